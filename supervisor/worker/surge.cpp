#include "supervisor/worker/surge.h"

#include <algorithm>
#include <csignal>

#include "policies/base/units.h"
#include "supervisor/log/log.h"
#include "supervisor/worker/process_signals.h"

namespace recycler {

using log::Level;
using units::format_duration;

Surge::Surge(SurgeHost& host, Timers& timers, std::mt19937_64& rng,
             const config::ProgramConfig& program, const std::string& name, unsigned slot,
             CgroupFactory make_cgroup)
    : host_(host),
      timers_(timers),
      rng_(rng),
      program_(program),
      name_(name),
      slot_(slot),
      make_cgroup_(std::move(make_cgroup)),
      backoff_({program.restart.backoff.initial, program.restart.backoff.max,
                program.restart.backoff.reset_after, 0.2}),
      failures_(program.restart.crash_loop.max, program.restart.crash_loop.within) {}

Surge::~Surge() {
  timer_.reset();
  for (std::unique_ptr<SideGeneration>* side : {&next_, &retiring_}) {
    if (!*side) continue;
    (*side)->timer.reset();
    (*side)->process.reset();
    (*side)->cgroup->kill_all();
    if (Status removed = (*side)->cgroup->remove(); !removed)
      log::warn("{}: cannot remove its cgroup {}: {}", name_, (*side)->cgroup->path(),
                removed.error().message);
  }
}

bool Surge::enabled() const {
  return program_.recycle.mode == config::RecycleMode::Surge && make_cgroup_;
}

void Surge::request(Duration delay, RecycleCause cause) {
  if (cause_) return;  // one under way
  cause_ = std::move(cause);
  if (delay <= Duration{0} && !retiring_) return begin();
  // After a recycle loop's delay, or once the last surge's old generation
  // has gone: never three generations at once.
  timer_ = timers_.after(std::max(delay, kDrainPoll), [this] {
    timer_.reset();
    begin();
  });
}

std::optional<pid_t> Surge::next_pid() const {
  if (next_ && next_->process) return next_->process->pid();
  return std::nullopt;
}

std::optional<pid_t> Surge::retiring_pid() const {
  if (retiring_ && retiring_->process) return retiring_->process->pid();
  return std::nullopt;
}

engine::Generation Surge::generation_in(unsigned variant) const {
  if (next_ && next_->variant == variant) return engine::Generation::Next;
  if (retiring_ && retiring_->variant == variant) return engine::Generation::Retiring;
  return engine::Generation::Current;
}

void Surge::begin() {
  SurgeHost::Main main = host_.main_generation();
  if (!cause_ || !main.running || main.stopping_for_good) return;
  if (retiring_) {  // the last one's old generation is still stopping
    timer_ = timers_.after(kDrainPoll, [this] {
      timer_.reset();
      begin();
    });
    return;
  }
  unsigned variant = 1 - main.variant;
  auto cg = make_cgroup_(variant);
  if (!cg) {
    log::warn("{}: cannot create a cgroup for its next generation ({}); recycling it by restart",
              name_, cg.error().message);
    give_up();
    return;
  }
  auto side = std::make_unique<SideGeneration>();
  side->cgroup = std::move(cg.value());
  side->variant = variant;
  side->generation = main.generation + 1;
  side->started = timers_.now();
  side->oom_kills_at_start = side->cgroup->oom_kills();
  start_next(std::move(side), main);
}

void Surge::start_next(std::unique_ptr<SideGeneration> side, const SurgeHost::Main& main) {
  const config::RecycleConfig& rc = program_.recycle;
  Result<std::unique_ptr<Process>> started = host_.launch(side->generation, cause_, *side->cgroup);
  next_ = std::move(side);
  if (!started) {
    failed(fmt::format("failed to start: {}", started.error().message));
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
                         name_, next_->generation, next_->process->pid(), main.generation, main.pid,
                         until),
             {{"program", program_.name},
              {"slot", slot_},
              {"pid", next_->process->pid()},
              {"generation", next_->generation},
              {"replaces", main.pid},
              {"cgroup", next_->cgroup->path()}});
  if (rc.ready_after)
    next_->timer = timers_.after(*rc.ready_after, [this] {
      ready(fmt::format("it has run {}", format_duration(*program_.recycle.ready_after)));
    });
  else
    next_->timer = timers_.after(rc.ready_timeout, [this] {
      failed(fmt::format("sent no READY=1 within {} (recycle.ready_timeout)",
                         format_duration(program_.recycle.ready_timeout)));
    });
}

// The surge asked for becomes a recycle by restart, with its cause.
void Surge::give_up() {
  RecycleCause cause = std::move(*cause_);
  cause_.reset();
  host_.recycle_by_restart(std::move(cause));
}

void Surge::notified_ready(pid_t pid) {
  if (!next_ || !next_->process || next_->stopping || program_.recycle.ready_after) return;
  bool main = pid == next_->process->pid();
  if (main == program_.recycle.ready_from_child) return;
  if (!main) {
    std::vector<pid_t> pids = next_->cgroup->pids();
    if (std::find(pids.begin(), pids.end(), pid) == pids.end()) return;
  }
  ready(pid == next_->process->pid() ? "READY=1" : fmt::format("READY=1 from pid {}", pid));
}

void Surge::ready(const std::string& how) {
  if (!next_ || !next_->process || next_->stopping) return;
  auto waited = std::chrono::duration_cast<Duration>(timers_.now() - next_->started);
  next_->timer.reset();
  RecycleCause cause = std::move(*cause_);
  cause_.reset();
  // The old generation steps aside: it stops gracefully while the new one serves.
  retiring_ = host_.take_over(std::move(next_), cause);
  backoff_.reset();
  SurgeHost::Main main = host_.main_generation();
  log::event(Level::Info, "surge_ready",
             fmt::format("{} generation {} (pid {}) ready after {} ({}); stopping generation {} "
                         "(pid {}): {}, SIGKILL to {} after {}",
                         name_, main.generation, main.pid, format_duration(waited), how,
                         retiring_->generation, retiring_->process->pid(),
                         units::signal_name(program_.stop.signal),
                         retiring_->cgroup->enforcing() ? "its cgroup" : "its processes",
                         format_duration(program_.stop.timeout)),
             {{"program", program_.name},
              {"slot", slot_},
              {"pid", main.pid},
              {"generation", main.generation},
              {"ready_s", static_cast<double>(waited.count()) / 1000.0},
              {"old_pid", retiring_->process->pid()}});
  stop_side(*retiring_);
  host_.begin_run();
}

void Surge::failed(const std::string& why) {
  if (!next_) return;
  SurgeHost::Main main = host_.main_generation();
  log::event(
      Level::Warn, "surge_failed",
      fmt::format("{} surge: generation {} {}; stopping it, generation {} (pid {}) serves on",
                  name_, next_->generation, why, main.generation, main.pid),
      {{"program", program_.name},
       {"slot", slot_},
       {"generation", next_->generation},
       {"error", why}});
  if (next_->process && !next_->stopping) {
    stop_side(*next_);
  } else if (!next_->process) {
    drain_side(&next_, timers_.now() + kDrainTimeout);
  }
  // Draining the next generation may have ended a stop that waited for it.
  if (!cause_ || host_.main_generation().stopping_for_good) return;
  if (failures_.record_exit(timers_.now())) {
    log::event(
        Level::Error, "surge_failed",
        fmt::format("{} surge: {} replacements failed within {}; recycling it by restart instead",
                    name_, failures_.exits_in_window(),
                    format_duration(program_.restart.crash_loop.within)),
        {{"program", program_.name}, {"slot", slot_}, {"error", std::string("crash loop")}});
    failures_.reset();
    timer_.reset();
    give_up();
    return;
  }
  retry();
}

void Surge::retry() {
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  Duration delay = backoff_.next(Duration{0}, unit(rng_));
  log::info("{} surge: trying again in {}", name_, format_duration(delay));
  timer_ = timers_.after(delay, [this] {
    timer_.reset();
    if (next_) {  // the failed one is still stopping
      timer_ = timers_.after(kDrainPoll, [this] { begin(); });
      return;
    }
    begin();
  });
}

void Surge::stop_side(SideGeneration& side) {
  side.stopping = true;
  SideGeneration* target = &side;
  signal_then_kill(timers_, program_.stop.timeout, *side.process, program_.stop.signal, side.timer,
                   [this, target] {
                     log::warn(
                         "{} generation {} still running {} after {}; killing every "
                         "process in {}",
                         name_, target->generation, format_duration(program_.stop.timeout),
                         units::signal_name(program_.stop.signal), target->cgroup->path());
                     target->cgroup->kill_all();
                     if (target->process) target->process->signal(SIGKILL);
                   });
}

bool Surge::exited(unsigned generation, ExitStatus status) {
  if (next_ && next_->generation == generation) {
    side_exited(next_, "next", status);
    return true;
  }
  if (retiring_ && retiring_->generation == generation) {
    side_exited(retiring_, "retiring", status);
    return true;
  }
  return false;
}

void Surge::side_exited(std::unique_ptr<SideGeneration>& side, const char* which,
                        ExitStatus status) {
  auto uptime = std::chrono::duration_cast<Duration>(timers_.now() - side->started);
  bool oom = side->oom_killed();
  bool expected = side->stopping;
  log::event(expected && !oom ? Level::Info : Level::Warn, oom ? "oom_kill" : "exit",
             fmt::format("{} generation {} ({}) {} after {}{}", name_, side->generation, which,
                         status.describe(), format_duration(uptime),
                         oom ? "; the kernel OOM-killed a process in its cgroup" : ""),
             {{"program", program_.name},
              {"slot", slot_},
              {"pid", side->process ? side->process->pid() : 0},
              {"generation", side->generation},
              {"uptime_s", static_cast<double>(uptime.count()) / 1000.0},
              {"oom_kill", oom},
              {"requested", expected}});
  std::unique_ptr<SideGeneration>* slot = &side;
  bool was_next = slot == &next_;
  side->timer.reset();
  side->stopping = true;
  if (side->cgroup->populated()) side->cgroup->kill_all();
  // The Process goes once its exit callback is over: from the drain's timer.
  side->timer =
      timers_.after(Duration{0}, [this, slot] { drain_side(slot, timers_.now() + kDrainTimeout); });
  if (was_next && !expected) failed(fmt::format("{} before it was ready", status.describe()));
}

void Surge::drain_side(std::unique_ptr<SideGeneration>* side, TimePoint deadline) {
  SideGeneration& s = **side;
  s.process.reset();
  drain_cgroup(timers_, *s.cgroup, deadline, s.timer, name_, [this, side] { remove_side(side); });
}

// A side generation's cgroup has drained: it is gone.
void Surge::remove_side(std::unique_ptr<SideGeneration>* side) {
  SideGeneration& s = **side;
  if (Status removed = s.cgroup->remove(); !removed)
    log::warn("{}: cannot remove its cgroup {}: {}", name_, s.cgroup->path(),
              removed.error().message);
  side->reset();
  if (finish_when_gone_ && !busy()) {
    finish_when_gone_ = false;
    host_.sides_gone();
  }
}

void Surge::kill(bool all) {
  timer_.reset();
  cause_.reset();
  for (std::unique_ptr<SideGeneration>* side : {&next_, &retiring_}) {
    if (!*side || (side == &retiring_ && !all)) continue;
    (*side)->stopping = true;
    (*side)->cgroup->kill_all();
    if ((*side)->process) (*side)->process->signal(SIGKILL);
  }
}

}  // namespace recycler
