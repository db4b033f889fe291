#include "supervisor/engine/recycle_controller.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <csignal>
#include <limits>

#include "policies/base/units.h"

namespace recycler::engine {

using config::LogLevel;
using units::format_duration;

RecycleController::RecycleController(std::shared_ptr<const config::ProgramConfig> program,
                                     unsigned slots, Clock clock)
    : program_(std::move(program)),
      now_(std::move(clock)),
      queue_(program_->max_concurrent_recycles),
      process_queue_(program_->max_concurrent_process_recycles) {
  for (const config::PolicyConfig& p : program_->policies) {
    if (!request_policy_ && (p.policy->needs() & policies::kNeedsRequests))
      request_policy_ = policies_.size();
    policies_.push_back(p.policy.get());
    needs_ |= p.policy->needs();
  }
  // A timeline records at least the cgroup's figures (cheap); per-process
  // ones only when a policy pays for them anyway.
  if (program_->timeline) needs_ |= policies::kNeedsCgroupMemory;
  needs_ |= program_->budget_needs;
  slots_.reserve(slots);
  for (unsigned i = 0; i < slots; ++i)
    slots_.push_back(
        Slot{.run = std::nullopt,
             .guard = RecycleLoopGuard(program_->min_uptime, program_->restart.backoff.initial,
                                       program_->restart.backoff.max),
             .next_generation = 0,
             .next_total = 0,
             .next_pid_requests = {},
             .retiring_answered = {}});
}

std::string RecycleController::name(unsigned slot) const {
  return program_->name + "[" + std::to_string(slot) + "]";
}

// "anon 612 MiB > 600 MiB (memory policy)": what RECYCLER_RECYCLE_REASON says.
std::string RecycleController::cause_text(size_t policy, const Decision& decision) const {
  // An operator's says who asked; the budget's starts with "budget: ".
  if (policy == kOperator || policy == kBudget) return decision.reason;
  return decision.reason + " (" + std::string(policies_[policy]->name()) + " policy)";
}

std::string_view RecycleController::policy_name(size_t policy) const {
  if (policy == kOperator) return kOperatorPolicy;
  if (policy == kBudget) return kBudgetPolicy;
  return policies_[policy]->name();
}

void RecycleController::log(LogLevel level, std::string message) {
  emit(Log{level, {}, std::move(message), {}});
}

void RecycleController::event(LogLevel level, std::string event, std::string message,
                              log::Fields fields) {
  emit(Log{level, std::move(event), std::move(message), std::move(fields)});
}

void RecycleController::record(unsigned slot, std::string event, pid_t pid, std::string detail) {
  if (program_->timeline) emit(Record{slot, std::move(event), pid, std::move(detail)});
}

bool RecycleController::running(unsigned slot) const {
  const Slot& s = slots_[slot];
  return s.run && !s.run->recycling;
}

void RecycleController::set_default_memory_max(std::optional<uint64_t> bytes) {
  if (bytes == default_memory_max_) return;
  default_memory_max_ = bytes;
  if (program_->limits.memory_max) return;
  for (Slot& s : slots_) {
    if (!s.run) continue;
    s.run->context.memory_max = bytes;
    for (size_t i = 0; i < policies_.size(); ++i)
      if (policies_[i]->needs_memory_max()) s.run->states[i] = policies_[i]->start(s.run->context);
  }
}

void RecycleController::run_started(unsigned slot, unsigned generation, TimePoint started,
                                    pid_t pid, uint64_t seed) {
  Slot& s = slots_[slot];
  if (!s.run || s.run->generation != generation) {
    end_run(slot);
    Run run;
    run.generation = generation;
    run.pid = pid;
    run.context.started = started;
    run.context.memory_max = memory_max();
    run.context.seed = seed;
    run.context.requests_held_below =
        program_->requests_held_below().value_or(std::numeric_limits<uint64_t>::max());
    for (const policies::Policy* p : policies_) run.states.push_back(p->start(run.context));
    run.growing.assign(policies_.size(), false);
    run.last.t = now_();
    if (s.next_generation == generation) {  // what it served while a surge waited for it
      run.requests = s.next_total;
      run.pid_requests = std::move(s.next_pid_requests);
    }
    s.next_generation = 0;
    s.next_total = 0;
    s.next_pid_requests.clear();
    s.retiring_answered.clear();
    s.run = std::move(run);
  }
  // A whole-worker recycle is done once its replacement runs.
  if (queue_.in_flight({slot, 0})) finished({slot, 0});
}

void RecycleController::end_run(unsigned slot) {
  Slot& s = slots_[slot];
  if (s.run && s.run->checkpoint) emit(CancelCheckpointTimer{slot});
  s.run.reset();
}

void RecycleController::run_ended(unsigned slot, RunEnd how, bool recycled,
                                  const std::string& exit) {
  Slot& s = slots_[slot];
  switch (how) {
    case RunEnd::Exited:
      if (!exit.empty()) record(slot, "exit", 0, exit);
      // Only recycles chain into a loop: a crash or a stop starts it over.
      if (!recycled) s.guard.reset();
      end_run(slot);
      break;
    case RunEnd::Stopping:
      end_run(slot);
      break;
    case RunEnd::Finished:
      end_run(slot);
      for (auto it = waiting_.begin(); it != waiting_.end();)
        it = it->first.first == slot ? waiting_.erase(it) : std::next(it);
      for (auto it = signalled_.begin(); it != signalled_.end();)
        it = it->second.slot == slot ? signalled_.erase(it) : std::next(it);
      admit(queue_.forget_slot(slot));
      admit(process_queue_.forget_slot(slot));
      break;
  }
}

void RecycleController::prepare(unsigned slot, policies::Sample& s,
                                const std::vector<pid_t>* listed) {
  Slot& sl = slots_[slot];
  if (!sl.run) return;
  Run& run = *sl.run;
  s.requests = run.requests;
  s.device = run.device;
  s.iteration = run.iteration;
  s.alive = run.alive;
  for (policies::ProcessSample& p : s.processes) {
    auto it = run.pid_requests.find(p.pid);
    p.requests = it == run.pid_requests.end() ? 0 : it->second;
  }
  run.members_fresh = false;
  if (listed) {  // forget the counts of processes that are gone
    forget_counts(
        run, [&](pid_t pid) { return !std::binary_search(listed->begin(), listed->end(), pid); });
    if (program_->requests) {  // only pids that output names are checked against it
      run.members = {listed->begin(), listed->end()};
      run.members_fresh = true;
    }
  }
}

void RecycleController::sampled(unsigned slot, policies::Sample sample) {
  Slot& sl = slots_[slot];
  if (!sl.run) return;
  Run& run = *sl.run;
  run.last = std::move(sample);
  check_unseen_requests(slot);
  const policies::Sample& s = run.last;
  const auto max = memory_max();
  if (run.checkpoint && run.checkpoint->overdue && max && s.current &&
      static_cast<double>(*s.current) >= kOverdueMemoryFraction * static_cast<double>(*max)) {
    log(LogLevel::Warn,
        fmt::format("{} is at {} of its {} memory_max and has not confirmed its checkpoint; "
                    "restarting it without one",
                    name(slot), units::format_size(*s.current), units::format_size(*max)));
    return end_checkpoint(slot, "memory", false);
  }
  evaluate(slot, run.last, 0);
}

// A request-counting policy that has counted nothing while the worker keeps
// busy is wired to nothing: said once, with where its counts would come from.
void RecycleController::check_unseen_requests(unsigned slot) {
  if (!watching_unseen_requests()) return;
  Run& run = *slots_[slot].run;
  const std::optional<uint64_t>& cpu = run.last.cpu_usec;
  if (!cpu) return;
  if (!run.cpu_base || *cpu < *run.cpu_base) run.cpu_base = cpu;
  uint64_t used = *cpu - *run.cpu_base;
  if (used < static_cast<uint64_t>(kUnseenRequestsCpu.count())) return;
  warned_unseen_requests_ = true;
  std::string_view policy = policies_[*request_policy_]->name();
  double used_s = static_cast<double>(used) / 1e6;
  event(LogLevel::Warn, "requests_unseen",
        fmt::format("{} has used {:.1f}s of CPU time since it started and its {} policy has not "
                    "counted a single request: it {}",
                    name(slot), used_s, policy, program_->request_source()),
        {{"program", program_->name},
         {"slot", slot},
         {"pid", run.pid},
         {"generation", run.generation},
         {"policy", std::string(policy)},
         {"cpu_s", used_s}});
}

void RecycleController::evaluate(unsigned slot, policies::Sample& sample, unsigned only_needing) {
  Run& run = *slots_[slot].run;
  for (policies::ProcessSample& p : sample.processes)
    p.recycling = signalled_.count(p.pid) > 0 || waiting_.count({slot, p.pid}) > 0;
  // Every policy sees every sample (their `for:` clocks must run); then the
  // whole-worker decision, if any, wins over process-scope ones.
  std::vector<std::pair<size_t, Decision>> decisions;
  for (size_t i = 0; i < policies_.size(); ++i) {
    if (only_needing && !(policies_[i]->needs() & only_needing)) continue;
    Decision d = policies_[i]->evaluate(sample, *run.states[i]);
    report_outlook(slot, i);
    if (observer_) observer_(slot, i, d);
    if (d) decisions.emplace_back(i, std::move(d));
  }
  auto whole = std::find_if(decisions.begin(), decisions.end(), [](const auto& d) {
    return d.second.action != Decision::Action::Signal;
  });
  // While a checkpoint is under way, only a plain restart changes anything;
  // not the watchdog's: checkpoint.timeout bounds a checkpoint that hangs.
  if (run.checkpoint || run.asking) {
    std::erase_if(decisions, [&](const auto& d) { return policies_[d.first]->watches_hangs(); });
    whole = std::find_if(decisions.begin(), decisions.end(), [](const auto& d) {
      return d.second.action == Decision::Action::Restart;
    });
  }
  if (whole != decisions.end()) return decide(slot, whole->first, std::move(whole->second));
  for (auto& [i, d] : decisions) {
    if (!running(slot)) return;
    decide(slot, i, std::move(d));
  }
}

// Logged when a predicting policy starts or stops seeing growth, not on
// every sample: "train[0] leak: growing: anon +38 MiB/min over 10m, ...".
void RecycleController::report_outlook(unsigned slot, size_t policy) {
  Run& run = *slots_[slot].run;
  const policies::Policy& p = *policies_[policy];
  const policies::Outlook* outlook = p.outlook(*run.states[policy]);
  if ((outlook != nullptr) == run.growing[policy]) return;
  run.growing[policy] = outlook != nullptr;
  log::Fields fields{{"program", program_->name},
                     {"slot", slot},
                     {"generation", run.generation},
                     {"policy", std::string(p.name())},
                     {"growing", outlook != nullptr}};
  if (!outlook) {
    event(LogLevel::Info, "outlook", fmt::format("{} {}: no longer growing", name(slot), p.name()),
          std::move(fields));
    return;
  }
  fields.emplace_back("slope_bytes_per_s", static_cast<uint64_t>(std::llround(outlook->slope)));
  fields.emplace_back("predicted_s", outlook->predicted_s);
  event(LogLevel::Info, "outlook",
        fmt::format("{} {}: growing: {}", name(slot), p.name(), outlook->summary),
        std::move(fields));
}

void RecycleController::decide(unsigned slot, size_t policy, Decision decision) {
  if (!running(slot)) return;
  Run& run = *slots_[slot].run;
  bool signal = decision.action == Decision::Action::Signal;
  RecycleKey key{slot, signal ? decision.pid : 0};
  // A limit that says "restart now" does not wait for a checkpoint asked for
  // earlier (a spike on top of the leak that asked for it).
  if (run.checkpoint && decision.action == Decision::Action::Restart) {
    log(LogLevel::Warn, fmt::format("{}: {} ({} policy) while it checkpoints; restarting it now",
                                    name(slot), decision.reason, policy_name(policy)));
    run.checkpoint.reset();
    emit(CancelCheckpointTimer{slot});
    return restart(slot, policy, cause_text(policy, decision), false);
  }
  // Already under way or waiting: a policy fires on every sample until then.
  RecycleQueue& queue = queue_of(key);
  if (queue.in_flight(key) || queue.queued(key) || (signal && signalled_.count(key.pid))) return;
  switch (queue.request(key)) {
    case RecycleQueue::Admit::Now:
      carry_out(slot, policy, decision);
      break;
    case RecycleQueue::Admit::Queued:
      log(LogLevel::Info,
          fmt::format("{} recycle{} waits its turn ({} of at most {} under way): {} ({} policy)",
                      name(slot), signal ? " pid " + std::to_string(key.pid) : std::string(),
                      queue.in_flight_count(), queue.max_concurrent(), decision.reason,
                      policy_name(policy)));
      waiting_[{key.slot, key.pid}] = Waiting{policy, std::move(decision), run.generation};
      break;
    case RecycleQueue::Admit::AlreadyInFlight:
    case RecycleQueue::Admit::AlreadyQueued:
      break;
  }
}

void RecycleController::carry_out(unsigned slot, size_t policy, const Decision& decision,
                                  bool waited) {
  if (decision.action == Decision::Action::Signal) {
    // A pre-fork server's master reaps its own children, so the pid may be
    // gone (or reused) by now: the worker looks before anything is logged
    // (process_signalled).
    signalled_[decision.pid] = InFlight{slot, policy, decision, false, false, waited, 0, 0};
    emit(SignalProcess{slot, decision.pid, decision.signal ? decision.signal : SIGTERM});
    return;
  }
  Run& run = *slots_[slot].run;
  announce(slot, policy, decision, run.pid);
  if (const auto& d = program_->diagnose;
      d && policy < policies_.size() &&
      std::find(d->policies.begin(), d->policies.end(), policy_name(policy)) != d->policies.end())
    emit(Diagnose{slot, run.pid, std::string(policy_name(policy)), cause_text(policy, decision)});
  if (decision.action == Decision::Action::Checkpoint) {
    run.asking.emplace(policy, cause_text(policy, decision));
    emit(AskCheckpoint{slot, program_->checkpoint.signal, run.asking->second});
    return;
  }
  // A hung worker wrote nothing since; its replacement resumes from the
  // slot's last confirmed checkpoint, where there is one.
  bool resume = policy < policies_.size() && policies_[policy]->watches_hangs() &&
                slots_[slot].checkpoint_on_disk;
  restart(slot, policy, cause_text(policy, decision), resume);
}

// The recycle line and event, and its timeline row.
void RecycleController::announce(unsigned slot, size_t policy, const Decision& decision,
                                 pid_t target, bool waited) {
  std::string_view p = policy_name(policy);
  const Slot& s = slots_[slot];
  log::Fields fields{{"program", program_->name},
                     {"slot", slot},
                     {"pid", target},
                     {"generation", s.run ? s.run->generation : 0u},
                     {"policy", std::string(p)},
                     {"action", policies::to_string(decision.action)},
                     {"reason", decision.reason}};
  if (decision.predicted_s) fields.emplace_back("predicted_s", *decision.predicted_s);
  // The requests served at the moment of the signal (the reason's count is
  // from the decision, which may have waited its turn).
  std::string served;
  if (decision.action == Decision::Action::Signal && s.run) {
    auto it = s.run->pid_requests.find(target);
    uint64_t n = it == s.run->pid_requests.end() ? 0 : it->second;
    fields.emplace_back("requests", n);
    if (waited) served = fmt::format("; {} requests at the signal", n);
  }
  record(slot, "recycle", target, cause_text(policy, decision));
  std::string what = decision.action == Decision::Action::Signal ? " pid " + std::to_string(target)
                                                                 : std::string();
  event(LogLevel::Info, "recycle",
        fmt::format("{} recycle{}: {} ({} policy{})", name(slot), what, decision.reason, p, served),
        std::move(fields));
  if (acted_) acted_(slot, policy, decision);
}

void RecycleController::restart(unsigned slot, size_t policy, std::string reason, bool resume) {
  Slot& s = slots_[slot];
  std::string_view p = policy_name(policy);
  bool may_loop = policy == kBudget || (policy != kOperator && policies_[policy]->may_loop());
  auto uptime = std::chrono::duration_cast<Duration>(now_() - s.run->context.started);
  Duration delay = s.guard.on_recycle(
      uptime, may_loop,
      (policy >= policies_.size() ? std::string() : std::to_string(policy)) + std::string(p));
  if (delay > Duration{0}) {
    event(LogLevel::Warn, "recycle_loop",
          fmt::format(
              "{} tripped the {} policy again {} after it started (min_uptime {}): "
              "it reached its limit within min_uptime; its next start waits {} (recycle loop {})",
              name(slot), p, format_duration(uptime), format_duration(program_->min_uptime),
              format_duration(delay), s.guard.loops()),
          {{"program", program_->name},
           {"slot", slot},
           {"policy", std::string(p)},
           {"delay_s", static_cast<double>(delay.count()) / 1000.0},
           {"loops", s.guard.loops()}});
  }
  s.run->recycling = true;
  s.run->asking.reset();
  emit(RecycleWorker{slot, delay, std::move(reason), resume});
}

void RecycleController::recycle_refused(unsigned slot) {
  finished({slot, 0});
}

void RecycleController::process_signalled(unsigned slot, pid_t pid, Signalled result) {
  auto it = signalled_.find(pid);
  if (it == signalled_.end() || it->second.slot != slot || it->second.sent) return;
  RecycleKey key{slot, pid};
  switch (result) {
    case Signalled::NotMember:
      log(LogLevel::Debug, fmt::format("{}: pid {} exited before its recycle", name(slot), pid));
      signalled_.erase(it);
      forget_process(key);
      finished(key);
      return;
    case Signalled::Gone:
      announce(slot, it->second.policy, it->second.decision, pid, it->second.waited);
      log(LogLevel::Debug, fmt::format("{}: pid {} is gone already", name(slot), pid));
      signalled_.erase(it);
      finished(key);
      return;
    case Signalled::Sent:
      announce(slot, it->second.policy, it->second.decision, pid, it->second.waited);
      it->second.sent = true;
      if (const Slot& s = slots_[slot]; s.run) {
        it->second.generation = s.run->generation;
        auto counted = s.run->pid_requests.find(pid);
        if (counted != s.run->pid_requests.end()) it->second.requests = counted->second;
      }
      return;
  }
}

void RecycleController::process_left(unsigned slot, pid_t pid) {
  auto it = signalled_.find(pid);
  if (it == signalled_.end() || it->second.slot != slot || it->second.left) return;
  it->second.left = true;
  log(LogLevel::Debug, fmt::format("{}: pid {} has left service", name(slot), pid));
  finished({slot, pid});
}

void RecycleController::process_exited(unsigned slot, pid_t pid) {
  auto it = signalled_.find(pid);
  if (it == signalled_.end() || it->second.slot != slot) return;
  bool left = it->second.left;
  unsigned generation = it->second.generation;
  uint64_t n = it->second.requests;
  signalled_.erase(it);
  RecycleKey key{slot, pid};
  if (const Slot& s = slots_[slot]; s.run && s.run->generation == generation) {
    auto counted = s.run->pid_requests.find(pid);
    if (counted != s.run->pid_requests.end()) n = std::max(n, counted->second);
  }
  // A run that ended since (a surge replaced its generation) counts no more of
  // it: what it served in all is its count at the signal.
  if (generation != 0)
    event(LogLevel::Info, "exited",
          fmt::format("{} pid {} exited after its recycle: {} requests served", name(slot), pid, n),
          {{"program", program_->name},
           {"slot", slot},
           {"pid", pid},
           {"generation", generation},
           {"requests", n}});
  forget_process(key);
  if (!left) finished(key);
}

void RecycleController::forget_process(RecycleKey key) {
  // Until the next sample, request reports are evaluated on the last one: a
  // process known to be gone must not stay a candidate there.
  Slot& s = slots_[key.slot];
  if (!s.run) return;
  std::erase_if(s.run->last.processes,
                [&](const policies::ProcessSample& p) { return p.pid == key.pid; });
  forget_counts(*s.run, [&](pid_t pid) { return pid == key.pid; });
}

void RecycleController::finished(RecycleKey key) {
  admit(queue_of(key).finish(key));
}

void RecycleController::admit(const std::vector<RecycleKey>& keys) {
  for (const RecycleKey& key : keys) {
    auto it = waiting_.find({key.slot, key.pid});
    if (it == waiting_.end()) {
      finished(key);
      continue;
    }
    Waiting waiting = std::move(it->second);
    waiting_.erase(it);
    const Slot& s = slots_[key.slot];
    if (running(key.slot) && s.run->generation == waiting.generation)
      carry_out(key.slot, waiting.policy, waiting.decision, true);
    else
      finished(key);
  }
}

bool RecycleController::recycle_asked(unsigned slot, std::string reason) {
  if (slot >= slots_.size() || !running(slot)) return false;
  Decision d;
  d.action = program_->checkpoints() ? Decision::Action::Checkpoint : Decision::Action::Restart;
  d.reason = std::move(reason);
  decide(slot, kOperator, std::move(d));
  return true;
}

bool RecycleController::budget_recycle(unsigned slot, pid_t pid, std::string reason) {
  if (slot >= slots_.size() || !running(slot)) return false;
  Decision d;
  d.reason = std::move(reason);
  if (pid) {
    if (!slots_[slot].run->members.count(pid)) return false;
    d.action = Decision::Action::Signal;
    d.pid = pid;
  } else {
    d.action = program_->checkpoints() ? Decision::Action::Checkpoint : Decision::Action::Restart;
  }
  decide(slot, kBudget, std::move(d));
  return true;
}

std::optional<TimePoint> RecycleController::run_started_at(unsigned slot) const {
  if (slot >= slots_.size() || !slots_[slot].run) return std::nullopt;
  return slots_[slot].run->context.started;
}

const std::string& RecycleController::status_text(unsigned slot) const {
  static const std::string none;
  if (slot >= slots_.size() || !slots_[slot].run) return none;
  return slots_[slot].run->status;
}

const policies::Sample* RecycleController::last_sample(unsigned slot) const {
  if (slot >= slots_.size() || !slots_[slot].run) return nullptr;
  return &slots_[slot].run->last;
}

std::vector<std::pair<size_t, const policies::Outlook*>> RecycleController::outlooks(
    unsigned slot) const {
  std::vector<std::pair<size_t, const policies::Outlook*>> out;
  if (slot >= slots_.size() || !slots_[slot].run) return out;
  const Run& run = *slots_[slot].run;
  for (size_t i = 0; i < policies_.size(); ++i)
    if (const policies::Outlook* o = policies_[i]->outlook(*run.states[i])) out.emplace_back(i, o);
  return out;
}

}  // namespace recycler::engine
