// What the container recycler runs in means for its programs (ContainerWatch
// reads it): its memory limit is the default of their percentage limits,
// followed as the pod is resized in place; a warning when their own
// limits.memory_max cannot all fit in it, and one (once) when its OOM kill
// would take recycler too (memory.oom.group).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "supervisor/cgroup/cgroup.h"
#include "supervisor/config/config.h"
#include "supervisor/control/status.h"
#include "supervisor/runtime/container_watch.h"
#include "supervisor/runtime/monitor.h"
#include "supervisor/runtime/program.h"

namespace recycler {

class ContainerLimits {
 public:
  // `monitors`: where new monitors find the limit; `programs`: the running
  // monitors told of a change; `config`: read at each check (a reload's).
  ContainerLimits(Timers& timers, MonitorContext& monitors, const Programs& programs,
                  const config::Config& config)
      : timers_(timers), monitors_(monitors), programs_(programs), config_(config) {}

  // Starts following the memory cgroup recycler was started in, when there
  // is one (container_memory_dir).
  void open(const cgroup::Layout& layout, const cgroup::Paths& paths);
  void close() { watch_.reset(); }
  // The warnings above, for `config` (the one in force, or a reload's).
  void check_fit(const config::Config& config);
  void check_fit() { check_fit(config_); }
  // Its figures, read now, once its limit is known.
  std::optional<ContainerStatus> status() const;

 private:
  void on_limit(const std::string& dir, std::optional<uint64_t> limit);

  Timers& timers_;
  MonitorContext& monitors_;
  const Programs& programs_;
  const config::Config& config_;
  std::unique_ptr<ContainerWatch> watch_;
  bool said_oom_group_ = false;
};

}  // namespace recycler
