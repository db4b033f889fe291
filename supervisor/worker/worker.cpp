#include "supervisor/worker/worker.h"

#include <sys/resource.h>

#include <algorithm>
#include <cerrno>
#include <csignal>

#include "policies/base/units.h"
#include "supervisor/log/log.h"

namespace recycler {

using log::Level;
using units::format_duration;

const char* to_string(WorkerState state) {
  return enum_name(kWorkerStateNames, state);
}
const char* to_string(StopPhase phase) {
  return enum_name(kStopPhaseNames, phase);
}

const char* Worker::to_string(AfterExit::Then then) {
  static constexpr EnumName<AfterExit::Then> kNames[] = {{AfterExit::Then::Restart, "restart"},
                                                         {AfterExit::Then::Replace, "replace"},
                                                         {AfterExit::Then::Resume, "resume"},
                                                         {AfterExit::Then::Stop, "stop"}};
  return enum_name(kNames, then);
}

Worker::Worker(WorkerServices& context, std::shared_ptr<const config::ProgramConfig> program,
               unsigned slot, std::unique_ptr<cgroup::WorkerCgroup> cgroup,
               std::string notify_socket, std::shared_ptr<const listen::Set> sockets,
               CgroupFactory make_cgroup)
    : ctx_(context),
      program_(std::move(program)),
      slot_(slot),
      name_(program_->name + "[" + std::to_string(slot) + "]"),
      cgroup_(std::move(cgroup)),
      notify_socket_(std::move(notify_socket)),
      sockets_(std::move(sockets)),
      surge_(*this, context.timers, context.rng, *program_, name_, slot, std::move(make_cgroup)),
      signals_(context.timers, context.launcher, context.service, name_, program_->stop.timeout),
      backoff_({program_->restart.backoff.initial, program_->restart.backoff.max,
                program_->restart.backoff.reset_after, 0.2}),
      crash_loop_(program_->restart.crash_loop.max, program_->restart.crash_loop.within) {}

Worker::~Worker() {
  timer_.reset();
  signals_.clear();
  process_.reset();
  Status removed = cgroup_->remove();
  if (!removed) log::warn("{}: cannot remove its cgroup: {}", name_, removed.error().message);
  // surge_ goes next, with whatever ran beside the main generation.
}

std::optional<pid_t> Worker::pid() const {
  if (process_ && (state_ == WorkerState::Running || state_ == WorkerState::Stopping))
    return process_->pid();
  return std::nullopt;
}

void Worker::set_phase(StopPhase phase) {
  phase_ = phase;
}

void Worker::set_state(WorkerState s) {
  state_ = s;
  // Single processes signalled are watched no longer: nothing of the slot runs.
  if (s == WorkerState::Stopped || s == WorkerState::Failed) signals_.clear();
  if (observer_) observer_->on_state_change(*this);
  if (ctx_.on_state_change) ctx_.on_state_change(*this);
}

void Worker::start() {
  if (state_ != WorkerState::Stopped && state_ != WorkerState::Failed) return;
  backoff_.reset();
  crash_loop_.reset();
  spawn();
}

void Worker::spawn() {
  timer_.reset();
  process_.reset();
  ++generation_;
  set_phase(StopPhase::None);
  set_state(WorkerState::Starting);
  oom_kills_at_start_ = cgroup_->oom_kills();

  std::optional<RecycleCause> cause = std::exchange(start_cause_, std::nullopt);
  if (!stopping_for_good()) after_exit_ = {};
  if (cause) {
    ++recycles_;
    last_recycle_reason_ = cause->reason;
  }
  started_at_ = ctx_.timers.now();
  Result<std::unique_ptr<Process>> started = launch(generation_, cause, *cgroup_);
  if (!started) {
    log::event(Level::Error, "start_failed",
               fmt::format("{} failed to start: {}", name_, started.error().message),
               {{"program", program_->name},
                {"slot", slot_},
                {"generation", generation_},
                {"error", started.error().message}});
    const Error& error = started.error();
    last_exit_ = ExitStatus{error.permanent ? exec_failure_status(error) : 127};
    last_uptime_ = Duration{0};
    if (!stopping_for_good()) ++crashes_;
    set_state(WorkerState::Exited);
    if (stopping_for_good()) {
      finish_stop();
    } else if (error.permanent) {
      // A typo'd path, a missing x bit: no backoff can fix it.
      log::event(Level::Error, "failed",
                 fmt::format("{} FAILED: its command cannot be run ({}); recycler will not "
                             "retry it. {}",
                             name_, error.message, ctx_.failed_advice),
                 {{"program", program_->name}, {"slot", slot_}, {"error", error.message}});
      set_state(WorkerState::Failed);
    } else {
      schedule_restart(Duration{0}, true);
    }
    return;
  }
  process_ = std::move(started.value());
  cgroup_->adopt(process_->pid());
  log::event(Level::Info, "start",
             fmt::format("{} started: pid {}, generation {}", name_, process_->pid(), generation_),
             {{"program", program_->name},
              {"slot", slot_},
              {"pid", process_->pid()},
              {"generation", generation_},
              {"cgroup", cgroup_->path()}});
  set_state(WorkerState::Running);
}

Result<std::unique_ptr<Process>> Worker::launch(unsigned generation,
                                                const std::optional<RecycleCause>& cause,
                                                cgroup::WorkerCgroup& cgroup) {
  LaunchSpec spec;
  spec.argv = program_->command;
  spec.env = worker_environment(ctx_.base_env, *program_, slot_, generation, notify_socket_, cause,
                                sockets_.get());
  spec.cwd = program_->cwd;
  spec.uid = program_->uid;
  spec.gid = program_->gid;
  spec.rlimits = program_->rlimits;
  bool sets_nofile =
      std::any_of(spec.rlimits.begin(), spec.rlimits.end(),
                  [](const config::Rlimit& r) { return r.resource == RLIMIT_NOFILE; });
  if (ctx_.worker_nofile && !sets_nofile) spec.rlimits.push_back(*ctx_.worker_nofile);
  spec.join_fds = cgroup.open_join_fds();
  if (sockets_) spec.listen_fds = sockets_->fds();
  bool joinable = std::all_of(spec.join_fds.begin(), spec.join_fds.end(),
                              [](const UniqueFd& fd) { return static_cast<bool>(fd); });
  if (!joinable) return errno_error("cannot open the files that join its cgroup " + cgroup.path());
  // Every main process, whichever generation it turns out to be when it exits.
  return ctx_.launcher.launch(std::move(spec), output_tag(), [this, generation](ExitStatus status) {
    exited(generation, status);
  });
}

void Worker::exited(unsigned generation, ExitStatus status) {
  if (!surge_.exited(generation, status)) on_exit(status);
}

OutputTag Worker::output_tag() {
  OutputTag tag{program_->name, slot_, nullptr};
  if (program_->requests && observer_)
    tag.observe = [this](pid_t pid, std::string_view line) {
      if (observer_) observer_->on_output(*this, pid, line);
    };
  return tag;
}

void Worker::on_exit(ExitStatus status) {
  if (surge_.active()) {
    log::warn("{}: its main process exited during a surge; stopping the next generation", name_);
    end_surge(false);
  }
  auto uptime = std::chrono::duration_cast<Duration>(ctx_.timers.now() - started_at_);
  timer_.reset();  // the stop timeout, if any
  set_phase(StopPhase::None);
  last_exit_ = status;
  last_uptime_ = uptime;
  report_exit(status, uptime);
  set_state(WorkerState::Exited);
  // Whatever the main process left behind in the cgroup goes with it, so the
  // next start begins from an empty cgroup.
  if (cgroup_->populated()) {
    size_t n = cgroup_->pids().size();
    cgroup_->kill_all();
    if (n > 0)
      log::info("{}: killed {} leftover process{} in its cgroup", name_, n, n == 1 ? "" : "es");
  }
  drain(ctx_.timers.now() + kDrainTimeout);
}

void Worker::report_exit(const ExitStatus& status, Duration uptime) {
  std::optional<uint64_t> oom_now = cgroup_->oom_kills();
  bool oom = oom_now && oom_kills_at_start_ && *oom_now > *oom_kills_at_start_;
  const auto& max = program_->limits.memory_max;
  std::string limit = max ? "cgroup memory limit " + units::format_size(*max)
                          : "no memory limit on its cgroup: the host ran out of memory";
  std::string message;
  if (oom && status.signaled && status.signal == SIGKILL) {
    message = fmt::format("{} was OOM-killed by the kernel ({}) after {}", name_, limit,
                          format_duration(uptime));
  } else {
    message = fmt::format("{} {} after {}", name_, status.describe(), format_duration(uptime));
    if (oom) message += fmt::format("; the kernel OOM-killed a process in its cgroup ({})", limit);
  }
  bool requested = after_exit_.then != AfterExit::Then::Restart || recycling();
  // An OOM kill is a warning even during a stop or a recycle (a checkpoint
  // that never came, a stop that took too long): the kernel acted, not recycler.
  bool crash = !requested && !(status.success() && !oom);
  Level level = crash || oom ? Level::Warn : Level::Info;
  if (crash) ++crashes_;
  log::Fields fields{{"program", program_->name},
                     {"slot", slot_},
                     {"pid", process_ ? process_->pid() : 0},
                     {"generation", generation_},
                     {"uptime_s", static_cast<double>(uptime.count()) / 1000.0},
                     {"oom_kill", oom},
                     {"requested", requested}};
  if (status.signaled)
    fields.emplace_back("signal", units::signal_name(status.signal));
  else
    fields.emplace_back("status", status.code);
  log::event(level, oom ? "oom_kill" : "exit", message, fields);
}

void Worker::drain(TimePoint deadline) {
  if (!cgroup_->populated()) {
    after_drain();
    return;
  }
  if (ctx_.timers.now() >= deadline) {
    log::error("{}: {} process(es) still in {} {} after SIGKILL; going on without them", name_,
               cgroup_->pids().size(), cgroup_->path(), format_duration(kDrainTimeout));
    after_drain();
    return;
  }
  cgroup_->kill_all();
  timer_ = ctx_.timers.after(kDrainPoll, [this, deadline] { drain(deadline); });
}

void Worker::after_drain() {
  timer_.reset();
  process_.reset();  // its last output is logged before what happens next
  AfterExit after = std::exchange(after_exit_, {});
  log::debug("{}: drained; then {}", name_, to_string(after.then));
  if (after.then == AfterExit::Then::Resume) after = resume_or_restart(std::move(after));
  switch (after.then) {
    case AfterExit::Then::Stop:
      after_exit_.then = AfterExit::Then::Stop;  // until finish_stop
      return finish_stop();
    case AfterExit::Then::Replace:
      return replace(after.delay, std::move(after.cause));
    case AfterExit::Then::Resume:
    case AfterExit::Then::Restart:
      return schedule_restart(last_uptime_, false);
  }
}

// A checkpointing worker's end: its clean exit, or its death by the
// checkpoint signal itself, ends the recycle; anything else is a crash.
Worker::AfterExit Worker::resume_or_restart(AfterExit after) {
  if (!last_exit_) return {};
  // Killed by the checkpoint signal itself: it had no handler for it, or it
  // was already on its way out (Python puts the default actions back while
  // it exits: a trainer that has just finished). recycler's own signal, not
  // a crash; its latest checkpoint is on disk whichever it was.
  bool by_signal = after.signal != 0 && last_exit_->signaled && last_exit_->signal == after.signal;
  if (by_signal)
    log::warn(
        "{}: killed by {}, the checkpoint signal: it has no handler for it, or was "
        "exiting as it came; restarting it with RECYCLER_RESUME=1 to resume from its "
        "latest checkpoint",
        name_, units::signal_name(after.signal));
  if (!last_exit_->success() && !by_signal) return {};
  after.then = AfterExit::Then::Replace;
  after.delay = Duration{0};
  return after;
}

// The replacement of a recycled run: at once, or after `delay` (a recycle loop's).
void Worker::replace(Duration delay, std::optional<RecycleCause> cause) {
  start_cause_ = std::move(cause);
  if (delay <= Duration{0}) return spawn();
  set_state(WorkerState::Backoff);
  timer_ = ctx_.timers.after(delay, [this] { spawn(); });
}

void Worker::schedule_restart(Duration uptime, bool failed_start) {
  const config::RestartConfig& r = program_->restart;
  bool clean = !failed_start && last_exit_ && last_exit_->success();
  bool restart =
      r.mode == config::RestartMode::Always || (r.mode == config::RestartMode::OnFailure && !clean);
  if (!restart) {
    log::info("{} will not be restarted (restart.mode: {})", name_, config::to_string(r.mode));
    set_state(failed_start ? WorkerState::Failed : WorkerState::Stopped);
    return;
  }
  if (crash_loop_.record_exit(ctx_.timers.now())) {
    std::string message = fmt::format(
        "{} FAILED: it exited {} times within {} (restart.crash_loop: max {}, within {}); "
        "recycler will not restart it again. {}",
        name_, crash_loop_.exits_in_window(), format_duration(r.crash_loop.within),
        r.crash_loop.max, format_duration(r.crash_loop.within), ctx_.failed_advice);
    log::event(
        Level::Error, "failed", message,
        {{"program", program_->name}, {"slot", slot_}, {"exits", crash_loop_.exits_in_window()}});
    set_state(WorkerState::Failed);
    return;
  }
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  Duration delay = backoff_.next(uptime, unit(ctx_.rng));
  log::event(Level::Info, "restart_scheduled",
             fmt::format("{} restarting in {} (attempt {})", name_, format_duration(delay),
                         backoff_.attempt()),
             {{"program", program_->name},
              {"slot", slot_},
              {"delay_s", static_cast<double>(delay.count()) / 1000.0},
              {"attempt", backoff_.attempt()}});
  set_state(WorkerState::Backoff);
  timer_ = ctx_.timers.after(delay, [this] { spawn(); });
}

void Worker::stop(std::function<void()> done) {
  if (surge_.active()) end_surge(false);
  switch (state_) {
    case WorkerState::Stopped:
    case WorkerState::Failed:
      if (done) done();
      return;
    case WorkerState::Backoff:
      timer_.reset();
      set_state(WorkerState::Stopped);
      if (done) done();
      return;
    case WorkerState::Stopping:
      // A recycle under way ends in a stop now; the signal is out already.
      if (phase_ == StopPhase::Recycling) set_phase(StopPhase::StopSigterm);
      [[fallthrough]];
    case WorkerState::Exited:
    case WorkerState::Starting:
      enter_stop();
      if (done) stop_done_.push_back(std::move(done));
      return;
    case WorkerState::Running:
      break;
  }
  enter_stop();
  if (done) stop_done_.push_back(std::move(done));
  const config::StopConfig& s = program_->stop;
  log::event(Level::Info, "stop",
             fmt::format("{} stopping: {} to pid {}, SIGKILL to {} after {}", name_,
                         units::signal_name(s.signal), process_->pid(),
                         // without a cgroup (the fallback), its process session
                         cgroup_->enforcing() ? "its cgroup" : "its processes",
                         format_duration(s.timeout)),
             {{"program", program_->name}, {"slot", slot_}, {"pid", process_->pid()}});
  send_stop_signal(StopPhase::StopSigterm);
}

bool Worker::recycle(Duration delay, RecycleCause cause) {
  if (state_ != WorkerState::Running || stopping_for_good()) return false;
  if (surge_.enabled()) {
    if (surge_.asked()) return true;  // one under way
    set_phase(StopPhase::Surging);
    surge_.request(delay, std::move(cause));
    return true;
  }
  enter_replace(delay, std::move(cause));
  send_stop_signal(StopPhase::Recycling);
  return true;
}

void Worker::enter_replace(Duration delay, RecycleCause cause) {
  after_exit_.then = AfterExit::Then::Replace;
  after_exit_.delay = delay;
  after_exit_.cause = std::move(cause);
  after_exit_.recycled = true;
}

void Worker::enter_stop() {
  after_exit_.then = AfterExit::Then::Stop;
  after_exit_.cause.reset();
}

void Worker::expect_clean_exit(RecycleCause cause) {
  if (state_ != WorkerState::Running) return;
  after_exit_.then = AfterExit::Then::Resume;
  after_exit_.cause = std::move(cause);
  after_exit_.signal = 0;
}

int Worker::checkpoint(int signal, RecycleCause cause) {
  if (state_ != WorkerState::Running || !process_) return ESRCH;
  // The main process is recycler's child and not reaped yet: its pidfd is its own.
  errno = ESRCH;
  if (!process_->signal(signal)) return errno;
  set_phase(StopPhase::Checkpointing);
  expect_clean_exit(std::move(cause));
  after_exit_.signal = signal;
  return 0;
}

bool Worker::signal(int signal) {
  if ((state_ != WorkerState::Running && state_ != WorkerState::Stopping) || !process_)
    return false;
  return process_->signal(signal);
}

void Worker::send_stop_signal(StopPhase phase) {
  const config::StopConfig& s = program_->stop;
  set_phase(phase);
  set_state(WorkerState::Stopping);
  signal_then_kill(ctx_.timers, s.timeout, *process_, s.signal, timer_, [this] {
    log::warn("{} still running {} after {}; killing every process in its cgroup", name_,
              format_duration(program_->stop.timeout), units::signal_name(program_->stop.signal));
    set_phase(StopPhase::StopSigkill);
    cgroup_->kill_all();
    if (process_) process_->signal(SIGKILL);  // in case the main process left its cgroup
  });
}

void Worker::kill(std::function<void()> done) {
  end_surge(true);
  if (state_ == WorkerState::Running || state_ == WorkerState::Stopping) {
    enter_stop();
    if (done) stop_done_.push_back(std::move(done));
    timer_.reset();
    set_phase(StopPhase::StopSigkill);
    set_state(WorkerState::Stopping);
    cgroup_->kill_all();
    process_->signal(SIGKILL);
    return;
  }
  stop(std::move(done));
}

void Worker::finish_stop() {
  if (surge_.busy()) {  // the stop is over once both sides have drained too
    surge_.finish_when_gone();
    return;
  }
  after_exit_ = {};
  process_.reset();
  log::event(Level::Info, "stopped", fmt::format("{} stopped", name_),
             {{"program", program_->name}, {"slot", slot_}});
  set_state(WorkerState::Stopped);
  // A callback may destroy this worker: run them from a local, touch nothing after.
  auto callbacks = std::move(stop_done_);
  stop_done_.clear();
  for (auto& cb : callbacks) cb();
}

// SurgeHost: the main generation as a surge sees it, and hands over.

SurgeHost::Main Worker::main_generation() const {
  return {state_ == WorkerState::Running, stopping_for_good(), generation_, variant_,
          process_ ? process_->pid() : 0};
}

std::unique_ptr<SideGeneration> Worker::take_over(std::unique_ptr<SideGeneration> next,
                                                  const RecycleCause& cause) {
  auto old = std::make_unique<SideGeneration>();
  old->process = std::exchange(process_, std::move(next->process));
  old->cgroup = std::exchange(cgroup_, std::move(next->cgroup));
  old->variant = std::exchange(variant_, next->variant);
  old->generation = std::exchange(generation_, next->generation);
  old->started = std::exchange(started_at_, next->started);
  old->oom_kills_at_start = std::exchange(oom_kills_at_start_, next->oom_kills_at_start);
  ++recycles_;
  last_recycle_reason_ = cause.reason;
  // Processes signalled one by one belonged to the old generation.
  signals_.clear();
  return old;
}

void Worker::begin_run() {
  set_phase(StopPhase::None);
  set_state(WorkerState::Running);  // a new run
}

void Worker::recycle_by_restart(RecycleCause cause) {
  set_phase(StopPhase::None);
  if (state_ != WorkerState::Running) return;
  enter_replace(Duration{0}, std::move(cause));
  send_stop_signal(StopPhase::Recycling);
}

void Worker::end_surge(bool all) {
  surge_.kill(all);
  if (phase_ == StopPhase::Surging) set_phase(StopPhase::None);
}

}  // namespace recycler
