// max_requests: recycle a worker (or, with scope: process, signal one process)
// after it has completed a number of requests, like gunicorn's max_requests.
// The jitter is drawn once per worker or process, so workers started together
// do not all recycle together.
//
//   - max_requests: {limit: 1000, jitter: 100, scope: process}
#include <algorithm>
#include <memory>
#include <random>

#include "policies/args.h"
#include "policies/metric.h"

namespace recycler::policies {
namespace {

constexpr uint64_t kMaxRequests = 1'000'000'000'000;

// The settings it accepts (registered with it: the docs are checked against them).
constexpr std::string_view kKeys[] = {"limit", "jitter", "scope", "signal"};

class MaxRequests final : public Policy {
 public:
  MaxRequests(uint64_t limit, uint64_t jitter, Scope scope)
      : limit_(limit), jitter_(jitter), scope_(scope) {}

  static std::unique_ptr<Policy> create(const YAML::Node& node, ErrorSink& errors) {
    Args args(node, errors, kKeys);
    Scope scope = read_scope(args);
    std::optional<uint64_t> limit;
    if (args.required("limit")) limit = args.integer("limit", 1, kMaxRequests);
    uint64_t jitter = args.integer("jitter", 0, kMaxRequests).value_or(0);
    if (!args.ok()) return nullptr;
    return std::make_unique<MaxRequests>(*limit, jitter, scope);
  }

  std::string_view name() const override { return "max_requests"; }
  std::optional<uint64_t> requests_left(const PolicyState& base) const override {
    return static_cast<const State&>(base).left;
  }
  // The jitter only adds: no process's limit is under limit_.
  std::optional<uint64_t> requests_exact_from() const override {
    return scope_.process ? limit_ : 1;
  }
  std::optional<uint64_t> process_request_limit(const PolicyState& base, pid_t pid) const override {
    if (!scope_.process) return std::nullopt;
    const uint64_t* jitter = static_cast<const State&>(base).processes.find(pid);
    if (!jitter) return std::nullopt;
    return limit_ + *jitter;
  }
  bool checkpoints() const override {
    return !scope_.process && scope_.action == Decision::Action::Checkpoint;
  }
  unsigned needs() const override {
    return kNeedsRequests | (scope_.process ? kNeedsProcesses : 0u);
  }

  std::unique_ptr<PolicyState> start(const WorkerContext& worker) const override {
    auto state = std::make_unique<State>(worker.seed);
    state->held_below = worker.requests_held_below;
    if (!scope_.process) state->jitter = draw(state->rng);
    // A process not seen yet may serve at least limit_.
    state->left = limit_ + state->jitter;
    return state;
  }

  Decision evaluate(const Sample& sample, PolicyState& base) const override {
    auto& state = static_cast<State&>(base);
    if (!scope_.process) {
      uint64_t requests = sample.requests.value_or(0);
      state.left = requests < limit_ + state.jitter ? limit_ + state.jitter - requests : 0;
      if (requests < limit_ + state.jitter) return Decision::none();
      return scope_.decide(reason(requests, state.jitter), 0);
    }
    state.processes.sync(sample, [&](const ProcessSample&) { return draw(state.rng); });
    Worst worst;
    uint64_t worst_jitter = 0;
    state.left = limit_;  // a process not seen yet
    for (const auto& p : sample.processes) {
      if (p.main || p.recycling) continue;
      // A process that has not reported yet has served nothing.
      uint64_t requests = p.requests.value_or(0);
      uint64_t jitter = state.processes.at(p.pid);
      // Below held_below it may have served up to held_below - 1 unreported,
      // all of them in its next report: what it may serve before its limit
      // counts from there (decisions go by what it reported).
      uint64_t may_have = requests < state.held_below ? state.held_below - 1 : requests;
      state.left =
          std::min(state.left, may_have < limit_ + jitter ? limit_ + jitter - may_have : 0);
      if (requests >= limit_ + jitter && worst.offer(p, requests - limit_ - jitter))
        worst_jitter = jitter;
    }
    if (!worst.process) return Decision::none();
    return scope_.decide(reason(worst.process->requests.value_or(0), worst_jitter),
                         worst.process->pid);
  }

 private:
  struct State final : PolicyState {
    explicit State(uint64_t seed) : rng(seed) {}
    std::mt19937_64 rng;
    uint64_t jitter = 0;               // scope: worker
    uint64_t left = 0;                 // requests_left() as of the last evaluate
    uint64_t held_below = 1;           // WorkerContext::requests_held_below
    ProcessTable<uint64_t> processes;  // scope: process, each one's jitter
  };

  uint64_t draw(std::mt19937_64& rng) const {
    if (jitter_ == 0) return 0;
    return std::uniform_int_distribution<uint64_t>(0, jitter_)(rng);
  }

  // "53 requests >= limit 53 (50 + jitter 3)"
  std::string reason(uint64_t requests, uint64_t jitter) const {
    std::string out =
        std::to_string(requests) + " requests >= limit " + std::to_string(limit_ + jitter);
    if (jitter > 0)
      out += " (" + std::to_string(limit_) + " + jitter " + std::to_string(jitter) + ")";
    return out;
  }

  uint64_t limit_;
  uint64_t jitter_;
  Scope scope_;
};

RECYCLER_REGISTER_POLICY("max_requests", MaxRequests::create, kKeys);

}  // namespace
}  // namespace recycler::policies
