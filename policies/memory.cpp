// memory: recycle a worker whose memory stays over a limit, or, with scope:
// process, signal the one process of a pre-fork server that is over it.
//
//   - memory: {metric: anon, limit: 1.5GiB, for: 10s}
//   - memory: {metric: uss, limit: 600MiB, scope: process}
//   - memory: {metric: device, limit: 28GiB, action: checkpoint}
//   - memory: {metric: gpu, limit: 90%}   (of the GPU it holds the most on)
#include <memory>

#include "policies/args.h"
#include "policies/base/units.h"
#include "policies/metric.h"

namespace recycler::policies {
namespace {

using units::format_duration;
using units::format_size;

// The settings it accepts (registered with it: the docs are checked against them).
constexpr std::string_view kKeys[] = {"metric", "limit", "for", "scope", "signal", "action"};

class Memory final : public Policy {
 public:
  Memory(Metric metric, SizeLimit limit, Duration hold, Scope scope)
      : metric_(metric), limit_(limit), hold_(hold), scope_(scope) {}

  static std::unique_ptr<Policy> create(const YAML::Node& node, ErrorSink& errors) {
    Args args(node, errors, kKeys);
    Scope scope = read_scope(args);
    read_action(args, scope);
    // Page cache is reclaimable and would fake a leak: anon by default; a
    // single process is measured without the pages it shares after fork.
    Metric metric = scope.process ? Metric::Uss : Metric::Anon;
    if (auto name = args.choice(
            "metric", {"anon", "current", "rss", "pss", "uss", "device", "gpu", "gpu_total"})) {
      metric = *parse_metric(*name);
      if (scope.process && !has_process_figure(metric))
        args.error("metric", "metric: " + *name +
                                 " is measured for the whole worker; scope: process takes rss, "
                                 "pss, uss or gpu");
    }
    std::optional<SizeLimit> limit;
    if (args.required("limit")) limit = args.limit("limit");
    Duration hold = args.duration("for").value_or(Duration::zero());
    if (!args.ok()) return nullptr;
    return std::make_unique<Memory>(metric, *limit, hold, scope);
  }

  std::string_view name() const override { return "memory"; }
  std::optional<std::string_view> metric() const override { return to_string(metric_); }
  bool per_process() const override { return scope_.process; }
  std::optional<uint64_t> limit(const std::optional<uint64_t>& memory_max) const override {
    if (gpu_metric(metric_)) return std::nullopt;
    return limit_.resolve(memory_max);
  }
  bool checkpoints() const override {
    return !scope_.process && scope_.action == Decision::Action::Checkpoint;
  }
  unsigned needs() const override { return policies::needs(metric_); }
  // A percentage of a GPU metric is of the device's memory.
  bool needs_memory_max() const override {
    return limit_.percent.has_value() && !gpu_metric(metric_);
  }
  bool may_loop() const override { return true; }

  // The cgroup's current is at least any of the metrics, so it crossing the
  // limit is the earliest moment this policy can fire.
  // Device and GPU memory are not in the cgroup: no kernel event for them.
  std::optional<uint64_t> fast_threshold(const WorkerContext& worker) const override {
    if (hold_ > Duration::zero() || metric_ == Metric::Device || gpu_metric(metric_))
      return std::nullopt;
    return limit_.resolve(worker.memory_max);
  }

  std::unique_ptr<PolicyState> start(const WorkerContext& worker) const override {
    auto state = std::make_unique<State>();
    state->memory_max = worker.memory_max;
    return state;
  }

  Decision evaluate(const Sample& sample, PolicyState& base) const override {
    auto& state = static_cast<State&>(base);
    if (!scope_.process) {
      // A percentage of a memory_max the worker does not have (or of a GPU
      // it holds no memory on): no limit at all.
      auto of = capacity(sample, metric_, state.memory_max);
      auto limit = limit_.resolve(of);
      auto v = value(sample, metric_);
      if (!limit || !v) return Decision::none();
      auto held = state.hold.update(sample.t, *v > *limit, hold_);
      if (!held) return Decision::none();
      return scope_.decide(reason(*v, *limit, of, *held), 0);
    }
    state.processes.sync(sample, [](const ProcessSample&) { return Hold{}; });
    Worst worst;
    Duration worst_held{};
    uint64_t worst_limit = 0;
    for (const auto& p : sample.processes) {
      if (p.main || p.recycling) continue;
      auto limit = limit_.resolve(capacity(p, metric_, state.memory_max));
      auto v = value(p, metric_);
      if (!limit || !v) continue;
      auto held = state.processes.at(p.pid).update(sample.t, *v > *limit, hold_);
      if (held && worst.offer(p, *v - *limit)) worst_held = *held, worst_limit = *limit;
    }
    if (!worst.process) return Decision::none();
    return scope_.decide(reason(*value(*worst.process, metric_), worst_limit,
                                capacity(*worst.process, metric_, state.memory_max), worst_held),
                         worst.process->pid);
  }

 private:
  struct State final : PolicyState {
    std::optional<uint64_t> memory_max;
    Hold hold;
    ProcessTable<Hold> processes;
  };

  // "anon 612 MiB > 600 MiB for 10s", "current 470 MiB > 460.8 MiB (90% of 512 MiB)"
  std::string reason(uint64_t v, uint64_t limit, const std::optional<uint64_t>& of,
                     Duration held) const {
    std::string out = std::string(to_string(metric_)) + " " + format_size(v) + " > " +
                      format_size(limit) + limit_.origin(of);
    if (hold_ > Duration::zero()) out += " for " + format_duration(held);
    return out;
  }

  Metric metric_;
  SizeLimit limit_;
  Duration hold_;
  Scope scope_;
};

RECYCLER_REGISTER_POLICY("memory", Memory::create, kKeys);

}  // namespace
}  // namespace recycler::policies
