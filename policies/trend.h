// Trend estimation over a series of points (t in seconds, value), for the
// leak policy: the slope estimators it chooses from, Theil–Sen (the median of
// the slopes between every pair of points, which up to ~29% of wild points
// cannot move) and plain least squares (the naive baseline), and the helpers
// that keep its estimate honest on the shapes of healthy memory use: sawtooth
// cycles, one-off steps, spikes, noise, and shapes that repeat window over
// window. Pure functions and two small bounded records of samples. Gaps and
// irregular spacing are fine everywhere; pairs of points at the same t carry
// no slope.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

namespace recycler::policies {

struct Point {
  double t = 0;  // seconds
  double v = 0;
};

// The median of `values` (the mean of the middle two for an even count),
// reordering them in place so that a caller's scratch space serves; they are
// not empty.
double median_of(std::span<double> values);

// Median pairwise slope, points in any order; nullopt with fewer than two
// distinct times. O(n^2) in time and memory: downsample first (the leak
// policy keeps at most 64 points). `scratch` is reused between calls so that
// a steady caller allocates nothing.
std::optional<double> theil_sen(std::span<const Point> points, std::vector<double>& scratch);
std::optional<double> theil_sen(std::span<const Point> points);

// Ordinary least-squares slope, points in any order; nullopt with fewer than
// two distinct times.
std::optional<double> least_squares(std::span<const Point> points);

// How much a series (in time order) rose from its start to its end: the
// median of its last quarter minus the median of its first (a quarter is at
// least one point), so that a stray point at either end does not decide it.
// nullopt when empty.
std::optional<double> rise(std::span<const Point> points);

// The largest rise within `span` seconds of a series in time order: the
// greatest v[j] - v[i] over i < j with t[j] - t[i] <= span; 0 when it never
// rises. A one-off step shows as a jump about as large as the whole rise.
double largest_jump(std::span<const Point> points, double span);

// The largest fall of a series in time order: the greatest v[i] - v[j] over
// i < j; 0 when it never falls. Whatever a sawtooth's period, a stretch of it
// longer than one period holds a fall as deep as the sawtooth.
double largest_fall(std::span<const Point> points);

// Memory that grows in steps: flat treads, steep risers of about the same
// height (a compile cache kept per iteration, a batch's buffers kept per
// epoch), with transient bumps between them (each iteration's working set).
// `floors` are the lowest values of consecutive buckets of `width` seconds, in
// time order, t at each bucket's end. The floor is taken to be their suffix
// minimum (the lowest value from each bucket on), which is what a staircase
// never falls back below, and which rises with a bump only once a higher
// tread follows it. A staircase has, among the floor's rises:
//   - at least two risers, each the rise of at most two consecutive buckets
//     and well above the noise (four times the median change of the values
//     from one bucket to the next);
//   - treads of at least three buckets between them and since the last one;
//   - little else: the floor's rises outside the risers (a ramp, a warm-up's
//     tail) at most a quarter of the risers' sum;
//   - steady steps: the smallest of the last four risers at least half the
//     largest.
// A staircase whose current tread has lasted more than twice the median time
// between risers has stopped: nullopt, as for any other shape.
struct Staircase {
  double step = 0;      // the median of the last four risers
  double spacing = 0;   // the median time between them, seconds
  double last = 0;      // when the current tread began (the last riser's end)
  double previous = 0;  // when the tread before it began
  size_t risers = 0;
};
std::optional<Staircase> find_staircase(std::span<const Point> floors, double width,
                                        std::vector<Point>& scratch);

// Growth in steady steps: `levels` (in time order) each a step above the one
// before, at least two steps, all of them growth, the smallest at least half
// the largest (a one-off first step, or steps that stopped, are not steady).
// The median step; nullopt otherwise. `scratch` is reused.
std::optional<double> steady_step(std::span<const double> levels, std::vector<double>& scratch);

// The running minimum (lower) or maximum (upper) of a series in time order
// over a trailing span > 0: for each point, the extreme of the values at times
// in (t - span, t]. A sawtooth whose period is at most `span` has flat envelopes
// (its troughs, its peaks); a leak raises both. The lower one lags a rise by
// `span`; the upper one does not.
void lower_envelope(std::span<const Point> points, double span, std::vector<Point>& out);
void upper_envelope(std::span<const Point> points, double span, std::vector<Point>& out);

// A sliding window of samples downsampled into buckets of equal time, each
// keeping the min, max and mean of its samples: the same bounded memory
// however long a worker runs and however often it is sampled. Bucket k holds
// the samples with t in [k * width, (k + 1) * width); the window is the
// newest bucket (the current one, still filling) and `closed` buckets before
// it. Buckets without samples (gaps) are simply absent. Each bucket also
// keeps sums of its samples' changes from the sample before each (in
// whichever bucket that was) and of the time between them: the noise.
class BucketWindow {
 public:
  struct Bucket {
    int64_t index = -1;  // k; -1: never used
    double min = 0, max = 0, sum = 0, t_sum = 0;
    uint64_t samples = 0;
    // Over the changes dv in dt since the previous sample: sums of dv^2,
    // dv * dt and dt^2, and how many (the window's first sample has none).
    double dv2 = 0, dvdt = 0, dt2 = 0;
    uint64_t changes = 0;

    double mean() const { return sum / static_cast<double>(samples); }
    double mean_t() const { return t_sum / static_cast<double>(samples); }
  };

  // `width` > 0 seconds; `closed` > 0 buckets.
  BucketWindow(double width, size_t closed);

  // Records value `v` at `t` seconds (t >= 0). True when it opened a bucket
  // newer than any before: the previous current one is closed. A sample older
  // than the window is dropped.
  bool add(double t, double v);

  // The closed buckets that hold samples, oldest first, into `out`.
  void closed(std::vector<Bucket>& out) const;
  // The newest bucket; nullptr before the first sample.
  const Bucket* current() const;
  double width() const { return width_; }

 private:
  Bucket& slot(int64_t index);
  const Bucket& slot(int64_t index) const;

  double width_;
  std::vector<Bucket> slots_;  // closed + 1, by index modulo their number
  int64_t newest_ = -1;
  std::optional<Point> previous_;  // the last sample
};

// The standard deviation of the samples around a line of `slope` (bytes per
// second), from the buckets' changes between successive samples less the
// line's (white noise: each has variance 2 sigma^2): the median over the
// buckets of their mean squared change, so that the few buckets holding a
// sawtooth's fall, a step or a spike do not count, corrected for the
// median's bias with few changes a bucket (one change: the median of
// chi-square(1) is 0.455 of its mean). nullopt without changes.
// O(buckets); `scratch` is reused.
std::optional<double> sample_noise(std::span<const BucketWindow::Bucket> buckets, double slope,
                                   std::vector<double>& scratch);

// The leak policy's estimates from a BucketWindow's closed buckets (oldest
// first, not empty): pure over the buckets and the parameters given.
// `points` and `scratch` are reused between calls so that a steady caller
// allocates nothing.

// The bucket with the highest value (max): a window's peak.
const BucketWindow::Bucket& highest(std::span<const BucketWindow::Bucket> buckets);

// The highest value of the buckets after bucket index `after` (0 when there
// are none): the recent top of a sawtooth, which meets a limit first.
double recent_peak(std::span<const BucketWindow::Bucket> buckets, int64_t after);

// A trend line's value at `at` seconds: the median of the buckets' means,
// each carried along `slope` to `at`. A bump (a cycle's) moves the median
// little where it would move a mean.
double line_level(std::span<const BucketWindow::Bucket> buckets, double slope, double at,
                  std::vector<double>& scratch);

// The naive baseline: the least-squares slopes of the bucket means over all
// of them and over the recent half of their time, the larger; nullopt with
// fewer than two distinct times.
std::optional<double> least_squares_slope(std::span<const BucketWindow::Bucket> buckets,
                                          std::vector<Point>& points);

// The early decision, before the envelopes can tell a cycle from a leak: the
// Theil–Sen slope of the bucket means, at least `min_slope`, when the rise
// is clean (at least 12 buckets, a rise four times their largest fall) and
// steady (each half at least half as fast as the whole, the recent one at
// least 3/4 as fast as the older); nullopt otherwise (leak.cpp: rule 1).
std::optional<double> early_slope(std::span<const BucketWindow::Bucket> buckets, double min_slope,
                                  std::vector<Point>& points, std::vector<double>& scratch);

// Growth throughout (leak.cpp: rule 1): the Theil–Sen slope of the lower
// envelope of the buckets' lows over `span_buckets` buckets of `width`
// seconds (where that span lies wholly within them: a sawtooth up to that
// long is flat in it), at least `min_slope`, not one jump, both envelopes
// still rising in the recent half; then the larger of it and the current
// slope (the smaller of the recent half's slopes of the upper envelope and
// the bucket means), at most 4 times it, unless the upper envelope jumps
// there. nullopt otherwise.
std::optional<double> robust_slope(std::span<const BucketWindow::Bucket> buckets, double width,
                                   int64_t span_buckets, double min_slope,
                                   std::vector<Point>& points, std::vector<Point>& lower,
                                   std::vector<Point>& upper, std::vector<double>& scratch);

// The lowest value and the mean of each consecutive span of `length` seconds
// (span k holds t in [k * length, (k + 1) * length)), for the current span
// and the `kept` closed ones before it: a shape that repeats every span (an
// epoch as long as the leak policy's window), or any number of times in it,
// has the same low and mean in each; a leak raises both span over span. The
// mean is the steadier under noise, the low the one a step taken once moves
// only once. The same bounded memory however long a worker runs.
class Spans {
 public:
  struct Span {
    int64_t index = -1;  // k; -1: never used
    double low = 0, sum = 0;
    uint64_t samples = 0;

    double mean() const { return sum / static_cast<double>(samples); }
  };

  // `length` > 0 seconds; `kept` > 0 closed spans.
  Spans(double length, size_t kept);

  // Records value `v` at `t` seconds (t >= 0; a sample for a span already
  // forgotten is dropped).
  void add(double t, double v);

  // The closed spans (all but the newest) that follow one another up to the
  // last closed one, oldest first, into `out`: a span without samples (a
  // gap) starts the run afresh.
  void closed(std::vector<Span>& out) const;
  double length() const { return length_; }

 private:
  double length_;
  std::vector<Span> spans_;  // kept + 1, by index modulo their number
  int64_t newest_ = -1;
};

}  // namespace recycler::policies
