// The container recycler runs in: the memory cgroup it was started in (a
// pod's container, a `podman run --memory`, a systemd unit's MemoryMax=),
// read every kInterval whether or not recycler may write to cgroupfs (an
// unprivileged pod mounts it read-only): its memory limit, usage, OOM kills
// and (v2) pressure, for status and metrics; and the limit as the default of
// percentage limits where a program sets no limits.memory_max, re-read as
// the pod is resized in place (Kubernetes 1.35), with a warning when the
// workers' own limits cannot all fit in it.
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

class ContainerWatch {
 public:
  static constexpr Duration kInterval = std::chrono::seconds(1);
  // After each reading whose limit differs from the one before (the first
  // included): the new limit (nullopt: none).
  using LimitChanged = std::function<void(std::optional<uint64_t> limit)>;

  // Reads `dir` (v2 or v1 files) now and every kInterval: `on_limit` runs
  // from within the constructor too.
  ContainerWatch(Timers& timers, std::string dir, bool v2, LimitChanged on_limit);
  ContainerWatch(const ContainerWatch&) = delete;
  ContainerWatch& operator=(const ContainerWatch&) = delete;

  // The last reading (dir, limit, current, oom_kills, pressure).
  const ContainerStatus& status() const { return status_; }
  std::optional<uint64_t> limit() const { return status_.limit; }
  // v2 memory.oom.group of the container (Kubernetes sets it since 1.28):
  // its OOM kill takes every process in it, recycler too. Read once.
  bool oom_group() const { return oom_group_; }
  // Reads now (the timer's work; tests call it).
  void read();

 private:
  Timers& timers_;
  bool v2_;
  LimitChanged on_limit_;
  ContainerStatus status_;
  bool first_ = true;
  bool oom_group_ = false;
  std::unique_ptr<Timer> tick_;
};

}  // namespace recycler
