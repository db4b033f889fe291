// The leak policy on the shapes a worker's memory takes: leaks (steady, slow,
// accelerating, riding a sawtooth, per iteration on the device) fire with at
// least half the horizon to spare; a healthy sawtooth, a warm-up ramp, a
// one-off step, noise and outliers on a plateau do not. The same shapes as
// the trace corpus (tests/fixtures/traces, replayed by replay_corpus_test),
// generated here in memory, under the defaults and under the corpus's config.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <random>

#include "policies/metric.h"
#include "tests/support/policy_harness.h"

namespace recycler::testing {
namespace {

using namespace std::chrono_literals;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;

constexpr double kMiB = 1 << 20;
constexpr double kGiB = 1 << 30;
constexpr double kMinute = 60;
// 90% of a 4 GiB memory_max, rounded down as the policy does.
constexpr double kLimit = 3865470566;
// The corpus's config (corpus.yaml): half-hour windows for hour-long runs.
constexpr char kCorpus[] = "{window: 30m, warmup: 5m, horizon: 20m, action: checkpoint}";

using Shape = std::function<double(double t)>;  // bytes at t seconds since the start

// Uniform noise in [-1, 1), the same on every platform (mt19937_64's output
// is fixed by the standard; the distributions are not).
class Noise {
 public:
  explicit Noise(uint64_t seed) : gen_(seed) {}
  double operator()() { return static_cast<double>(gen_() >> 11) * 0x1.0p-52 - 1; }

 private:
  std::mt19937_64 gen_;
};

// A rise over the last `validate` seconds of every `period`, freed at its end
// (seed 004's per-epoch validation; validate == period is a GC cycle).
double cycle(double t, double period, double validate, double amplitude) {
  double phase = std::fmod(t, period);
  double start = period - validate;
  return phase < start ? 0 : amplitude * (phase - start) / validate;
}

// Imports and model load: settles at `level` within two minutes.
double startup(double t, double level) {
  return level * (1 - std::exp(-t / 25));
}

// Flat at 1.2 GiB for 20 min, then a leak whose rate doubles every ~14 min.
double accelerating(double t) {
  double x = std::max(0.0, t - 20 * kMinute) / (20 * kMinute);
  return startup(t, 1.2 * kGiB) + 100 * kMiB * (std::exp(x) - 1);
}

// A second model loaded at 45 min: +1.3 GiB within 40 s onto 1.6 GiB, then a plateau.
double second_model(double t) {
  return startup(t, 1.6 * kGiB) + 1.3 * kGiB * std::clamp((t - 45 * kMinute) / 40, 0.0, 1.0);
}

// The corpus's epochs (seed 004): 10 minutes whose validation, the last 3.5,
// takes 700 MiB and frees it, with an 80 MiB GC cycle of 75 s on top.
double epochs(double t) {
  return cycle(t, 600, 210, 700 * kMiB) + cycle(t, 75, 75, 80 * kMiB);
}

TimePoint at(const WorkerContext& worker, double t) {
  return worker.started + std::chrono::duration_cast<Duration>(std::chrono::duration<double>(t));
}

struct Run {
  std::string yaml;
  Shape shape;
  double minutes = 0;
  double step = 10;  // seconds between samples
  std::optional<uint64_t> memory_max = 4_GiB;
  bool device = false;    // the shape is Sample::device, not anon
  double limit = kLimit;  // where the shape counts as crossing it
};

struct Outcome {
  std::optional<double> fired_at;  // seconds since the start, of the first decision
  Decision decision;
  std::optional<double> crosses_at;  // of the first sample at or over `limit`
  std::optional<double> growing_at;  // of the first sample with an outlook
  std::optional<Outlook> outlook;    // that outlook
  bool growing_at_end = false;       // an outlook after the last sample
  std::optional<double> lead() const {
    if (!fired_at || !crosses_at) return std::nullopt;
    return *crosses_at - *fired_at;
  }
};

// Samples `shape` every `step` seconds until both the first decision and the
// crossing were seen, or for `minutes`.
Outcome run(const Run& r) {
  Outcome out;
  auto policy = make("leak", r.yaml);
  if (!policy) return out;
  WorkerContext worker = worker_at(FakeClock().now());
  worker.memory_max = r.memory_max;
  Watch watch(*policy, worker);
  for (int i = 0; i * r.step <= r.minutes * kMinute; ++i) {
    const double t = i * r.step;
    const double v = std::max(0.0, r.shape(t));
    Sample s;
    s.t = at(worker, t);
    (r.device ? s.device : s.anon) = static_cast<uint64_t>(v);
    if (!out.crosses_at && v >= r.limit) out.crosses_at = t;
    if (Decision d = watch(s); d && !out.fired_at) {
      out.fired_at = t;
      out.decision = d;
    }
    out.growing_at_end = watch.outlook() != nullptr;
    if (out.growing_at_end && !out.growing_at) {
      out.growing_at = t;
      out.outlook = *watch.outlook();
    }
    if (out.fired_at && out.crosses_at) break;
  }
  return out;
}

// --- The settings -------------------------------------------------------------

TEST(LeakPolicy, IsRegisteredAsLeak) {
  auto policy = make("leak", "");
  ASSERT_TRUE(policy);
  EXPECT_EQ(policy->name(), "leak");
}

TEST(LeakPolicy, DefaultsWatchAnonAgainstNinetyPercentOfMemoryMax) {
  auto policy = make("leak", "");
  EXPECT_EQ(policy->needs(), policies::kNeedsCgroupMemory);
  EXPECT_TRUE(policy->needs_memory_max());
  EXPECT_TRUE(policy->may_loop());
  WorkerContext worker = worker_at({});
  worker.memory_max = 4_GiB;
  EXPECT_EQ(policy->fast_threshold(worker), std::nullopt) << "nothing for the kernel to watch";
}

TEST(LeakPolicy, NeedsFollowTheMetric) {
  EXPECT_EQ(make("leak", "{metric: device}")->needs(), policies::kNeedsDevice);
  EXPECT_EQ(make("leak", "{metric: uss}")->needs(),
            policies::kNeedsProcessMemory | policies::kNeedsProcesses);
  EXPECT_EQ(make("leak", "{metric: file}")->needs(), policies::kNeedsCgroupMemory);
}

TEST(LeakPolicy, AnAbsoluteLimitNeedsNoMemoryMax) {
  EXPECT_FALSE(make("leak", "{limit: 3GiB}")->needs_memory_max());
}

TEST(LeakPolicy, BadDurationsAreReported) {
  EXPECT_THAT(errors_of("leak", "{window: 10, horizon: 0s}"),
              ElementsAre("window: invalid duration \"10\": missing unit, e.g. \"10s\"",
                          "horizon must be greater than 0"));
  EXPECT_THAT(errors_of("leak", "{window: 0ms}"), ElementsAre("window must be greater than 0"));
  EXPECT_THAT(errors_of("leak", "{warmup: soon}"),
              ElementsAre(HasSubstr("warmup: invalid duration \"soon\"")));
}

TEST(LeakPolicy, AWarmupLongerThanTheWindowIsAllowed) {
  EXPECT_TRUE(make("leak", "{window: 5m, warmup: 1h}"));
}

TEST(LeakPolicy, MinSlopeIsASizePerTimeUnit) {
  EXPECT_THAT(errors_of("leak", "{min_slope: 1MiB}"),
              ElementsAre("min_slope: invalid rate \"1MiB\": expected a size per s, min or h, "
                          "e.g. \"1MiB/min\""));
  EXPECT_THAT(errors_of("leak", "{min_slope: 1MiB/day}"),
              ElementsAre("min_slope: invalid rate \"1MiB/day\": unknown time unit \"day\"; use "
                          "s, min or h"));
  EXPECT_THAT(errors_of("leak", "{min_slope: 10MB/s}"),
              ElementsAre("min_slope: invalid rate \"10MB/s\": decimal units are ambiguous; use "
                          "\"10MiB\" or a byte count"));
  EXPECT_THAT(errors_of("leak", "{min_slope: 0MiB/min}"),
              ElementsAre("min_slope must be greater than 0"));
}

TEST(LeakPolicy, UnknownChoicesListTheAllowedOnes) {
  EXPECT_THAT(errors_of("leak", "{action: pause, estimator: ols, metric: vram}"),
              ElementsAre("metric: invalid value \"vram\"; expected anon, current, file, rss, "
                          "pss, uss, device, gpu or gpu_total",
                          "action: invalid value \"pause\"; expected restart or checkpoint",
                          "estimator: invalid value \"ols\"; expected theil-sen or least-squares"));
}

TEST(LeakPolicy, IsForTheWholeWorkerOnly) {
  EXPECT_THAT(errors_of("leak", "{scope: process}"),
              ElementsAre(HasSubstr("unknown key \"scope\"")));
}

TEST(LeakPolicy, ErrorsPointAtTheOffendingValue) {
  Built b = build("leak", "window: 10m\nhorizon: 15\n");
  EXPECT_EQ(b.policy, nullptr);
  ASSERT_EQ(b.errors.reported.size(), 1u);
  EXPECT_EQ(b.errors.reported[0].at.line, 1);
  EXPECT_EQ(b.errors.reported[0].at.column, 9);
}

// --- An exact line: every figure known ---------------------------------------

// One sample per bucket (10m / 64 = 9.375 s), 38 MiB/min against 90% of
// 3 GiB, which is 20m + 905 s away at the start: the first sample projected
// less than the 20m horizon from it is the 97th, at 909.375 s.
class ExactLine : public ::testing::Test {
 protected:
  static constexpr double kSlope = 38 * kMiB / kMinute;
  static constexpr double kStep = 9.375;
  static constexpr double kLimit3G = 2899102924;  // 90% of 3 GiB, rounded down
  static constexpr double kFiresAt = 97 * kStep;
  static double shape(double t) { return kLimit3G - kSlope * (20 * kMinute + 905 - t); }

  Outcome fire(const std::string& yaml) {
    return run({.yaml = yaml,
                .shape = shape,
                .minutes = 30,
                .step = kStep,
                .memory_max = 3_GiB,
                .limit = kLimit3G});
  }
};

TEST_F(ExactLine, FiresWhenTheProjectionComesWithinTheHorizon) {
  Outcome o = fire("{horizon: 20m}");
  ASSERT_TRUE(o.fired_at);
  EXPECT_DOUBLE_EQ(*o.fired_at, kFiresAt);
  EXPECT_EQ(o.decision.action, Decision::Action::Restart);
}

TEST_F(ExactLine, ReasonGivesTheSlopeWindowLevelLimitAndProjection) {
  EXPECT_EQ(fire("{horizon: 20m}").decision.reason,
            "anon +38 MiB/min over 10m, 1.96 GiB of 2.7 GiB (90% of 3 GiB), limit in 19m56s < "
            "horizon 20m");
}

TEST_F(ExactLine, PredictedSecondsIsTheTimeLeftToTheLimit) {
  Outcome o = fire("{horizon: 20m}");
  ASSERT_TRUE(o.decision.predicted_s);
  EXPECT_NEAR(*o.decision.predicted_s, 20 * kMinute + 905 - kFiresAt, 0.01);
}

TEST_F(ExactLine, AnAbsoluteLimitHasNoOriginInTheReason) {
  EXPECT_THAT(fire("{horizon: 20m, limit: 2899102924}").decision.reason,
              HasSubstr(", 1.96 GiB of 2.7 GiB, limit in 19m56s"));
}

TEST_F(ExactLine, CheckpointIsTheActionAskedFor) {
  EXPECT_EQ(fire("{horizon: 20m, action: checkpoint}").decision.action,
            Decision::Action::Checkpoint);
  EXPECT_EQ(fire("{horizon: 20m, action: restart}").decision.action, Decision::Action::Restart);
}

TEST_F(ExactLine, TheOutlookComesWithTheFirstEstimateAheadOfTheDecision) {
  Outcome o = fire("{horizon: 20m}");
  ASSERT_TRUE(o.growing_at && o.fired_at && o.outlook);
  // Two thirds of the 10m window after the 2m warm-up, at a bucket's close.
  EXPECT_GE(*o.growing_at, 2 * kMinute + 400);
  EXPECT_LE(*o.growing_at, 2 * kMinute + 400 + 2 * kStep);
  EXPECT_LT(*o.growing_at, *o.fired_at);
  EXPECT_NEAR(o.outlook->slope, kSlope, kSlope * 1e-6);
  // The top of the window is the sample at growing_at.
  EXPECT_NEAR(o.outlook->predicted_s, 20 * kMinute + 905 - *o.growing_at, 0.01);
  EXPECT_GT(o.outlook->predicted_s, 20 * kMinute);
  EXPECT_THAT(o.outlook->summary, ::testing::StartsWith("anon +38 MiB/min over "));
  EXPECT_THAT(o.outlook->summary, HasSubstr("of 2.7 GiB (90% of 3 GiB), limit in "));
  EXPECT_THAT(o.outlook->summary, Not(HasSubstr("horizon")));
  EXPECT_TRUE(o.growing_at_end);
}

TEST(LeakPolicy, TheOutlookGoesAwayWhenTheGrowthStops) {
  // 20 MiB/min for an hour (the limit hours away), then an hour flat.
  Outcome o =
      run({.yaml = "",
           .shape = [](double t) { return 1 * kGiB + 20 * kMiB * std::min(t, 3600.0) / 60; },
           .minutes = 120});
  EXPECT_FALSE(o.fired_at) << o.decision.reason;
  ASSERT_TRUE(o.growing_at);
  EXPECT_LT(*o.growing_at, 3600);
  EXPECT_FALSE(o.growing_at_end);
}

TEST(LeakPolicy, NoOutlookDuringTheWarmup) {
  auto policy = make("leak", "{warmup: 5m}");
  ASSERT_TRUE(policy);
  WorkerContext worker = worker_at(FakeClock().now());
  worker.memory_max = 4_GiB;
  Watch watch(*policy, worker);
  for (int i = 0; i < 30; ++i) {
    Sample s;
    s.t = at(worker, i * 10.0);
    s.anon = static_cast<uint64_t>(1 * kGiB + i * 100 * kMiB);
    EXPECT_FALSE(watch(s));
    EXPECT_EQ(watch.outlook(), nullptr) << "at " << i * 10 << " s";
  }
}

TEST_F(ExactLine, LeastSquaresGivesTheSameFiguresOnALine) {
  Outcome o = fire("{horizon: 20m, estimator: least-squares}");
  EXPECT_EQ(o.fired_at, kFiresAt);
  EXPECT_THAT(o.decision.reason, HasSubstr("anon +38 MiB/min over 10m, 1.96 GiB of 2.7 GiB"));
}

// --- Firing on a leak --------------------------------------------------------

TEST(LeakPolicy, NothingFiresDuringTheWarmupNorBeforeTwoThirdsOfAWindowAfterIt) {
  // Already at 85% of the limit and climbing 200 MiB/min: over it in 3 min.
  Outcome o = run({.yaml = "{warmup: 3m, window: 9m}",
                   .shape = [](double t) { return 0.85 * kLimit + 200 * kMiB * t / kMinute; },
                   .minutes = 30});
  ASSERT_TRUE(o.fired_at);
  EXPECT_GE(*o.fired_at, 3 * kMinute + 6 * kMinute);
  EXPECT_LE(*o.fired_at, 3 * kMinute + 6 * kMinute + 10) << "then at once";
}

TEST(LeakPolicy, ASteadyLeakFiresAboutAHorizonAhead) {
  // 1 GiB + 20 MiB/min with noise: the limit at ~133 min.
  Noise noise(1);
  Outcome o = run(
      {.yaml = "",
       .shape = [&](double t) { return 1 * kGiB + 20 * kMiB * t / kMinute + 6 * kMiB * noise(); },
       .minutes = 180});
  ASSERT_TRUE(o.lead());
  EXPECT_GE(*o.lead(), 15 * kMinute / 2);
  EXPECT_LE(*o.lead(), 15 * kMinute + 2 * kMinute) << "not much earlier than the horizon";
}

TEST(LeakPolicy, ASlowLeakFiresWithHalfTheHorizonToSpare) {
  // 3 MiB/min under noise of +-16 MiB: the limit after ~3 h.
  Noise noise(2);
  Outcome o = run(
      {.yaml = "",
       .shape = [&](double t) { return 3 * kGiB + 3 * kMiB * t / kMinute + 16 * kMiB * noise(); },
       .minutes = 240});
  ASSERT_TRUE(o.lead());
  EXPECT_GE(*o.lead(), 15 * kMinute / 2);
}

TEST(LeakPolicy, AnAcceleratingLeakFiresWithHalfTheHorizonToSpare) {
  Noise noise(3);
  Outcome o = run({.yaml = "",
                   .shape = [&](double t) { return accelerating(t) + 6 * kMiB * noise(); },
                   .minutes = 180});
  ASSERT_TRUE(o.lead());
  EXPECT_GE(*o.lead(), 15 * kMinute / 2);
}

TEST(LeakPolicy, ALeakRidingASawtoothFiresWithHalfTheHorizonToSpare) {
  // 3-minute epochs whose validation keeps 30 MiB of the 500 MiB it takes.
  Outcome o = run({.yaml = "",
                   .shape =
                       [](double t) {
                         return 1.5 * kGiB + 30 * kMiB * std::floor(t / 180) +
                                cycle(t, 180, 60, 500 * kMiB);
                       },
                   .minutes = 400});
  ASSERT_TRUE(o.lead());
  EXPECT_GE(*o.lead(), 15 * kMinute / 2);
}

TEST(LeakPolicy, APerIterationDeviceLeakFiresWithHalfTheHorizonToSpare) {
  // Seed 001: every 2-minute iteration decodes (+3 GiB for 40 s) and keeps
  // 300 MiB of compilation cache, on a 32 GiB accelerator.
  Outcome o = run({.yaml = "{metric: device, limit: 30GiB}",
                   .shape =
                       [](double t) {
                         return startup(t, 7.8 * kGiB) + 300 * kMiB * std::floor(t / 120) +
                                (std::fmod(t, 120) < 40 ? 3 * kGiB : 0);
                       },
                   .minutes = 300,
                   .memory_max = std::nullopt,
                   .device = true,
                   .limit = 30 * kGiB});
  ASSERT_TRUE(o.lead());
  EXPECT_GE(*o.lead(), 15 * kMinute / 2);
  EXPECT_THAT(o.decision.reason, HasSubstr("device +"));
  EXPECT_THAT(o.decision.reason, HasSubstr(" of 30 GiB, limit in "));
}

TEST(LeakPolicy, GapsInTheSamplesDoNotHideALeak) {
  // 25 MiB/min sampled at uneven intervals, with nothing at all for 6 minutes.
  auto policy = make("leak", "");
  WorkerContext worker = worker_at(FakeClock().now());
  worker.memory_max = 4_GiB;
  Watch watch(*policy, worker);
  std::optional<double> fired;
  double t = 0;
  for (int i = 0; t < 200 * kMinute && !fired; ++i) {
    t += i % 3 == 0 ? 4 : 17;
    if (t > 60 * kMinute && t < 66 * kMinute) continue;
    Sample s;
    s.t = at(worker, t);
    s.anon = static_cast<uint64_t>(1 * kGiB + 25 * kMiB * t / kMinute);
    if (watch(s)) fired = t;
  }
  ASSERT_TRUE(fired);
  const double crosses = (kLimit - 1 * kGiB) / (25 * kMiB / kMinute);
  EXPECT_GE(crosses - *fired, 15 * kMinute / 2);
  EXPECT_LE(crosses - *fired, 15 * kMinute + kMinute);
}

TEST(LeakPolicy, GrowthSlowerThanMinSlopeIsIgnored) {
  // 0.8 MiB/min, 30 MiB under the limit: it will get there, slowly.
  Shape creep = [](double t) { return kLimit - 30 * kMiB + 0.8 * kMiB * t / kMinute; };
  EXPECT_FALSE(run({.yaml = "", .shape = creep, .minutes = 40}).fired_at);
  EXPECT_TRUE(run({.yaml = "{min_slope: 512KiB/min}", .shape = creep, .minutes = 40}).fired_at);
}

TEST(LeakPolicy, APercentageWithoutMemoryMaxNeverFires) {
  Outcome o = run({.yaml = "{limit: 50%}",
                   .shape = [](double t) { return 1 * kGiB + 200 * kMiB * t / kMinute; },
                   .minutes = 60,
                   .memory_max = std::nullopt});
  EXPECT_FALSE(o.fired_at);
}

TEST(LeakPolicy, SamplesWithoutTheFigureAreNoOpinion) {
  auto policy = make("leak", "{metric: device, limit: 1GiB}");
  WorkerContext worker = worker_at(FakeClock().now());
  Watch watch(*policy, worker);
  for (int i = 0; i < 360; ++i) {
    Sample s;
    s.t = at(worker, i * 10.0);
    s.anon = 100_GiB;  // not what it watches
    EXPECT_FALSE(watch(s));
  }
}

// --- Staying quiet -------------------------------------------------------------

TEST(LeakPolicy, AHealthySawtoothDoesNotFire) {
  // Periods up to a third of the window, 20% of the limit deep, peaks at 85%
  // of it: per-epoch validation (the last 40% of the period) and GC cycles.
  for (double period : {60.0, 100.0, 150.0, 200.0})
    for (double validate : {period, 0.4 * period}) {
      Shape saw = [&](double t) {
        return startup(t, 0.65 * kLimit) + cycle(t, period, validate, 0.2 * kLimit);
      };
      Outcome o = run({.yaml = "", .shape = saw, .minutes = 180, .step = 5});
      EXPECT_FALSE(o.fired_at) << "period " << period << " s, rising for " << validate
                               << " s: " << o.decision.reason;
      EXPECT_FALSE(o.growing_at) << "period " << period << " s: " << o.outlook->summary;
    }
}

TEST(LeakPolicy, AStepThenAPlateauDoesNotFire) {
  // To 81% of the limit.
  Noise noise(4);
  Outcome o = run({.yaml = "",
                   .shape = [&](double t) { return second_model(t) + 6 * kMiB * noise(); },
                   .minutes = 180});
  EXPECT_FALSE(o.fired_at) << o.decision.reason;
  EXPECT_FALSE(o.growing_at) << o.outlook->summary;
}

TEST(LeakPolicy, AWarmupRampThenAPlateauDoesNotFire) {
  // Model load, then caches filling another 350 MiB, settling within ~10 min.
  Noise noise(5);
  Outcome o = run({.yaml = "",
                   .shape =
                       [&](double t) {
                         return startup(t, 2.2 * kGiB) +
                                350 * kMiB * (1 - std::exp(-std::max(0.0, t - 60) / 120)) +
                                6 * kMiB * noise();
                       },
                   .minutes = 180});
  EXPECT_FALSE(o.fired_at) << o.decision.reason;
}

TEST(LeakPolicy, NoiseSpikesAndGlitchesOnAPlateauDoNotFire) {
  // 70% of the limit, +-40 MiB of noise; one sample in five is a spike of up
  // to 600 MiB (a large request), one in a hundred reads up to 300 MiB low.
  Noise noise(6), pick(7);
  Outcome o = run({.yaml = "",
                   .shape =
                       [&](double t) {
                         double u = pick(), wild = 0;
                         if (u > 0.6) wild = 300 * kMiB * (noise() + 1);
                         if (u < -0.98) wild = -150 * kMiB * (noise() + 1);
                         return startup(t, 0.7 * kLimit) + 40 * kMiB * noise() + wild;
                       },
                   .minutes = 180,
                   .step = 5});
  EXPECT_FALSE(o.fired_at) << o.decision.reason;
}

TEST(LeakPolicy, OnlyTheWindowCounts) {
  // A steep climb that stopped a day ago, then a day at 80% of the limit.
  Outcome o = run(
      {.yaml = "",
       .shape =
           [](double t) { return 1 * kGiB + std::min(t, 3600.0) * (0.8 * kLimit - kGiB) / 3600; },
       .minutes = 24 * 60,
       .step = 30});
  EXPECT_FALSE(o.fired_at) << o.decision.reason;
}

TEST(LeakPolicy, AWeekOfPlateauThenALeakStillFiresInTime) {
  constexpr double kWeek = 7 * 24 * 3600;
  Outcome o = run(
      {.yaml = "",
       .shape = [](double t) { return 2 * kGiB + 20 * kMiB * std::max(0.0, t - kWeek) / kMinute; },
       .minutes = kWeek / kMinute + 120,
       .step = 30});
  ASSERT_TRUE(o.lead());
  EXPECT_GE(*o.lead(), 15 * kMinute / 2);
}

// --- The corpus's shapes under the corpus's config ------------------------------

TEST(LeakPolicyCorpus, A10MinuteEpochSawtoothDoesNotFire) {
  Noise noise(8);
  Outcome o =
      run({.yaml = kCorpus,
           .shape = [&](double t) { return startup(t, 2 * kGiB) + epochs(t) + 6 * kMiB * noise(); },
           .minutes = 180});
  EXPECT_FALSE(o.fired_at) << o.decision.reason;
}

TEST(LeakPolicyCorpus, AnEpochSawtoothKeeping100MiBAnEpochFires) {
  Noise noise(9);
  Outcome o = run({.yaml = kCorpus,
                   .shape =
                       [&](double t) {
                         return startup(t, 1.5 * kGiB) + 100 * kMiB * std::floor(t / 600) +
                                epochs(t) + 6 * kMiB * noise();
                       },
                   .minutes = 240});
  ASSERT_TRUE(o.lead());
  EXPECT_GE(*o.lead(), 20 * kMinute / 2);
  EXPECT_EQ(o.decision.action, Decision::Action::Checkpoint);
}

TEST(LeakPolicyCorpus, AnAcceleratingLeakFires) {
  Noise noise(10);
  Outcome o = run({.yaml = kCorpus,
                   .shape = [&](double t) { return accelerating(t) + 6 * kMiB * noise(); },
                   .minutes = 180});
  ASSERT_TRUE(o.lead());
  EXPECT_GE(*o.lead(), 20 * kMinute / 2);
}

TEST(LeakPolicyCorpus, AStepThenAPlateauDoesNotFire) {
  Outcome o = run({.yaml = kCorpus, .shape = second_model, .minutes = 180});
  EXPECT_FALSE(o.fired_at) << o.decision.reason;
}

// --- The least-squares baseline --------------------------------------------------

TEST(LeakPolicy, LeastSquaresTakesAStepForALeak) {
  Shape step = second_model;
  Outcome naive = run({.yaml = "{estimator: least-squares}", .shape = step, .minutes = 180});
  ASSERT_TRUE(naive.fired_at) << "the baseline sees growth";
  EXPECT_GE(*naive.fired_at, 45 * kMinute);
  EXPECT_FALSE(run({.yaml = "{estimator: theil-sen}", .shape = step, .minutes = 180}).fired_at);
}

TEST(LeakPolicy, OnGpuAPercentageIsOfTheGpuAndNeedsNoMemoryMax) {
  auto policy = make("leak", "{metric: gpu, limit: 90%, window: 60s, warmup: 0s, horizon: 30s}");
  ASSERT_TRUE(policy);
  EXPECT_FALSE(policy->needs_memory_max());
  EXPECT_EQ(policy->needs(), policies::kNeedsGpu);
  FakeClock clock;
  WorkerContext worker = worker_at(clock.now());
  Watch watch(*policy, worker);
  Decision fired;
  // 10 MiB/s from 100 MiB on a 1 GiB GPU: 90% (921.6 MiB) is ~82 s away.
  for (int s = 0; s <= 120 && !fired; ++s) {
    Sample sample;
    sample.t = clock.now();
    sample.gpu = 100_MiB + static_cast<uint64_t>(s) * 10_MiB;
    sample.gpu_capacity = 1_GiB;
    fired = watch(sample);
    clock.advance(1s);
  }
  ASSERT_TRUE(fired);
  EXPECT_THAT(fired.reason, ::testing::HasSubstr("of 921.6 MiB (90% of 1 GiB)"));
}

}  // namespace
}  // namespace recycler::testing
