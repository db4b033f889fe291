// RecycleController (recycle_controller.h): the checkpoint protocol once
// carry_out has asked for one. The worker is restarted when it confirms, or
// without a checkpoint when it cannot be asked or stays silent past
// checkpoint.timeout (on_timeout: wait: until it nears its memory_max, which
// sampled watches). A protocol of its own, so apart from the decisions and
// the queue that lead to it.
#include <fmt/format.h>

#include "policies/base/units.h"
#include "supervisor/engine/recycle_controller.h"

namespace recycler::engine {

using config::LogLevel;
using units::format_duration;

void RecycleController::checkpoint_failed(unsigned slot, pid_t pid, const std::string& why) {
  Slot& s = slots_[slot];
  if (!s.run || !s.run->asking) return;
  auto [policy, reason] = std::move(*s.run->asking);
  s.run->asking.reset();
  log(LogLevel::Warn,
      fmt::format("{}: cannot ask pid {} to checkpoint ({}); restarting it without one", name(slot),
                  pid, why));
  restart(slot, policy, std::move(reason), false);
}

void RecycleController::checkpoint_sent(unsigned slot, pid_t pid) {
  Slot& s = slots_[slot];
  if (!s.run || !s.run->asking) return;
  Run& run = *s.run;
  auto [policy, reason] = std::move(*run.asking);
  run.asking.reset();
  const config::CheckpointConfig& c = program_->checkpoint;
  event(LogLevel::Info, "checkpoint",
        fmt::format("{} asked to checkpoint: {} to {}pid {}; restarting it once it confirms "
                    "(RECYCLER_CHECKPOINTED=1 or a clean exit), at most {} from now{}",
                    name(slot), units::signal_name(c.signal),
                    c.signal_to == config::SignalTo::Main       ? ""
                    : c.signal_to == config::SignalTo::Children ? "the children of "
                                                                : "every process of the worker, ",
                    pid, format_duration(c.timeout),
                    c.on_timeout == config::CheckpointTimeout::Wait ? " (then it waits on)" : ""),
        {{"program", program_->name},
         {"slot", slot},
         {"pid", pid},
         {"generation", run.generation},
         {"signal", units::signal_name(c.signal)},
         {"timeout_s", static_cast<double>(c.timeout.count()) / 1000.0}});
  record(slot, "checkpoint", pid, units::signal_name(c.signal));
  run.checkpoint = Checkpointing{policy, std::move(reason), now_(), false};
  emit(ArmCheckpointTimer{slot, c.timeout});
}

void RecycleController::checkpoint_timer_fired(unsigned slot) {
  Slot& s = slots_[slot];
  if (!s.run || !s.run->checkpoint || s.run->checkpoint->overdue) return;
  Checkpointing& cp = *s.run->checkpoint;
  const config::CheckpointConfig& c = program_->checkpoint;
  if (c.on_timeout == config::CheckpointTimeout::Wait) {
    cp.overdue = true;
    const auto max = memory_max();
    log(LogLevel::Warn,
        fmt::format("{} has not confirmed its checkpoint after {}; waiting on (on_timeout: wait){}",
                    name(slot), format_duration(c.timeout),
                    max ? fmt::format(" until it nears its {} memory_max", units::format_size(*max))
                        : std::string()));
    return;
  }
  log(LogLevel::Warn,
      fmt::format("{} has not confirmed its checkpoint after {}; restarting it without one "
                  "(on_timeout: restart)",
                  name(slot), format_duration(c.timeout)));
  end_checkpoint(slot, "timeout", false);
}

// The checkpoint is over (confirmed or timed out): stop the worker and start
// its replacement, resuming from the checkpoint when there is one.
void RecycleController::end_checkpoint(unsigned slot, std::string_view why, bool resume) {
  Run& run = *slots_[slot].run;
  Checkpointing cp = std::move(*run.checkpoint);
  run.checkpoint.reset();
  emit(CancelCheckpointTimer{slot});
  log(LogLevel::Debug,
      fmt::format("{}: checkpoint over ({}) after {}", name(slot), why,
                  format_duration(std::chrono::duration_cast<Duration>(now_() - cp.since))));
  if (resume) slots_[slot].checkpoint_on_disk = true;
  restart(slot, cp.policy, std::move(cp.reason), resume);
}

}  // namespace recycler::engine
