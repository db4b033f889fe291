// The leak policy on shapes a trainer's memory takes: a steady leak fires
// with its figures and enough lead; a sawtooth, a step then plateau, and the
// warm-up do not. (The trace corpus in tests/fixtures/traces goes through
// replay_corpus_test.)
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <functional>

#include "tests/support/policy_harness.h"

namespace recycler::testing {
namespace {

using namespace std::chrono_literals;
using ::testing::HasSubstr;
using ::testing::MatchesRegex;

constexpr char kPolicy[] =
    "{metric: anon, window: 10m, warmup: 2m, horizon: 15m, min_slope: 1MiB/min, limit: 90%}";

struct Fired {
  double t = -1;  // seconds since start; -1: never
  Decision decision;
};

// Runs `anon(t)` (bytes) every 10 s for `minutes` through the policy.
Fired run(const std::string& yaml, std::function<double(double)> anon, int minutes,
          std::optional<uint64_t> memory_max = 4_GiB) {
  auto policy = make("leak", yaml);
  FakeClock clock;
  WorkerContext w = worker_at(clock.now());
  w.memory_max = memory_max;
  Watch watch(*policy, w);
  for (int i = 0; i <= minutes * 6; ++i) {
    Sample s;
    s.t = clock.now();
    s.anon = static_cast<uint64_t>(anon(i * 10.0));
    s.device = s.anon;
    if (Decision d = watch(s)) return {i * 10.0, d};
    clock.advance(10s);
  }
  return {};
}

TEST(LeakPolicy, ASteadyLeakFiresWithItsFiguresAndHorizonOfLead) {
  // 1 GiB + 20 MiB/min: 90% of 4 GiB (3.6 GiB) at ~133 min.
  auto leak = [](double t) { return 1.0 * (1 << 30) + 20.0 * (1 << 20) * t / 60; };
  Fired f = run(kPolicy, leak, 180);
  ASSERT_GE(f.t, 0) << "never fired";
  double crosses = (3.6 * (1 << 30) - 1.0 * (1 << 30)) / (20.0 * (1 << 20) / 60);
  EXPECT_GE(crosses - f.t, 15 * 60 / 2) << "at least horizon/2 of lead";
  EXPECT_LE(crosses - f.t, 15 * 60 + 120) << "not much more than the horizon";
  EXPECT_EQ(f.decision.action, Decision::Action::Restart);
  ASSERT_TRUE(f.decision.predicted_s);
  EXPECT_LT(*f.decision.predicted_s, 15 * 60);
  EXPECT_THAT(f.decision.reason,
              MatchesRegex("anon \\+20(\\.[0-9]+)? MiB/min over [0-9m.s]+, [0-9.]+ GiB "
                           "of 3\\.6 GiB \\(90% of 4 GiB\\), limit in [0-9m.s]+ < horizon 15m"));
}

TEST(LeakPolicy, NothingFiresDuringTheWarmup) {
  auto steep = [](double t) { return 3.0 * (1 << 30) + 200.0 * (1 << 20) * t / 60; };
  Fired f = run(kPolicy, steep, 10);
  ASSERT_GE(f.t, 0);
  EXPECT_GE(f.t, 120 + 300) << "warm-up, then half a window of data";
}

// The window must hold a couple of periods of a healthy cycle: within one
// epoch, its rise looks like any other growth.
TEST(LeakPolicy, AHealthySawtoothDoesNotFire) {
  // 2 GiB, +700 MiB over each 5-minute epoch, freed at its end.
  auto saw = [](double t) { return 2.0 * (1 << 30) + 700.0 * (1 << 20) * std::fmod(t, 300) / 300; };
  EXPECT_LT(run(kPolicy, saw, 240).t, 0);
}

TEST(LeakPolicy, AStepThenAPlateauDoesNotFire) {
  auto step = [](double t) { return (t < 45 * 60 ? 1.6 : 2.9) * (1 << 30); };
  EXPECT_LT(run(kPolicy, step, 180).t, 0);
}

TEST(LeakPolicy, ALeakRidingASawtoothFires) {
  auto saw = [](double t) {
    return 1.5 * (1 << 30) + 100.0 * (1 << 20) * std::floor(t / 600) +
           500.0 * (1 << 20) * std::fmod(t, 600) / 600;
  };
  Fired f = run(kPolicy, saw, 300);
  ASSERT_GE(f.t, 0);
}

TEST(LeakPolicy, CheckpointActionDeviceMetricAndAbsoluteLimit) {
  auto leak = [](double t) { return 9.0 * (1 << 30) + 300.0 * (1 << 20) * t / 60; };
  Fired f = run("{metric: device, limit: 28GiB, window: 10m, warmup: 1m, horizon: 15m, "
                "action: checkpoint}",
                leak, 120, std::nullopt);
  ASSERT_GE(f.t, 0);
  EXPECT_EQ(f.decision.action, Decision::Action::Checkpoint);
  EXPECT_THAT(f.decision.reason, HasSubstr("device +"));
  EXPECT_THAT(f.decision.reason, HasSubstr(" of 28 GiB, limit in"));
}

TEST(LeakPolicy, APercentageWithoutMemoryMaxNeverFires) {
  auto leak = [](double t) { return 1.0 * (1 << 30) + 200.0 * (1 << 20) * t / 60; };
  EXPECT_LT(run(kPolicy, leak, 60, std::nullopt).t, 0);
  EXPECT_TRUE(make("leak", kPolicy)->needs_memory_max());
}

TEST(LeakPolicy, LeastSquaresIsTheBaselineAndFiresOnAStepThenPlateau) {
  auto step = [](double t) { return (t < 45 * 60 ? 1.6 : 2.9) * (1 << 30); };
  std::string ls = std::string(kPolicy).insert(1, "estimator: least-squares, ");
  EXPECT_GE(run(ls, step, 180).t, 45 * 60) << "the naive slope sees the step as growth";
  EXPECT_LT(run(kPolicy, step, 180).t, 0) << "the robust one stays quiet";
}

TEST(LeakPolicy, BadSettingsAreReportedByKey) {
  EXPECT_THAT(errors_of("leak", "{window: 0s}"), ::testing::ElementsAre(HasSubstr("window")));
  EXPECT_THAT(errors_of("leak", "{min_slope: 1MiB}"),
              ::testing::ElementsAre(HasSubstr("min_slope: invalid rate \"1MiB\"")));
  EXPECT_THAT(errors_of("leak", "{action: pause}"), ::testing::ElementsAre(HasSubstr("action")));
  EXPECT_THAT(errors_of("leak", "{estimator: ols}"),
              ::testing::ElementsAre(HasSubstr("estimator")));
  EXPECT_THAT(errors_of("leak", "{metric: vram}"), ::testing::ElementsAre(HasSubstr("metric")));
  EXPECT_THAT(errors_of("leak", "{horizon: soon}"), ::testing::ElementsAre(HasSubstr("horizon")));
}

TEST(MemoryPolicyAction, CheckpointIsForTheWholeWorkerOnly) {
  EXPECT_THAT(errors_of("memory", "{limit: 1GiB, scope: process, action: checkpoint}"),
              ::testing::ElementsAre(HasSubstr("action: checkpoint applies to the whole worker")));
  auto p = make("memory", "{metric: device, limit: 1GiB, action: checkpoint}");
  WorkerContext w;
  EXPECT_FALSE(p->fast_threshold(w)) << "device memory has no kernel event";
}

}  // namespace
}  // namespace recycler::testing
