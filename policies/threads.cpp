// threads: recycle a worker whose thread count stays over a limit (a thread
// leak), or, with scope: process, signal the one process that is over it.
//
//   - threads: {limit: 200, for: 1m}
#include <memory>

#include "policies/args.h"
#include "policies/base/units.h"
#include "policies/metric.h"

namespace recycler::policies {
namespace {

constexpr uint64_t kMaxThreads = 4'194'304;  // PID_MAX_LIMIT on 64-bit Linux

// The settings it accepts (registered with it: the docs are checked against them).
constexpr std::string_view kKeys[] = {"limit", "for", "scope", "signal"};

class Threads final : public Policy {
 public:
  Threads(uint64_t limit, Duration hold, Scope scope) : limit_(limit), hold_(hold), scope_(scope) {}

  static std::unique_ptr<Policy> create(const YAML::Node& node, ErrorSink& errors) {
    Args args(node, errors, kKeys);
    Scope scope = read_scope(args);
    std::optional<uint64_t> limit;
    if (args.required("limit")) limit = args.integer("limit", 1, kMaxThreads);
    Duration hold = args.duration("for").value_or(Duration::zero());
    if (!args.ok()) return nullptr;
    return std::make_unique<Threads>(*limit, hold, scope);
  }

  std::string_view name() const override { return "threads"; }
  bool checkpoints() const override {
    return !scope_.process && scope_.action == Decision::Action::Checkpoint;
  }
  unsigned needs() const override {
    return kNeedsThreads | (scope_.process ? kNeedsProcesses : 0u);
  }
  bool may_loop() const override { return true; }

  std::unique_ptr<PolicyState> start(const WorkerContext&) const override {
    return std::make_unique<State>();
  }

  Decision evaluate(const Sample& sample, PolicyState& base) const override {
    auto& state = static_cast<State&>(base);
    if (!scope_.process) {
      if (!sample.threads) return Decision::none();
      auto held = state.hold.update(sample.t, *sample.threads > limit_, hold_);
      if (!held) return Decision::none();
      return scope_.decide(reason(*sample.threads, *held), 0);
    }
    state.processes.sync(sample, [](const ProcessSample&) { return Hold{}; });
    Worst worst;
    Duration worst_held{};
    for (const auto& p : sample.processes) {
      if (p.main || p.recycling || !p.threads) continue;
      auto held = state.processes.at(p.pid).update(sample.t, *p.threads > limit_, hold_);
      if (held && worst.offer(p, *p.threads - limit_)) worst_held = *held;
    }
    if (!worst.process) return Decision::none();
    return scope_.decide(reason(*worst.process->threads, worst_held), worst.process->pid);
  }

 private:
  struct State final : PolicyState {
    Hold hold;
    ProcessTable<Hold> processes;
  };

  // "212 threads > 200 for 1m"
  std::string reason(uint64_t threads, Duration held) const {
    std::string out = std::to_string(threads) + " threads > " + std::to_string(limit_);
    if (hold_ > Duration::zero()) out += " for " + units::format_duration(held);
    return out;
  }

  uint64_t limit_;
  Duration hold_;
  Scope scope_;
};

RECYCLER_REGISTER_POLICY("threads", Threads::create, kKeys);

}  // namespace
}  // namespace recycler::policies
