#include "supervisor/monitor.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <csignal>
#include <cstring>
#include <unordered_map>
#include <unordered_set>

#include "policies/base/units.h"
#include "supervisor/log.h"
#include "supervisor/timeline/writer.h"
#include "supervisor/util/pidfd.h"

namespace recycler {

using log::Level;
using policies::Decision;
using policies::RecycleKey;
using units::format_duration;

// A checkpoint asked of a worker: until it confirms, exits, or time is up.
struct Checkpointing {
  size_t policy = 0;
  RecycleCause cause;
  TimePoint since;
  bool overdue = false;  // past checkpoint.timeout with on_timeout: wait
  std::unique_ptr<Timer> timeout;
};

// One run (generation) of a worker, as the policies see it.
struct ProgramMonitor::Run {
  unsigned generation = 0;
  policies::WorkerContext context;
  std::vector<std::unique_ptr<policies::PolicyState>> states;
  std::vector<bool> growing;  // per policy: it had an outlook after the last sample
  uint64_t requests = 0;
  // Per process, for the processes of the worker only (at most
  // kMaxTrackedPids): a pid a worker prints is checked against them.
  std::unordered_map<pid_t, uint64_t> pid_requests;
  // The worker's processes as last read: by the sample, or on the first pid
  // printed since that is not among them (at most once per sample).
  std::unordered_set<pid_t> members;
  bool members_fresh = false;
  bool warned_stranger = false;
  std::optional<uint64_t> device;
  policies::Sample last;
  bool ready = false;
  std::optional<Checkpointing> checkpoint;
};

namespace {

// "anon 612 MiB > 600 MiB (memory policy)": what RECYCLER_RECYCLE_REASON says.
std::string cause_text(const Decision& decision, const policies::Policy& policy) {
  return decision.reason + " (" + std::string(policy.name()) + " policy)";
}

// With on_timeout: wait, a worker this close to memory_max is restarted
// without its checkpoint: one more step could be the OOM kill.
constexpr double kOverdueMemoryFraction = 0.95;

}  // namespace

struct ProgramMonitor::Slot {
  Slot(Worker& w, const config::ProgramConfig& p)
      : worker(&w),
        index(w.slot()),
        guard(p.min_uptime, p.restart.backoff.initial, p.restart.backoff.max) {}

  Worker* worker;
  unsigned index;
  std::optional<Run> run;
  std::unique_ptr<Timer> tick;
  // The cgroup outlives runs, and so does its kernel watch.
  std::unique_ptr<probe::MemoryWatch> watch;
  bool watch_tried = false;
  unsigned follow_ups = 0;  // close samples left after a kernel event
  TimePoint last_sample{};
  policies::RecycleLoopGuard guard;
  std::optional<timeline::TimelineWriter> timeline;
  bool timeline_tried = false;
};

// A process-scope recycle in flight: the signalled process, until it exits.
struct ProgramMonitor::Signalled {
  unsigned slot = 0;
  pid_t pid = 0;
  UniqueFd pidfd;
  uv::Handle<uv_poll_t> poll;
  std::unique_ptr<Timer> escalate;
};

ProgramMonitor::ProgramMonitor(MonitorContext& ctx,
                               std::shared_ptr<const config::ProgramConfig> program,
                               const std::vector<std::unique_ptr<Worker>>& workers)
    : ctx_(ctx), program_(std::move(program)), queue_(program_->max_concurrent_recycles) {
  for (const config::PolicyConfig& p : program_->policies) {
    policies_.push_back(p.policy.get());
    needs_ |= p.policy->needs();
  }
  // A timeline records at least the cgroup's figures (cheap); per-process
  // ones only when a policy pays for them anyway.
  if (program_->timeline) needs_ |= policies::kNeedsCgroupMemory;
  if (program_->requests) matcher_ = program_->requests->matcher;  // compiled with the config
  for (const auto& w : workers) slots_.push_back(std::make_unique<Slot>(*w, *program_));
}

ProgramMonitor::~ProgramMonitor() = default;

ProgramMonitor::Slot* ProgramMonitor::find(const Worker& worker) {
  for (auto& s : slots_)
    if (s->worker == &worker) return s.get();
  return nullptr;
}

void ProgramMonitor::on_state_change(Worker& worker) {
  Slot* slot = find(worker);
  if (!slot || !active()) return;
  switch (worker.state()) {
    case WorkerState::Running:
      if (!slot->run || slot->run->generation != worker.generation()) begin_run(*slot);
      // A whole-worker recycle is done once its replacement runs.
      if (queue_.in_flight({slot->index, 0})) finished({slot->index, 0});
      break;
    case WorkerState::Starting:
      break;
    case WorkerState::Exited:
      if (auto exit = worker.last_exit()) record(*slot, "exit", 0, exit->describe());
      // Only recycles chain into a loop: a crash or a stop starts it over.
      if (!worker.recycling()) slot->guard.reset();
      end_run(*slot);
      break;
    case WorkerState::Stopping:
    case WorkerState::Backoff:
      end_run(*slot);
      break;
    case WorkerState::Stopped:
    case WorkerState::Failed: {
      end_run(*slot);
      for (auto it = waiting_.begin(); it != waiting_.end();)
        it = it->first.first == slot->index ? waiting_.erase(it) : std::next(it);
      for (auto it = signalled_.begin(); it != signalled_.end();)
        it = it->second->slot == slot->index ? signalled_.erase(it) : std::next(it);
      admit(queue_.forget_slot(slot->index));
      break;
    }
  }
}

void ProgramMonitor::begin_run(Slot& slot) {
  Worker& w = *slot.worker;
  Run run;
  run.generation = w.generation();
  run.context.started = w.started_at();
  run.context.memory_max = program_->limits.memory_max;
  run.context.seed = ctx_.rng();
  for (const policies::Policy* p : policies_) run.states.push_back(p->start(run.context));
  run.growing.assign(policies_.size(), false);
  run.last.t = ctx_.timers.now();
  slot.run = std::move(run);

  if (program_->timeline && !slot.timeline_tried) {
    slot.timeline_tried = true;
    auto writer = timeline::TimelineWriter::create(*program_->timeline, program_->name, slot.index);
    if (writer)
      slot.timeline.emplace(std::move(writer.value()));
    else
      log::warn("{}: no timeline: {}", w.name(), writer.error().message);
  }
  if (slot.timeline) {
    if (Status s = slot.timeline->start_run(w.generation(), w.pid().value_or(0), w.started_at());
        !s)
      log::warn("{}: timeline: {}", w.name(), s.error().message);
  }

  if (!slot.watch_tried) {
    slot.watch_tried = true;
    std::optional<uint64_t> threshold;
    for (const policies::Policy* p : policies_)
      if (auto t = p->fast_threshold(slot.run->context); t && (!threshold || *t < *threshold))
        threshold = t;
    auto dir = w.cgroup().memory_dir();
    if (threshold && dir) {
      auto watch = probe::MemoryWatch::create(ctx_.loop, dir->fd, dir->v2, *threshold,
                                              [this, &slot] { on_kernel_event(slot); });
      if (watch)
        slot.watch = std::move(watch.value());
      else
        log::warn("{}: no fast path for memory spikes (sampling every {} only): {}", w.name(),
                  format_duration(program_->sample_interval), watch.error().message);
    }
  }
  arm_tick(slot, program_->sample_interval);
}

void ProgramMonitor::end_run(Slot& slot) {
  slot.tick.reset();
  slot.run.reset();
}

void ProgramMonitor::arm_tick(Slot& slot, Duration delay) {
  slot.tick = ctx_.timers.after(delay, [this, &slot] {
    sample(slot);
    if (!slot.run) return;
    // After a kernel event, look closely for a while: the cgroup's `current`
    // crosses the threshold a little before the policy's own metric does.
    // Bounded, so a worker whose page cache keeps `current` above the
    // threshold costs no more than a few samples per crossing.
    if (slot.follow_ups > 0) {
      --slot.follow_ups;
      arm_tick(slot, std::min(kFollowUp, program_->sample_interval));
    } else {
      arm_tick(slot, program_->sample_interval);
    }
  });
}

void ProgramMonitor::on_kernel_event(Slot& slot) {
  if (!slot.run) return;
  if (ctx_.timers.now() - slot.last_sample >= kFollowUp) sample(slot);
  if (!slot.run) return;
  slot.follow_ups = kFollowUps;
  arm_tick(slot, std::min(kFollowUp, program_->sample_interval));
}

void ProgramMonitor::sample(Slot& slot) {
  Worker& w = *slot.worker;
  if (!slot.run || w.state() != WorkerState::Running || w.recycling()) return;
  Run& run = *slot.run;
  auto dir = w.cgroup().memory_dir();
  bool list = probe::reads_processes(needs_, dir.has_value());
  std::vector<pid_t> pids;
  if (list) pids = w.cgroup().pids();
  std::optional<probe::CgroupReader> reader;
  if (dir) reader.emplace(dir->fd, dir->v2);
  TimePoint now = ctx_.timers.now();
  policies::Sample s = probe::probe_worker(reader ? &*reader : nullptr, ctx_.procs, pids,
                                           w.pid().value_or(0), needs_, now);
  s.requests = run.requests;
  s.device = run.device;
  for (policies::ProcessSample& p : s.processes) {
    auto it = run.pid_requests.find(p.pid);
    p.requests = it == run.pid_requests.end() ? 0 : it->second;
  }
  run.members_fresh = false;
  if (list) {  // forget the counts of processes that are gone
    std::erase_if(run.pid_requests, [&](const auto& e) {
      return !std::binary_search(pids.begin(), pids.end(), e.first);
    });
    if (matcher_) {  // only pids that output names are checked against it
      run.members = {pids.begin(), pids.end()};
      run.members_fresh = true;
    }
  }
  slot.last_sample = now;
  if (slot.timeline) {
    if (Status written = slot.timeline->sample(s); !written)
      log::warn("{}: timeline: {}", w.name(), written.error().message);
  }
  run.last = s;
  const auto& max = program_->limits.memory_max;
  if (run.checkpoint && run.checkpoint->overdue && max && s.current &&
      static_cast<double>(*s.current) >= kOverdueMemoryFraction * static_cast<double>(*max)) {
    log::warn(
        "{} is at {} of its {} memory_max and has not confirmed its checkpoint; restarting "
        "it without one",
        w.name(), units::format_size(*s.current), units::format_size(*max));
    return end_checkpoint(slot, "memory", false);
  }
  evaluate(slot, run.last, 0);
}

void ProgramMonitor::evaluate(Slot& slot, policies::Sample& sample, unsigned only_needing) {
  for (policies::ProcessSample& p : sample.processes)
    p.recycling = signalled_.count(p.pid) > 0 || waiting_.count({slot.index, p.pid}) > 0;
  // Every policy sees every sample (their `for:` clocks must run); then the
  // whole-worker decision, if any, wins over process-scope ones.
  std::vector<std::pair<size_t, Decision>> decisions;
  for (size_t i = 0; i < policies_.size(); ++i) {
    if (only_needing && !(policies_[i]->needs() & only_needing)) continue;
    Decision d = policies_[i]->evaluate(sample, *slot.run->states[i]);
    report_outlook(slot, i);
    if (d) decisions.emplace_back(i, std::move(d));
  }
  auto whole = std::find_if(decisions.begin(), decisions.end(), [](const auto& d) {
    return d.second.action != Decision::Action::Signal;
  });
  // While a checkpoint is under way, only a plain restart changes anything.
  if (slot.run->checkpoint)
    whole = std::find_if(decisions.begin(), decisions.end(), [](const auto& d) {
      return d.second.action == Decision::Action::Restart;
    });
  if (whole != decisions.end()) return decide(slot, whole->first, std::move(whole->second));
  for (auto& [i, d] : decisions) {
    if (!slot.run) return;
    decide(slot, i, std::move(d));
  }
}

// Logged when a predicting policy starts or stops seeing growth, not on
// every sample: "train[0] leak: growing: anon +38 MiB/min over 10m, ...".
void ProgramMonitor::report_outlook(Slot& slot, size_t policy) {
  Run& run = *slot.run;
  const policies::Policy& p = *policies_[policy];
  const policies::Outlook* outlook = p.outlook(*run.states[policy]);
  if ((outlook != nullptr) == run.growing[policy]) return;
  run.growing[policy] = outlook != nullptr;
  const Worker& w = *slot.worker;
  log::Fields fields{{"program", program_->name},
                     {"slot", slot.index},
                     {"generation", run.generation},
                     {"policy", std::string(p.name())},
                     {"growing", outlook != nullptr}};
  if (!outlook) {
    log::event(Level::Info, "outlook", fmt::format("{} {}: no longer growing", w.name(), p.name()),
               fields);
    return;
  }
  fields.emplace_back("slope_bytes_per_s", static_cast<uint64_t>(std::llround(outlook->slope)));
  fields.emplace_back("predicted_s", outlook->predicted_s);
  log::event(Level::Info, "outlook",
             fmt::format("{} {}: growing: {}", w.name(), p.name(), outlook->summary), fields);
}

void ProgramMonitor::decide(Slot& slot, size_t policy, Decision decision) {
  Worker& w = *slot.worker;
  if (w.state() != WorkerState::Running || w.recycling()) return;
  bool signal = decision.action == Decision::Action::Signal;
  RecycleKey key{slot.index, signal ? decision.pid : 0};
  // A limit that says "restart now" does not wait for a checkpoint asked for
  // earlier (a spike on top of the leak that asked for it).
  if (slot.run && slot.run->checkpoint && decision.action == Decision::Action::Restart) {
    log::warn("{}: {} ({} policy) while it checkpoints; restarting it now", w.name(),
              decision.reason, policies_[policy]->name());
    slot.run->checkpoint.reset();
    return restart(slot, policy, RecycleCause{cause_text(decision, *policies_[policy]), false});
  }
  // Already under way or waiting: a policy fires on every sample until then.
  if (queue_.in_flight(key) || queue_.queued(key) || (signal && signalled_.count(key.pid))) return;
  switch (queue_.request(key)) {
    case policies::RecycleQueue::Admit::Now:
      carry_out(slot, policy, decision);
      break;
    case policies::RecycleQueue::Admit::Queued:
      log::info("{} recycle{} waits its turn ({} of at most {} under way): {} ({} policy)",
                w.name(), signal ? " pid " + std::to_string(key.pid) : std::string(),
                queue_.in_flight_count(), program_->max_concurrent_recycles, decision.reason,
                policies_[policy]->name());
      waiting_[{key.slot, key.pid}] = Waiting{policy, std::move(decision), w.generation()};
      break;
    case policies::RecycleQueue::Admit::AlreadyInFlight:
    case policies::RecycleQueue::Admit::AlreadyQueued:
      break;
  }
}

void ProgramMonitor::carry_out(Slot& slot, size_t policy, const Decision& decision) {
  Worker& w = *slot.worker;
  const policies::Policy& p = *policies_[policy];
  bool signal = decision.action == Decision::Action::Signal;
  RecycleKey key{slot.index, signal ? decision.pid : 0};
  pid_t target = signal ? decision.pid : w.pid().value_or(0);
  UniqueFd pidfd;
  if (signal) {
    // A pre-fork server's master reaps its own children, so the pid may be
    // gone (or reused) by now. A pidfd pins the process; it must still be
    // in the worker's cgroup after that.
    pidfd.reset(pidfd_open(target));
    std::vector<pid_t> pids = pidfd ? w.cgroup().pids() : std::vector<pid_t>{};
    if (std::find(pids.begin(), pids.end(), target) == pids.end()) {
      log::debug("{}: pid {} exited before its recycle", w.name(), target);
      forget_process(key);
      finished(key);
      return;
    }
  }
  log::Fields fields{{"program", program_->name},
                     {"slot", slot.index},
                     {"pid", target},
                     {"generation", w.generation()},
                     {"policy", std::string(p.name())},
                     {"action", policies::to_string(decision.action)},
                     {"reason", decision.reason}};
  if (decision.predicted_s) fields.emplace_back("predicted_s", *decision.predicted_s);
  record(slot, "recycle", target, cause_text(decision, p));
  std::string what = signal ? " pid " + std::to_string(target) : std::string();
  log::event(Level::Info, "recycle",
             fmt::format("{} recycle{}: {} ({} policy)", w.name(), what, decision.reason, p.name()),
             fields);

  if (signal) {
    int sig = decision.signal ? decision.signal : SIGTERM;
    if (pidfd_send_signal(pidfd.get(), sig) != 0) {
      log::debug("{}: pid {} is gone already", w.name(), target);
      finished(key);
      return;
    }
    watch_exit(slot, target, std::move(pidfd));
    return;
  }
  if (decision.action == Decision::Action::Checkpoint)
    return begin_checkpoint(slot, policy, decision);
  restart(slot, policy, RecycleCause{cause_text(decision, p), false});
}

void ProgramMonitor::restart(Slot& slot, size_t policy, RecycleCause cause) {
  Worker& w = *slot.worker;
  const policies::Policy& p = *policies_[policy];
  RecycleKey key{slot.index, 0};
  auto uptime = std::chrono::duration_cast<Duration>(ctx_.timers.now() - w.started_at());
  Duration delay =
      slot.guard.on_recycle(uptime, p.may_loop(), std::to_string(policy) + std::string(p.name()));
  if (delay > Duration{0}) {
    log::event(Level::Warn, "recycle_loop",
               fmt::format("{} tripped the {} policy again {} after it started (min_uptime {}): "
                           "it starts near its limit; its next start waits {} (recycle loop {})",
                           w.name(), p.name(), format_duration(uptime),
                           format_duration(program_->min_uptime), format_duration(delay),
                           slot.guard.loops()),
               {{"program", program_->name},
                {"slot", slot.index},
                {"policy", std::string(p.name())},
                {"delay_s", static_cast<double>(delay.count()) / 1000.0},
                {"loops", slot.guard.loops()}});
  }
  if (!w.recycle(delay, std::move(cause))) finished(key);
}

void ProgramMonitor::begin_checkpoint(Slot& slot, size_t policy, const Decision& decision) {
  Worker& w = *slot.worker;
  const config::CheckpointConfig& c = program_->checkpoint;
  RecycleCause cause{cause_text(decision, *policies_[policy]), true};
  std::optional<pid_t> pid = w.pid();
  // The main process is recycler's child and not reaped yet: its pid is its own.
  if (!pid || ::kill(*pid, c.signal) != 0) {
    log::warn("{}: cannot ask pid {} to checkpoint ({}); restarting it without one", w.name(),
              pid.value_or(0), std::strerror(errno));
    cause.resume = false;
    return restart(slot, policy, std::move(cause));
  }
  log::event(
      Level::Info, "checkpoint",
      fmt::format("{} asked to checkpoint: {} to pid {}; restarting it once it confirms "
                  "(RECYCLER_CHECKPOINTED=1 or a clean exit), at most {} from now{}",
                  w.name(), units::signal_name(c.signal), *pid, format_duration(c.timeout),
                  c.on_timeout == config::CheckpointTimeout::Wait ? " (then it waits on)" : ""),
      {{"program", program_->name},
       {"slot", slot.index},
       {"pid", *pid},
       {"generation", w.generation()},
       {"signal", units::signal_name(c.signal)},
       {"timeout_s", static_cast<double>(c.timeout.count()) / 1000.0}});
  record(slot, "checkpoint", *pid, units::signal_name(c.signal));
  w.expect_clean_exit(cause);
  Checkpointing& cp = slot.run->checkpoint.emplace();
  cp.policy = policy;
  cp.cause = std::move(cause);
  cp.since = ctx_.timers.now();
  cp.timeout = ctx_.timers.after(c.timeout, [this, &slot] { on_checkpoint_timeout(slot); });
}

void ProgramMonitor::on_checkpoint_timeout(Slot& slot) {
  if (!slot.run || !slot.run->checkpoint) return;
  Checkpointing& cp = *slot.run->checkpoint;
  const config::CheckpointConfig& c = program_->checkpoint;
  if (c.on_timeout == config::CheckpointTimeout::Wait) {
    cp.overdue = true;
    const auto& max = program_->limits.memory_max;
    log::warn("{} has not confirmed its checkpoint after {}; waiting on (on_timeout: wait){}",
              slot.worker->name(), format_duration(c.timeout),
              max ? fmt::format(" until it nears its {} memory_max", units::format_size(*max))
                  : std::string());
    return;
  }
  log::warn(
      "{} has not confirmed its checkpoint after {}; restarting it without one "
      "(on_timeout: restart)",
      slot.worker->name(), format_duration(c.timeout));
  end_checkpoint(slot, "timeout", false);
}

// The checkpoint is over (confirmed or timed out): stop the worker
// and start its replacement, resuming from the checkpoint when there is one.
void ProgramMonitor::end_checkpoint(Slot& slot, std::string_view why, bool resume) {
  Checkpointing cp = std::move(*slot.run->checkpoint);
  slot.run->checkpoint.reset();
  cp.cause.resume = resume;
  log::debug("{}: checkpoint over ({}) after {}", slot.worker->name(), why,
             format_duration(std::chrono::duration_cast<Duration>(ctx_.timers.now() - cp.since)));
  restart(slot, cp.policy, std::move(cp.cause));
}

void ProgramMonitor::watch_exit(Slot& slot, pid_t pid, UniqueFd pidfd) {
  auto entry = std::make_unique<Signalled>();
  entry->slot = slot.index;
  entry->pid = pid;
  entry->pidfd = std::move(pidfd);
  auto* poll = new uv_poll_t;
  uv_poll_init(ctx_.loop, poll, entry->pidfd.get());
  poll->data = this;
  entry->poll = uv::Handle<uv_poll_t>(poll);
  uv_poll_start(poll, UV_READABLE, [](uv_poll_t* h, int, int) {
    auto* self = static_cast<ProgramMonitor*>(h->data);
    if (!self) return;
    for (auto& [p, s] : self->signalled_) {
      if (s->poll.get() != h) continue;
      RecycleKey key{s->slot, p};
      self->signalled_.erase(key.pid);  // not `p`: it lives in the node being erased
      self->forget_process(key);
      self->finished(key);
      return;
    }
  });
  // A process that ignores its signal gets what a stop gets: SIGKILL after stop.timeout.
  entry->escalate = ctx_.timers.after(program_->stop.timeout, [this, pid] {
    auto it = signalled_.find(pid);
    if (it == signalled_.end()) return;
    log::warn("{}[{}] pid {} still running {} after it was signalled; killing it", program_->name,
              it->second->slot, pid, format_duration(program_->stop.timeout));
    pidfd_send_signal(it->second->pidfd.get(), SIGKILL);
  });
  signalled_[pid] = std::move(entry);
}

void ProgramMonitor::record(Slot& slot, std::string_view event, pid_t pid,
                            std::string_view detail) {
  if (!slot.timeline) return;
  if (Status s = slot.timeline->event(event, pid, detail); !s)
    log::warn("{}: timeline: {}", slot.worker->name(), s.error().message);
}

void ProgramMonitor::forget_process(RecycleKey key) {
  // Until the next sample, request reports are evaluated on the last one: a
  // process known to be gone must not stay a candidate there.
  Slot* slot = key.slot < slots_.size() ? slots_[key.slot].get() : nullptr;
  if (!slot || !slot->run) return;
  std::erase_if(slot->run->last.processes,
                [&](const policies::ProcessSample& p) { return p.pid == key.pid; });
  slot->run->pid_requests.erase(key.pid);
}

void ProgramMonitor::finished(RecycleKey key) {
  admit(queue_.finish(key));
}

void ProgramMonitor::admit(const std::vector<RecycleKey>& keys) {
  for (const RecycleKey& key : keys) {
    auto it = waiting_.find({key.slot, key.pid});
    if (it == waiting_.end()) {
      finished(key);
      continue;
    }
    Waiting waiting = std::move(it->second);
    waiting_.erase(it);
    Slot* slot = key.slot < slots_.size() ? slots_[key.slot].get() : nullptr;
    Worker* w = slot ? slot->worker : nullptr;
    bool valid = w && slot->run && w->state() == WorkerState::Running && !w->recycling() &&
                 w->generation() == waiting.generation && (key.pid == 0 || ::kill(key.pid, 0) == 0);
    if (valid)
      carry_out(*slot, waiting.policy, waiting.decision);
    else
      finished(key);
  }
}

void ProgramMonitor::on_notify(Worker& worker, pid_t sender, const notify::NotifyMessage& message) {
  Slot* slot = find(worker);
  if (!slot || !slot->run) return;
  Run& run = *slot->run;
  if (message.device_bytes) run.device = message.device_bytes;
  if (message.ready && !run.ready) {
    run.ready = true;
    log::debug("{} is ready (READY=1 from pid {})", worker.name(), sender);
  }
  if (message.status) log::debug("{} status: {}", worker.name(), *message.status);
  if (message.checkpointed) {
    if (!run.checkpoint) {
      log::debug("{}: RECYCLER_CHECKPOINTED=1 from pid {} with no checkpoint asked for",
                 worker.name(), sender);
    } else {
      auto took = std::chrono::duration_cast<Duration>(ctx_.timers.now() - run.checkpoint->since);
      log::event(Level::Info, "checkpointed",
                 fmt::format("{} checkpointed in {} (pid {}); restarting it to resume",
                             worker.name(), format_duration(took), sender),
                 {{"program", program_->name},
                  {"slot", slot->index},
                  {"pid", sender},
                  {"generation", worker.generation()},
                  {"took_s", static_cast<double>(took.count()) / 1000.0}});
      record(*slot, "checkpointed", sender, format_duration(took));
      return end_checkpoint(*slot, "confirmed", true);
    }
  }
  if (message.requests && *message.requests > 0) count_requests(*slot, sender, *message.requests);
}

void ProgramMonitor::on_output(Worker& worker, pid_t pid, std::string_view line) {
  if (!matcher_) return;
  notify::OutputMatcher::Match m = matcher_->match(line);
  if (!m.matched) return;
  Slot* slot = find(worker);
  if (!slot || !slot->run) return;
  // The pid in a line is text the worker wrote: it names one of its
  // processes, or the request counts for the worker alone.
  if (m.pid && *m.pid != pid && !is_member(*slot, *m.pid)) {
    Run& run = *slot->run;
    if (!std::exchange(run.warned_stranger, true))
      log::warn(
          "{}: its output names pid {} as serving a request, which is not one of its "
          "processes; such requests count for the worker, not for a process",
          worker.name(), *m.pid);
    return count_requests(*slot, std::nullopt, 1);
  }
  count_requests(*slot, m.pid.value_or(pid), 1);
}

bool ProgramMonitor::is_member(Slot& slot, pid_t pid) {
  Run& run = *slot.run;
  if (run.members.count(pid)) return true;
  if (run.members_fresh) return false;
  std::vector<pid_t> pids = slot.worker->cgroup().pids();
  run.members = {pids.begin(), pids.end()};
  run.members_fresh = true;
  return run.members.count(pid) > 0;
}

void ProgramMonitor::count_requests(Slot& slot, std::optional<pid_t> pid, uint64_t n) {
  Run& run = *slot.run;
  run.requests += n;
  if (pid && run.pid_requests.size() >= kMaxTrackedPids && !run.pid_requests.count(*pid)) {
    // Only the worker's processes get here: forget those that are gone.
    std::erase_if(run.pid_requests, [&](const auto& e) { return !run.members.count(e.first); });
    if (run.pid_requests.size() >= kMaxTrackedPids) pid.reset();
  }
  if (pid) run.pid_requests[*pid] += n;
  if (!(needs_ & policies::kNeedsRequests)) return;
  // The request-counting policies look at once, on the last sample with the
  // new counts (memory figures stay as last measured; those policies skip it).
  policies::Sample& s = run.last;
  s.t = ctx_.timers.now();
  s.requests = run.requests;
  if (pid) {
    auto it = std::find_if(s.processes.begin(), s.processes.end(),
                           [&](const policies::ProcessSample& p) { return p.pid == *pid; });
    if (it == s.processes.end()) {
      policies::ProcessSample p;
      p.pid = *pid;
      p.main = slot.worker->pid() == *pid;
      s.processes.push_back(p);
      it = std::prev(s.processes.end());
    }
    it->requests = run.pid_requests[*pid];
  }
  evaluate(slot, s, policies::kNeedsRequests);
}

}  // namespace recycler
