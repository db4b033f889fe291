#include "supervisor/timeline/replay.h"

#include <memory>
#include <optional>
#include <type_traits>
#include <utility>
#include <variant>

#include "supervisor/engine/recycle_controller.h"
#include "supervisor/timeline/trace.h"

namespace recycler::timeline {
namespace {

// The simulated worker: it does at once what the engine's commands ask, on
// the replay's clock.
struct SimulatedWorker {
  SimulatedWorker(engine::RecycleController& c, const TimePoint& clock)
      : controller(c), now(clock) {}

  engine::RecycleController& controller;
  const TimePoint& now;
  std::optional<TimePoint> checkpoint_deadline;
  std::vector<pid_t> exiting;  // signalled: gone before the next Sample

  void carry_out() {
    for (std::vector<engine::Command> batch = controller.take(); !batch.empty();
         batch = controller.take())
      for (engine::Command& command : batch)
        std::visit(
            [&](auto& c) {
              using C = std::decay_t<decltype(c)>;
              if constexpr (std::is_same_v<C, engine::AskCheckpoint>) {
                controller.checkpoint_sent(0, 0);
              } else if constexpr (std::is_same_v<C, engine::SignalProcess>) {
                controller.process_signalled(0, c.pid, engine::Signalled::Sent);
                exiting.push_back(c.pid);
              } else if constexpr (std::is_same_v<C, engine::ArmCheckpointTimer>) {
                checkpoint_deadline = now + c.delay;
              } else if constexpr (std::is_same_v<C, engine::CancelCheckpointTimer>) {
                checkpoint_deadline.reset();
              }
              // RecycleWorker: under way to the end of the trace. Record, Log:
              // the runtime's timeline rows and log lines, not replay's output.
            },
            command);
  }
};

}  // namespace

ReplayRun replay_run(const config::ProgramConfig& program,
                     const std::vector<policies::Sample>& samples, const ReplayOptions& options) {
  auto shared = std::make_shared<const config::ProgramConfig>(program);
  TimePoint now{};
  engine::RecycleController controller(shared, 1, [&now] { return now; });
  const auto& policies = controller.policies();

  ReplayRun out;
  bool stop = false;
  std::vector<std::optional<pid_t>> firing(policies.size());  // the pid it fired at last
  controller.observe([&](unsigned, size_t i, const policies::Decision& d) {
    std::optional<pid_t> was = std::exchange(firing[i], d ? std::optional(d.pid) : std::nullopt);
    if (stop || !d || was == d.pid) return;
    out.reported.push_back({seconds(now), std::string(policies[i]->name()), d});
    if (options.stop_at_first) stop = true;
  });
  controller.on_acted([&](unsigned, size_t i, const policies::Decision& d) {
    out.acted.push_back({seconds(now), std::string(policies[i]->name()), d});
  });

  SimulatedWorker worker(controller, now);

  controller.run_started(0, 1, TimePoint{}, 0, options.seed);
  worker.carry_out();
  for (const policies::Sample& sample : samples) {
    if (worker.checkpoint_deadline && *worker.checkpoint_deadline <= sample.t) {
      now = *worker.checkpoint_deadline;
      worker.checkpoint_deadline.reset();
      controller.checkpoint_timer_fired(0);
      worker.carry_out();
    }
    now = sample.t;
    for (pid_t pid : std::exchange(worker.exiting, {})) controller.process_exited(0, pid);
    controller.sampled(0, sample);
    worker.carry_out();
    if (stop) break;
  }
  return out;
}

std::vector<Replayed> replay(const config::ProgramConfig& program,
                             const std::vector<policies::Sample>& samples,
                             const ReplayOptions& options) {
  return replay_run(program, samples, options).reported;
}

}  // namespace recycler::timeline
