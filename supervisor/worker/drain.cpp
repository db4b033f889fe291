#include "supervisor/worker/drain.h"

#include "policies/base/units.h"
#include "supervisor/log/log.h"

namespace recycler {

void drain_cgroup(Timers& timers, cgroup::WorkerCgroup& cgroup, TimePoint deadline,
                  std::unique_ptr<Timer>& poll, const std::string& name,
                  std::function<void()> drained) {
  bool populated = cgroup.populated();
  if (populated && timers.now() < deadline) {
    cgroup.kill_all();
    poll = timers.after(kCgroupDrainPoll,
                        [&timers, &cgroup, deadline, &poll, &name, drained = std::move(drained)] {
                          drain_cgroup(timers, cgroup, deadline, poll, name, drained);
                        });
    return;
  }
  if (populated)
    log::error("{}: {} process(es) still in {} {} after SIGKILL; going on without them", name,
               cgroup.pids().size(), cgroup.path(), units::format_duration(kCgroupDrainTimeout));
  drained();
}

}  // namespace recycler
