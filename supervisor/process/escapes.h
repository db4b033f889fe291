// Processes that leave their worker's cgroup. A worker running as root can
// write itself (or a child) into another cgroup, and without cgroups a
// setsid() leaves the session that stands for one; such a process escapes
// the limits and would survive the worker's stop. recycler cannot prevent it
// (run workers with `user:`), but it notices and cleans up:
//
// - recycler is the subreaper of everything its workers start
//   (PR_SET_CHILD_SUBREAPER, set by the supervisor), so an orphan comes back
//   to it instead of to init: every process a worker started stays in
//   recycler's process tree;
// - scan() walks that tree (one pass over /proc/PID/stat) and asks the
//   cgroup layer which worker each process is in (Manager::owner_of). One in
//   no worker has escaped: it is attributed to the worker it came from (its
//   nearest ancestor inside a worker, else the worker it was last seen in,
//   else the worker whose session it is in: a worker's main process leads a
//   session of its own), reported once, and remembered;
// - kill(worker) kills the escapees of a worker whose run has ended, and
//   kill_all() everything left below recycler at shutdown. A process is
//   signalled through a pidfd, and only when its start time is still the one
//   recorded: a reused pid is never hit.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "supervisor/cgroup/cgroup.h"

namespace recycler {

class EscapeTracker {
 public:
  // `proc`: /proc; `self`: recycler's pid (the root of the tree).
  EscapeTracker(std::string proc, pid_t self, const cgroup::Manager& cgroups);

  // A run of `worker` started with main process `pid` (its session id).
  void started(const cgroup::WorkerId& worker, pid_t pid);
  // Walks the tree; logs each escapee the first time it is found.
  void scan();
  // Kills the escapees of `worker` (after a scan); how many were signalled.
  size_t kill(const cgroup::WorkerId& worker);
  // Kills every process below recycler that is in no worker, round after
  // round (a killed process's children come back to recycler), waiting at
  // most `timeout` in all. For the end of a run of recycler.
  size_t kill_all(std::chrono::milliseconds timeout);

  // Seen below recycler and outside every worker, and not killed yet.
  size_t escapees() const { return escaped_.size(); }

  // How often the supervisor scans while workers run.
  // A scan reads /proc/PID/stat of every process on the host and asks about
  // each of the workers' (bench/escape_bench): hence not every sample.
  static constexpr std::chrono::seconds kScanInterval{20};

 private:
  struct Known {
    uint64_t start = 0;
    std::optional<cgroup::WorkerId> worker;
  };
  bool signal_checked(pid_t pid, uint64_t start);
  // The worker `known` places `pid` in, if the entry is of the same process
  // (the same `start`; any, without one). For scan()'s attribution.
  static std::optional<cgroup::WorkerId> worker_in(const std::map<pid_t, Known>& known, pid_t pid,
                                                   std::optional<uint64_t> start);

  std::string proc_;
  pid_t self_;
  const cgroup::Manager& cgroups_;
  std::map<pid_t, Known> members_;  // processes seen inside a worker: for attribution
  std::map<pid_t, Known> escaped_;  // reported, not killed yet
  // Sessions of the last kMaxSessions runs, oldest first.
  std::deque<std::pair<pid_t, cgroup::WorkerId>> sessions_;
  static constexpr size_t kMaxSessions = 4096;
};

}  // namespace recycler
