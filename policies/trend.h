// Slopes of a series of points (t in seconds, value), for the leak policy:
// Theil–Sen (the median of the slopes between every pair of points), which
// up to ~29% of wild points cannot move, and plain least squares, the naive
// baseline it is compared with. Both take points in any order and spacing
// (gaps are fine); pairs at the same t are skipped.
#pragma once

#include <optional>
#include <span>
#include <vector>

namespace recycler::policies {

struct Point {
  double t = 0;
  double v = 0;
};

// Median pairwise slope; nullopt with fewer than two distinct times.
// O(n^2) in time: downsample first (the leak policy keeps at most 64 points).
// `scratch` is reused between calls so that a steady caller allocates nothing.
std::optional<double> theil_sen(std::span<const Point> points, std::vector<double>& scratch);
std::optional<double> theil_sen(std::span<const Point> points);

// Ordinary least-squares slope; nullopt with fewer than two distinct times.
std::optional<double> least_squares(std::span<const Point> points);

}  // namespace recycler::policies
