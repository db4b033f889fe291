#include "supervisor/timeline/replay.h"

#include <memory>
#include <optional>
#include <utility>

#include "supervisor/timeline/trace.h"

namespace recycler::timeline {

std::vector<Replayed> replay(const config::ProgramConfig& program,
                             const std::vector<policies::Sample>& samples,
                             const ReplayOptions& options) {
  struct Watch {
    const policies::Policy& policy;
    std::unique_ptr<policies::PolicyState> state;
    std::optional<pid_t> firing;  // the pid it fired at on the previous Sample
  };
  policies::WorkerContext worker;
  worker.started = policies::TimePoint{};
  worker.memory_max = program.limits.memory_max;
  worker.seed = options.seed;
  std::vector<Watch> watches;
  for (const config::PolicyConfig& p : program.policies)
    watches.push_back({*p.policy, p.policy->start(worker), std::nullopt});

  std::vector<Replayed> out;
  for (const policies::Sample& sample : samples) {
    for (Watch& w : watches) {
      policies::Decision d = w.policy.evaluate(sample, *w.state);
      std::optional<pid_t> was = std::exchange(w.firing, d ? std::optional(d.pid) : std::nullopt);
      if (!d || was == d.pid) continue;
      out.push_back({seconds(sample.t), std::string(w.policy.name()), std::move(d)});
      if (options.stop_at_first) return out;
    }
  }
  return out;
}

}  // namespace recycler::timeline
