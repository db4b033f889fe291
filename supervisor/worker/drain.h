// Draining a generation's cgroup once its main process has exited: SIGKILL
// to whatever is left in it, again every kCgroupDrainPoll, until it is empty
// or kCgroupDrainTimeout has passed (an error then: the slot goes on without
// those processes, so one that cannot die never wedges it). One drain for
// the slot's main generation and a surge's generations alike.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "supervisor/cgroup/cgroup.h"
#include "supervisor/util/timers.h"

namespace recycler {

inline constexpr Duration kCgroupDrainTimeout{5000};
inline constexpr Duration kCgroupDrainPoll{10};

// Drains `cgroup` until `deadline`, polling on `poll` (its owner's timer:
// destroying it stops the drain), then calls `drained`, which may destroy
// `cgroup` and `poll`: nothing is touched after it. `name`: the worker's,
// for the log. An empty cgroup is drained at once.
void drain_cgroup(Timers& timers, cgroup::WorkerCgroup& cgroup, TimePoint deadline,
                  std::unique_ptr<Timer>& poll, const std::string& name,
                  std::function<void()> drained);

}  // namespace recycler
