// The slope estimators on exact lines, outliers, gaps and degenerate input.
#include "policies/trend.h"

#include <gtest/gtest.h>

#include <cmath>

namespace recycler::policies {
namespace {

std::vector<Point> line(double slope, double intercept, int n, double dt = 10) {
  std::vector<Point> out;
  for (int i = 0; i < n; ++i) out.push_back({i * dt, intercept + slope * i * dt});
  return out;
}

TEST(Trend, BothRecoverAnExactLine) {
  auto pts = line(3.5, 100, 40);
  EXPECT_DOUBLE_EQ(*theil_sen(pts), 3.5);
  EXPECT_NEAR(*least_squares(pts), 3.5, 1e-9);
}

TEST(Trend, TheilSenIgnoresAQuarterOfWildPointsLeastSquaresDoesNot) {
  auto pts = line(2.0, 0, 40);
  // Every fourth point is a spike of +5000 (a short allocation burst).
  for (size_t i = 3; i < pts.size(); i += 4) pts[i].v += 5000;
  EXPECT_NEAR(*theil_sen(pts), 2.0, 0.05);
  EXPECT_GT(std::abs(*least_squares(pts) - 2.0), 0.1) << "the baseline is pulled by the spikes";
}

TEST(Trend, GapsAndIrregularSpacingDoNotBiasTheSlope) {
  std::vector<Point> pts;
  for (double t : {0.0, 1.0, 2.5, 3.0, 50.0, 51.0, 200.0, 200.5, 400.0})
    pts.push_back({t, 7 + 1.25 * t});
  EXPECT_DOUBLE_EQ(*theil_sen(pts), 1.25);
  EXPECT_NEAR(*least_squares(pts), 1.25, 1e-9);
}

TEST(Trend, OrderDoesNotMatterAndPairsAtTheSameTimeAreSkipped) {
  std::vector<Point> pts{{30, 60}, {0, 0}, {10, 20}, {10, 25}, {20, 40}};
  auto s = theil_sen(pts);
  ASSERT_TRUE(s);
  EXPECT_NEAR(*s, 2.0, 0.3);
}

TEST(Trend, TooFewDistinctTimesGiveNoSlope) {
  EXPECT_FALSE(theil_sen(std::vector<Point>{}));
  EXPECT_FALSE(theil_sen(std::vector<Point>{{5, 1}}));
  EXPECT_FALSE(theil_sen(std::vector<Point>{{5, 1}, {5, 9}}));
  EXPECT_FALSE(least_squares(std::vector<Point>{{5, 1}, {5, 9}}));
}

TEST(Trend, AConstantSeriesHasSlopeZero) {
  auto pts = line(0, 42, 10);
  EXPECT_DOUBLE_EQ(*theil_sen(pts), 0.0);
  EXPECT_DOUBLE_EQ(*least_squares(pts), 0.0);
}

}  // namespace
}  // namespace recycler::policies
