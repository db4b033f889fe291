// The container recycler runs in: the memory cgroup it was started in (a
// pod's container, a `podman run --memory`, a systemd unit's MemoryMax=),
// read whether or not recycler may write to cgroupfs (an unprivileged pod
// mounts it read-only). Its memory limit, read every kInterval, is the
// default of percentage limits where a program sets no limits.memory_max,
// followed as the pod is resized in place (Kubernetes 1.35); its usage, OOM
// kills and (v2) pressure are read when status or metrics ask.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "supervisor/cgroup/cgroup.h"
#include "supervisor/control/status.h"
#include "supervisor/util/timers.h"

namespace recycler {

// The memory cgroup directory recycler was started in: its own path (from
// /proc/self/cgroup) under the memory hierarchy's mount, or the mount itself
// where that path is not there (a container without a cgroup namespace sees
// the host's path, and its own cgroup at the mount: podman on v1). "" when
// there is no memory hierarchy.
std::string container_memory_dir(const cgroup::Layout& layout, const cgroup::Paths& paths);

// The memory limit of the cgroup `dir` (v2 memory.max, v1
// memory.limit_in_bytes): nullopt for none (v2 "max", v1's page-rounded
// LONG_MAX) or an unreadable file.
std::optional<uint64_t> read_memory_limit(const std::string& dir, bool v2);
// Its usage (v2 memory.current, v1 memory.usage_in_bytes).
std::optional<uint64_t> read_memory_current(const std::string& dir, bool v2);

class ContainerWatch {
 public:
  static constexpr Duration kInterval = std::chrono::seconds(1);
  // After each reading whose limit differs from the one before (the first
  // included): the new limit (nullopt: none).
  using LimitChanged = std::function<void(std::optional<uint64_t> limit)>;

  // Reads the limit of `dir` (v2 or v1 files) now and every kInterval:
  // `on_limit` runs from within the constructor too.
  ContainerWatch(Timers& timers, std::string dir, bool v2, LimitChanged on_limit);
  ContainerWatch(const ContainerWatch&) = delete;
  ContainerWatch& operator=(const ContainerWatch&) = delete;

  const std::string& dir() const { return dir_; }
  // The limit as last read.
  std::optional<uint64_t> limit() const { return limit_; }
  // That limit with the usage, OOM kills and pressure, read now.
  ContainerStatus status() const;
  // v2 memory.oom.group of the container (Kubernetes sets it since 1.28):
  // its OOM kill takes every process in it, recycler too. Read once.
  bool oom_group() const { return oom_group_; }
  // Reads the limit now (the timer's work).
  void read();

 private:
  Timers& timers_;
  std::string dir_;
  bool v2_;
  LimitChanged on_limit_;
  std::optional<uint64_t> limit_;
  bool first_ = true;
  bool oom_group_ = false;
  std::unique_ptr<Timer> tick_;
};

}  // namespace recycler
