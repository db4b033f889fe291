#include "supervisor/worker/worker_checkpoints.h"

#include <cerrno>
#include <cstring>

#include "policies/base/units.h"
#include "supervisor/log/log.h"
#include "supervisor/worker/checkpoint_signal.h"

namespace recycler {
namespace {
// The cause a start after a stop's checkpoint carries.
const RecycleCause kStopCheckpoint{"it checkpointed as it was stopped", true};
}  // namespace

bool Worker::Checkpoints::before_stop(std::optional<Duration> within) {
  const config::ProgramConfig& p = w_.program();
  Duration window = within.value_or(p.checkpoint.timeout);
  if (!p.checkpoints() || window <= Duration{0} || !w_.main_.process) return false;
  pid_t pid = w_.main_.process->pid();
  // A recycle's checkpoint under way is the one the stop waits for.
  if (w_.phase_ != StopPhase::Checkpointing && !send(p.checkpoint.signal)) {
    log::warn("{}: cannot ask pid {} to checkpoint before it stops ({}); stopping it without one",
              w_.name(), pid, std::strerror(errno));
    return false;
  }
  resume_cause_.reset();
  await(window);
  log::event(log::Level::Info, "stop",
             fmt::format("{} stopping: asked to checkpoint first ({} to {}); {} once it "
                         "confirms (RECYCLER_CHECKPOINTED=1), at most {} from now",
                         w_.name(), units::signal_name(p.checkpoint.signal),
                         checkpoint_target(p.checkpoint.signal_to, pid),
                         units::signal_name(p.stop.signal), units::format_duration(window)),
             {{"program", p.name},
              {"slot", w_.slot()},
              {"pid", pid},
              {"checkpoint_signal", units::signal_name(p.checkpoint.signal)},
              {"checkpoint_timeout_s", static_cast<double>(window.count()) / 1000.0}});
  return true;
}

void Worker::Checkpoints::await(Duration window) {
  w_.phase_ = StopPhase::StopCheckpoint;
  w_.set_state(WorkerState::Stopping);
  w_.timer_ = w_.ctx_.timers.after(window, [this, window] {
    if (!confirmed_for_gang())
      log::warn("{} has not confirmed its checkpoint after {}; stopping it without one", w_.name(),
                units::format_duration(window));
    then_stop();
  });
}

void Worker::Checkpoints::expect_clean_exit(RecycleCause cause) {
  if (w_.state_ != WorkerState::Running) return;
  w_.after_exit_.enter_resume(std::move(cause), 0);
}

int Worker::Checkpoints::ask(int signal, RecycleCause cause) {
  if (w_.state_ != WorkerState::Running || !w_.main_.process) return ESRCH;
  // The main process is recycler's child and not reaped yet: its pidfd is its own.
  errno = ESRCH;
  if (!send(signal)) return errno;
  w_.phase_ = StopPhase::Checkpointing;
  expect_clean_exit(std::move(cause));
  w_.after_exit_.signal = signal;
  return 0;
}

bool Worker::Checkpoints::send(int signal) {
  return send_checkpoint_signal(w_.program().checkpoint.signal_to, signal, *w_.main_.process,
                                *w_.main_.cgroup, w_.ctx_.proc) > 0;
}

void Worker::Checkpoints::then_stop() {
  w_.send_stop_signal(w_.after_exit_.stopping_for_good() ? StopPhase::StopSigterm
                                                         : StopPhase::Recycling);
}

void Worker::Checkpoints::confirmed() {
  if (w_.phase_ != StopPhase::StopCheckpoint || !w_.main_.process || confirmed_for_gang()) return;
  pid_t pid = w_.main_.process->pid();
  if (gang_ && w_.after_exit_.then == AfterExit::Then::Replace) {
    // One rank of a gang: stopped once every rank has confirmed (release_stop).
    gang_->confirmed = true;
    if (w_.after_exit_.cause) w_.after_exit_.cause->resume = true;
    log::event(log::Level::Info, "checkpointed",
               fmt::format("{} checkpointed for its gang's recycle (pid {}); stopped once every "
                           "rank has confirmed",
                           w_.name(), pid),
               {{"program", w_.program().name}, {"slot", w_.slot()}, {"pid", pid}});
    if (gang_->hooks.checkpointed) gang_->hooks.checkpointed();
    return;
  }
  w_.timer_.reset();
  resume_cause_ = kStopCheckpoint;
  log::event(log::Level::Info, "checkpointed",
             fmt::format("{} checkpointed before its stop; {} to pid {}", w_.name(),
                         units::signal_name(w_.program().stop.signal), pid),
             {{"program", w_.program().name}, {"slot", w_.slot()}, {"pid", pid}});
  then_stop();
}

void Worker::Checkpoints::exited_during_stop(bool success) {
  if (!success && !confirmed_for_gang()) return;
  if (w_.after_exit_.then == AfterExit::Then::Replace && w_.after_exit_.cause)
    w_.after_exit_.cause->resume = true;  // a gang's recycle: its replacement resumes
  else
    resume_cause_ = kStopCheckpoint;
}

bool Worker::Checkpoints::park() {
  if (!gang_) return false;
  gang_->parked = true;
  w_.set_state(WorkerState::Backoff);
  if (gang_ && gang_->hooks.parked) gang_->hooks.parked();
  return true;
}

bool Worker::Checkpoints::recycle_in_gang(RecycleCause cause, Duration checkpoint_within,
                                          GangHooks hooks) {
  if (w_.state_ != WorkerState::Running || w_.after_exit_.stopping_for_good() || !w_.main_.process)
    return false;
  const config::ProgramConfig& p = w_.program();
  bool asked = w_.phase_ == StopPhase::Checkpointing;  // the engine's checkpoint is out already
  w_.after_exit_.enter_replace(Duration{0}, std::move(cause));
  gang_ = GangRecycle{std::move(hooks)};
  if (!p.checkpoints() || checkpoint_within <= Duration{0}) {
    w_.send_stop_signal(StopPhase::Recycling);
    return true;
  }
  pid_t pid = w_.main_.process->pid();
  if (!asked && !send(p.checkpoint.signal)) {
    log::warn(
        "{}: cannot ask pid {} to checkpoint for its gang's recycle ({}); stopping it "
        "without one",
        w_.name(), pid, std::strerror(errno));
    w_.send_stop_signal(StopPhase::Recycling);
    return true;
  }
  await(checkpoint_within);
  log::event(log::Level::Info, "checkpoint",
             fmt::format("{} asked to checkpoint for its gang's recycle ({} to {}); stopped once "
                         "every rank has confirmed, at most {} from now",
                         w_.name(), units::signal_name(p.checkpoint.signal),
                         checkpoint_target(p.checkpoint.signal_to, pid),
                         units::format_duration(checkpoint_within)),
             {{"program", p.name},
              {"slot", w_.slot()},
              {"pid", pid},
              {"signal", units::signal_name(p.checkpoint.signal)},
              {"timeout_s", static_cast<double>(checkpoint_within.count()) / 1000.0}});
  return true;
}

void Worker::Checkpoints::release_stop() {
  if (w_.phase_ != StopPhase::StopCheckpoint || !gang_) return;
  w_.timer_.reset();
  then_stop();
}

void Worker::Checkpoints::release_start() {
  if (!parked() || w_.state_ != WorkerState::Backoff) return;
  w_.spawn();
}

}  // namespace recycler
