#include "supervisor/runtime/escape_watch.h"

#include <chrono>
#include <utility>

namespace recycler {

EscapeWatch::EscapeWatch(Timers& timers, DeferredQueue& deferred, std::string proc, pid_t self,
                         const cgroup::Manager& cgroups)
    : timers_(timers), deferred_(deferred), tracker_(std::move(proc), self, cgroups) {
  scan_later();
}

void EscapeWatch::scan_later() {
  scan_ = timers_.after(EscapeTracker::kScanInterval, [this] {
    tracker_.scan();
    scan_later();
  });
}

void EscapeWatch::run_started(const cgroup::WorkerId& worker, pid_t pid) {
  tracker_.started(worker, pid);
}

void EscapeWatch::run_ended(const cgroup::WorkerId& worker) {
  runs_ended_.push_back(worker);
  if (runs_ended_.size() > 1) return;  // the scan is queued
  deferred_.defer([this] { kill_escapees_of_ended_runs(); });
}

void EscapeWatch::kill_escapees_of_ended_runs() {
  tracker_.scan();
  for (const cgroup::WorkerId& id : runs_ended_) tracker_.kill(id);
  runs_ended_.clear();
}

void EscapeWatch::kill_all() {
  scan_.reset();
  tracker_.kill_all(std::chrono::seconds(1));
}

}  // namespace recycler
