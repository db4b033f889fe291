// Single processes of a worker, signalled one at a time: a pre-fork server's
// children, recycled while their master serves on (scope: process). Each
// gets its signal through a pidfd once it is known to be in the worker's
// cgroup, SIGKILL after stop.timeout if it is still there, and is watched
// until it has left service and until it exits. Forgotten (clear()) when the
// slot stops or a surge replaces its generation.
#pragma once

#include <sys/types.h>

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "supervisor/cgroup/cgroup.h"
#include "supervisor/engine/vocabulary.h"
#include "supervisor/probe/service.h"
#include "supervisor/process/process.h"
#include "supervisor/util/timers.h"

namespace recycler {

// `signal` to `process` now, and `kill` after `timeout` unless `escalate`
// is reset first (the process exited): the one escalation, for a worker's
// main process, a surge's generations and single processes alike. False
// when the signal could not be sent.
bool signal_then_kill(Timers& timers, Duration timeout, Process& process, int signal,
                      std::unique_ptr<Timer>& escalate, std::function<void()> kill);

class ProcessSignals {
 public:
  // `name`: the worker's, for logs (it outlives this). `service`: sees a
  // process leave service before it exits (null: only its exit counts).
  ProcessSignals(Timers& timers, Launcher& launcher, const probe::ServiceProbe* service,
                 const std::string& name, Duration stop_timeout);

  // `signal` to `pid` if it is in `cgroup`; `on_exit` once it has exited
  // (only after Sent), `on_left` once it has left service: it closed the
  // listening sockets it shared with its parent (polled every kLeavePoll),
  // or, at the latest, when it exits. A Python worker closes them within a
  // request of the signal and may take 50-120 ms more to exit. A pid
  // already signalled is Sent again, and keeps its first callbacks.
  engine::Signalled signal(const cgroup::WorkerCgroup& cgroup, pid_t pid, int signal,
                           std::function<void()> on_exit, std::function<void()> on_left);
  size_t size() const { return entries_.size(); }
  void clear() { entries_.clear(); }

  static constexpr Duration kLeavePoll{2};

 private:
  struct Entry {
    std::unique_ptr<Process> process;
    std::unique_ptr<Timer> escalate;
    std::function<void()> on_exit;
    std::function<void()> on_left;      // until it has left service
    std::vector<uint64_t> listeners;    // the sockets it shares with its master
    std::unique_ptr<Timer> leave_poll;  // while it still holds them
  };
  void exited(pid_t pid);
  void watch_leaving(pid_t pid);
  void poll_left(pid_t pid);

  Timers& timers_;
  Launcher& launcher_;
  const probe::ServiceProbe* service_;
  const std::string& name_;
  Duration stop_timeout_;
  std::map<pid_t, Entry> entries_;
};

}  // namespace recycler
