// Policy cost: Policy::evaluate() on one Sample of one worker whose state
// holds a full window, i.e. what the supervisor pays per policy, per worker,
// per sample_interval (default 1 s).
//
// The worker: a leak policy built from YAML through the registry, as the
// config does, its state filled untimed with warm-up + a whole window of
// samples 1 s apart. Its limit is far away (1024 TiB), so nothing fires: each
// evaluation takes the whole path (bucket, estimate when a bucket closes,
// projection) and no Decision is formatted.
//
// Variants (one iteration = one Sample; the time column is what to read)
//   BM_Leak/theil_sen|least_squares/interval_ms:1000
//       a steady leak sampled every second: the per-call cost, with the
//       re-estimate every 64th of the window (~9.4 s of the 10m window)
//       spread over the samples in between. theil-sen is the default;
//       least-squares the baseline.
//   BM_Leak/theil_sen|least_squares/interval_ms:9375
//       one sample per bucket: every call closes a bucket and estimates the
//       trend again from the 64 buckets, the worst case of a single call.
//   BM_Memory
//       the memory policy (a threshold) on the same samples, for scale.
//
// Run from a Release build (see bench/README.md):
//   build-bench/bench/bench_policy
#include <benchmark/benchmark.h>
#include <yaml-cpp/yaml.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>

#include "policies/policy.h"

namespace {

using namespace recycler::policies;

class ThrowingSink final : public ErrorSink {
 public:
  void error(const YAML::Mark&, std::string message) override { throw std::runtime_error(message); }
};

std::unique_ptr<Policy> build(const std::string& name, const std::string& yaml) {
  ThrowingSink sink;
  return (*Registry::instance().find(name))(YAML::Load(yaml), sink);
}

// A worker leaking 10 MiB/min with +-4 MiB of noise, sampled every `interval`.
class Worker {
 public:
  Worker(const Policy& policy, std::chrono::milliseconds interval)
      : policy_(policy), interval_(interval) {
    WorkerContext context;
    context.memory_max = uint64_t{16} << 30;
    state_ = policy_.start(context);
    started_ = context.started;
  }

  Sample next() {
    Sample s;
    s.t = started_ + interval_ * n_;
    const double minutes = std::chrono::duration<double>(interval_ * n_).count() / 60;
    noise_ = noise_ * 6364136223846793005ull + 1442695040888963407ull;            // an LCG: cheap
    const auto jitter = static_cast<int64_t>(noise_ >> 41) - (int64_t{1} << 22);  // +-4 MiB
    s.anon = static_cast<uint64_t>(int64_t{1} << 30) +
             static_cast<uint64_t>(minutes * 10 * (1 << 20)) + static_cast<uint64_t>(jitter);
    ++n_;
    return s;
  }

  Decision evaluate(const Sample& s) { return policy_.evaluate(s, *state_); }

 private:
  const Policy& policy_;
  std::chrono::milliseconds interval_;
  std::unique_ptr<PolicyState> state_;
  TimePoint started_;
  int64_t n_ = 0;
  uint64_t noise_ = 42;
};

void run(benchmark::State& state, const Policy& policy, std::chrono::milliseconds interval) {
  Worker worker(policy, interval);
  // The warm-up (2m) and a whole window (10m), untimed.
  const auto fill = (std::chrono::minutes(12) + interval - std::chrono::milliseconds(1)) / interval;
  for (int64_t i = 0; i < fill; ++i) worker.evaluate(worker.next());
  // Making the Sample is timed too (a few ns): pausing the timer costs more.
  int64_t fired = 0;
  for (auto _ : state) {
    Decision d = worker.evaluate(worker.next());
    fired += d ? 1 : 0;
    benchmark::DoNotOptimize(d);
  }
  if (fired > 0) state.SkipWithError("the policy fired: the timings include formatting a reason");
}

void BM_Leak(benchmark::State& state, const char* estimator) {
  auto policy =
      build("leak", std::string("{window: 10m, limit: 1024TiB, estimator: ") + estimator + "}");
  run(state, *policy, std::chrono::milliseconds(state.range(0)));
}

void BM_Memory(benchmark::State& state) {
  auto policy = build("memory", "{limit: 1024TiB}");
  run(state, *policy, std::chrono::seconds(1));
}

BENCHMARK_CAPTURE(BM_Leak, theil_sen, "theil-sen")
    ->ArgName("interval_ms")
    ->Arg(1000)
    ->Arg(9375)
    ->Unit(benchmark::kNanosecond);
BENCHMARK_CAPTURE(BM_Leak, least_squares, "least-squares")
    ->ArgName("interval_ms")
    ->Arg(1000)
    ->Arg(9375)
    ->Unit(benchmark::kNanosecond);
BENCHMARK(BM_Memory)->Unit(benchmark::kNanosecond);

}  // namespace

BENCHMARK_MAIN();
