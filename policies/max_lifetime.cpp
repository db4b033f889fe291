// max_lifetime: recycle a worker (or, with scope: process, signal one process)
// once it has been up for a while, whatever it measures. The jitter is drawn
// once per worker or process, so workers started together do not all recycle
// together.
//
//   - max_lifetime: {after: 6h, jitter: 10m}
#include <memory>
#include <random>

#include "policies/args.h"
#include "policies/base/units.h"
#include "policies/metric.h"

namespace recycler::policies {
namespace {

using units::format_duration;

// The settings it accepts (registered with it: the docs are checked against them).
constexpr std::string_view kKeys[] = {"after", "jitter", "scope", "signal"};

class MaxLifetime final : public Policy {
 public:
  MaxLifetime(Duration after, Duration jitter, Scope scope)
      : after_(after), jitter_(jitter), scope_(scope) {}

  static std::unique_ptr<Policy> create(const YAML::Node& node, ErrorSink& errors) {
    Args args(node, errors, kKeys);
    Scope scope = read_scope(args);
    std::optional<Duration> after;
    if (args.required("after")) after = args.duration("after");
    if (after && *after == Duration::zero()) args.error("after", "after must be greater than 0");
    Duration jitter = args.duration("jitter").value_or(Duration::zero());
    if (!args.ok()) return nullptr;
    return std::make_unique<MaxLifetime>(*after, jitter, scope);
  }

  std::string_view name() const override { return "max_lifetime"; }
  bool checkpoints() const override {
    return !scope_.process && scope_.action == Decision::Action::Checkpoint;
  }
  // Worker scope needs nothing but time: every tick evaluates it.
  unsigned needs() const override { return scope_.process ? kNeedsProcesses : 0u; }

  std::unique_ptr<PolicyState> start(const WorkerContext& worker) const override {
    auto state = std::make_unique<State>(worker.seed);
    if (!scope_.process) state->worker = Life{worker.started, draw(state->rng)};
    return state;
  }

  Decision evaluate(const Sample& sample, PolicyState& base) const override {
    auto& state = static_cast<State&>(base);
    if (!scope_.process) {
      Duration up = age(state.worker, sample.t);
      if (up < after_ + state.worker.jitter) return Decision::none();
      return scope_.decide(reason(up, state.worker.jitter), 0);
    }
    state.processes.sync(sample, [&](const ProcessSample&) {
      return Life{sample.t, draw(state.rng)};
    });
    Worst worst;
    Duration worst_up{}, worst_jitter{};
    for (const auto& p : sample.processes) {
      if (p.main || p.recycling) continue;
      const Life& life = state.processes.at(p.pid);
      Duration up = age(life, sample.t);
      Duration limit = after_ + life.jitter;
      if (up >= limit && worst.offer(p, static_cast<uint64_t>((up - limit).count()))) {
        worst_up = up;
        worst_jitter = life.jitter;
      }
    }
    if (!worst.process) return Decision::none();
    return scope_.decide(reason(worst_up, worst_jitter), worst.process->pid);
  }

 private:
  struct Life {
    TimePoint since;  // the worker's start, or when the process was first seen
    Duration jitter;
  };
  struct State final : PolicyState {
    explicit State(uint64_t seed) : rng(seed) {}
    std::mt19937_64 rng;
    Life worker{};                 // scope: worker
    ProcessTable<Life> processes;  // scope: process
  };

  static Duration age(const Life& life, TimePoint t) {
    return std::chrono::duration_cast<Duration>(t - life.since);
  }

  // Whole milliseconds, and never so many that after + jitter overflows.
  Duration draw(std::mt19937_64& rng) const {
    if (jitter_ == Duration::zero()) return Duration::zero();
    Duration::rep most = std::min(jitter_.count(), Duration::max().count() - after_.count());
    return Duration(std::uniform_int_distribution<Duration::rep>(0, most)(rng));
  }

  // "up 6h4m >= max lifetime 6h4m (6h + jitter 4m)"
  std::string reason(Duration up, Duration jitter) const {
    std::string out =
        "up " + format_duration(up) + " >= max lifetime " + format_duration(after_ + jitter);
    if (jitter > Duration::zero())
      out += " (" + format_duration(after_) + " + jitter " + format_duration(jitter) + ")";
    return out;
  }

  Duration after_;
  Duration jitter_;
  Scope scope_;
};

RECYCLER_REGISTER_POLICY("max_lifetime", MaxLifetime::create, kKeys);

}  // namespace
}  // namespace recycler::policies
