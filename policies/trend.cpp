#include "policies/trend.h"

#include <algorithm>

namespace recycler::policies {

std::optional<double> theil_sen(std::span<const Point> points, std::vector<double>& scratch) {
  scratch.clear();
  for (size_t i = 0; i < points.size(); ++i)
    for (size_t j = i + 1; j < points.size(); ++j) {
      double dt = points[j].t - points[i].t;
      if (dt != 0) scratch.push_back((points[j].v - points[i].v) / dt);
    }
  if (scratch.empty()) return std::nullopt;
  size_t n = scratch.size();
  auto mid = scratch.begin() + static_cast<std::ptrdiff_t>(n / 2);
  std::nth_element(scratch.begin(), mid, scratch.end());
  double upper = *mid;
  if (n % 2 == 1) return upper;
  double lower = *std::max_element(scratch.begin(), mid);
  return (lower + upper) / 2;
}

std::optional<double> theil_sen(std::span<const Point> points) {
  std::vector<double> scratch;
  return theil_sen(points, scratch);
}

std::optional<double> least_squares(std::span<const Point> points) {
  if (points.size() < 2) return std::nullopt;
  double n = static_cast<double>(points.size()), mt = 0, mv = 0;
  for (const Point& p : points) {
    mt += p.t;
    mv += p.v;
  }
  mt /= n;
  mv /= n;
  double sxx = 0, sxy = 0;
  for (const Point& p : points) {
    sxx += (p.t - mt) * (p.t - mt);
    sxy += (p.t - mt) * (p.v - mv);
  }
  if (sxx == 0) return std::nullopt;
  return sxy / sxx;
}

}  // namespace recycler::policies
