// Escape watching on the loop (the finding and killing is EscapeTracker's,
// process/escapes.h): a scan every EscapeTracker::kScanInterval while
// recycler runs, and one after the runs that end in a turn of the loop,
// which kills their escapees. Out of Supervisor because it needs nothing of
// it but the timers and the deferred queue: what starts and ends is told.
#pragma once

#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

#include "supervisor/cgroup/cgroup.h"
#include "supervisor/process/escapes.h"
#include "supervisor/util/deferred_queue.h"
#include "supervisor/util/timers.h"

namespace recycler {

class EscapeWatch {
 public:
  // Scans from now on. `timers`, `deferred` and `cgroups` outlive the watch;
  // `proc` is /proc and `self` recycler's pid (EscapeTracker).
  EscapeWatch(Timers& timers, DeferredQueue& deferred, std::string proc, pid_t self,
              const cgroup::Manager& cgroups);

  // A run of `worker` started with main process `pid`.
  void run_started(const cgroup::WorkerId& worker, pid_t pid);
  // A run of `worker` ended: what left its cgroup goes with it, after one
  // scan for all the runs that end in the same turn of the loop (a stop of
  // many workers).
  void run_ended(const cgroup::WorkerId& worker);
  // The end of recycler: no more scans; kills everything left below
  // recycler that is in no worker.
  void kill_all();

 private:
  void scan_later();
  void kill_escapees_of_ended_runs();

  Timers& timers_;
  DeferredQueue& deferred_;
  EscapeTracker tracker_;
  std::unique_ptr<Timer> scan_;
  std::vector<cgroup::WorkerId> runs_ended_;  // since the last scan, for their escapees
};

}  // namespace recycler
