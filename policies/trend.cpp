#include "policies/trend.h"

#include <algorithm>
#include <array>
#include <cmath>

namespace recycler::policies {
namespace {

// The running extreme by a monotonic queue of candidates (indexes into
// `points`, their values in `better` order): O(n) whatever the span.
template <typename Better>
void envelope(std::span<const Point> points, double span, std::vector<Point>& out, Better better) {
  out.clear();
  std::vector<size_t> queue(points.size());  // [head, tail)
  size_t head = 0, tail = 0;
  for (size_t i = 0; i < points.size(); ++i) {
    while (tail > head && !better(points[queue[tail - 1]].v, points[i].v)) --tail;
    queue[tail++] = i;
    while (points[i].t - points[queue[head]].t >= span) ++head;
    out.push_back({points[i].t, points[queue[head]].v});
  }
}

struct Riser {
  size_t from, to;  // the last bucket of the tread below, the first of the one above
  double height;
};

// The rises of the floor `steps` past `threshold`, neighbouring ones joined; none
// unless there are enough of them and the rises below the threshold (creep)
// are a small share of the climb.
std::vector<Riser> find_risers(std::span<const Point> steps, double threshold) {
  constexpr size_t kMinRisers = 2;
  constexpr double kMaxCreepShare = 0.25;
  std::vector<Riser> risers;
  double creep = 0, climbed = 0;
  for (size_t i = 1; i < steps.size(); ++i) {
    const double rise = steps[i].v - steps[i - 1].v;
    if (rise <= threshold) {
      creep += rise;
      continue;
    }
    climbed += rise;
    if (!risers.empty() && risers.back().to == i - 1) {
      risers.back().to = i;
      risers.back().height += rise;
    } else {
      risers.push_back({i - 1, i, rise});
    }
  }
  if (risers.size() < kMinRisers || creep > kMaxCreepShare * climbed) return {};
  return risers;
}

}  // namespace

double median_of(std::span<double> values) {
  size_t n = values.size();
  auto mid = values.begin() + static_cast<std::ptrdiff_t>(n / 2);
  std::nth_element(values.begin(), mid, values.end());
  double upper = *mid;
  if (n % 2 == 1) return upper;
  return (*std::max_element(values.begin(), mid) + upper) / 2;
}

std::optional<double> theil_sen(std::span<const Point> points, std::vector<double>& scratch) {
  scratch.clear();
  for (size_t i = 0; i < points.size(); ++i)
    for (size_t j = i + 1; j < points.size(); ++j) {
      double dt = points[j].t - points[i].t;
      if (dt != 0) scratch.push_back((points[j].v - points[i].v) / dt);
    }
  if (scratch.empty()) return std::nullopt;
  return median_of(scratch);
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

std::optional<double> rise(std::span<const Point> points) {
  if (points.empty()) return std::nullopt;
  const size_t quarter = std::max<size_t>(1, points.size() / 4);
  // A quarter of the leak policy's envelope fits on the stack.
  constexpr size_t kOnStack = 32;
  std::array<double, 2 * kOnStack> stack;
  std::vector<double> heap;
  std::span<double> values(stack);
  if (quarter > kOnStack) {
    heap.resize(2 * quarter);
    values = heap;
  }
  auto head = values.first(quarter), tail = values.subspan(quarter, quarter);
  for (size_t i = 0; i < quarter; ++i) {
    head[i] = points[i].v;
    tail[i] = points[points.size() - quarter + i].v;
  }
  return median_of(tail) - median_of(head);
}

double largest_jump(std::span<const Point> points, double span) {
  double jump = 0;
  size_t from = 0;
  for (size_t j = 0; j < points.size(); ++j) {
    while (points[j].t - points[from].t > span) ++from;
    for (size_t i = from; i < j; ++i) jump = std::max(jump, points[j].v - points[i].v);
  }
  return jump;
}

double largest_fall(std::span<const Point> points) {
  double fall = 0;
  if (points.empty()) return fall;
  double high = points.front().v;
  for (const Point& p : points) {
    high = std::max(high, p.v);
    fall = std::max(fall, high - p.v);
  }
  return fall;
}

std::optional<Staircase> find_staircase(std::span<const Point> floors, double width,
                                        std::vector<Point>& scratch) {
  constexpr size_t kRecent = 4, kMinTread = 3;
  constexpr double kRiserNoise = 4, kSteadyShare = 0.5, kStopped = 2;
  // The floor; and the noise: the median change from one bucket to the next,
  // which treads make (as long as risers and the edges of bumps are fewer).
  const size_t n = floors.size();
  if (n < 2 * kMinTread + 1) return std::nullopt;
  scratch.assign(floors.begin(), floors.end());
  for (size_t i = n - 1; i-- > 0;) scratch[i].v = std::min(scratch[i].v, scratch[i + 1].v);
  std::vector<double> changes(n - 1);
  for (size_t i = 1; i < n; ++i) changes[i - 1] = std::abs(floors[i].v - floors[i - 1].v);
  const double noise = median_of(changes);
  // Not less than a thousandth of the level, lest a byte's wobble of exact
  // figures (device memory) count as a riser.
  const double threshold = std::max(kRiserNoise * noise, 1e-3 * std::abs(scratch.back().v));

  const std::vector<Riser> risers = find_risers(scratch, threshold);
  if (risers.empty()) return std::nullopt;
  for (size_t k = 0; k < risers.size(); ++k) {
    const Riser& r = risers[k];
    // Steep: within two buckets' time (a gap in the samples is not a riser).
    if (scratch[r.to].t - scratch[r.from].t > 2.5 * width) return std::nullopt;
    const size_t tread_end = k + 1 < risers.size() ? risers[k + 1].from : n - 1;
    if (tread_end + 1 - r.to < kMinTread) return std::nullopt;
  }
  const size_t first = risers.size() > kRecent ? risers.size() - kRecent : 0;
  std::vector<double> heights, spacings;
  for (size_t k = first; k < risers.size(); ++k) {
    heights.push_back(risers[k].height);
    if (k > first) spacings.push_back(scratch[risers[k].to].t - scratch[risers[k - 1].to].t);
  }
  auto [low, high] = std::minmax_element(heights.begin(), heights.end());
  if (*low < kSteadyShare * *high) return std::nullopt;
  Staircase out;
  out.step = median_of(heights);
  out.spacing = median_of(spacings);
  out.last = scratch[risers.back().to].t - width;
  out.previous = scratch[risers[risers.size() - 2].to].t - width;
  out.risers = risers.size();
  if (scratch.back().t - out.last > kStopped * out.spacing) return std::nullopt;
  return out;
}

std::optional<double> steady_step(std::span<const double> levels, std::vector<double>& scratch) {
  constexpr size_t kMinSteps = 2;
  constexpr double kSteadyShare = 0.5;
  if (levels.size() < kMinSteps + 1) return std::nullopt;
  scratch.clear();
  for (size_t k = 1; k < levels.size(); ++k) scratch.push_back(levels[k] - levels[k - 1]);
  auto [low, high] = std::minmax_element(scratch.begin(), scratch.end());
  if (*low <= 0 || *low < kSteadyShare * *high) return std::nullopt;
  return median_of(scratch);
}

void lower_envelope(std::span<const Point> points, double span, std::vector<Point>& out) {
  envelope(points, span, out, [](double a, double b) { return a < b; });
}

void upper_envelope(std::span<const Point> points, double span, std::vector<Point>& out) {
  envelope(points, span, out, [](double a, double b) { return a > b; });
}

BucketWindow::BucketWindow(double width, size_t closed) : width_(width), slots_(closed + 1) {}

BucketWindow::Bucket& BucketWindow::slot(int64_t index) {
  return slots_[static_cast<size_t>(index) % slots_.size()];
}

const BucketWindow::Bucket& BucketWindow::slot(int64_t index) const {
  return slots_[static_cast<size_t>(index) % slots_.size()];
}

bool BucketWindow::add(double t, double v) {
  const auto index = static_cast<int64_t>(std::floor(t / width_));
  const auto span = static_cast<int64_t>(slots_.size());
  if (index < 0 || (newest_ >= 0 && index <= newest_ - span)) return false;
  bool opened = index > newest_;
  if (opened) newest_ = index;
  Bucket& b = slot(index);
  if (b.index != index) b = Bucket{.index = index, .min = v, .max = v};  // unused, or one that left
  b.min = std::min(b.min, v);
  b.max = std::max(b.max, v);
  b.sum += v;
  b.t_sum += t;
  ++b.samples;
  if (previous_) {
    const double dv = v - previous_->v, dt = t - previous_->t;
    b.dv2 += dv * dv;
    b.dvdt += dv * dt;
    b.dt2 += dt * dt;
    ++b.changes;
  }
  previous_ = Point{t, v};
  return opened;
}

void BucketWindow::closed(std::vector<Bucket>& out) const {
  out.clear();
  const auto span = static_cast<int64_t>(slots_.size());
  for (int64_t k = std::max<int64_t>(0, newest_ - span + 1); k < newest_; ++k)
    if (slot(k).index == k) out.push_back(slot(k));
}

const BucketWindow::Bucket* BucketWindow::current() const {
  return newest_ < 0 ? nullptr : &slot(newest_);
}

std::optional<double> sample_noise(std::span<const BucketWindow::Bucket> buckets, double slope,
                                   std::vector<double>& scratch) {
  scratch.clear();
  double changes = 0;
  for (const BucketWindow::Bucket& b : buckets) {
    if (b.changes == 0) continue;
    // The sum of (dv - slope dt)^2, expanded.
    const double squares = b.dv2 - 2 * slope * b.dvdt + slope * slope * b.dt2;
    scratch.push_back(std::max(0.0, squares) / static_cast<double>(b.changes));
    changes += static_cast<double>(b.changes);
  }
  if (scratch.empty()) return std::nullopt;
  // A mean of n squared changes is about chi-square with 2n/3 degrees of
  // freedom (neighbouring changes share a sample), whose median is
  // (1 - 2 / (9 dof))^3 of its mean (Wilson and Hilferty).
  const double dof = std::max(1.0, 2 * changes / static_cast<double>(scratch.size()) / 3);
  const double median_share = std::pow(1 - 2 / (9 * dof), 3);
  return std::sqrt(median_of(scratch) / (2 * median_share));
}

Spans::Spans(double length, size_t kept) : length_(length), spans_(kept + 1) {}

void Spans::add(double t, double v) {
  const auto index = static_cast<int64_t>(std::floor(t / length_));
  const auto kept = static_cast<int64_t>(spans_.size());
  if (index < 0 || (newest_ >= 0 && index <= newest_ - kept)) return;
  newest_ = std::max(newest_, index);
  Span& s = spans_[static_cast<size_t>(index) % spans_.size()];
  if (s.index != index) s = Span{.index = index, .low = v};
  s.low = std::min(s.low, v);
  s.sum += v;
  ++s.samples;
}

void Spans::closed(std::vector<Span>& out) const {
  out.clear();
  const auto kept = static_cast<int64_t>(spans_.size());
  for (int64_t k = std::max<int64_t>(0, newest_ - kept + 1); k < newest_; ++k) {
    const Span& s = spans_[static_cast<size_t>(k) % spans_.size()];
    if (s.index != k)
      out.clear();  // a gap: what came before it does not follow on
    else
      out.push_back(s);
  }
}

namespace {

using Bucket = BucketWindow::Bucket;

// Growth throughout (robust_slope): no rise within an eighth of the
// envelope's span may be more than this share of its whole rise...
constexpr double kMaxJumpShare = 2.0 / 3;
// ...and over the recent half, the lower envelope rises by at least this
// share of what the slope says, the upper one (no lag) by at least half.
constexpr double kLowerRecentShare = 0.25;
constexpr double kUpperRecentShare = 0.5;
// The current slope counts up to this many times the envelope's.
constexpr double kAcceleration = 4;
// The early decision (early_slope): how many buckets hold samples, and the
// tests of a clean rise.
constexpr size_t kEarlyPoints = 12;
constexpr double kEarlyFallShare = 0.25;
constexpr double kEarlyHalfShare = 0.5;
constexpr double kEarlySettleShare = 0.75;

// The lower envelope of the buckets' lows and the upper one of their highs
// over `span_buckets` buckets, only where that span lies wholly within the
// buckets (not empty). `points` is scratch.
void bucket_envelopes(std::span<const Bucket> buckets, double width, int64_t span_buckets,
                      std::vector<Point>& points, std::vector<Point>& lower,
                      std::vector<Point>& upper) {
  // Points at their bucket's end, so that a span of n buckets holds n
  // points; half a bucket of slack keeps the n+1-th out whatever rounding.
  points.clear();
  for (const Bucket& b : buckets) points.push_back({static_cast<double>(b.index + 1) * width, 0});
  const int64_t first = buckets.front().index;
  auto whole_span = [&](const Bucket& b) { return b.index - first >= span_buckets - 1; };
  const auto skip = std::find_if(buckets.begin(), buckets.end(), whole_span) - buckets.begin();
  auto fold_into = [&](auto fold, double Bucket::*of, std::vector<Point>& out) {
    for (size_t i = 0; i < buckets.size(); ++i) points[i].v = buckets[i].*of;
    fold(points, (static_cast<double>(span_buckets) - 0.5) * width, out);
    out.erase(out.begin(), out.begin() + skip);
  };
  fold_into(lower_envelope, &Bucket::min, lower);
  fold_into(upper_envelope, &Bucket::max, upper);
}

}  // namespace

const Bucket& highest(std::span<const Bucket> buckets) {
  return *std::max_element(buckets.begin(), buckets.end(),
                           [](const Bucket& a, const Bucket& b) { return a.max < b.max; });
}

double recent_peak(std::span<const Bucket> buckets, int64_t after) {
  double peak = 0;
  for (const Bucket& b : buckets)
    if (b.index > after) peak = std::max(peak, b.max);
  return peak;
}

double line_level(std::span<const Bucket> buckets, double slope, double at,
                  std::vector<double>& scratch) {
  scratch.clear();
  for (const Bucket& b : buckets) scratch.push_back(b.mean() + slope * (at - b.mean_t()));
  return median_of(scratch);
}

std::optional<double> least_squares_slope(std::span<const Bucket> buckets,
                                          std::vector<Point>& points) {
  points.clear();
  for (const Bucket& b : buckets) points.push_back({b.mean_t(), b.mean()});
  auto all = least_squares(points);
  if (!all) return std::nullopt;
  const double mid = (points.front().t + points.back().t) / 2;
  auto half =
      std::find_if(points.begin(), points.end(), [&](const Point& p) { return p.t >= mid; });
  auto recent = least_squares(std::span(half, points.end()));
  return std::max(*all, recent.value_or(*all));
}

std::optional<double> early_slope(std::span<const Bucket> buckets, double min_slope,
                                  std::vector<Point>& points, std::vector<double>& scratch) {
  if (buckets.size() < kEarlyPoints) return std::nullopt;
  points.clear();
  for (const Bucket& b : buckets) points.push_back({b.mean_t(), b.mean()});
  auto slope = theil_sen(points, scratch);
  if (!slope || *slope < min_slope) return std::nullopt;
  const double span = points.back().t - points.front().t;
  const double climb = *slope * span;
  if (largest_fall(points) > kEarlyFallShare * climb) return std::nullopt;
  const double mid = points.front().t + span / 2;
  auto split =
      std::find_if(points.begin(), points.end(), [&](const Point& p) { return p.t >= mid; });
  auto older = theil_sen(std::span(points.begin(), split), scratch);
  auto recent = theil_sen(std::span(split, points.end()), scratch);
  if (!older || !recent || std::min(*older, *recent) < kEarlyHalfShare * *slope ||
      *recent < kEarlySettleShare * *older)
    return std::nullopt;
  return slope;
}

std::optional<double> robust_slope(std::span<const Bucket> buckets, double width,
                                   int64_t span_buckets, double min_slope,
                                   std::vector<Point>& points, std::vector<Point>& lower,
                                   std::vector<Point>& upper, std::vector<double>& scratch) {
  bucket_envelopes(buckets, width, span_buckets, points, lower, upper);
  if (lower.size() < 4) return std::nullopt;

  // Neighbours share all but one bucket of their span: every other point,
  // ending with the newest, tells as much for a quarter of the pairs.
  points.clear();
  for (size_t i = (lower.size() + 1) % 2; i < lower.size(); i += 2) points.push_back(lower[i]);
  auto slope = theil_sen(points, scratch);
  if (!slope || *slope < min_slope) return std::nullopt;
  const double whole = *rise(lower);
  const double span = lower.back().t - lower.front().t;
  const double jump_span = std::max(width, span / 8) + width / 2;
  const double jump = largest_jump(lower, jump_span);
  if (whole <= 0 || jump > kMaxJumpShare * whole) return std::nullopt;
  const double mid = lower.front().t + span / 2;
  auto recent = [&](const std::vector<Point>& e) {
    auto from = std::find_if(e.begin(), e.end(), [&](const Point& p) { return p.t >= mid; });
    return std::span(from, e.end());
  };
  auto rises = [&](std::span<const Point> half, double share) {
    return *rise(half) >= share * *slope * (half.back().t - half.front().t);
  };
  if (!rises(recent(lower), kLowerRecentShare) || !rises(recent(upper), kUpperRecentShare))
    return std::nullopt;
  // How fast now: the upper envelope ignores a sawtooth but not a spike
  // (which it holds for a third of the window), the bucket means the other
  // way round; the smaller of the two is free of both.
  points.clear();
  for (const Bucket& b : buckets)
    if (double end = static_cast<double>(b.index + 1) * width; end >= mid)
      points.push_back({end, b.mean()});
  // Only growth throughout the recent half is faster growth: not a bump
  // taken at once (validation's memory, in an epoch as long as the window).
  auto upper_recent = recent(upper);
  if (largest_jump(upper_recent, jump_span) > kMaxJumpShare * *rise(upper_recent)) return slope;
  auto peaks = theil_sen(upper_recent, scratch);
  auto means = theil_sen(points, scratch);
  double now = std::min(peaks.value_or(*slope), means.value_or(*slope));
  return std::max(*slope, std::min(now, kAcceleration * *slope));
}

}  // namespace recycler::policies
