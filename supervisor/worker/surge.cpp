// Worker's surge (recycle.mode: surge; worker.h): the next generation starts
// beside the current one in the slot's other cgroup, takes over once ready,
// and the old one stops beside it.
#include <algorithm>
#include <csignal>

#include "policies/base/units.h"
#include "supervisor/log/log.h"
#include "supervisor/worker/worker.h"

namespace recycler {

using log::Level;
using units::format_duration;

std::optional<pid_t> Worker::surge_pid() const {
  if (next_ && next_->process) return next_->process->pid();
  return std::nullopt;
}

std::optional<pid_t> Worker::retiring_pid() const {
  if (retiring_ && retiring_->process) return retiring_->process->pid();
  return std::nullopt;
}

Worker::Generation Worker::generation_in(unsigned variant) const {
  if (next_ && next_->variant == variant) return Generation::Next;
  if (retiring_ && retiring_->variant == variant) return Generation::Retiring;
  return Generation::Current;
}

void Worker::begin_surge() {
  if (!surge_cause_ || state_ != WorkerState::Running || stopping_for_good()) return;
  if (retiring_) {  // the last one's old generation is still stopping
    surge_timer_ = ctx_.timers.after(kDrainPoll, [this] {
      surge_timer_.reset();
      begin_surge();
    });
    return;
  }
  const config::RecycleConfig& rc = program_->recycle;
  unsigned variant = 1 - variant_;
  auto cg = make_cgroup_(variant);
  if (!cg) {
    log::warn("{}: cannot create a cgroup for its next generation ({}); recycling it by restart",
              name_, cg.error().message);
    restart_instead();
    return;
  }
  auto side = std::make_unique<Side>();
  side->cgroup = std::move(cg.value());
  side->variant = variant;
  side->generation = generation_ + 1;
  side->started = ctx_.timers.now();
  side->oom_kills_at_start = side->cgroup->oom_kills();
  LaunchSpec spec = launch_spec(side->generation, surge_cause_, *side->cgroup);
  bool joinable = std::all_of(spec.join_fds.begin(), spec.join_fds.end(),
                              [](const UniqueFd& fd) { return static_cast<bool>(fd); });
  Result<std::unique_ptr<Process>> started =
      joinable
          ? ctx_.launcher.launch(std::move(spec), output_tag(), exit_callback(side->generation))
          : errno_error("cannot open the files that join its cgroup " + side->cgroup->path());
  next_ = std::move(side);
  if (!started) {
    surge_failed(fmt::format("failed to start: {}", started.error().message));
    return;
  }
  next_->process = std::move(started.value());
  next_->cgroup->adopt(next_->process->pid());
  std::string until = rc.ready_after
                          ? fmt::format("once it has run {}", format_duration(*rc.ready_after))
                          : fmt::format("once {} sends READY=1, at most {} from now",
                                        rc.ready_from_child ? "a child of it" : "it",
                                        format_duration(rc.ready_timeout));
  log::event(Level::Info, "surge",
             fmt::format("{} surge: generation {} (pid {}) starting beside generation {} (pid {}); "
                         "it takes over {}",
                         name_, next_->generation, next_->process->pid(), generation_,
                         process_->pid(), until),
             {{"program", program_->name},
              {"slot", slot_},
              {"pid", next_->process->pid()},
              {"generation", next_->generation},
              {"replaces", process_->pid()},
              {"cgroup", next_->cgroup->path()}});
  if (rc.ready_after)
    next_->timer = ctx_.timers.after(*rc.ready_after, [this] {
      surge_ready(fmt::format("it has run {}", format_duration(*program_->recycle.ready_after)));
    });
  else
    next_->timer = ctx_.timers.after(rc.ready_timeout, [this] {
      surge_failed(fmt::format("sent no READY=1 within {} (recycle.ready_timeout)",
                               format_duration(program_->recycle.ready_timeout)));
    });
}

// The surge asked for becomes a recycle by restart, with its cause.
void Worker::restart_instead() {
  RecycleCause cause = std::move(*surge_cause_);
  surge_cause_.reset();
  set_phase(StopPhase::None);
  if (state_ != WorkerState::Running) return;
  enter_replace(Duration{0}, std::move(cause));
  send_stop_signal(StopPhase::Recycling);
}

void Worker::notified_ready(pid_t pid) {
  if (!next_ || !next_->process || next_->stopping || program_->recycle.ready_after) return;
  bool main = pid == next_->process->pid();
  if (main == program_->recycle.ready_from_child) return;
  if (!main) {
    std::vector<pid_t> pids = next_->cgroup->pids();
    if (std::find(pids.begin(), pids.end(), pid) == pids.end()) return;
  }
  surge_ready(pid == next_->process->pid() ? "READY=1" : fmt::format("READY=1 from pid {}", pid));
}

void Worker::surge_ready(const std::string& how) {
  if (!next_ || !next_->process || next_->stopping) return;
  auto waited = std::chrono::duration_cast<Duration>(ctx_.timers.now() - next_->started);
  // The old generation steps aside: it stops gracefully while the new one serves.
  auto old = std::make_unique<Side>();
  old->process = std::move(process_);
  old->cgroup = std::move(cgroup_);
  old->variant = variant_;
  old->generation = generation_;
  old->started = started_at_;
  old->oom_kills_at_start = oom_kills_at_start_;
  std::unique_ptr<Side> next = std::move(next_);
  next->timer.reset();
  process_ = std::move(next->process);
  cgroup_ = std::move(next->cgroup);
  variant_ = next->variant;
  generation_ = next->generation;
  started_at_ = next->started;
  oom_kills_at_start_ = next->oom_kills_at_start;
  RecycleCause cause = std::move(*surge_cause_);
  surge_cause_.reset();
  ++recycles_;
  last_recycle_reason_ = cause.reason;
  surge_backoff_.reset();
  // Processes signalled one by one belonged to the old generation.
  signalled_.clear();
  retiring_ = std::move(old);
  log::event(Level::Info, "surge_ready",
             fmt::format("{} generation {} (pid {}) ready after {} ({}); stopping generation {} "
                         "(pid {}): {}, SIGKILL to {} after {}",
                         name_, generation_, process_->pid(), format_duration(waited), how,
                         retiring_->generation, retiring_->process->pid(),
                         units::signal_name(program_->stop.signal),
                         retiring_->cgroup->enforcing() ? "its cgroup" : "its processes",
                         format_duration(program_->stop.timeout)),
             {{"program", program_->name},
              {"slot", slot_},
              {"pid", process_->pid()},
              {"generation", generation_},
              {"ready_s", static_cast<double>(waited.count()) / 1000.0},
              {"old_pid", retiring_->process->pid()}});
  stop_side(*retiring_, program_->stop.signal);
  set_phase(StopPhase::None);
  set_state(WorkerState::Running);  // a new run
}

void Worker::surge_failed(const std::string& why) {
  if (!next_) return;
  log::event(
      Level::Warn, "surge_failed",
      fmt::format("{} surge: generation {} {}; stopping it, generation {} (pid {}) serves on",
                  name_, next_->generation, why, generation_, process_ ? process_->pid() : 0),
      {{"program", program_->name},
       {"slot", slot_},
       {"generation", next_->generation},
       {"error", why}});
  if (next_->process && !next_->stopping) {
    stop_side(*next_, program_->stop.signal);
  } else if (!next_->process) {
    drain_side(&next_, ctx_.timers.now() + kDrainTimeout);
  }
  if (!surge_cause_ || stopping_for_good()) return;
  if (surge_failures_.record_exit(ctx_.timers.now())) {
    log::event(
        Level::Error, "surge_failed",
        fmt::format("{} surge: {} replacements failed within {}; recycling it by restart instead",
                    name_, surge_failures_.exits_in_window(),
                    format_duration(program_->restart.crash_loop.within)),
        {{"program", program_->name}, {"slot", slot_}, {"error", std::string("crash loop")}});
    surge_failures_.reset();
    surge_timer_.reset();
    restart_instead();
    return;
  }
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  Duration delay = surge_backoff_.next(Duration{0}, unit(ctx_.rng));
  log::info("{} surge: trying again in {}", name_, format_duration(delay));
  surge_timer_ = ctx_.timers.after(delay, [this] {
    surge_timer_.reset();
    if (next_) {  // the failed one is still stopping
      surge_timer_ = ctx_.timers.after(kDrainPoll, [this] { begin_surge(); });
      return;
    }
    begin_surge();
  });
}

void Worker::stop_side(Side& side, int signal) {
  side.stopping = true;
  Side* target = &side;
  terminate(*side.process, signal, side.timer, [this, target] {
    log::warn("{} generation {} still running {} after {}; killing every process in {}", name_,
              target->generation, format_duration(program_->stop.timeout),
              units::signal_name(program_->stop.signal), target->cgroup->path());
    target->cgroup->kill_all();
    if (target->process) target->process->signal(SIGKILL);
  });
}

void Worker::side_exited(std::unique_ptr<Side>& side, const char* which, ExitStatus status) {
  auto uptime = std::chrono::duration_cast<Duration>(ctx_.timers.now() - side->started);
  std::optional<uint64_t> oom_now = side->cgroup->oom_kills();
  bool oom = oom_now && side->oom_kills_at_start && *oom_now > *side->oom_kills_at_start;
  bool expected = side->stopping;
  log::event(expected && !oom ? Level::Info : Level::Warn, oom ? "oom_kill" : "exit",
             fmt::format("{} generation {} ({}) {} after {}{}", name_, side->generation, which,
                         status.describe(), format_duration(uptime),
                         oom ? "; the kernel OOM-killed a process in its cgroup" : ""),
             {{"program", program_->name},
              {"slot", slot_},
              {"pid", side->process ? side->process->pid() : 0},
              {"generation", side->generation},
              {"uptime_s", static_cast<double>(uptime.count()) / 1000.0},
              {"oom_kill", oom},
              {"requested", expected}});
  std::unique_ptr<Side>* slot = &side;
  bool was_next = slot == &next_;
  side->timer.reset();
  side->stopping = true;
  if (side->cgroup->populated()) side->cgroup->kill_all();
  // The Process goes once its exit callback is over: from the drain's timer.
  side->timer = ctx_.timers.after(
      Duration{0}, [this, slot] { drain_side(slot, ctx_.timers.now() + kDrainTimeout); });
  if (was_next && !expected) surge_failed(fmt::format("{} before it was ready", status.describe()));
}

void Worker::drain_side(std::unique_ptr<Side>* side, TimePoint deadline) {
  Side& s = **side;
  s.process.reset();
  if (s.cgroup->populated() && ctx_.timers.now() < deadline) {
    s.cgroup->kill_all();
    s.timer = ctx_.timers.after(kDrainPoll, [this, side, deadline] { drain_side(side, deadline); });
    return;
  }
  if (s.cgroup->populated())
    log::error("{}: {} process(es) still in {} {} after SIGKILL; going on without them", name_,
               s.cgroup->pids().size(), s.cgroup->path(), format_duration(kDrainTimeout));
  if (Status removed = s.cgroup->remove(); !removed)
    log::warn("{}: cannot remove its cgroup {}: {}", name_, s.cgroup->path(),
              removed.error().message);
  side->reset();
  if (finish_when_sides_gone_ && !sides_busy()) {
    finish_when_sides_gone_ = false;
    finish_stop();
  }
}

// A stop of the slot, or its main process's exit, during a surge: the next
// generation goes at once (with `all`, a kill, whatever is left of the old
// one too).
void Worker::kill_sides(bool all) {
  surge_timer_.reset();
  surge_cause_.reset();
  if (phase_ == StopPhase::Surging) set_phase(StopPhase::None);
  for (std::unique_ptr<Side>* side : {&next_, &retiring_}) {
    if (!*side || (side == &retiring_ && !all)) continue;
    (*side)->stopping = true;
    (*side)->cgroup->kill_all();
    if ((*side)->process) (*side)->process->signal(SIGKILL);
  }
}

}  // namespace recycler
