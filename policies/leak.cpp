// leak: predict when a growing metric reaches its limit from its trend, and
// recycle (or checkpoint, then restart) the worker while there is time.
//
//   - leak: {metric: anon, window: 10m, warmup: 2m, horizon: 15m,
//            min_slope: 1MiB/min, limit: 90%, action: checkpoint}
//
// The window is kept as kBuckets buckets (min, max and mean of the samples in
// each), so the state is bounded whatever the sample rate or uptime. Each
// time a bucket closes, once two thirds of a window are behind the warm-up,
// the trend is estimated again from the closed buckets:
//   - the lower envelope (the lowest value over the last third of the window,
//     at each bucket) runs along a sawtooth's troughs and the upper envelope
//     along its peaks: a healthy per-epoch or GC cycle up to a third of the
//     window long is flat in both, a leak riding it is not;
//   - the growth is the Theil–Sen slope of the lower envelope, and it counts
//     only when it is growth throughout: not one jump (a second model loaded,
//     then a plateau), and still rising in the recent half of both envelopes
//     (the lower one lags by a third of the window; the upper one stops
//     rising as soon as a warm-up ramp settles);
//   - the projection uses the larger of that slope and the current one (at
//     most kAcceleration times the first): the smaller of the slopes of the
//     upper envelope and of the bucket means over the recent half, neither of
//     which lags, so an accelerating leak is projected at its current speed.
// On every sample, the time to the limit is projected from the recent peak
// (the top of the sawtooth is what meets the limit first); the policy fires
// when that is less than `horizon`. While there is a trend, outlook() gives
// the slope and that projection (the supervisor logs when it appears or goes).
//
// `estimator: least-squares` replaces all of that with least-squares slopes
// of the bucket means (whole window and recent half, the larger): the naive
// baseline, kept to compare with on recorded timelines (`recycler replay`).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <memory>

#include "policies/args.h"
#include "policies/base/units.h"
#include "policies/metric.h"
#include "policies/trend.h"

namespace recycler::policies {
namespace {

using namespace std::chrono_literals;
using units::format_duration;
using units::format_size;
using Bucket = BucketWindow::Bucket;

constexpr size_t kBuckets = 64;
// The envelopes look back this many buckets: a third of the window.
constexpr int64_t kEnvelopeBuckets = (kBuckets + 1) / 3;
// Growth throughout: no rise within an eighth of the envelope's span may be
// more than this share of its whole rise...
constexpr double kMaxJumpShare = 2.0 / 3;
// ...and over the recent half, the lower envelope rises by at least this
// share of what the slope says, the upper one (no lag) by at least half.
constexpr double kLowerRecentShare = 0.25;
constexpr double kUpperRecentShare = 0.5;
constexpr double kAcceleration = 4;

double seconds(Duration d) {
  return std::chrono::duration<double>(d).count();
}

class Leak final : public Policy {
 public:
  struct Settings {
    Metric metric = Metric::Anon;
    Duration window = 10min;
    Duration warmup = 2min;
    Duration horizon = 15min;
    double min_slope = 1024.0 * 1024.0 / 60.0;  // bytes per second
    SizeLimit limit{0, 90.0};
    Decision::Action action = Decision::Action::Restart;
    bool least_squares = false;
  };

  explicit Leak(Settings s) : s_(s) {}

  static std::unique_ptr<Policy> create(const YAML::Node& node, ErrorSink& errors) {
    Args args(
        node, errors,
        {"metric", "window", "warmup", "horizon", "min_slope", "limit", "action", "estimator"});
    Settings s;
    if (auto name = args.choice("metric", {"anon", "current", "file", "rss", "pss", "uss", "device",
                                           "gpu", "gpu_total"}))
      s.metric = *parse_metric(*name);
    auto positive = [&](std::string_view key, Duration& out) {
      auto d = args.duration(key);
      if (!d) return;
      if (*d <= Duration::zero())
        args.error(key, std::string(key) + " must be greater than 0");
      else
        out = *d;
    };
    positive("window", s.window);
    positive("horizon", s.horizon);
    // Any warm-up goes, longer than the window too: it is time since the start.
    if (auto d = args.duration("warmup")) s.warmup = *d;
    if (auto r = args.rate("min_slope")) s.min_slope = *r;
    if (auto l = args.limit("limit")) s.limit = *l;
    Scope scope;
    read_action(args, scope);
    s.action = scope.action;
    if (auto e = args.choice("estimator", {"theil-sen", "least-squares"}))
      s.least_squares = *e == "least-squares";
    if (!args.ok()) return nullptr;
    return std::make_unique<Leak>(s);
  }

  std::string_view name() const override { return "leak"; }
  unsigned needs() const override { return policies::needs(s_.metric); }
  // A percentage of a GPU metric is of the GPU (known from the samples).
  bool needs_memory_max() const override {
    return s_.limit.percent.has_value() && !gpu_metric(s_.metric);
  }
  bool may_loop() const override { return true; }

  std::unique_ptr<PolicyState> start(const WorkerContext& worker) const override {
    auto state = std::make_unique<State>(seconds(s_.window) / kBuckets);
    state->started = worker.started;
    state->limit = s_.limit.resolve(worker.memory_max);
    state->origin = s_.limit.origin(worker.memory_max);
    return state;
  }

  Decision evaluate(const Sample& sample, PolicyState& base) const override {
    auto& st = static_cast<State&>(base);
    // gpu: a percentage is of the GPU the worker fills most, as last seen.
    if (gpu_metric(s_.metric) && s_.limit.percent) {
      if (auto of = capacity(sample, s_.metric, std::nullopt)) {
        st.limit = s_.limit.resolve(of);
        st.origin = s_.limit.origin(of);
      }
    }
    // A percentage of a memory_max the worker does not have (or of a GPU it
    // has not used yet): no limit at all.
    if (!st.limit) return Decision::none();
    auto v = value(sample, s_.metric);
    if (!v) return Decision::none();
    const double t = std::chrono::duration<double>(sample.t - st.started).count();
    if (t < seconds(s_.warmup)) return Decision::none();
    const bool closed = st.window.add(t, static_cast<double>(*v));
    if (closed) estimate(st);
    if (!st.trend) {
      st.outlook.reset();
      return Decision::none();
    }

    const double peak = std::max(st.trend->peak, st.window.current()->max);
    const double eta = std::max(0.0, (static_cast<double>(*st.limit) - peak) / st.trend->slope);
    // A trend is only ever new on a closed bucket: the outlook is set with it.
    if (closed)
      st.outlook = Outlook{st.trend->slope, eta, summary(st, peak, eta)};
    else
      st.outlook->predicted_s = eta;
    if (eta >= seconds(s_.horizon)) return Decision::none();
    Decision d;
    d.action = s_.action;
    d.reason = summary(st, peak, eta) + " < horizon " + format_duration(s_.horizon);
    d.predicted_s = eta;
    return d;
  }

  const Outlook* outlook(const PolicyState& base) const override {
    const auto& st = static_cast<const State&>(base);
    return st.outlook ? &*st.outlook : nullptr;
  }

 private:
  struct Trend {
    double slope;    // bytes per second, > 0
    double covered;  // seconds of window behind it
    double peak;     // the highest value of the closed buckets an envelope span back
  };
  struct State final : PolicyState {
    explicit State(double width) : window(width, kBuckets) {}
    TimePoint started;
    std::optional<uint64_t> limit;
    std::string origin;
    BucketWindow window;
    std::optional<Trend> trend;      // as of the last closed bucket
    std::optional<Outlook> outlook;  // while there is a trend
    // Scratch space reused by every estimate.
    std::vector<Bucket> closed;
    std::vector<Point> points, lower, upper;
    std::vector<double> scratch;
  };

  // Estimates the trend again from the closed buckets.
  void estimate(State& st) const {
    st.trend.reset();
    st.window.closed(st.closed);
    if (st.closed.empty()) return;
    const int64_t newest = st.window.current()->index;
    const double covered =
        static_cast<double>(newest - st.closed.front().index) * st.window.width();
    // The envelopes need a third of the window behind each of their points:
    // with two thirds of it, they cover the last third.
    if (covered < seconds(s_.window) * 2 / 3) return;
    auto slope = s_.least_squares ? least_squares_slope(st) : robust_slope(st);
    if (!slope || *slope < s_.min_slope) return;
    double peak = 0;
    for (const Bucket& b : st.closed)
      if (b.index > newest - kEnvelopeBuckets) peak = std::max(peak, b.max);
    st.trend = Trend{*slope, covered, peak};
  }

  std::optional<double> least_squares_slope(State& st) const {
    st.points.clear();
    for (const Bucket& b : st.closed) st.points.push_back({b.mean_t(), b.mean()});
    auto all = least_squares(st.points);
    if (!all) return std::nullopt;
    const double mid = (st.points.front().t + st.points.back().t) / 2;
    auto half = std::find_if(st.points.begin(), st.points.end(),
                             [&](const Point& p) { return p.t >= mid; });
    auto recent = least_squares(std::span(half, st.points.end()));
    return std::max(*all, recent.value_or(*all));
  }

  std::optional<double> robust_slope(State& st) const {
    const double w = st.window.width();
    // Points at their bucket's end, so that a span of n buckets holds n
    // points; half a bucket of slack keeps the n+1-th out whatever rounding.
    st.points.clear();
    for (const Bucket& b : st.closed)
      st.points.push_back({static_cast<double>(b.index + 1) * w, 0});
    // Only where the span lies wholly within the window.
    const int64_t first = st.closed.front().index;
    auto whole_span = [&](const Bucket& b) { return b.index - first >= kEnvelopeBuckets - 1; };
    const auto skip =
        std::find_if(st.closed.begin(), st.closed.end(), whole_span) - st.closed.begin();
    auto envelope = [&](auto fold, double Bucket::*of, std::vector<Point>& out) {
      for (size_t i = 0; i < st.closed.size(); ++i) st.points[i].v = st.closed[i].*of;
      fold(st.points, (static_cast<double>(kEnvelopeBuckets) - 0.5) * w, out);
      out.erase(out.begin(), out.begin() + skip);
    };
    envelope(lower_envelope, &Bucket::min, st.lower);
    envelope(upper_envelope, &Bucket::max, st.upper);
    if (st.lower.size() < 4) return std::nullopt;

    // Neighbours share all but one bucket of their span: every other point,
    // ending with the newest, tells as much for a quarter of the pairs.
    st.points.clear();
    for (size_t i = (st.lower.size() + 1) % 2; i < st.lower.size(); i += 2)
      st.points.push_back(st.lower[i]);
    auto slope = theil_sen(st.points, st.scratch);
    if (!slope || *slope < s_.min_slope) return std::nullopt;
    const double whole = *rise(st.lower);
    const double span = st.lower.back().t - st.lower.front().t;
    const double jump = largest_jump(st.lower, std::max(w, span / 8) + w / 2);
    if (whole <= 0 || jump > kMaxJumpShare * whole) return std::nullopt;
    const double mid = st.lower.front().t + span / 2;
    auto recent = [&](const std::vector<Point>& e) {
      auto from = std::find_if(e.begin(), e.end(), [&](const Point& p) { return p.t >= mid; });
      return std::span(from, e.end());
    };
    auto rises = [&](std::span<const Point> half, double share) {
      return *rise(half) >= share * *slope * (half.back().t - half.front().t);
    };
    if (!rises(recent(st.lower), kLowerRecentShare) || !rises(recent(st.upper), kUpperRecentShare))
      return std::nullopt;
    // How fast now: the upper envelope ignores a sawtooth but not a spike
    // (which it holds for a third of the window), the bucket means the other
    // way round; the smaller of the two is free of both.
    st.points.clear();
    for (const Bucket& b : st.closed)
      if (double end = static_cast<double>(b.index + 1) * w; end >= mid)
        st.points.push_back({end, b.mean()});
    auto peaks = theil_sen(recent(st.upper), st.scratch);
    auto means = theil_sen(st.points, st.scratch);
    double now = std::min(peaks.value_or(*slope), means.value_or(*slope));
    return std::max(*slope, std::min(now, kAcceleration * *slope));
  }

  // "anon +38 MiB/min over 10m, 2.1 GiB of 2.7 GiB (90% of 3 GiB), limit in 16m"
  std::string summary(const State& st, double peak, double eta) const {
    auto whole_seconds = [](double s) { return Duration(std::llround(s) * 1000); };
    return std::string(to_string(s_.metric)) + " +" +
           format_size(static_cast<uint64_t>(std::llround(st.trend->slope * 60))) + "/min over " +
           format_duration(whole_seconds(st.trend->covered)) + ", " +
           format_size(static_cast<uint64_t>(peak)) + " of " + format_size(*st.limit) + st.origin +
           ", limit in " + format_duration(whole_seconds(eta));
  }

  Settings s_;
};

RECYCLER_REGISTER_POLICY("leak", Leak::create);

}  // namespace
}  // namespace recycler::policies
