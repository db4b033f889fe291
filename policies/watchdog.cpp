// watchdog: restart a worker that has stopped saying it is alive, or whose
// iterations have stopped advancing: a stuck collective, a wedged data
// loader, a deadlock. Written as a program's `watchdog:` key (the parser makes
// it this policy); it reads the times the engine puts in each Sample.
//
//   - watchdog: {timeout: 30s}    WATCHDOG=1 or RECYCLER_ITERATION at least every 30s
//   - watchdog: {progress: 10m}   RECYCLER_ITERATION=N advancing at least every 10m
//
// Armed by the first message of a run, so a worker that never sends one is
// never taken for hung; a hung worker cannot checkpoint, so its restart asks
// for none (RecycleController resumes it from its last confirmed checkpoint).
#include <memory>

#include "policies/args.h"
#include "policies/base/units.h"

namespace recycler::policies {
namespace {

using units::format_duration;

constexpr std::string_view kKeys[] = {"timeout", "progress"};

class Watchdog final : public Policy {
 public:
  Watchdog(std::optional<Duration> timeout, std::optional<Duration> progress)
      : timeout_(timeout), progress_(progress) {}

  static std::unique_ptr<Policy> create(const YAML::Node& node, ErrorSink& errors) {
    Args args(node, errors, kKeys);
    auto timeout = args.duration("timeout");
    auto progress = args.duration("progress");
    if (args.ok() && !timeout && !progress)
      args.error("timeout",
                 "give timeout (WATCHDOG=1 or RECYCLER_ITERATION at least this often), "
                 "progress (RECYCLER_ITERATION advancing at least this often), or both");
    for (auto [key, d] : {std::pair{"timeout", timeout}, std::pair{"progress", progress}})
      if (d && *d < kShortest)
        args.error(key, std::string(key) + ": " + format_duration(*d) + " is too short; at least " +
                            format_duration(kShortest));
    if (!args.ok()) return nullptr;
    return std::make_unique<Watchdog>(timeout, progress);
  }

  std::string_view name() const override { return "watchdog"; }
  unsigned needs() const override { return 0; }  // the Sample's times, never a probe
  bool watches_hangs() const override { return true; }

  std::unique_ptr<PolicyState> start(const WorkerContext&) const override {
    return std::make_unique<State>();
  }

  Decision evaluate(const Sample& sample, PolicyState& base) const override {
    auto& state = static_cast<State&>(base);
    if (timeout_ && sample.alive && sample.t - *sample.alive > *timeout_)
      return restart("hung: no WATCHDOG=1 or RECYCLER_ITERATION for " +
                     format_duration(since(*sample.alive, sample.t)) + " (watchdog timeout " +
                     format_duration(*timeout_) + ")");
    if (!progress_ || !sample.iteration) return Decision::none();
    if (state.iteration != sample.iteration) {
      state.iteration = sample.iteration;
      state.since = sample.t;
      return Decision::none();
    }
    if (sample.t - state.since <= *progress_) return Decision::none();
    return restart("stalled: iteration " + std::to_string(*sample.iteration) + " for " +
                   format_duration(since(state.since, sample.t)) + " (watchdog progress " +
                   format_duration(*progress_) + ")");
  }

 private:
  // Below a second, the sampling interval's own floor would decide.
  static constexpr Duration kShortest{1000};

  struct State final : PolicyState {
    std::optional<uint64_t> iteration;  // the last one seen, since `since`
    TimePoint since{};
  };

  static Duration since(TimePoint from, TimePoint to) {
    return std::chrono::duration_cast<Duration>(to - from);
  }
  static Decision restart(std::string reason) {
    Decision d;
    d.action = Decision::Action::Restart;
    d.reason = std::move(reason);
    return d;
  }

  std::optional<Duration> timeout_;
  std::optional<Duration> progress_;
};

RECYCLER_REGISTER_POLICY("watchdog", Watchdog::create, kKeys);

}  // namespace
}  // namespace recycler::policies
