#include "supervisor/runtime/finish_check.h"

#include "supervisor/log/log.h"

namespace recycler {
namespace {

// What recycler's exit code is once every program has finished by itself.
int exit_code_when_finished(const Programs& programs, bool wrap_mode) {
  int code = 0;
  for (const auto& [name, program] : programs) {
    for (const auto& w : program.workers) {
      auto exit = w->record().last_exit();
      if (wrap_mode) return exit ? exit->shell_code() : 1;
      if (w->state() == WorkerState::Failed || !exit || !exit->success()) code = 1;
    }
  }
  return code;
}

// A slot that has failed for good: marked failed (a crash loop), or stopped
// after a crash with no restart to come (restart: never). A stop someone
// asked for is no failure.
const Worker* failed_for_good(const Programs& programs) {
  for (const auto& [name, program] : programs) {
    if (program.replacing) continue;
    for (const auto& w : program.workers) {
      if (w->state() == WorkerState::Failed) return w.get();
      if (w->state() == WorkerState::Stopped && w->record().last_crashed()) return w.get();
    }
  }
  return nullptr;
}

// Every slot has stopped or failed, and no program is being replaced.
bool all_stopped(const Programs& programs) {
  for (const auto& [name, program] : programs) {
    if (program.replacing) return false;
    for (const auto& w : program.workers)
      if (w->state() != WorkerState::Stopped && w->state() != WorkerState::Failed) return false;
  }
  return true;
}

}  // namespace

void FinishCheck::schedule() {
  if (pending_ || hooks_.stopping()) return;
  pending_ = true;
  deferred_.defer([this] {
    pending_ = false;
    check();
  });
}

void FinishCheck::check() {
  if (hooks_.stopping() || hooks_.starting()) return;
  const config::ExitWhen when = wrap_mode_ ? config::ExitWhen::AllExited : config_.exit.when;
  if (when == config::ExitWhen::AnyFailed)
    if (const Worker* failed = failed_for_good(programs_)) {
      log::error(
          "{} failed for good (exit.when: any_failed): stopping every program; recycler "
          "exits with status 1",
          failed->name());
      return hooks_.finish(1);
    }
  if (commands_.holding()) return;  // an operator stopped them and may start them again
  if (!all_stopped(programs_)) return;
  if (when == config::ExitWhen::Never) {
    if (!said_all_exited_)
      log::info(
          "every program has exited and none will be restarted; recycler stays (exit.when: "
          "never): `recycler start`, a reload or SIGTERM");
    said_all_exited_ = true;
    return;
  }
  log::info("every program has exited and none will be restarted; recycler exits");
  hooks_.finish(exit_code_when_finished(programs_, wrap_mode_));
}

}  // namespace recycler
