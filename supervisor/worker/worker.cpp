#include "supervisor/worker/worker.h"

#include <sys/resource.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <map>

#include "policies/base/units.h"
#include "supervisor/config/allocator.h"
#include "supervisor/log/log.h"

namespace recycler {

using log::Level;
using units::format_duration;

const char* to_string(WorkerState state) {
  switch (state) {
    case WorkerState::Stopped:
      return "stopped";
    case WorkerState::Starting:
      return "starting";
    case WorkerState::Running:
      return "running";
    case WorkerState::Stopping:
      return "stopping";
    case WorkerState::Exited:
      return "exited";
    case WorkerState::Backoff:
      return "backoff";
    case WorkerState::Failed:
      return "failed";
  }
  return "?";
}

const char* to_string(StopPhase phase) {
  switch (phase) {
    case StopPhase::None:
      return "none";
    case StopPhase::Checkpointing:
      return "checkpointing";
    case StopPhase::Recycling:
      return "recycling";
    case StopPhase::StopSigterm:
      return "stop-sigterm";
    case StopPhase::StopSigkill:
      return "stop-sigkill";
    case StopPhase::Surging:
      return "surging";
  }
  return "?";
}

std::vector<std::string> worker_environment(const std::vector<std::string>& base,
                                            const config::ProgramConfig& program, unsigned slot,
                                            unsigned generation, const std::string& notify_socket,
                                            const std::optional<RecycleCause>& cause,
                                            const listen::Set* sockets) {
  std::map<std::string, std::string> env;
  for (const std::string& kv : base) {
    size_t eq = kv.find('=');
    if (eq != std::string::npos) env[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  // A recycler run as another recycler's worker must not pass its own on.
  env.erase("RECYCLER_RESUME");
  env.erase("RECYCLER_RECYCLE_REASON");
  env.erase(config::kRequestsBatchBelowVar);
  for (const auto& [k, v] : program.env) env[k] = v;
  if (program.threads) {
    for (const char* var : config::kThreadEnvVars)
      if (!program.env.count(var)) env[var] = std::to_string(*program.threads);
  }
  config::apply_allocator(program.allocator, program.env, env);
  env["RECYCLER_PROGRAM"] = program.name;
  env["RECYCLER_SLOT"] = std::to_string(slot);
  env["RECYCLER_GENERATION"] = std::to_string(generation);
  // sd_notify(3) senders (READY=1, STATUS=...) and RECYCLER_REQUESTS=N reach recycler.
  if (!notify_socket.empty()) env["NOTIFY_SOCKET"] = notify_socket;
  // How many requests each process may report in batches, not one by one.
  if (!program.env.count(config::kRequestsBatchBelowVar)) {
    auto below = program.requests_batch_below();
    env[config::kRequestsBatchBelowVar] = below ? std::to_string(*below) : "unlimited";
  }
  if (cause) {
    env["RECYCLER_RECYCLE_REASON"] = cause->reason;
    if (cause->resume) env["RECYCLER_RESUME"] = "1";
  }
  for (const char* var : {"LISTEN_FDS", "LISTEN_PID", "LISTEN_FDNAMES"}) env.erase(var);
  if (sockets)
    for (auto& [k, v] : sockets->environment()) env[k] = v;
  std::vector<std::string> out;
  out.reserve(env.size());
  for (const auto& [k, v] : env) out.push_back(k + "=" + v);
  return out;
}

Worker::Worker(WorkerContext& context, std::shared_ptr<const config::ProgramConfig> program,
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
      make_cgroup_(std::move(make_cgroup)),
      surge_backoff_({program_->restart.backoff.initial, program_->restart.backoff.max,
                      program_->restart.backoff.reset_after, 0.2}),
      surge_failures_(program_->restart.crash_loop.max, program_->restart.crash_loop.within),
      backoff_({program_->restart.backoff.initial, program_->restart.backoff.max,
                program_->restart.backoff.reset_after, 0.2}),
      crash_loop_(program_->restart.crash_loop.max, program_->restart.crash_loop.within) {}

Worker::~Worker() {
  timer_.reset();
  surge_timer_.reset();
  signalled_.clear();
  process_.reset();
  for (std::unique_ptr<Side>* side : {&next_, &retiring_}) {
    if (!*side) continue;
    (*side)->timer.reset();
    (*side)->process.reset();
    (*side)->cgroup->kill_all();
    if (Status removed = (*side)->cgroup->remove(); !removed)
      log::warn("{}: cannot remove its cgroup {}: {}", name_, (*side)->cgroup->path(),
                removed.error().message);
  }
  Status removed = cgroup_->remove();
  if (!removed) log::warn("{}: cannot remove its cgroup: {}", name_, removed.error().message);
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
  if (s == WorkerState::Stopped || s == WorkerState::Failed) signalled_.clear();
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

  std::optional<RecycleCause> cause = std::exchange(cause_, std::nullopt);
  if (cause) {
    ++recycles_;
    last_recycle_reason_ = cause->reason;
  }
  LaunchSpec spec = launch_spec(generation_, cause, *cgroup_);
  clean_exit_.reset();
  checkpoint_signal_.reset();
  started_at_ = ctx_.timers.now();

  bool joinable = std::all_of(spec.join_fds.begin(), spec.join_fds.end(),
                              [](const UniqueFd& fd) { return static_cast<bool>(fd); });
  Result<std::unique_ptr<Process>> started =
      joinable ? ctx_.launcher.launch(std::move(spec), output_tag(), exit_callback(generation_))
               : errno_error("cannot open the files that join its cgroup " + cgroup_->path());
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
    if (!stop_requested_) ++crashes_;
    set_state(WorkerState::Exited);
    if (stop_requested_) {
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

LaunchSpec Worker::launch_spec(unsigned generation, const std::optional<RecycleCause>& cause,
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
  return spec;
}

// Every main process, whichever generation it turns out to be when it exits.
Launcher::ExitCallback Worker::exit_callback(unsigned generation) {
  return [this, generation](ExitStatus status) { exited(generation, status); };
}

void Worker::exited(unsigned generation, ExitStatus status) {
  if (next_ && next_->generation == generation) return side_exited(next_, "next", status);
  if (retiring_ && retiring_->generation == generation)
    return side_exited(retiring_, "retiring", status);
  on_exit(status);
}

OutputTag Worker::output_tag() {
  OutputTag tag{program_->name, slot_, nullptr};
  if (program_->requests && ctx_.on_output)
    tag.observe = [this](pid_t pid, std::string_view line) { ctx_.on_output(*this, pid, line); };
  return tag;
}

void Worker::on_exit(ExitStatus status) {
  if (surge_cause_ || next_) {
    log::warn("{}: its main process exited during a surge; stopping the next generation", name_);
    kill_sides(false);
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
  bool requested = stop_requested_ || recycling() || clean_exit_.has_value();
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
  if (stop_requested_) {
    recycle_delay_.reset();
    cause_.reset();
    finish_stop();
    return;
  }
  if (clean_exit_ && last_exit_ && !recycle_delay_) {
    // Killed by the checkpoint signal itself: it had no handler for it, or it
    // was already on its way out (Python puts the default actions back while
    // it exits: a trainer that has just finished). recycler's own signal, not
    // a crash; its latest checkpoint is on disk whichever it was.
    bool by_signal =
        checkpoint_signal_ && last_exit_->signaled && last_exit_->signal == *checkpoint_signal_;
    if (by_signal)
      log::warn(
          "{}: killed by {}, the checkpoint signal: it has no handler for it, or was "
          "exiting as it came; restarting it with RECYCLER_RESUME=1 to resume from its "
          "latest checkpoint",
          name_, units::signal_name(*checkpoint_signal_));
    if (last_exit_->success() || by_signal) {
      recycle_delay_ = Duration{0};
      cause_ = std::move(clean_exit_);
    }
  }
  clean_exit_.reset();
  checkpoint_signal_.reset();
  if (recycle_delay_) {
    Duration delay = *std::exchange(recycle_delay_, std::nullopt);
    if (delay <= Duration{0}) {
      spawn();
      return;
    }
    set_state(WorkerState::Backoff);
    timer_ = ctx_.timers.after(delay, [this] { spawn(); });
    return;
  }
  schedule_restart(last_uptime_, false);
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
  if (surge_cause_ || next_) kill_sides(false);
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
      stop_requested_ = true;
      if (done) stop_done_.push_back(std::move(done));
      return;
    case WorkerState::Running:
      break;
  }
  stop_requested_ = true;
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
  if (state_ != WorkerState::Running || stop_requested_) return false;
  if (program_->recycle.mode == config::RecycleMode::Surge && make_cgroup_) {
    if (surge_cause_) return true;  // one under way
    surge_cause_ = std::move(cause);
    set_phase(StopPhase::Surging);
    if (delay <= Duration{0} && !retiring_) {
      begin_surge();
    } else {
      // After a recycle loop's delay, or once the last surge's old
      // generation has gone: never three generations at once.
      surge_timer_ = ctx_.timers.after(std::max(delay, kDrainPoll), [this] {
        surge_timer_.reset();
        begin_surge();
      });
    }
    return true;
  }
  recycle_delay_ = delay;
  cause_ = std::move(cause);
  send_stop_signal(StopPhase::Recycling);
  return true;
}

void Worker::expect_clean_exit(RecycleCause cause) {
  if (state_ == WorkerState::Running) clean_exit_ = std::move(cause);
}

int Worker::checkpoint(int signal, RecycleCause cause) {
  if (state_ != WorkerState::Running || !process_) return ESRCH;
  // The main process is recycler's child and not reaped yet: its pidfd is its own.
  errno = ESRCH;
  if (!process_->signal(signal)) return errno;
  set_phase(StopPhase::Checkpointing);
  expect_clean_exit(std::move(cause));
  checkpoint_signal_ = signal;
  return 0;
}

bool Worker::signal(int signal) {
  if ((state_ != WorkerState::Running && state_ != WorkerState::Stopping) || !process_)
    return false;
  return process_->signal(signal);
}

SignalResult Worker::signal_process(pid_t pid, int signal, std::function<void()> on_exit,
                                    std::function<void()> on_left) {
  if (signalled_.count(pid)) return SignalResult::Sent;
  // A pre-fork server's master reaps its own children, so the pid may be
  // gone (or reused) by now. The pidfd pins the process; it must still be in
  // the worker's cgroup after that.
  auto attached = ctx_.launcher.attach(pid, [this, pid] {
    auto it = signalled_.find(pid);
    if (it == signalled_.end()) return;
    auto left = std::move(it->second.on_left);
    auto done = std::move(it->second.on_exit);
    signalled_.erase(it);  // the Process too: its callback is over once this returns
    if (left) left();
    if (done) done();
  });
  if (!attached) return SignalResult::NotMember;
  std::vector<pid_t> pids = cgroup_->pids();
  if (std::find(pids.begin(), pids.end(), pid) == pids.end()) return SignalResult::NotMember;
  Signalled& entry = signalled_[pid];
  entry.process = std::move(attached.value());
  entry.on_exit = std::move(on_exit);
  // A process that ignores its signal gets what a stop gets: SIGKILL after stop.timeout.
  bool sent = terminate(*entry.process, signal, entry.escalate, [this, pid] {
    auto it = signalled_.find(pid);
    if (it == signalled_.end()) return;
    log::warn("{} pid {} still running {} after it was signalled; killing it", name_, pid,
              format_duration(program_->stop.timeout));
    it->second.process->signal(SIGKILL);
  });
  if (!sent) {
    signalled_.erase(pid);
    return SignalResult::Gone;
  }
  entry.on_left = std::move(on_left);
  if (entry.on_left && ctx_.service) {
    entry.listeners = ctx_.service->shared_sockets(pid);
    if (!entry.listeners.empty())
      entry.leave_poll = ctx_.timers.after(kLeavePoll, [this, pid] { poll_left(pid); });
  }
  return SignalResult::Sent;
}

void Worker::poll_left(pid_t pid) {
  auto it = signalled_.find(pid);
  if (it == signalled_.end()) return;
  Signalled& entry = it->second;
  if (ctx_.service->holds_any(pid, entry.listeners)) {
    entry.leave_poll = ctx_.timers.after(kLeavePoll, [this, pid] { poll_left(pid); });
    return;
  }
  entry.leave_poll.reset();
  if (auto left = std::exchange(entry.on_left, nullptr)) left();
}

bool Worker::terminate(Process& process, int signal, std::unique_ptr<Timer>& escalate,
                       std::function<void()> kill) {
  bool sent = process.signal(signal);
  escalate = ctx_.timers.after(program_->stop.timeout, std::move(kill));
  return sent;
}

void Worker::send_stop_signal(StopPhase phase) {
  const config::StopConfig& s = program_->stop;
  set_phase(phase);
  set_state(WorkerState::Stopping);
  terminate(*process_, s.signal, timer_, [this] {
    log::warn("{} still running {} after {}; killing every process in its cgroup", name_,
              format_duration(program_->stop.timeout), units::signal_name(program_->stop.signal));
    set_phase(StopPhase::StopSigkill);
    cgroup_->kill_all();
    if (process_) process_->signal(SIGKILL);  // in case the main process left its cgroup
  });
}

void Worker::kill(std::function<void()> done) {
  kill_sides(true);
  if (state_ == WorkerState::Running || state_ == WorkerState::Stopping) {
    stop_requested_ = true;
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

// ---------------------------------------------------------------------------
// Surge: the next generation beside the current one.

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
  if (!surge_cause_ || state_ != WorkerState::Running || stop_requested_) return;
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
  recycle_delay_ = Duration{0};
  cause_ = std::move(cause);
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
  if (!surge_cause_ || stop_requested_) return;
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

void Worker::finish_stop() {
  if (sides_busy()) {  // the stop is over once both sides have drained too
    finish_when_sides_gone_ = true;
    return;
  }
  stop_requested_ = false;
  process_.reset();
  log::event(Level::Info, "stopped", fmt::format("{} stopped", name_),
             {{"program", program_->name}, {"slot", slot_}});
  set_state(WorkerState::Stopped);
  // A callback may destroy this worker: run them from a local, touch nothing after.
  auto callbacks = std::move(stop_done_);
  stop_done_.clear();
  for (auto& cb : callbacks) cb();
}

}  // namespace recycler
