// RecycleController (recycle_controller.h): what workers report (notify
// messages, request counts, iterations, the members a pid is checked
// against) and what it answers them (their request limits).
#include <fmt/format.h>

#include <algorithm>
#include <limits>

#include "policies/base/units.h"
#include "supervisor/engine/recycle_controller.h"

namespace recycler::engine {

using config::LogLevel;
using units::format_duration;

void RecycleController::notified(unsigned slot, pid_t sender, const notify::NotifyMessage& m) {
  Slot& s = slots_[slot];
  if (!s.run) return;
  Run& run = *s.run;
  if (m.requests) requests_seen_ = true;  // even 0: the worker reports, so counts arrive
  if (m.device_bytes) run.device = m.device_bytes;
  if (m.watchdog || m.iteration) run.alive = now_();
  if (m.ready && !run.ready) {
    run.ready = true;
    log(LogLevel::Debug, fmt::format("{} is ready (READY=1 from pid {})", name(slot), sender));
  }
  if (m.status) {
    run.status = *m.status;
    log(LogLevel::Debug, fmt::format("{} status: {}", name(slot), *m.status));
  }
  // A signalled process of a pre-fork server that says it is going (gunicorn's
  // worker_exit hook sends STOPPING=1 once it has left its accept loop) no
  // longer serves, whether or not it still holds its listening sockets.
  if (m.stopping) process_left(slot, sender);
  if (m.checkpointed) {
    if (!run.checkpoint) {
      log(LogLevel::Debug,
          fmt::format("{}: RECYCLER_CHECKPOINTED=1 from pid {} with no checkpoint asked for",
                      name(slot), sender));
    } else {
      auto took = std::chrono::duration_cast<Duration>(now_() - run.checkpoint->since);
      event(LogLevel::Info, "checkpointed",
            fmt::format("{} checkpointed in {} (pid {}); restarting it to resume", name(slot),
                        format_duration(took), sender),
            {{"program", program_->name},
             {"slot", slot},
             {"pid", sender},
             {"generation", run.generation},
             {"took_s", static_cast<double>(took.count()) / 1000.0}});
      record(slot, "checkpointed", sender, format_duration(took));
      return end_checkpoint(slot, "confirmed", true);
    }
  }
  if (m.requests && *m.requests > 0) requests(slot, sender, *m.requests);
  if (m.iteration && s.run && s.run->iteration != m.iteration) new_iteration(slot, *m.iteration);
}

void RecycleController::new_iteration(unsigned slot, uint64_t iteration) {
  Run& run = *slots_[slot].run;
  run.iteration = iteration;
  if (!(needs_ & policies::kNeedsIterations)) return;
  // The policies that project per iteration look at once, before the next
  // iteration allocates anything: on the last sample with the new number and
  // the device bytes reported with it (the cgroup's figures stay as last
  // measured: a sample interval old at most).
  policies::Sample& s = run.last;
  s.t = now_();
  s.device = run.device;
  s.iteration = iteration;
  evaluate(slot, s, policies::kNeedsIterations);
}

bool RecycleController::known_member(unsigned slot, pid_t pid) const {
  const Slot& s = slots_[slot];
  return s.run && s.run->members.count(pid) > 0;
}

bool RecycleController::members_fresh(unsigned slot) const {
  const Slot& s = slots_[slot];
  return s.run && s.run->members_fresh;
}

void RecycleController::set_members(unsigned slot, const std::vector<pid_t>& pids) {
  Slot& s = slots_[slot];
  if (!s.run) return;
  s.run->members = {pids.begin(), pids.end()};
  s.run->members_fresh = true;
}

bool RecycleController::warn_stranger_once(unsigned slot) {
  Slot& s = slots_[slot];
  return s.run && !std::exchange(s.run->warned_stranger, true);
}

void RecycleController::requests(unsigned slot, std::optional<pid_t> pid, uint64_t n) {
  Slot& sl = slots_[slot];
  if (!sl.run) return;
  Run& run = *sl.run;
  requests_seen_ = true;
  requests_counted_ += n;
  run.requests += n;
  if (pid && run.pid_requests.size() >= kMaxTrackedPids && !run.pid_requests.count(*pid)) {
    // Only the worker's processes get here: forget those that are gone.
    forget_counts(run, [&](pid_t p) { return !run.members.count(p); });
    if (run.pid_requests.size() >= kMaxTrackedPids) pid.reset();
  }
  if (pid) run.pid_requests[*pid] += n;
  if (!(needs_ & policies::kNeedsRequests)) return;
  // The request-counting policies look at once, on the last sample with the
  // new counts (memory figures stay as last measured; those policies skip it).
  policies::Sample& s = run.last;
  s.t = now_();
  s.requests = run.requests;
  if (pid) {
    auto it = std::find_if(s.processes.begin(), s.processes.end(),
                           [&](const policies::ProcessSample& p) { return p.pid == *pid; });
    if (it == s.processes.end()) {
      policies::ProcessSample p;
      p.pid = *pid;
      p.main = run.pid == *pid;
      s.processes.push_back(p);
      it = std::prev(s.processes.end());
    }
    it->requests = run.pid_requests[*pid];
  }
  evaluate(slot, s, policies::kNeedsRequests);
}

void RecycleController::next_requests(unsigned slot, unsigned generation, pid_t pid, uint64_t n) {
  if (slot >= slots_.size() || generation == 0) return;
  Slot& s = slots_[slot];
  if (s.next_generation != generation) {  // a surge before it failed: not this one's
    s.next_generation = generation;
    s.next_total = 0;
    s.next_pid_requests.clear();
  }
  requests_seen_ = true;
  requests_counted_ += n;
  s.next_total += n;
  if (s.next_pid_requests.size() < kMaxTrackedPids || s.next_pid_requests.count(pid))
    s.next_pid_requests[pid] += n;
}

notify::Answer RecycleController::retiring_report(unsigned slot, pid_t pid, uint64_t n) {
  notify::Answer out;
  if (slot >= slots_.size()) return out;
  auto& answered = slots_[slot].retiring_answered;
  if (answered.size() >= kMaxTrackedPids || !answered.insert(pid).second) return out;
  out.requests_seen = n;
  return out;
}

std::optional<uint64_t> RecycleController::requests_served(unsigned slot) const {
  if (slot >= slots_.size() || !slots_[slot].run) return std::nullopt;
  return slots_[slot].run->requests;
}

std::optional<uint64_t> RecycleController::requests_left() const {
  std::optional<uint64_t> fewest;
  for (const Slot& s : slots_) {
    if (!s.run) continue;
    for (size_t i = 0; i < policies_.size(); ++i)
      if (auto left = policies_[i]->requests_left(*s.run->states[i]))
        fewest = fewest ? std::min(*fewest, *left) : *left;
    // A process told its limit may report every request up to it at once:
    // one more may be the one that reaches it.
    if (!s.run->told.empty()) fewest = std::min<uint64_t>(fewest.value_or(1), 1);
  }
  return fewest;
}

std::optional<uint64_t> RecycleController::process_request_limit(unsigned slot, pid_t pid) const {
  if (slot >= slots_.size() || !slots_[slot].run) return std::nullopt;
  const Run& run = *slots_[slot].run;
  std::optional<uint64_t> limit;
  for (size_t i = 0; i < policies_.size(); ++i)
    if (auto l = policies_[i]->process_request_limit(*run.states[i], pid))
      limit = limit ? std::min(*limit, *l) : *l;
  return limit;
}

notify::Answer RecycleController::answer(unsigned slot, pid_t pid) {
  notify::Answer out;
  if (slot >= slots_.size() || !slots_[slot].run) return out;
  Run& run = *slots_[slot].run;
  auto counted = run.pid_requests.find(pid);
  if (counted == run.pid_requests.end()) return out;  // not tracked (kMaxTrackedPids)
  std::optional<uint64_t> limit = process_request_limit(slot, pid);
  if (!limit) return out;
  auto [it, first] = run.told.try_emplace(pid);
  Run::Told& told = it->second;
  if (first || told.limit != *limit) {
    told = {*limit, false};
    out.request_limit = *limit;
  }
  if (counted->second >= *limit && !told.seen) {
    told.seen = true;
    out.requests_seen = counted->second;
  }
  return out;
}

}  // namespace recycler::engine
