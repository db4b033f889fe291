// What a program's monitor does with its controller's commands (engine/
// vocabulary.h): one handler each, in the order the controller gave them;
// a slot's commands wait while a diagnosis or a drain holds its recycle.
#include <cstring>
#include <type_traits>
#include <utility>

#include "policies/base/units.h"
#include "supervisor/log/log.h"
#include "supervisor/runtime/monitor.h"
#include "supervisor/runtime/monitor_slot.h"
#include "supervisor/worker/worker_checkpoints.h"

namespace recycler {

void ProgramMonitor::run_commands() {
  // Carrying out a command may lead to more (a recycle stops the worker, and
  // the controller hears of it): each batch is taken before it runs.
  for (std::vector<engine::Command> batch = controller_.take(); !batch.empty();
       batch = controller_.take())
    for (engine::Command& c : batch) execute(c);
}

void ProgramMonitor::execute(engine::Command& command) {
  std::visit(
      [this](auto& c) {
        using C = std::decay_t<decltype(c)>;
        if constexpr (std::is_same_v<C, engine::Log>) {
          if (!c.event.empty())
            log::event(c.level, c.event, c.message, c.fields);
          else if (log::enabled(c.level))
            log::message(c.level, c.message);
        } else {
          Slot& slot = *slots_.at(c.slot);
          if (slot.diagnosis || slot.drain) {  // the recycle waits for its evidence or drain
            slot.held.emplace_back(std::in_place_type<C>, std::move(c));
            return;
          }
          carry_out(slot, c);
        }
      },
      command);
}

void ProgramMonitor::carry_out(Slot& slot, engine::Diagnose& c) {
  diagnose(slot, c);
}

void ProgramMonitor::carry_out(Slot& slot, engine::RecycleWorker& c) {
  if (drain_first(slot)) {
    slot.held.emplace_back(std::in_place_type<engine::RecycleWorker>, std::move(c));
    return;
  }
  RecycleCause cause{std::move(c.reason), c.resume};
  // A gang's ranks go together (after a recycle loop's delay, all).
  bool done = gang_ ? gang_->recycle(c.slot, std::move(cause), false, c.delay)
                    : slot.worker->recycle(c.delay, std::move(cause));
  if (!done) controller_.recycle_refused(c.slot);
}

void ProgramMonitor::carry_out(Slot& slot, engine::AskCheckpoint& c) {
  Worker& w = *slot.worker;
  pid_t pid = w.pid().value_or(0);
  if (gang_) {  // every rank checkpoints, then all stop and start together
    if (!gang_->recycle(c.slot, RecycleCause{c.reason, false}, true))
      controller_.checkpoint_failed(c.slot, pid, "it is not running");
    return;
  }
  if (int err = w.checkpoints().ask(c.signal, RecycleCause{c.reason, true}); err != 0)
    controller_.checkpoint_failed(c.slot, pid, std::strerror(err));
  else
    controller_.checkpoint_sent(c.slot, pid);
}

void ProgramMonitor::carry_out(Slot& slot, engine::SignalProcess& c) {
  unsigned index = c.slot;
  pid_t pid = c.pid;
  // The worker may outlive this monitor (a reload replaces it).
  std::weak_ptr<ProgramMonitor*> self = self_;
  engine::Signalled r = slot.worker->signal_process(
      pid, c.signal,
      [self, index, pid] {
        if (auto alive = self.lock()) {
          (*alive)->controller_.process_exited(index, pid);
          (*alive)->run_commands();
        }
      },
      [self, index, pid] {
        if (auto alive = self.lock()) {
          (*alive)->controller_.process_left(index, pid);
          (*alive)->run_commands();
        }
      });
  controller_.process_signalled(index, pid, r);
}

void ProgramMonitor::carry_out(Slot& slot, engine::ArmCheckpointTimer& c) {
  unsigned index = c.slot;
  slot.checkpoint_timeout = ctx_.timers.after(c.delay, [this, index] {
    controller_.checkpoint_timer_fired(index);
    run_commands();
  });
}

void ProgramMonitor::carry_out(Slot& slot, engine::CancelCheckpointTimer&) {
  slot.checkpoint_timeout.reset();
}

void ProgramMonitor::carry_out(Slot& slot, engine::Record& c) {
  if (!slot.timeline) return;
  if (Status s = slot.timeline->event(c.event, c.pid, c.detail); !s)
    log::warn("{}: timeline: {}", slot.worker->name(), s.error().message);
}

bool ProgramMonitor::drain_first(Slot& slot) {
  if (std::exchange(slot.drained, false)) return false;
  const Worker& w = *slot.worker;
  if (!program_->drain_unready_for || gang_ || w.state() != WorkerState::Running) return false;
  Duration wait = *program_->drain_unready_for;
  log::info("{}: unready for {} before its recycle (drain.unready_for)", w.name(),
            units::format_duration(wait));
  unsigned index = slot.index;
  slot.drain = ctx_.timers.after(wait, [this, index] {
    Slot& s = *slots_.at(index);
    s.drain.reset();
    s.drained = true;
    for (engine::Command& c : std::exchange(s.held, {})) execute(c);
    s.drained = false;
    run_commands();
  });
  return true;
}

void ProgramMonitor::diagnose(Slot& slot, const engine::Diagnose& asked) {
  if (!program_->diagnose || !ctx_.launcher || !ctx_.base_env) return;
  Worker& w = *slot.worker;
  std::weak_ptr<ProgramMonitor*> self = self_;
  unsigned index = slot.index;
  slot.diagnosis = std::make_unique<Diagnosis>(
      *ctx_.launcher, ctx_.timers, *ctx_.base_env, *program_, w.name(), slot.index, w.generation(),
      asked, [&w](int signal) { return w.signal(signal); },
      [self, index, asked](Diagnosis::Outcome outcome) {
        if (auto alive = self.lock())
          (*alive)->diagnosed(*(*alive)->slots_.at(index), asked, std::move(outcome));
      });
}

// The evidence is in: logged (and kept beside the timeline), then the
// recycle it held goes ahead.
void ProgramMonitor::diagnosed(Slot& slot, const engine::Diagnose& asked,
                               Diagnosis::Outcome outcome) {
  Worker& w = *slot.worker;
  std::string kept;
  if (slot.timeline && !program_->diagnose->command.empty()) {
    if (auto path = slot.timeline->diagnosis(outcome.output))
      kept = *path;
    else
      log::warn("{}: timeline: {}", w.name(), path.error().message);
  }
  log::Fields fields{{"program", program_->name},
                     {"slot", slot.index},
                     {"pid", asked.pid},
                     {"policy", asked.policy},
                     {"took_s", static_cast<double>(outcome.took.count()) / 1000.0}};
  if (!kept.empty()) fields.emplace_back("file", kept);
  log::event(
      log::Level::Info, "diagnosed",
      fmt::format("{} diagnosed before its recycle ({} policy): {}{}", w.name(), asked.policy,
                  outcome.what, kept.empty() ? std::string() : "; output in " + kept),
      std::move(fields));
  if (slot.timeline) {
    if (Status s = slot.timeline->event("diagnosed", asked.pid, kept.empty() ? outcome.what : kept);
        !s)
      log::warn("{}: timeline: {}", w.name(), s.error().message);
  }
  slot.diagnosis.reset();
  for (engine::Command& c : std::exchange(slot.held, {})) execute(c);
  run_commands();
}

}  // namespace recycler
