// leak: predict when a growing metric reaches its limit from its trend, and
// recycle (or checkpoint, then restart) the worker while there is time.
//
//   - leak: {metric: anon, window: 10m, warmup: 2m, horizon: 15m,
//            min_slope: 1MiB/min, limit: 90%, action: checkpoint}
//
// The window is kept as kBuckets buckets (min, max, mean of the samples in
// each), so the state is bounded whatever the sample rate or uptime. When a
// bucket closes the trend is estimated again:
//   - the lower envelope (the lowest value over the last third of the window
//     at each bucket) follows a sawtooth's troughs, so a healthy per-epoch
//     sawtooth or GC cycle is flat there, and a leak riding it is not;
//   - its Theil–Sen slope is the growth, and it must be growth throughout:
//     both halves of the window rise by at least a quarter of what that slope
//     says (a one-off step followed by a plateau does not, nor does noise);
//   - the larger of the whole-window and the recent-half slopes is used, so an
//     accelerating leak is projected with its current speed.
// On every sample, the time to the limit is projected from the recent peak
// (the top of the sawtooth is what meets the limit); the policy fires when
// that is less than `horizon`.
//
// `estimator: least-squares` replaces all that with a least-squares slope of
// the bucket means (whole window and recent half): the naive baseline, kept
// to compare against on recorded timelines (`recycler replay`).
#include <algorithm>
#include <cmath>
#include <deque>
#include <memory>

#include "policies/args.h"
#include "policies/metric.h"
#include "policies/trend.h"
#include "supervisor/config/units.h"

namespace recycler::policies {
namespace {

using config::format_duration;
using config::format_size;

constexpr int64_t kBuckets = 64;
// The lower envelope looks back this fraction of the window.
constexpr double kEnvelopeSpan = 1.0 / 3;
// Each half of the window must rise by this fraction of what the slope says.
constexpr double kHalfRise = 0.25;

double seconds(Duration d) {
  return static_cast<double>(d.count()) / 1000.0;
}

class Leak final : public Policy {
 public:
  struct Settings {
    Metric metric = Metric::Anon;
    Duration window{10 * 60 * 1000};
    Duration warmup{2 * 60 * 1000};
    Duration horizon{15 * 60 * 1000};
    double min_slope = 1024.0 * 1024.0 / 60.0;  // bytes per second
    SizeLimit limit{0, 90.0};
    Scope scope;
    bool least_squares = false;
  };

  explicit Leak(Settings s) : s_(std::move(s)) {}

  static std::unique_ptr<Policy> create(const YAML::Node& node, ErrorSink& errors) {
    Args args(
        node, errors,
        {"metric", "window", "warmup", "horizon", "min_slope", "limit", "action", "estimator"});
    Settings s;
    if (auto name =
            args.choice("metric", {"anon", "current", "file", "rss", "pss", "uss", "device"}))
      s.metric = *parse_metric(*name);
    auto positive = [&](const char* key, Duration& out) {
      auto d = args.duration(key);
      if (!d) return;
      if (*d <= Duration::zero())
        args.error(key, std::string(key) + " must be greater than 0");
      else
        out = *d;
    };
    positive("window", s.window);
    positive("horizon", s.horizon);
    if (auto d = args.duration("warmup")) s.warmup = *d;
    if (auto r = args.rate("min_slope")) s.min_slope = *r;
    if (auto l = args.limit("limit")) s.limit = *l;
    read_action(args, s.scope);
    if (auto e = args.choice("estimator", {"theil-sen", "least-squares"}))
      s.least_squares = *e == "least-squares";
    if (!args.ok()) return nullptr;
    return std::make_unique<Leak>(std::move(s));
  }

  std::string_view name() const override { return "leak"; }
  unsigned needs() const override { return policies::needs(s_.metric); }
  bool needs_memory_max() const override { return s_.limit.percent.has_value(); }
  bool may_loop() const override { return true; }

  std::unique_ptr<PolicyState> start(const WorkerContext& worker) const override {
    auto state = std::make_unique<State>();
    state->started = worker.started;
    state->limit = s_.limit.resolve(worker.memory_max);
    state->origin = s_.limit.origin(worker.memory_max);
    return state;
  }

  Decision evaluate(const Sample& sample, PolicyState& base) const override {
    auto& st = static_cast<State&>(base);
    if (!st.limit) return Decision::none();
    auto v = value(sample, s_.metric);
    if (!v) return Decision::none();
    double t = std::chrono::duration<double>(sample.t - st.started).count();
    if (t < seconds(s_.warmup)) return Decision::none();
    const double w = seconds(s_.window) / kBuckets;
    const auto k = static_cast<int64_t>(std::floor(t / w));
    if (st.buckets.empty() || st.buckets.back().k < k) {
      if (!st.buckets.empty()) estimate(st, k, w);  // a bucket closed
      st.buckets.push_back(Bucket{k, static_cast<double>(*v), static_cast<double>(*v), 0, 0, 0});
      while (st.buckets.front().k <= k - kBuckets) st.buckets.pop_front();
    }
    Bucket& b = st.buckets.back();
    const auto x = static_cast<double>(*v);
    b.min = std::min(b.min, x);
    b.max = std::max(b.max, x);
    b.sum += x;
    b.tsum += t;
    ++b.n;
    if (!st.slope) return Decision::none();

    // The recent peak meets the limit first.
    const int64_t span = envelope_span(w);
    double peak = 0;
    for (const Bucket& r : st.buckets)
      if (r.k > k - span) peak = std::max(peak, r.max);
    const double limit = static_cast<double>(*st.limit);
    const double eta = std::max(0.0, (limit - peak) / *st.slope);
    if (eta >= seconds(s_.horizon)) return Decision::none();
    Decision d = s_.scope.decide(reason(st, peak, eta), 0);
    d.predicted_s = eta;
    return d;
  }

 private:
  struct Bucket {
    int64_t k;  // floor(t / bucket width)
    double min, max, sum;
    double tsum;  // of the samples' times: the mean is at tsum / n
    uint32_t n;
  };
  struct State final : PolicyState {
    TimePoint started;
    std::optional<uint64_t> limit;
    std::string origin;
    std::deque<Bucket> buckets;
    std::optional<double> slope;  // bytes per second, as last estimated
    double covered = 0;           // seconds of window behind that estimate
    std::vector<Point> points, half;
    std::vector<double> scratch;
  };

  int64_t envelope_span(double w) const {
    return std::max<int64_t>(1, std::llround(seconds(s_.window) * kEnvelopeSpan / w));
  }

  // Re-estimates the slope from the closed buckets (those before `k`).
  void estimate(State& st, int64_t k, double w) const {
    st.slope.reset();
    const int64_t first = st.buckets.front().k;
    st.covered = static_cast<double>(k - first) * w;
    if (st.covered < seconds(s_.window) / 2) return;
    std::optional<double> slope =
        s_.least_squares ? least_squares_slope(st, k) : robust_slope(st, k, w);
    if (slope && *slope >= s_.min_slope) st.slope = slope;
  }

  std::optional<double> least_squares_slope(State& st, int64_t k) const {
    st.points.clear();
    for (const Bucket& b : st.buckets)
      if (b.k < k) st.points.push_back({b.tsum / b.n, b.sum / b.n});
    auto all = least_squares(st.points);
    if (!all) return std::nullopt;
    double mid = (st.points.front().t + st.points.back().t) / 2;
    st.half.clear();
    for (const Point& p : st.points)
      if (p.t >= mid) st.half.push_back(p);
    auto recent = least_squares(st.half);
    return std::max(*all, recent.value_or(*all));
  }

  std::optional<double> robust_slope(State& st, int64_t k, double w) const {
    const int64_t span = envelope_span(w);
    const int64_t first = st.buckets.front().k;
    st.points.clear();
    for (size_t i = 0; i < st.buckets.size() && st.buckets[i].k < k; ++i) {
      const Bucket& x = st.buckets[i];
      if (x.k - first < span - 1) continue;
      double lo = x.min;
      for (size_t j = i; j-- > 0 && st.buckets[j].k > x.k - span;)
        lo = std::min(lo, st.buckets[j].min);
      st.points.push_back({static_cast<double>(x.k) * w, lo});
    }
    if (st.points.size() < 4) return std::nullopt;
    auto all = theil_sen(st.points, st.scratch);
    if (!all || *all < s_.min_slope) return std::nullopt;
    // Growth throughout: each half rises by a fair share of the slope.
    double mid = (st.points.front().t + st.points.back().t) / 2;
    const Point* first_half_end = nullptr;
    st.half.clear();
    for (const Point& p : st.points) {
      if (p.t <= mid) first_half_end = &p;
      if (p.t >= mid) st.half.push_back(p);
    }
    const Point& a = st.points.front();
    const Point& b = *first_half_end;
    const Point& c = st.half.front();
    const Point& d = st.half.back();
    bool rises = b.v - a.v > 0 && d.v - c.v > 0 && b.v - a.v >= kHalfRise * *all * (b.t - a.t) &&
                 d.v - c.v >= kHalfRise * *all * (d.t - c.t);
    if (!rises) return std::nullopt;
    // Growth it is; how fast now: the bucket means of the last third, so that
    // acceleration shows before the envelope (which lags) catches up.
    st.half.clear();
    for (const Bucket& r : st.buckets)
      if (r.k < k && r.k >= k - span) st.half.push_back({r.tsum / r.n, r.sum / r.n});
    auto recent = theil_sen(st.half, st.scratch);
    return std::max(*all, recent.value_or(*all));
  }

  // "anon +38 MiB/min over 10m, 2.1 GiB of 2.7 GiB (90% of 3 GiB), limit in 16m < horizon 20m"
  std::string reason(const State& st, double peak, double eta) const {
    // Whole seconds, or tenths below a minute: "16m", "4.2s".
    auto whole = [](double s) {
      int64_t unit = s >= 60 ? 1000 : 100;
      return Duration(std::llround(s * 1000 / static_cast<double>(unit)) * unit);
    };
    return std::string(to_string(s_.metric)) + " +" +
           format_size(static_cast<uint64_t>(*st.slope * 60)) + "/min over " +
           format_duration(whole(st.covered)) + ", " + format_size(static_cast<uint64_t>(peak)) +
           " of " + format_size(*st.limit) + st.origin + ", limit in " +
           format_duration(whole(eta)) + " < horizon " + format_duration(s_.horizon);
  }

  Settings s_;
};

RECYCLER_REGISTER_POLICY("leak", Leak::create);

}  // namespace
}  // namespace recycler::policies
