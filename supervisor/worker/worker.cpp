#include "supervisor/worker/worker.h"

#include <cerrno>
#include <csignal>
#include <cstring>
#include <utility>

#include "policies/base/units.h"
#include "supervisor/log/log.h"
#include "supervisor/worker/exit_report.h"
#include "supervisor/worker/worker_checkpoints.h"

namespace recycler {

using log::Level;
using units::format_duration;

const char* to_string(WorkerState state) {
  return enum_name(kWorkerStateNames, state);
}
const char* to_string(StopPhase phase) {
  return enum_name(kStopPhaseNames, phase);
}

// What a surge needs of the main generation: its state, a launch, the hand-over.
class Worker::SurgeSide final : public SurgeHost {
 public:
  explicit SurgeSide(Worker& worker) : w_(worker) {}

  Main main_generation() const override {
    return {w_.state_ == WorkerState::Running, w_.after_exit_.stopping_for_good(),
            w_.main_.generation, w_.main_.variant, w_.main_.process ? w_.main_.process->pid() : 0};
  }
  Result<std::unique_ptr<Process>> launch(unsigned generation,
                                          const std::optional<RecycleCause>& cause,
                                          cgroup::WorkerCgroup& cgroup) override {
    return w_.launch(generation, cause, cgroup);
  }
  std::unique_ptr<SideGeneration> take_over(std::unique_ptr<SideGeneration> next,
                                            const RecycleCause& cause) override {
    auto old = std::make_unique<SideGeneration>();
    static_cast<GenerationRun&>(*old) =
        std::exchange(w_.main_, std::move(static_cast<GenerationRun&>(*next)));
    w_.record_.recycled(cause);
    // Processes signalled one by one belonged to the old generation.
    w_.signals_.clear();
    return old;
  }
  void begin_run() override {
    w_.phase_ = StopPhase::None;
    w_.set_state(WorkerState::Running);  // a new run
  }
  void recycle_by_restart(RecycleCause cause) override {
    w_.phase_ = StopPhase::None;
    if (w_.state_ != WorkerState::Running) return;
    w_.after_exit_.enter_replace(Duration{0}, std::move(cause));
    w_.send_stop_signal(StopPhase::Recycling);
  }
  void sides_gone() override { w_.finish_stop(); }

 private:
  Worker& w_;
};

Worker::Worker(WorkerServices& context, std::shared_ptr<const config::ProgramConfig> program,
               unsigned slot, std::unique_ptr<cgroup::WorkerCgroup> cgroup,
               std::string notify_socket, std::shared_ptr<const listen::Set> sockets,
               CgroupFactory make_cgroup)
    : ctx_(context),
      slot_(context.launcher, context.base_env, context.worker_nofile, std::move(program), slot,
            std::move(notify_socket), std::move(sockets), context.gpus_auto),
      surge_side_(std::make_unique<SurgeSide>(*this)),
      surge_(*surge_side_, context.timers, context.rng, slot_.program(), slot_.name(), slot,
             std::move(make_cgroup)),
      signals_(context.timers, context.launcher, context.service, slot_.name(),
               slot_.program().stop.timeout),
      record_(slot_.program().restart),
      checkpoints_(std::make_unique<Checkpoints>(*this)) {
  main_.cgroup = std::move(cgroup);
}

Worker::~Worker() {
  timer_.reset();
  signals_.clear();
  main_.process.reset();
  Status removed = main_.cgroup->remove();
  if (!removed) log::warn("{}: cannot remove its cgroup: {}", name(), removed.error().message);
  // surge_ goes next, with whatever ran beside the main generation.
}

std::optional<pid_t> Worker::pid() const {
  if (main_.process && (state_ == WorkerState::Running || state_ == WorkerState::Stopping))
    return main_.process->pid();
  return std::nullopt;
}

void Worker::set_state(WorkerState s) {
  state_ = s;
  // Single processes signalled are watched no longer: nothing of the slot runs.
  if (s == WorkerState::Stopped || s == WorkerState::Failed) {
    signals_.clear();
    checkpoints_->leave_gang();
  }
  if (observer_) observer_->on_state_change(*this);
  if (ctx_.on_state_change) ctx_.on_state_change(*this);
}

void Worker::start() {
  if (state_ != WorkerState::Stopped && state_ != WorkerState::Failed) return;
  record_.reset();
  spawn();
}

void Worker::spawn() {
  timer_.reset();
  main_.process.reset();
  ++main_.generation;
  phase_ = StopPhase::None;
  set_state(WorkerState::Starting);
  main_.oom_kills_at_start = main_.cgroup->oom_kills();

  checkpoints_->leave_gang();
  std::optional<RecycleCause> cause = record_.take_start_cause();
  checkpoints_->resume_unless_caused(cause);
  if (!after_exit_.stopping_for_good()) after_exit_ = {};
  main_.started = ctx_.timers.now();
  Result<std::unique_ptr<Process>> started = launch(main_.generation, cause, *main_.cgroup);
  if (!started) {
    log::event(Level::Error, "start_failed",
               fmt::format("{} failed to start: {}", name(), started.error().message),
               {{"program", program().name},
                {"slot", slot()},
                {"generation", main_.generation},
                {"error", started.error().message}});
    const Error& error = started.error();
    record_.ended(ExitStatus{error.permanent ? exec_failure_status(error) : 127}, Duration{0},
                  !after_exit_.stopping_for_good());
    set_state(WorkerState::Exited);
    if (after_exit_.stopping_for_good()) {
      finish_stop();
    } else if (error.permanent) {
      // A typo'd path, a missing x bit: no backoff can fix it.
      log::event(Level::Error, "failed",
                 fmt::format("{} FAILED: its command cannot be run ({}); recycler will not "
                             "retry it. {}",
                             name(), error.message, ctx_.failed_advice),
                 {{"program", program().name}, {"slot", slot()}, {"error", error.message}});
      set_state(WorkerState::Failed);
    } else {
      schedule_restart(true);
    }
    return;
  }
  main_.process = std::move(started.value());
  main_.cgroup->adopt(main_.process->pid());
  log::event(Level::Info, "start",
             fmt::format("{} started: pid {}, generation {}", name(), main_.process->pid(),
                         main_.generation),
             {{"program", program().name},
              {"slot", slot()},
              {"pid", main_.process->pid()},
              {"generation", main_.generation},
              {"cgroup", main_.cgroup->path()}});
  set_state(WorkerState::Running);
}

Result<std::unique_ptr<Process>> Worker::launch(unsigned generation,
                                                const std::optional<RecycleCause>& cause,
                                                cgroup::WorkerCgroup& cgroup) {
  std::function<void(pid_t, std::string_view)> observe;
  if (program().requests && observer_)
    observe = [this](pid_t pid, std::string_view line) {
      if (observer_) observer_->on_output(*this, pid, line);
    };
  // Every main process, whichever generation it turns out to be when it exits.
  return slot_.launch(generation, cause, cgroup, std::move(observe),
                      [this, generation](ExitStatus status) {
                        if (!surge_.exited(generation, status)) on_exit(status);
                      });
}

void Worker::on_exit(ExitStatus status) {
  if (surge_.active()) {
    log::warn("{}: its main process exited during a surge; stopping the next generation", name());
    end_surge(false);
  }
  auto uptime = std::chrono::duration_cast<Duration>(ctx_.timers.now() - main_.started);
  timer_.reset();  // the stop timeout, if any
  // Asked to checkpoint as it stops, it saved and exited: that is a checkpoint.
  if (phase_ == StopPhase::StopCheckpoint) checkpoints_->exited_during_stop(status.success());
  phase_ = StopPhase::None;
  ExitReport report = describe_exit(slot_, {.pid = main_.process ? main_.process->pid() : 0,
                                            .generation = main_.generation,
                                            .status = status,
                                            .uptime = uptime,
                                            .oom = main_.oom_killed(),
                                            .requested = after_exit_.requested()});
  record_.ended(status, uptime, report.crash);
  log::event(report.level, report.event, report.message, report.fields);
  set_state(WorkerState::Exited);
  // Whatever the main process left behind in the cgroup goes with it, so the
  // next start begins from an empty cgroup.
  if (main_.cgroup->populated()) {
    size_t n = main_.cgroup->pids().size();
    main_.cgroup->kill_all();
    if (n > 0)
      log::info("{}: killed {} leftover process{} {}", name(), n, n == 1 ? "" : "es",
                main_.cgroup->enforcing() ? "in its cgroup" : "it had started");
  }
  drain_cgroup(ctx_.timers, *main_.cgroup, ctx_.timers.now() + kCgroupDrainTimeout, timer_, name(),
               [this] { after_drain(); });
}

void Worker::after_drain() {
  timer_.reset();
  main_.process.reset();  // its last output is logged before what happens next
  AfterExit after = std::exchange(after_exit_, {});
  log::debug("{}: drained; then {}", name(), enum_name(kAfterExitNames, after.then));
  if (after.then == AfterExit::Then::Resume) after = after.resolved(record_.last_exit(), name());
  switch (after.then) {
    case AfterExit::Then::Stop:
      after_exit_.then = AfterExit::Then::Stop;  // until finish_stop
      return finish_stop();
    case AfterExit::Then::Replace:
      return replace(after.delay, std::move(after.cause));
    case AfterExit::Then::Resume:
    case AfterExit::Then::Restart:
      return schedule_restart(false);
  }
}

// The replacement of a recycled run: at once, or after `delay` (a recycle loop's).
void Worker::replace(Duration delay, std::optional<RecycleCause> cause) {
  record_.replace_next(std::move(cause));
  if (checkpoints_->park()) return;  // one rank of a gang: the start waits for the others
  if (delay <= Duration{0}) return spawn();
  set_state(WorkerState::Backoff);
  timer_ = ctx_.timers.after(delay, [this] { spawn(); });
}

void Worker::schedule_restart(bool failed_start) {
  const config::RestartConfig& r = program().restart;
  RestartRecord::Decision next = record_.next(failed_start, ctx_.timers.now(), ctx_.rng);
  switch (next.then) {
    case RestartRecord::Decision::Then::NotRestarted:
      log::info("{} will not be restarted (restart.mode: {})", name(), config::to_string(r.mode));
      set_state(failed_start ? WorkerState::Failed : WorkerState::Stopped);
      return;
    case RestartRecord::Decision::Then::CrashLoop:
      log::event(
          Level::Error, "failed",
          fmt::format("{} FAILED: it exited {} times within {} (restart.crash_loop: max {}, "
                      "within {}); recycler will not restart it again. {}",
                      name(), next.exits, format_duration(r.crash_loop.within), r.crash_loop.max,
                      format_duration(r.crash_loop.within), ctx_.failed_advice),
          {{"program", program().name}, {"slot", slot()}, {"exits", next.exits}});
      set_state(WorkerState::Failed);
      return;
    case RestartRecord::Decision::Then::Restart:
      break;
  }
  log::event(Level::Info, "restart_scheduled",
             fmt::format("{} restarting in {} (attempt {})", name(), format_duration(next.delay),
                         next.attempt),
             {{"program", program().name},
              {"slot", slot()},
              {"delay_s", static_cast<double>(next.delay.count()) / 1000.0},
              {"attempt", next.attempt}});
  set_state(WorkerState::Backoff);
  timer_ = ctx_.timers.after(next.delay, [this] { spawn(); });
}

void Worker::stop(std::function<void()> done, std::optional<Duration> checkpoint_within) {
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
      if (phase_ == StopPhase::Recycling) phase_ = StopPhase::StopSigterm;
      [[fallthrough]];
    case WorkerState::Exited:
    case WorkerState::Starting:
      after_exit_.enter_stop();
      if (done) stop_done_.push_back(std::move(done));
      // Its checkpoint for its gang is saved: nothing to wait for now.
      if (phase_ == StopPhase::StopCheckpoint && checkpoints_->confirmed_for_gang())
        checkpoints_->release_stop();
      return;
    case WorkerState::Running:
      break;
  }
  after_exit_.enter_stop();
  if (done) stop_done_.push_back(std::move(done));
  if (checkpoints_->before_stop(checkpoint_within)) return;
  const config::StopConfig& s = program().stop;
  log::event(Level::Info, "stop",
             fmt::format("{} stopping: {} to pid {}, SIGKILL to {} after {}", name(),
                         units::signal_name(s.signal), main_.process->pid(),
                         // without a cgroup (the fallback), its process session
                         main_.cgroup->enforcing() ? "its cgroup" : "its processes",
                         format_duration(s.timeout)),
             {{"program", program().name}, {"slot", slot()}, {"pid", main_.process->pid()}});
  send_stop_signal(StopPhase::StopSigterm);
}

bool Worker::recycle(Duration delay, RecycleCause cause) {
  if (state_ != WorkerState::Running || after_exit_.stopping_for_good()) return false;
  if (surge_.enabled()) {
    if (surge_.asked()) return true;  // one under way
    phase_ = StopPhase::Surging;
    surge_.request(delay, std::move(cause));
    return true;
  }
  after_exit_.enter_replace(delay, std::move(cause));
  send_stop_signal(StopPhase::Recycling);
  return true;
}

bool Worker::signal(int signal) {
  if ((state_ != WorkerState::Running && state_ != WorkerState::Stopping) || !main_.process)
    return false;
  return main_.process->signal(signal);
}

void Worker::send_stop_signal(StopPhase phase) {
  const config::StopConfig& s = program().stop;
  phase_ = phase;
  set_state(WorkerState::Stopping);
  signal_then_kill(ctx_.timers, s.timeout, *main_.process, s.signal, timer_, [this] {
    log::warn("{} still running {} after {}; killing every process {}", name(),
              format_duration(program().stop.timeout), units::signal_name(program().stop.signal),
              main_.cgroup->enforcing() ? "in its cgroup" : "it started");
    phase_ = StopPhase::StopSigkill;
    main_.cgroup->kill_all();
    if (main_.process) main_.process->signal(SIGKILL);  // in case the main process left its cgroup
  });
}

void Worker::kill(std::function<void()> done) {
  end_surge(true);
  if (state_ == WorkerState::Running || state_ == WorkerState::Stopping) {
    after_exit_.enter_stop();
    if (done) stop_done_.push_back(std::move(done));
    timer_.reset();
    phase_ = StopPhase::StopSigkill;
    set_state(WorkerState::Stopping);
    main_.cgroup->kill_all();
    main_.process->signal(SIGKILL);
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
  main_.process.reset();
  log::event(Level::Info, "stopped", fmt::format("{} stopped", name()),
             {{"program", program().name}, {"slot", slot()}});
  set_state(WorkerState::Stopped);
  // A callback may destroy this worker: run them from a local, touch nothing after.
  auto callbacks = std::move(stop_done_);
  stop_done_.clear();
  for (auto& cb : callbacks) cb();
}

void Worker::end_surge(bool all) {
  surge_.kill(all);
  if (phase_ == StopPhase::Surging) phase_ = StopPhase::None;
}

}  // namespace recycler
