// The trend estimators and helpers: exact lines, outliers, gaps, degenerate
// input; envelopes of sawtooths and steps; steady steps; the bucketed window
// and the noise it measures; the lows and means of consecutive spans.
#include "policies/trend.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <random>

namespace recycler::policies {
namespace {

using ::testing::ElementsAre;

std::vector<Point> line(double slope, double intercept, int n, double dt = 10) {
  std::vector<Point> out;
  for (int i = 0; i < n; ++i) out.push_back({i * dt, intercept + slope * i * dt});
  return out;
}

std::vector<double> values(const std::vector<Point>& points) {
  std::vector<double> out;
  for (const Point& p : points) out.push_back(p.v);
  return out;
}

TEST(Trend, BothRecoverAnExactLine) {
  auto pts = line(3.5, 100, 40);
  EXPECT_DOUBLE_EQ(*theil_sen(pts), 3.5);
  EXPECT_NEAR(*least_squares(pts), 3.5, 1e-9);
}

TEST(Trend, TheilSenIgnoresAlmostThirtyPercentOfWildPointsLeastSquaresDoesNot) {
  auto pts = line(2.0, 0, 70);
  // Two points in every seven (28.6%) are wild, and wilder as time goes on.
  for (size_t i = 0; i < pts.size(); ++i)
    if (i % 7 == 2 || i % 7 == 5) pts[i].v += 5000 + 100.0 * static_cast<double>(i);
  EXPECT_NEAR(*theil_sen(pts), 2.0, 1e-9);
  EXPECT_GT(std::abs(*least_squares(pts) - 2.0), 1) << "the baseline is pulled by the spikes";
}

TEST(Trend, TheilSenIgnoresOutliersOnBothSides) {
  auto pts = line(-1.0, 1000, 60);
  for (size_t i = 0; i < pts.size(); i += 5) pts[i].v += i % 2 == 0 ? 800 : -800;
  EXPECT_NEAR(*theil_sen(pts), -1.0, 0.05);
}

TEST(Trend, GapsAndIrregularSpacingDoNotBiasTheSlope) {
  std::vector<Point> pts;
  for (double t : {0.0, 1.0, 2.5, 3.0, 50.0, 51.0, 200.0, 200.5, 400.0})
    pts.push_back({t, 7 + 1.25 * t});
  EXPECT_DOUBLE_EQ(*theil_sen(pts), 1.25);
  EXPECT_NEAR(*least_squares(pts), 1.25, 1e-9);
}

TEST(Trend, OrderDoesNotMatterAndPairsAtTheSameTimeAreSkipped) {
  std::vector<Point> pts{{30, 60}, {0, 0}, {10, 20}, {10, 20}, {20, 40}, {20, 40}};
  EXPECT_DOUBLE_EQ(*theil_sen(pts), 2.0);
  EXPECT_NEAR(*least_squares(pts), 2.0, 1e-9);
}

TEST(Trend, TooFewDistinctTimesGiveNoSlope) {
  EXPECT_FALSE(theil_sen(std::vector<Point>{}));
  EXPECT_FALSE(theil_sen(std::vector<Point>{{5, 1}}));
  EXPECT_FALSE(theil_sen(std::vector<Point>{{5, 1}, {5, 9}}));
  EXPECT_FALSE(least_squares(std::vector<Point>{}));
  EXPECT_FALSE(least_squares(std::vector<Point>{{5, 1}, {5, 9}}));
}

TEST(Trend, AConstantSeriesHasSlopeZero) {
  auto pts = line(0, 42, 10);
  EXPECT_DOUBLE_EQ(*theil_sen(pts), 0.0);
  EXPECT_DOUBLE_EQ(*least_squares(pts), 0.0);
}

TEST(Trend, TheilSenReusesItsScratch) {
  std::vector<double> scratch;
  EXPECT_DOUBLE_EQ(*theil_sen(line(1, 0, 20), scratch), 1.0);
  EXPECT_DOUBLE_EQ(*theil_sen(line(-3, 0, 5), scratch), -3.0) << "the last call's slopes are gone";
}

TEST(Trend, RiseComparesTheMediansOfTheFirstAndLastQuarters) {
  // Quarters of two points: medians 1.5 and 10.5.
  std::vector<Point> pts{{0, 1}, {1, 2}, {2, 5}, {3, 6}, {4, 7}, {5, 8}, {6, 10}, {7, 11}};
  EXPECT_DOUBLE_EQ(*rise(pts), 9.0);
}

TEST(Trend, RiseIsNotDecidedByAStrayEndPoint) {
  auto pts = line(1, 0, 40);
  pts.back().v = -1000;
  pts.front().v = 5000;
  // Each stray moves its quarter's median by one rank, not by its size.
  EXPECT_DOUBLE_EQ(*rise(pts), 335 - 55);
}

TEST(Trend, RiseOfOneOrNoPoint) {
  EXPECT_DOUBLE_EQ(*rise(std::vector<Point>{{3, 7}}), 0.0);
  EXPECT_FALSE(rise(std::vector<Point>{}));
}

TEST(Trend, LargestJumpOfAStepIsItsHeight) {
  std::vector<Point> pts;
  for (int i = 0; i < 30; ++i) pts.push_back({i * 10.0, i < 15 ? 100.0 : 400.0});
  EXPECT_DOUBLE_EQ(largest_jump(pts, 20), 300);
}

TEST(Trend, LargestJumpOfALineIsItsSlopeTimesTheSpan) {
  EXPECT_DOUBLE_EQ(largest_jump(line(2, 0, 30), 45), 80) << "4 steps of 10 s fit in 45 s";
  EXPECT_DOUBLE_EQ(largest_jump(line(-2, 0, 30), 45), 0) << "a fall is no jump";
}

TEST(Trend, LargestJumpCountsTimeNotPoints) {
  std::vector<Point> pts{{0, 0}, {100, 50}, {101, 51}, {300, 60}};
  EXPECT_DOUBLE_EQ(largest_jump(pts, 10), 1);
  EXPECT_DOUBLE_EQ(largest_jump(pts, 100), 50) << "0 to 101 is more than 100 s";
}

TEST(Trend, LargestFallIsTheDeepestDropFromAnEarlierHigh) {
  EXPECT_DOUBLE_EQ(largest_fall(line(2, 0, 30)), 0) << "a rise never falls";
  EXPECT_DOUBLE_EQ(largest_fall(line(-2, 0, 30)), 580);
  std::vector<Point> saw;  // a 30-deep sawtooth rising 1 a point: 33 -> 4, 37 -> 8, ...
  for (int i = 0; i < 24; ++i) saw.push_back({i * 10.0, (i % 4) * 10.0 + i});
  EXPECT_DOUBLE_EQ(largest_fall(saw), 29);
  EXPECT_DOUBLE_EQ(largest_fall(std::vector<Point>{}), 0);
}

TEST(Trend, EnvelopesOfASawtoothAreItsTroughsAndPeaks) {
  // Period 40 s, sampled every 10 s: 0, 10, 20, 30, 0, 10, ...
  std::vector<Point> pts;
  for (int i = 0; i < 24; ++i) pts.push_back({i * 10.0, (i % 4) * 10.0});
  std::vector<Point> lower, upper;
  lower_envelope(pts, 40, lower);
  upper_envelope(pts, 40, upper);
  ASSERT_EQ(lower.size(), pts.size());
  for (size_t i = 3; i < pts.size(); ++i) {
    EXPECT_EQ(lower[i].v, 0) << "at " << lower[i].t;
    EXPECT_EQ(upper[i].v, 30) << "at " << upper[i].t;
    EXPECT_EQ(lower[i].t, pts[i].t);
  }
}

TEST(Trend, TheLowerEnvelopeOfARiseLagsByTheSpan) {
  std::vector<Point> lower, upper;
  lower_envelope(line(1, 0, 6), 25, lower);
  upper_envelope(line(1, 0, 6), 25, upper);
  EXPECT_THAT(values(lower), ElementsAre(0, 0, 0, 10, 20, 30)) << "(t - 25, t]: 3 points";
  EXPECT_THAT(values(upper), ElementsAre(0, 10, 20, 30, 40, 50));
}

TEST(Trend, EnvelopesSpanTimeNotPoints) {
  std::vector<Point> pts{{0, 5}, {1, 1}, {2, 9}, {100, 7}, {101, 8}};
  std::vector<Point> lower;
  lower_envelope(pts, 10, lower);
  EXPECT_THAT(values(lower), ElementsAre(5, 1, 1, 7, 7)) << "the gap empties the span";
}

// --- find_staircase: floors of buckets 10 s wide, t at each bucket's end ------

std::vector<Point> floors(const std::vector<double>& values) {
  std::vector<Point> out;
  for (size_t i = 0; i < values.size(); ++i)
    out.push_back({(static_cast<double>(i) + 1) * 10, values[i]});
  return out;
}

// `treads` treads of `length` buckets, each `step` above the last from `base`.
std::vector<double> stairs(int treads, int length, double base, double step) {
  std::vector<double> out;
  for (int k = 0; k < treads; ++k)
    for (int i = 0; i < length; ++i) out.push_back(base + k * step);
  return out;
}

// `amplitude` times uniform noise in [-1, 1), the same on every platform.
std::vector<double> noisy(std::vector<double> values, double amplitude, uint64_t seed = 1) {
  std::mt19937_64 gen(seed);
  for (double& v : values) v += amplitude * (static_cast<double>(gen() >> 11) * 0x1.0p-52 - 1);
  return values;
}

std::optional<Staircase> staircase_of(const std::vector<double>& values) {
  std::vector<Point> scratch;
  return find_staircase(floors(values), 10, scratch);
}

TEST(Staircase, IsItsRisersAndTreads) {
  // Treads of 5 buckets at 100, 120, 140, 160: risers at 50, 100 and 150 s.
  auto s = staircase_of(stairs(4, 5, 100, 20));
  ASSERT_TRUE(s);
  EXPECT_DOUBLE_EQ(s->step, 20);
  EXPECT_DOUBLE_EQ(s->spacing, 50);
  EXPECT_DOUBLE_EQ(s->last, 150) << "the current tread began with its first bucket";
  EXPECT_DOUBLE_EQ(s->previous, 100);
  EXPECT_EQ(s->risers, 3u);
}

TEST(Staircase, BumpsAboveTheTreadsAreNotRisers) {
  // Each tread's working set: two buckets 90 above it, right after its riser
  // (the bump is the iteration; the riser is what it keeps).
  std::vector<double> v = stairs(4, 5, 100, 20);
  for (size_t i = 5; i < v.size(); i += 5) v[i] += 90, v[i + 1] += 90;
  auto s = staircase_of(v);
  ASSERT_TRUE(s);
  EXPECT_DOUBLE_EQ(s->step, 20);
  EXPECT_EQ(s->risers, 3u);
}

TEST(Staircase, NeedsTwoRisers) {
  EXPECT_FALSE(staircase_of(stairs(2, 8, 100, 20))) << "one step: a second model loaded";
  EXPECT_TRUE(staircase_of(stairs(3, 5, 100, 20)));
}

TEST(Staircase, ARampIsNotOneCleanOrNoisy) {
  std::vector<double> ramp;
  for (int i = 0; i < 40; ++i) ramp.push_back(100 + 4.0 * i);
  EXPECT_FALSE(staircase_of(ramp));
  for (uint64_t seed = 1; seed <= 20; ++seed)
    EXPECT_FALSE(staircase_of(noisy(ramp, 6, seed))) << "seed " << seed;
}

TEST(Staircase, ASawtoothIsNotOne) {
  std::vector<double> saw;  // ends mid-rise, as a window of it may
  for (int i = 0; i < 43; ++i) saw.push_back(100 + 15.0 * (i % 6));
  EXPECT_FALSE(staircase_of(saw));
}

TEST(Staircase, RisersAreSteep) {
  // Each rise of 30 spread over three buckets (100, 110, 120, 130): a ramp by parts.
  std::vector<double> v = stairs(4, 6, 100, 30);
  for (size_t i = 6; i < v.size(); i += 6) v[i] -= 20, v[i + 1] -= 10;
  EXPECT_FALSE(staircase_of(v));
  // Over two buckets (100, 115, 130): still a riser.
  v = stairs(4, 6, 100, 30);
  for (size_t i = 6; i < v.size(); i += 6) v[i] -= 15;
  EXPECT_TRUE(staircase_of(v));
}

TEST(Staircase, TreadsAreThreeBucketsLongTheCurrentOneToo) {
  EXPECT_FALSE(staircase_of(stairs(4, 2, 100, 20)));
  std::vector<double> v = stairs(3, 5, 100, 20);
  v.push_back(160);
  v.push_back(160);
  EXPECT_FALSE(staircase_of(v)) << "on a riser, or the start of a ramp, for all it can tell";
  v.push_back(160);
  EXPECT_TRUE(staircase_of(v));
}

TEST(Staircase, StepsMustBeSteady) {
  std::vector<double> v = stairs(2, 5, 100, 10);  // 100, 110
  for (double level : {150.0, 160.0}) v.insert(v.end(), 5, level);
  EXPECT_FALSE(staircase_of(v)) << "risers of 10, 40, 10";
  v = stairs(4, 5, 100, 20);
  v.insert(v.end(), 5, 170);
  auto s = staircase_of(v);
  ASSERT_TRUE(s) << "risers of 20, 20, 20, 10: the smallest is half the largest";
  EXPECT_DOUBLE_EQ(s->step, 20);
}

TEST(Staircase, OneThatStoppedIsNone) {
  std::vector<double> v = stairs(4, 5, 100, 20);
  v.insert(v.end(), 5, 160);  // the current tread: 10 buckets, twice the spacing
  EXPECT_TRUE(staircase_of(v));
  v.push_back(160);
  EXPECT_FALSE(staircase_of(v));
}

TEST(Staircase, TreadsThatCreepAreARampNotAStaircase) {
  // Risers of 60 on noisy treads (+-5) that rise 3 a bucket, too little a
  // bucket for a riser, but a third of the whole climb: a ramp with steps.
  std::vector<double> v = noisy(stairs(5, 6, 100, 60), 5);
  EXPECT_TRUE(staircase_of(v));
  for (size_t i = 0; i < v.size(); ++i) v[i] += 3.0 * static_cast<double>(i);
  EXPECT_FALSE(staircase_of(v));
}

TEST(Staircase, RisersStandAboveTheNoise) {
  // Treads with +-5 of noise (bucket minimums): every seed finds the risers
  // of 60, none those of 8 (no more than the noise).
  for (uint64_t seed = 1; seed <= 20; ++seed) {
    auto s = staircase_of(noisy(stairs(5, 6, 100, 60), 5, seed));
    ASSERT_TRUE(s) << "seed " << seed;
    EXPECT_NEAR(s->step, 60, 10) << "seed " << seed;
    EXPECT_EQ(s->risers, 4u) << "seed " << seed;
    EXPECT_FALSE(staircase_of(noisy(stairs(5, 6, 100, 8), 5, seed))) << "seed " << seed;
  }
}

TEST(BucketWindow, KeepsMinMaxAndMeanPerBucket) {
  BucketWindow w(10, 4);
  EXPECT_EQ(w.current(), nullptr);
  EXPECT_TRUE(w.add(1, 5));
  EXPECT_FALSE(w.add(4, 9));
  EXPECT_FALSE(w.add(9.5, 1));
  const BucketWindow::Bucket* b = w.current();
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->index, 0);
  EXPECT_EQ(b->min, 1);
  EXPECT_EQ(b->max, 9);
  EXPECT_DOUBLE_EQ(b->mean(), 5);
  EXPECT_DOUBLE_EQ(b->mean_t(), 14.5 / 3);
  EXPECT_EQ(b->samples, 3u);
}

TEST(BucketWindow, ANewBucketClosesTheCurrentOne) {
  BucketWindow w(10, 4);
  w.add(1, 5);
  std::vector<BucketWindow::Bucket> closed;
  w.closed(closed);
  EXPECT_TRUE(closed.empty()) << "the current bucket is still filling";
  EXPECT_TRUE(w.add(12, 7));
  w.closed(closed);
  ASSERT_EQ(closed.size(), 1u);
  EXPECT_EQ(closed[0].index, 0);
  EXPECT_EQ(w.current()->index, 1);
}

TEST(BucketWindow, SlidesKeepingTheLastClosedBuckets) {
  BucketWindow w(10, 4);
  for (int t = 0; t < 1000; t += 5) w.add(t, t);
  std::vector<BucketWindow::Bucket> closed;
  w.closed(closed);
  std::vector<int64_t> indexes;
  for (const auto& b : closed) indexes.push_back(b.index);
  EXPECT_THAT(indexes, ElementsAre(95, 96, 97, 98));
  EXPECT_EQ(closed.back().min, 980);
  EXPECT_EQ(closed.back().max, 985);
}

TEST(BucketWindow, GapsLeaveNoBuckets) {
  BucketWindow w(10, 8);
  for (double t : {0.0, 11.0, 55.0, 61.0, 75.0}) w.add(t, t);
  std::vector<BucketWindow::Bucket> closed;
  w.closed(closed);
  std::vector<int64_t> indexes;
  for (const auto& b : closed) indexes.push_back(b.index);
  EXPECT_THAT(indexes, ElementsAre(0, 1, 5, 6));
}

TEST(BucketWindow, ALateSampleJoinsItsBucketAndAnOlderOneIsDropped) {
  BucketWindow w(10, 2);
  w.add(0, 1);
  w.add(25, 3);
  EXPECT_FALSE(w.add(12, 100)) << "bucket 1, within the window";
  std::vector<BucketWindow::Bucket> closed;
  w.closed(closed);
  ASSERT_EQ(closed.size(), 2u);
  EXPECT_EQ(closed[1].max, 100);
  w.add(41, 4);
  EXPECT_FALSE(w.add(5, -50)) << "bucket 0 left the window";
  w.closed(closed);
  for (const auto& b : closed) EXPECT_NE(b.min, -50);
}

TEST(BucketWindow, AWindowLongGapForgetsEverything) {
  BucketWindow w(10, 4);
  w.add(0, 1);
  w.add(15, 2);
  w.add(500, 3);
  std::vector<BucketWindow::Bucket> closed;
  w.closed(closed);
  EXPECT_TRUE(closed.empty());
  EXPECT_EQ(w.current()->min, 3);
}

TEST(BucketWindow, SumsEachSamplesChangeFromTheOneBefore) {
  BucketWindow w(10, 4);
  w.add(0, 5);
  EXPECT_EQ(w.current()->changes, 0u) << "nothing before the first sample";
  w.add(4, 9);
  w.add(12, 6);  // its change, from the sample at 4, counts in bucket 1
  std::vector<BucketWindow::Bucket> closed;
  w.closed(closed);
  ASSERT_EQ(closed.size(), 1u);
  EXPECT_EQ(closed[0].changes, 1u);
  EXPECT_DOUBLE_EQ(closed[0].dv2, 16);
  EXPECT_DOUBLE_EQ(closed[0].dvdt, 16);
  EXPECT_DOUBLE_EQ(closed[0].dt2, 16);
  EXPECT_EQ(w.current()->changes, 1u);
  EXPECT_DOUBLE_EQ(w.current()->dv2, 9);
  EXPECT_DOUBLE_EQ(w.current()->dvdt, -24);
  EXPECT_DOUBLE_EQ(w.current()->dt2, 64);
}

TEST(SteadyStep, IsTheMedianStepOfSteadyGrowth) {
  std::vector<double> scratch;
  EXPECT_EQ(steady_step(std::vector<double>{100, 110, 121, 130}, scratch), 10);
  EXPECT_EQ(steady_step(std::vector<double>{0, 30, 60}, scratch), 30);
}

TEST(SteadyStep, NeedsTwoStepsAllOfThemGrowthNoneUnderHalfTheLargest) {
  std::vector<double> scratch;
  EXPECT_FALSE(steady_step(std::vector<double>{0, 30}, scratch)) << "one step";
  EXPECT_FALSE(steady_step(std::vector<double>{0, 30, 60, 60}, scratch)) << "stopped";
  EXPECT_FALSE(steady_step(std::vector<double>{0, 30, 60, 55}, scratch)) << "fell";
  EXPECT_FALSE(steady_step(std::vector<double>{0, 100, 110, 120}, scratch)) << "one-off first";
  EXPECT_TRUE(steady_step(std::vector<double>{0, 20, 30, 40}, scratch)) << "half the largest";
}

// Buckets of `width` seconds of a line of `slope` with Gaussian noise of
// `sigma`, sampled every `step` seconds for 64 buckets.
std::vector<BucketWindow::Bucket> noisy_buckets(double width, double step, double slope,
                                                double sigma, uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::normal_distribution<double> normal(0, sigma);
  BucketWindow w(width, 64);
  for (double t = 0; t < 65 * width; t += step) w.add(t, 1e9 + slope * t + normal(gen));
  std::vector<BucketWindow::Bucket> closed;
  w.closed(closed);
  return closed;
}

TEST(SampleNoise, IsTheNoisesStandardDeviationWhateverTheSamplesABucket) {
  std::vector<double> scratch;
  for (uint64_t seed = 1; seed <= 10; ++seed) {
    // One sample a bucket (10 s samples, a 10m window), ten, a hundred.
    for (double step : {9.375, 0.9375, 0.09375}) {
      auto buckets = noisy_buckets(9.375, step, 1e5, 25e6, seed);
      EXPECT_NEAR(*sample_noise(buckets, 1e5, scratch), 25e6, 25e6 * 0.25)
          << "seed " << seed << ", a sample every " << step << " s";
    }
  }
}

TEST(SampleNoise, TheLinesOwnChangesAreNotNoise) {
  std::vector<double> scratch;
  auto buckets = noisy_buckets(10, 1, 6e5, 0, 1);
  EXPECT_NEAR(*sample_noise(buckets, 6e5, scratch), 0, 1);
  EXPECT_NEAR(*sample_noise(buckets, 0, scratch), 6e5 / std::sqrt(2 * 0.93), 6e5 * 0.05)
      << "measured around a flat line, the growth is all change";
}

TEST(SampleNoise, ASawtoothsFallsAndSpikesDoNotCount) {
  std::mt19937_64 gen(3);
  std::normal_distribution<double> normal(0, 1e6);
  BucketWindow w(10, 64);
  for (double t = 0; t < 650; t += 2) {
    double v = 1e9 + 1e8 * std::fmod(t, 120) / 120 + normal(gen);  // a fall every 12 buckets
    if (std::fmod(t, 100) == 0) v += 5e8;                          // a spike every 10
    w.add(t, v);
  }
  std::vector<BucketWindow::Bucket> closed;
  w.closed(closed);
  std::vector<double> scratch;
  // The sawtooth's rise, 1.7 MB a sample, adds to the noise; its falls and the spikes do not.
  EXPECT_NEAR(*sample_noise(closed, 0, scratch), std::hypot(1e6, 1.7e6 / std::sqrt(2)), 0.3e6);
}

TEST(SampleNoise, NoneWithoutChanges) {
  std::vector<double> scratch;
  EXPECT_FALSE(sample_noise({}, 0, scratch));
  BucketWindow w(10, 4);
  w.add(0, 1);
  w.add(12, 1);
  std::vector<BucketWindow::Bucket> closed;
  w.closed(closed);
  EXPECT_FALSE(sample_noise(closed, 0, scratch)) << "the first sample has no change";
}

std::vector<double> lows(const Spans& spans) {
  std::vector<Spans::Span> closed;
  spans.closed(closed);
  std::vector<double> out;
  for (const Spans::Span& s : closed) out.push_back(s.low);
  return out;
}

TEST(Spans, KeepTheLowAndTheMeanOfEachClosedSpan) {
  Spans spans(600, 3);
  for (double t = 0; t < 3000; t += 10) spans.add(t, 100 + 30 * std::floor(t / 600) + (t == 650));
  std::vector<Spans::Span> closed;
  spans.closed(closed);
  ASSERT_EQ(closed.size(), 3u) << "the last 3 closed spans, not the current one";
  EXPECT_EQ(closed[0].index, 1);
  EXPECT_EQ(closed[0].low, 130);
  EXPECT_DOUBLE_EQ(closed[0].mean(), 130 + 1.0 / 60);
  EXPECT_EQ(closed[0].samples, 60u);
  EXPECT_THAT(lows(spans), ElementsAre(130, 160, 190));
  EXPECT_EQ(spans.length(), 600);
}

TEST(Spans, AGapStartsTheRunAfresh) {
  Spans spans(10, 5);
  for (double t : {0.0, 11.0, 35.0, 41.0, 52.0}) spans.add(t, t);
  EXPECT_THAT(lows(spans), ElementsAre(35, 41)) << "span 2 had no sample";
}

TEST(Spans, ASampleForAForgottenSpanIsDropped) {
  Spans spans(10, 2);
  for (double t : {0.0, 10.0, 20.0, 30.0}) spans.add(t, 5);
  spans.add(1, -1);   // span 0: forgotten
  spans.add(11, -2);  // span 1: still kept
  EXPECT_THAT(lows(spans), ElementsAre(-2, 5));
}

}  // namespace
}  // namespace recycler::policies
