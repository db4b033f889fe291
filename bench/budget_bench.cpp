// The budget's cost (engine/budget.h): one Budget::evaluate() of a reading
// of N workers, what recycler pays every budget.interval (default 1 s) on top
// of sampling the workers, which it does anyway.
//
// Each worker grows at its own rate; the limit is far (1 PiB), so nothing
// fires and every evaluation takes the whole path: each worker's point into
// its growth series (kept over growth_window, thinned to 64 points), the
// scope's own, the usage clock, the trend (the leak policy's estimator over
// the sum, with horizon), the view's Theil–Sen slope. The growth window is
// filled (untimed) before the timing starts.
//
// Variants
//   BM_Budget/workers:N            a reading of N workers, as it runs
//   BM_BudgetChoose/workers:N      the same, over the limit: every evaluation
//                                  chooses (fastest-growing: a Theil-Sen
//                                  slope per worker), then is told the choice
//                                  was refused, so the next one chooses again
//
// Run from a Release build (see bench/README.md):
//   build-bench/bench/bench_budget
#include <benchmark/benchmark.h>

#include <chrono>
#include <cstdint>
#include <string>

#include "supervisor/config/parse.h"
#include "supervisor/engine/budget.h"

namespace {

using namespace recycler;

config::BudgetConfig budget(const std::string& limit) {
  std::string yaml = "budget: {limit: ";
  yaml += limit;
  yaml +=
      ", horizon: 10m, window: 10m, warmup: 2m, growth_window: 1m}\n"
      "programs:\n  a: {command: [/bin/true]}\n";
  auto loaded = config::parse_string(yaml, "bench.yaml");
  return *loaded.config->budget;
}

engine::BudgetReading reading(int workers, int64_t second) {
  engine::BudgetReading r;
  r.t = engine::TimePoint{} + std::chrono::seconds(second);
  uint64_t sum = 0;
  for (int i = 0; i < workers; ++i) {
    uint64_t bytes = (uint64_t{100} << 20) + static_cast<uint64_t>(second) * (i + 1) * 1024;
    sum += bytes;
    static const char* const kPrograms[] = {"a", "b", "c", "d", "e", "f", "g", "h"};
    r.candidates.push_back({kPrograms[i % 8], static_cast<unsigned>(i), 0, bytes,
                            engine::TimePoint{}, config::BudgetPreference::None, true});
  }
  r.used = sum;
  return r;
}

void run(benchmark::State& state, const std::string& limit, bool choose) {
  config::BudgetConfig cfg = budget(limit);
  engine::Budget b(cfg);
  const int workers = static_cast<int>(state.range(0));
  int64_t second = 0;
  for (; second < 720; ++second)  // warm-up + window
    if (b.evaluate(reading(workers, second))) b.refused();
  int64_t chosen = 0;
  for (auto _ : state) {
    state.PauseTiming();
    engine::BudgetReading r = reading(workers, second++);
    state.ResumeTiming();
    auto c = b.evaluate(r);
    if (c) {
      ++chosen;
      b.refused();
    }
    benchmark::DoNotOptimize(c);
  }
  if (choose != (chosen > 0)) state.SkipWithError(choose ? "it never chose" : "it chose");
}

void BM_Budget(benchmark::State& state) {
  run(state, "1PiB", false);
}
void BM_BudgetChoose(benchmark::State& state) {
  run(state, "1MiB", true);
}

BENCHMARK(BM_Budget)->ArgName("workers")->Arg(4)->Arg(64)->Arg(512)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_BudgetChoose)
    ->ArgName("workers")
    ->Arg(4)
    ->Arg(64)
    ->Arg(512)
    ->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
