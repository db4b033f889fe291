// The leak policy on the shapes a worker's memory takes: leaks (steady, slow,
// accelerating, riding a sawtooth, per iteration on the device) fire with at
// least half the horizon to spare, a fast clean one as early as the evidence
// allows; steps per iteration, marked or seen in the samples, fire before
// the step that would cross; a healthy sawtooth, a warm-up ramp, a one-off
// step, steps that stop, noise and outliers on a plateau do not; epochs as
// long as the window are compared at like phases, window over window, and
// heavy noise keeps a margin under the limit. The same
// shapes as the trace corpus (tests/fixtures/traces, replayed by
// replay_corpus_test), generated here in memory, under the defaults and
// under the corpus's config.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <memory>
#include <random>
#include <regex>

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

// Seed 001's decode loop (as tests/fixtures/traces/make_traces.py has it):
// the weights load, then iteration k (from 1) starts at first + (k - 1) *
// period, waits `prep` seconds, and decodes for `decode` seconds: its compile
// cache (`kept`) stays for good, its activations (a half sine) go. With
// `steps`, only the first that many iterations compile anything new.
struct DecodeLoop {
  double weights, first, period, prep, decode, activations, kept;
  std::optional<int> steps;

  std::optional<uint64_t> iteration(double t) const {
    if (t < first) return std::nullopt;
    return static_cast<uint64_t>(std::floor((t - first) / period)) + 1;
  }
  double decode_start(uint64_t k) const {
    return first + static_cast<double>(k - 1) * period + prep;
  }
  double operator()(double t) const {
    double load = weights * (1 - std::exp(-t / 15));
    auto k = iteration(t);
    if (!k) return load;
    double phase = std::fmod(t - first, period) - prep;
    double compiled = static_cast<double>(phase >= 0 ? *k : *k - 1);
    if (steps) compiled = std::min(compiled, static_cast<double>(*steps));
    double working =
        phase >= 0 && phase < decode ? activations * std::sin(M_PI * phase / decode) : 0;
    return load + compiled * kept + working;
  }
};

// The seed as it happened: 8.4 GiB of weights, 3.7 GiB kept and a 16.7 GiB
// peak per decode, 5-minute iterations from 2 min on (the weights loaded);
// against 30 GiB, the third crosses. Samples every 10 s catch each peak.
constexpr DecodeLoop kSeed001{8.4 * kGiB, 120, 300, 60, 140, 13 * kGiB, 3.7 * kGiB, std::nullopt};
// More and smaller steps: 2.5 GiB kept, 7.5 GiB of activations every 4 min;
// the sixth decode crosses 30 GiB.
constexpr DecodeLoop kStairs{8 * kGiB, 60, 240, 60, 90, 7.5 * kGiB, 2.5 * kGiB, std::nullopt};

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
  // The iteration the worker reports at t, if it marks them.
  std::function<std::optional<uint64_t>(double t)> iteration = nullptr;
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
    if (r.iteration) s.iteration = r.iteration(t);
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
  EXPECT_EQ(policy->needs(), policies::kNeedsCgroupMemory | policies::kNeedsIterations);
  EXPECT_TRUE(policy->needs_memory_max());
  EXPECT_TRUE(policy->may_loop());
  WorkerContext worker = worker_at({});
  worker.memory_max = 4_GiB;
  EXPECT_EQ(policy->fast_threshold(worker), std::nullopt) << "nothing for the kernel to watch";
}

TEST(LeakPolicy, NeedsFollowTheMetricAndIterationsAreReadToo) {
  using policies::kNeedsIterations;
  EXPECT_EQ(make("leak", "{metric: device}")->needs(), policies::kNeedsDevice | kNeedsIterations);
  EXPECT_EQ(make("leak", "{metric: uss}")->needs(),
            policies::kNeedsProcessMemory | policies::kNeedsProcesses | kNeedsIterations);
  EXPECT_EQ(make("leak", "{metric: file}")->needs(),
            policies::kNeedsCgroupMemory | kNeedsIterations);
  EXPECT_EQ(make("leak", "{estimator: least-squares}")->needs(), policies::kNeedsCgroupMemory)
      << "the baseline is the estimator as it was";
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
  EXPECT_THAT(fire("{horizon: 20m, limit: 2899102924B}").decision.reason,
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
  // A clean line: as soon as the buckets after the 2m warm-up span more than
  // a third of the 10m window (24 of them), at a bucket's close.
  EXPECT_GE(*o.growing_at, 2 * kMinute + 200);
  EXPECT_LE(*o.growing_at, 2 * kMinute + 24 * kStep + kStep);
  EXPECT_LT(*o.growing_at, *o.fired_at);
  EXPECT_NEAR(o.outlook->slope, kSlope, kSlope * 1e-6);
  // The top of the window is the sample at growing_at.
  EXPECT_NEAR(o.outlook->predicted_s, 20 * kMinute + 905 - *o.growing_at, 0.01);
  EXPECT_GT(o.outlook->predicted_s, 20 * kMinute);
  EXPECT_THAT(o.outlook->summary, ::testing::StartsWith("anon +38 MiB/min over 3m45s, "));
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

TEST(LeakPolicy, NothingFiresDuringTheWarmupNorBeforeAThirdOfAWindowAfterIt) {
  // Already at 85% of the limit and climbing 200 MiB/min: over it in 3 min.
  // A healthy cycle may last a third of the window (3 min): 24 of its 64
  // buckets (8.4 s each) after the warm-up, more than that whatever the
  // samples' alignment, and then at once.
  Outcome o = run({.yaml = "{warmup: 3m, window: 9m}",
                   .shape = [](double t) { return 0.85 * kLimit + 200 * kMiB * t / kMinute; },
                   .minutes = 30});
  ASSERT_TRUE(o.fired_at);
  EXPECT_GE(*o.fired_at, 3 * kMinute + 3 * kMinute);
  EXPECT_LE(*o.fired_at, 3 * kMinute + 25 * 8.4375 + 10) << "then at once";
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

// --- Deciding early --------------------------------------------------------------

// Issue 14: 150 MiB growing 30 MiB/min (+-2 MiB) toward a 460 MiB limit (at
// 620 s), sampled every second, `window: 10m, warmup: 2m, horizon: 5m`.
Run fast_leak(const std::string& extra = "") {
  auto noise = std::make_shared<Noise>(11);
  return {.yaml = "{window: 10m, warmup: 2m, horizon: 5m, limit: 460MiB" + extra + "}",
          .shape =
              [noise](double t) {
                return 150 * kMiB + 30 * kMiB * t / kMinute + 2 * kMiB * (*noise)();
              },
          .minutes = 12,
          .step = 1,
          .memory_max = 512_MiB,
          .limit = 460 * kMiB};
}

TEST(LeakPolicyEarly, AFastCleanLeakFiresWithHalfItsHorizonToSpare) {
  Outcome o = run(fast_leak());
  ASSERT_TRUE(o.lead());
  EXPECT_GE(*o.lead(), 5 * kMinute / 2);
  EXPECT_LE(*o.fired_at, 2 * kMinute + 4 * kMinute) << "long before two thirds of the window";
  EXPECT_THAT(o.decision.reason, ::testing::StartsWith("anon +30"));
  EXPECT_THAT(o.decision.reason, HasSubstr(" MiB/min over 3m45s, "));
  EXPECT_THAT(o.decision.reason, HasSubstr(" of 460 MiB, limit in "));
}

TEST(LeakPolicyEarly, TheBaselineStillWaitsForTwoThirdsOfTheWindow) {
  // The figures: it fires at 516 s, 104 s before the limit.
  Outcome o = run(fast_leak(", estimator: least-squares"));
  ASSERT_TRUE(o.fired_at);
  EXPECT_NEAR(*o.fired_at, 516, 1);
}

TEST(LeakPolicyEarly, NoisierGrowthWaitsForMoreEvidence) {
  // The same 30 MiB/min far from the limit, clean or under +-150 MiB of noise.
  auto growing_at = [](double noise_mib) {
    Noise noise(12);
    return run({.yaml = "{window: 10m, warmup: 2m}",
                .shape =
                    [&](double t) {
                      return 1 * kGiB + 30 * kMiB * t / kMinute + noise_mib * kMiB * noise();
                    },
                .minutes = 30,
                .step = 1})
        .growing_at;
  };
  auto clean = growing_at(2), noisy = growing_at(150);
  ASSERT_TRUE(clean && noisy);
  EXPECT_LT(*clean, 2 * kMinute + 4 * kMinute);
  EXPECT_GT(*noisy, *clean + 30) << "more buckets before the rise stands out of the noise";
}

TEST(LeakPolicyEarly, ASawtoothRisingForAThirdOfTheWindowIsNotALeakWhateverItsPhase) {
  // A 200 s cycle that rises all the way (a third of the 10m window), to 85%
  // of the limit: its rise alone would reach the limit within the horizon.
  for (double offset = 0; offset < 200; offset += 25) {
    Shape saw = [&](double t) {
      return startup(t, 0.65 * kLimit) + cycle(t + offset, 200, 200, 0.2 * kLimit);
    };
    Outcome o = run({.yaml = "", .shape = saw, .minutes = 60, .step = 5});
    EXPECT_FALSE(o.fired_at) << "offset " << offset << " s: " << o.decision.reason;
    EXPECT_FALSE(o.growing_at) << "offset " << offset << " s: " << o.outlook->summary;
  }
}

TEST(LeakPolicyEarly, AStepJustAfterTheWarmupIsNotALeak) {
  // Half the limit, then +30% of it within 40 s at 3 min.
  Noise noise(13);
  Outcome o = run({.yaml = "",
                   .shape =
                       [&](double t) {
                         return startup(t, 0.5 * kLimit) +
                                0.3 * kLimit * std::clamp((t - 180) / 40, 0.0, 1.0) +
                                6 * kMiB * noise();
                       },
                   .minutes = 60});
  EXPECT_FALSE(o.fired_at) << o.decision.reason;
  EXPECT_FALSE(o.growing_at) << o.outlook->summary;
}

TEST(LeakPolicyEarly, ACacheFillingForThreeMinutesIsNotALeak) {
  // Half the limit; from 4 min a cache fills +30% of it in 3 min, then stays.
  // While it fills, the data since the warm-up is flat, then a ramp steep
  // enough to reach the limit within the horizon.
  Noise noise(15);
  Outcome o = run({.yaml = "",
                   .shape =
                       [&](double t) {
                         return startup(t, 0.5 * kLimit) +
                                0.3 * kLimit * std::clamp((t - 240) / 180, 0.0, 1.0) +
                                6 * kMiB * noise();
                       },
                   .minutes = 60});
  EXPECT_FALSE(o.fired_at) << o.decision.reason;
}

TEST(LeakPolicyEarly, AWarmupRampStillSettlingAfterTheWarmupIsNotALeak) {
  // Caches filling with a 3-minute time constant, well past the 2m warm-up,
  // to 85% of the limit: early on, as steep as a leak that would get there.
  Noise noise(14);
  Outcome o = run({.yaml = "",
                   .shape =
                       [&](double t) {
                         return startup(t, 0.5 * kLimit) +
                                0.35 * kLimit * (1 - std::exp(-t / 180)) + 6 * kMiB * noise();
                       },
                   .minutes = 60});
  EXPECT_FALSE(o.fired_at) << o.decision.reason;
}

// --- Steps per iteration ----------------------------------------------------------

Run seed001(const DecodeLoop& loop, const std::string& yaml, double minutes, bool marked = true) {
  return {.yaml = yaml,
          .shape = loop,
          .minutes = minutes,
          .memory_max = std::nullopt,
          .device = true,
          .limit = 30 * kGiB,
          .iteration =
              marked ? std::function([loop](double t) { return loop.iteration(t); }) : nullptr};
}

TEST(LeakPolicySteps, ASteadyStepPerIterationFiresAtTheBoundaryBeforeTheStepThatWouldCross) {
  // The boundary of iteration 3, at 660 s: two steps of 3.7 GiB seen, and
  // the second iteration peaked at 28.8 GiB. No slope over minutes sees it.
  Outcome o = run(seed001(kSeed001, "{metric: device, limit: 30GiB, action: checkpoint}", 20));
  ASSERT_TRUE(o.fired_at && o.crosses_at);
  EXPECT_EQ(*o.fired_at, kSeed001.first + 2 * kSeed001.period);
  EXPECT_LT(*o.crosses_at, kSeed001.first + 3 * kSeed001.period) << "in iteration 3";
  EXPECT_EQ(o.decision.action, Decision::Action::Checkpoint);
  EXPECT_EQ(o.decision.reason,
            "device 28.8 GiB (the last iteration's peak) + 3.7 GiB per iteration would cross "
            "limit 30 GiB in iteration 3");
  ASSERT_TRUE(o.decision.predicted_s);
  EXPECT_EQ(*o.decision.predicted_s, kSeed001.period) << "by the end of that iteration";
}

TEST(LeakPolicySteps, BoundariesCountDuringTheWarmup) {
  // The same loop at ten times the pace: it crosses within a 5m warm-up.
  DecodeLoop fast = kSeed001;
  fast.period = 30, fast.prep = 6, fast.decode = 14;
  Outcome o = run({.yaml = "{metric: device, limit: 30GiB, warmup: 5m}",
                   .shape = fast,
                   .minutes = 4,
                   .step = 1,
                   .memory_max = std::nullopt,
                   .device = true,
                   .limit = 30 * kGiB,
                   .iteration = [&](double t) { return fast.iteration(t); }});
  ASSERT_TRUE(o.fired_at && o.crosses_at);
  EXPECT_EQ(*o.fired_at, fast.first + 2 * fast.period);
  EXPECT_LT(*o.fired_at, fast.decode_start(3));
}

TEST(LeakPolicySteps, OneStepIsNotATrend) {
  // Against 28 GiB the second iteration already crosses (25.1 GiB + 3.7): a
  // first iteration's one-off compile looks the same, so nothing fires at
  // its boundary.
  struct Run r = seed001(kSeed001, "{metric: device, limit: 28GiB}", 20);
  r.limit = 28 * kGiB;
  Outcome o = run(r);
  ASSERT_TRUE(o.crosses_at);
  EXPECT_GT(*o.crosses_at, kSeed001.first + kSeed001.period);
  EXPECT_FALSE(o.fired_at && *o.fired_at < *o.crosses_at) << o.decision.reason;
}

TEST(LeakPolicySteps, StepsThatStoppedDoNotFireOnALargerIteration) {
  // Three steps, then every shape is compiled: the level stays at 19.5 GiB.
  // Iteration 4, the first without a step, decodes a longer video (2 GiB
  // more activations, a 34.5 GiB peak): one more 3.7 GiB step after it would
  // cross 37 GiB, and three of the last four steps were that; but the last
  // one was none: not steady.
  DecodeLoop loop = kSeed001;
  loop.steps = 3;
  struct Run r = seed001(loop, "{metric: device, limit: 37GiB}", 60);
  r.shape = [loop](double t) {
    double phase = t - loop.decode_start(4);
    return loop(t) + (phase >= 0 && phase < loop.decode
                          ? 2 * kGiB * std::sin(M_PI * phase / loop.decode)
                          : 0);
  };
  r.limit = 37 * kGiB;
  Outcome o = run(r);
  EXPECT_FALSE(o.crosses_at);
  EXPECT_FALSE(o.fired_at) << o.decision.reason;
}

// (t, device bytes, iteration) samples, to a leak policy on `metric: device`.
struct Marked {
  double t;
  double gib;
  std::optional<uint64_t> iteration;
};
std::vector<Decision> feed(const std::string& yaml, const std::vector<Marked>& samples) {
  std::vector<Decision> out;
  auto policy = make("leak", yaml);
  if (!policy) return out;
  WorkerContext worker = worker_at(FakeClock().now());
  Watch watch(*policy, worker);
  for (const Marked& m : samples) {
    Sample s;
    s.t = at(worker, m.t);
    s.device = static_cast<uint64_t>(m.gib * kGiB);
    s.iteration = m.iteration;
    out.push_back(watch(s));
  }
  return out;
}

TEST(LeakPolicySteps, TheLevelAtABoundaryIsTheLowerOfTheValuesAroundIt) {
  // The worker reports its level with each boundary (at 10, 20, 30 s: 10,
  // 12, 14 GiB), but the sample before each is still in the last
  // iteration's working set: the steps are 2 GiB, not 22 - 10.
  auto d = feed("{metric: device, limit: 28GiB}", {{0, 10, std::nullopt},
                                                   {9, 22, std::nullopt},
                                                   {10, 10, 1},
                                                   {19, 24, 1},
                                                   {20, 12, 2},
                                                   {29, 26, 2},
                                                   {30, 14, 3}});
  ASSERT_EQ(d.size(), 7u);
  EXPECT_FALSE(d[4]) << "one step is not enough";
  ASSERT_TRUE(d[6]);
  EXPECT_EQ(d[6].reason,
            "device 26 GiB (the last iteration's peak) + 2 GiB per iteration would cross limit 28 "
            "GiB in iteration 3");
  // The other way round: the sample at the boundary already holds the new
  // iteration's working set (sampled late); the one before is the level.
  d = feed(
      "{metric: device, limit: 24GiB}",
      {{0, 10, std::nullopt}, {10, 20, 1}, {15, 12, 1}, {20, 22, 2}, {25, 14, 2}, {30, 24, 3}});
  ASSERT_TRUE(d.back());
  EXPECT_EQ(d.back().reason,
            "device 22 GiB (the last iteration's peak) + 2 GiB per iteration would cross limit 24 "
            "GiB in iteration 3");
}

TEST(LeakPolicySteps, UnsteadyStepsDoNotFire) {
  // Steps of 1 and 4 GiB (each iteration ends at its new level): the
  // smallest is not half the largest.
  auto d = feed(
      "{metric: device, limit: 28GiB}",
      {{0, 10, 1}, {8, 11, 1}, {10, 11, 2}, {15, 27, 2}, {18, 15, 2}, {20, 15, 3}, {25, 15, 3}});
  for (const Decision& x : d) EXPECT_FALSE(x) << x.reason;
  // Steady steps to the same level fire, from the boundary on.
  d = feed("{metric: device, limit: 28GiB}", {{0, 10, 1},
                                              {8, 12.5, 1},
                                              {10, 12.5, 2},
                                              {15, 27, 2},
                                              {18, 15, 2},
                                              {20, 15, 3},
                                              {25, 15, 3}});
  EXPECT_FALSE(d[4]);
  EXPECT_TRUE(d[5] && d[6]) << "from the boundary on, until the next one";
}

TEST(LeakPolicySteps, StepsSlowerThanMinSlopeAreIgnored) {
  // 2 GiB per day-long iteration: 1.4 MiB/min.
  const std::vector<Marked> days = {{0, 20, 1},     {86000, 22, 1},  {86400, 22, 2},
                                    {86450, 29, 2}, {172000, 24, 2}, {172800, 24, 3}};
  auto d = feed("{metric: device, limit: 30GiB, min_slope: 2MiB/min}", days);
  EXPECT_FALSE(d.back()) << d.back().reason;
  d = feed("{metric: device, limit: 30GiB, min_slope: 1MiB/min}", days);
  EXPECT_TRUE(d.back());
}

TEST(LeakPolicySteps, TheBaselineIgnoresIterations) {
  // With the corpus's half-hour window, no trend before 25 min: too late.
  std::string yaml = std::string(kCorpus).insert(1, "metric: device, limit: 30GiB, ");
  Outcome robust = run(seed001(kSeed001, yaml, 20));
  ASSERT_TRUE(robust.fired_at && robust.crosses_at);
  EXPECT_LT(*robust.fired_at, *robust.crosses_at);
  Outcome naive = run(seed001(kSeed001, yaml.insert(1, "estimator: least-squares, "), 20));
  EXPECT_FALSE(naive.fired_at) << naive.decision.reason;
}

// --- Steps seen in the samples ----------------------------------------------------

TEST(LeakPolicySteps, AStaircaseWithoutMarksFiresOneRiserAhead) {
  // The corpus's config: no trend before 25 min; the sixth decode crosses at
  // about 22 min, and four risers come after the 5m warm-up.
  Outcome o = run(seed001(kStairs, std::string(kCorpus).insert(1, "metric: device, limit: 30GiB, "),
                          30, false));
  ASSERT_TRUE(o.fired_at && o.crosses_at);
  EXPECT_LT(*o.fired_at, kStairs.decode_start(6));
  EXPECT_GT(*o.crosses_at, kStairs.decode_start(6));
  EXPECT_THAT(o.decision.reason, HasSubstr(" (the last step's peak) + 2.5 GiB per step (every "));
  EXPECT_THAT(o.decision.reason, HasSubstr(") would cross limit 30 GiB at the next step"));
}

TEST(LeakPolicySteps, AStaircaseThatStoppedDoesNotFireOnALargerBump) {
  // Four steps, then none; iteration 9 (long after) has 3 GiB more activations,
  // a 28.5 GiB peak that one more riser would take over the limit.
  DecodeLoop loop = kStairs;
  loop.steps = 4;
  struct Run r =
      seed001(loop, std::string(kCorpus).insert(1, "metric: device, limit: 30GiB, "), 120, false);
  r.shape = [loop](double t) {
    double phase = t - loop.decode_start(9);
    return loop(t) + (phase >= 0 && phase < loop.decode
                          ? 3 * kGiB * std::sin(M_PI * phase / loop.decode)
                          : 0);
  };
  Outcome o = run(r);
  EXPECT_FALSE(o.crosses_at);
  EXPECT_FALSE(o.fired_at) << o.decision.reason;
}

// --- Epochs as long as the window, heavy noise (issue 28) -------------------------

// The policy's own window and warm-up, a 5-minute horizon: an epoch as long
// as the window is one cycle in it.
constexpr char kShort[] = "{window: 10m, warmup: 2m, horizon: 5m}";

// Gaussian noise of standard deviation 1 (Box-Muller on Noise's draws).
class Gaussian {
 public:
  explicit Gaussian(uint64_t seed) : uniform_(seed) {}
  double operator()() {
    const double u = (1 - uniform_()) / 2;  // (0, 1]
    const double v = (uniform_() + 1) / 2;
    return std::sqrt(-2 * std::log(u)) * std::cos(2 * M_PI * v);
  }

 private:
  Noise uniform_;
};

// 10-minute epochs from `level`: validation takes 100 MiB (within 20 s) for
// the last 2 minutes of each and frees it at the epoch's end but for `kept`,
// for the first `keeping` epochs; Gaussian noise of 6 MiB.
Shape window_epochs(double level, double kept, uint64_t seed, double keeping = 1e9) {
  auto noise = std::make_shared<Gaussian>(seed);
  return [=](double t) {
    const double phase = std::fmod(t, 600);
    const double validation = 100 * kMiB * std::clamp((phase - 480) / 20, 0.0, 1.0);
    return startup(t, level) + kept * std::min(std::floor(t / 600), keeping) + validation +
           6 * kMiB * (*noise)();
  };
}

TEST(LeakPolicyWindows, AnEpochAsLongAsTheWindowKeeping30MiBFiresAtLikePhases) {
  // The ninth bump crosses the limit, the eighth peaks ~20 MiB under it:
  // each bump's like phase a window later, 30 MiB higher, crosses.
  Outcome o =
      run({.yaml = kShort, .shape = window_epochs(3.275 * kGiB, 30 * kMiB, 21), .minutes = 120});
  ASSERT_TRUE(o.lead()) << "it fired: " << o.fired_at.has_value();
  EXPECT_GE(*o.lead(), 5 * kMinute / 2);
  EXPECT_LE(*o.lead(), 5 * kMinute + 30) << "a like phase, not a slope from the bump";
  EXPECT_GE(*o.fired_at, 80 * kMinute) << "after the eighth bump";
  EXPECT_THAT(o.decision.reason,
              ::testing::ContainsRegex("^anon \\+(2\\.9|3\\.0)[0-9]* MiB/min over 50m "
                                       "\\(\\+(29|30)\\.[0-9]* MiB a window at like "
                                       "phases\\), 3\\.5[0-9]* GiB of 3\\.6 GiB "));
  EXPECT_NEAR(*o.decision.predicted_s, 5 * kMinute, 10);
}

TEST(LeakPolicyWindows, TheSameEpochsKeepingNothingDoNotFire) {
  // Peaks ~45 MiB under the limit for two and a half hours.
  Outcome o = run({.yaml = kShort, .shape = window_epochs(3.45 * kGiB, 0, 22), .minutes = 150});
  EXPECT_FALSE(o.crosses_at);
  EXPECT_FALSE(o.fired_at) << o.decision.reason;
}

TEST(LeakPolicyWindows, ACacheThatFillsForFiveEpochsThenStopsDoesNotFire) {
  // Troughs rise 30 MiB an epoch, as the leak's, then stay: peaks end ~57
  // MiB under the limit. Seen growing while it fills, then not.
  Outcome o =
      run({.yaml = kShort, .shape = window_epochs(3.3 * kGiB, 30 * kMiB, 23, 5), .minutes = 150});
  EXPECT_FALSE(o.crosses_at);
  EXPECT_FALSE(o.fired_at) << o.decision.reason;
  ASSERT_TRUE(o.growing_at);
  EXPECT_THAT(o.outlook->summary, HasSubstr(" a window at like phases)"));
  EXPECT_FALSE(o.growing_at_end);
}

TEST(LeakPolicyWindows, AStepTakenOnceIsNotGrowthWindowOverWindow) {
  // A second model (+450 MiB within 40 s) halfway through the second window
  // after the warm-up: the windows' means rise 225 MiB twice, steadily, but
  // their lows only once. One step more would cross the limit.
  Noise noise(25);
  Outcome o = run({.yaml = kShort,
                   .shape =
                       [&](double t) {
                         return startup(t, 3.05 * kGiB) +
                                450 * kMiB * std::clamp((t - 17 * kMinute) / 40, 0.0, 1.0) +
                                6 * kMiB * noise();
                       },
                   .minutes = 90});
  EXPECT_FALSE(o.crosses_at);
  EXPECT_FALSE(o.fired_at) << o.decision.reason;
}

TEST(LeakPolicyWindows, AValidationBumpRightAfterTheWarmupIsNotAcceleration) {
  // The first bump comes as the envelopes take over, the start-up still
  // settling under it (28 MiB short at the warm-up's end): no faster growth
  // than the settling's, 3 MiB/min at most (without the check, draws 76, 121
  // and 197 fire at the bump).
  auto policy = make("leak", kShort);
  WorkerContext worker = worker_at({});
  worker.memory_max = 4_GiB;
  for (uint64_t seed = 1; seed <= 200; ++seed) {
    Watch watch(*policy, worker);
    Shape shape = window_epochs(3.45 * kGiB, 0, seed);
    double fastest = 0;
    for (double t = 0; t <= 15 * kMinute; t += 10) {
      Sample s;
      s.t = at(worker, t);
      s.anon = static_cast<uint64_t>(shape(t));
      EXPECT_FALSE(watch(s)) << "seed " << seed << " at " << t;
      if (const Outlook* o = watch.outlook()) fastest = std::max(fastest, o->slope);
    }
    EXPECT_LT(fastest * kMinute, 5 * kMiB) << "seed " << seed << ": not the bump's 100 MiB in 20 s";
  }
}

// From 3.2 GiB, +6 MiB/min after the warm-up, Gaussian noise of `sigma`.
Shape noisy_leak(double sigma, uint64_t seed, double rate = 6 * kMiB) {
  auto noise = std::make_shared<Gaussian>(seed);
  return [=](double t) {
    return startup(t, 3.2 * kGiB) + rate * std::max(0.0, t - 120) / kMinute + sigma * (*noise)();
  };
}

TEST(LeakPolicyNoise, AHeavilyNoisyLeakFiresBeforeTheFirstNoisySampleCrosses) {
  // sigma 25 MiB around 6 MiB/min: the first sample over the limit comes
  // minutes before the line crosses it.
  for (uint64_t seed = 1; seed <= 5; ++seed) {
    Outcome o = run({.yaml = kShort, .shape = noisy_leak(25 * kMiB, seed), .minutes = 120});
    ASSERT_TRUE(o.lead()) << "seed " << seed;
    EXPECT_GE(*o.lead(), 5 * kMinute / 2) << "seed " << seed << ": " << o.decision.reason;
  }
}

TEST(LeakPolicyNoise, TheMarginIsThreeSigmaOfTheNoise) {
  for (double sigma : {12.0, 25.0}) {
    Outcome o = run({.yaml = kShort, .shape = noisy_leak(sigma * kMiB, 1), .minutes = 120});
    ASSERT_TRUE(o.fired_at);
    std::smatch m;
    ASSERT_TRUE(std::regex_search(o.decision.reason, m,
                                  std::regex(" \\+ ([0-9.]+) MiB \\(3 sigma of noise\\) of ")))
        << o.decision.reason;
    EXPECT_NEAR(std::stod(m[1]), 3 * sigma, 0.6 * sigma) << o.decision.reason;
  }
}

TEST(LeakPolicyNoise, HeavyNoiseOnAFlatPlateauDoesNotFire) {
  // sigma 25 MiB around 3.47 GiB, 133 MiB (5.3 sigma) under the limit.
  for (uint64_t seed = 1; seed <= 5; ++seed) {
    Outcome o = run({.yaml = kShort, .shape = noisy_leak(25 * kMiB, seed, 0), .minutes = 150});
    EXPECT_FALSE(o.fired_at) << "seed " << seed << ": " << o.decision.reason;
  }
}

TEST(LeakPolicyNoise, TheBaselineKeepsNoMargin) {
  Outcome o = run({.yaml = "{window: 10m, warmup: 2m, horizon: 5m, estimator: least-squares}",
                   .shape = noisy_leak(25 * kMiB, 1),
                   .minutes = 120});
  ASSERT_TRUE(o.fired_at);
  EXPECT_THAT(o.decision.reason, Not(HasSubstr("sigma")));
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
  EXPECT_TRUE(policy->needs() & policies::kNeedsGpu);
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
