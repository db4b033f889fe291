#include "supervisor/worker/process_signals.h"

#include <algorithm>
#include <csignal>

#include "policies/base/units.h"
#include "supervisor/log/log.h"

namespace recycler {

bool signal_then_kill(Timers& timers, Duration timeout, Process& process, int signal,
                      std::unique_ptr<Timer>& escalate, std::function<void()> kill) {
  bool sent = process.signal(signal);
  escalate = timers.after(timeout, std::move(kill));
  return sent;
}

ProcessSignals::ProcessSignals(Timers& timers, Launcher& launcher,
                               const probe::ServiceProbe* service, const std::string& name,
                               Duration stop_timeout)
    : timers_(timers),
      launcher_(launcher),
      service_(service),
      name_(name),
      stop_timeout_(stop_timeout) {}

engine::Signalled ProcessSignals::signal(const cgroup::WorkerCgroup& cgroup, pid_t pid, int signal,
                                         std::function<void()> on_exit,
                                         std::function<void()> on_left) {
  if (entries_.count(pid)) return engine::Signalled::Sent;
  // A pre-fork server's master reaps its own children, so the pid may be
  // gone (or reused) by now. The pidfd pins the process; it must still be in
  // the worker's cgroup after that.
  auto attached = launcher_.attach(pid, [this, pid] { exited(pid); });
  if (!attached) return engine::Signalled::NotMember;
  std::vector<pid_t> pids = cgroup.pids();
  if (std::find(pids.begin(), pids.end(), pid) == pids.end()) return engine::Signalled::NotMember;
  Entry& entry = entries_[pid];
  entry.process = std::move(attached.value());
  entry.on_exit = std::move(on_exit);
  // A process that ignores its signal gets what a stop gets: SIGKILL after stop.timeout.
  bool sent =
      signal_then_kill(timers_, stop_timeout_, *entry.process, signal, entry.escalate, [this, pid] {
        auto it = entries_.find(pid);
        if (it == entries_.end()) return;
        log::warn(
            "{} pid {} still running {} after it was signalled; "
            "killing it",
            name_, pid, units::format_duration(stop_timeout_));
        it->second.process->signal(SIGKILL);
      });
  if (!sent) {
    entries_.erase(pid);
    return engine::Signalled::Gone;
  }
  entry.on_left = std::move(on_left);
  watch_leaving(pid);
  return engine::Signalled::Sent;
}

void ProcessSignals::exited(pid_t pid) {
  auto it = entries_.find(pid);
  if (it == entries_.end()) return;
  auto left = std::move(it->second.on_left);
  auto done = std::move(it->second.on_exit);
  entries_.erase(it);  // the Process too: its callback is over once this returns
  if (left) left();
  if (done) done();
}

void ProcessSignals::watch_leaving(pid_t pid) {
  Entry& entry = entries_[pid];
  if (!entry.on_left || !service_) return;
  entry.listeners = service_->shared_sockets(pid);
  if (!entry.listeners.empty())
    entry.leave_poll = timers_.after(kLeavePoll, [this, pid] { poll_left(pid); });
}

void ProcessSignals::poll_left(pid_t pid) {
  auto it = entries_.find(pid);
  if (it == entries_.end()) return;
  Entry& entry = it->second;
  if (service_->holds_any(pid, entry.listeners)) {
    entry.leave_poll = timers_.after(kLeavePoll, [this, pid] { poll_left(pid); });
    return;
  }
  entry.leave_poll.reset();
  if (auto left = std::exchange(entry.on_left, nullptr)) left();
}

}  // namespace recycler
