// leak: predict when a growing metric reaches its limit, and recycle (or
// checkpoint, then restart) the worker while there is time.
//
//   - leak: {metric: anon, window: 10m, warmup: 2m, horizon: 15m,
//            min_slope: 1MiB/min, limit: 90%, action: checkpoint}
//
// Four rules, each on its own evidence; the first that fires decides.
//
// 1. The trend. The window is kept as kBuckets buckets (min, max and mean of
// the samples in each), so the state is bounded whatever the sample rate or
// uptime. Each time a bucket closes, the trend is estimated again from the
// closed buckets (all after the warm-up) by trend.h's robust_slope and
// early_slope (theirs are the constants named below, kEarlyBuckets aside):
//   - once two thirds of a window are behind the warm-up, from envelopes:
//     the lower envelope (the lowest value over the last third of the window,
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
//     which lags, so an accelerating leak is projected at its current speed;
//     only when the upper envelope rises throughout that half (no jump, as
//     for the lower one: a validation's memory taken at once is a bump, not
//     acceleration).
//   - Earlier, as soon as the evidence is strong: the window says that a
//     healthy cycle lasts up to a third of it, so nothing shorter than that
//     can tell a cycle's rise from a leak; but once the buckets since the
//     warm-up span more than a third of the window (kEarlyBuckets, and at
//     least kEarlyPoints of them hold samples), a clean, steady rise counts:
//     along the bucket means, the rise of their Theil–Sen line is at least
//     1 / kEarlyFallShare times their largest fall (noise falls as often as
//     it rises, and a sawtooth falls by its whole depth within any stretch
//     longer than its period: the growth must stand that far clear of
//     both), each half rises at least kEarlyHalfShare as fast as the whole
//     (a step, or a cache that started filling, is flat on one side) and the
//     recent half at least kEarlySettleShare as fast as the older one (a
//     warm-up ramp settles). Noisier data takes more of the window to pass;
//     what never passes waits for the envelopes.
// On every sample, the time to the limit is projected from the recent peak
// (the top of the sawtooth is what meets the limit first); the policy fires
// when that is less than `horizon`. While there is a trend (rule 1 or 4),
// outlook() gives the slope and the sooner projection (the supervisor logs
// when it appears or goes).
//
// 2. Steps per iteration. A worker that marks its iterations
// (RECYCLER_ITERATION=N on the notify socket: Sample::iteration changes)
// gives the metric's level at each boundary: the lower of the last value
// before it and the first at it, so neither the last iteration's working set
// nor the next one's counts. From the last kBoundaries levels (bounded), the
// growth per iteration is the median of the steps between them, and it is
// steady (trend.h: steady_step) when there are at least two steps, all of
// them growth, the smallest at least half the largest (a one-off
// first-iteration cost, or steps that stopped, are not steady), at least
// min_slope over the median iteration's time. Then the next iteration is
// projected to peak one step above the last one's peak (the highest value between the last two
// boundaries): when that reaches the limit, the policy fires at the
// boundary, between iterations, whatever the horizon. Boundaries count from
// the first, warm-up or not: the steps must agree, which is the warm-up's
// job here. A slope over minutes cannot see this coming when a few large
// steps are all there is (seed 001: 3.7 GB per decode).
//
// 3. Steps seen in the samples. Without boundaries, a staircase (trend.h:
// find_staircase: flat treads, steep risers of steady height, bumps between
// them allowed) in the window's bucket minimums is projected one riser
// ahead: the highest value since the tread before the current one began,
// plus the median riser, against the limit. A staircase whose current tread
// has lasted twice its usual time has stopped and projects nothing.
//
// 4. Window over window. A periodic shape as long as the window (an epoch
// whose validation takes its memory at the end) is one cycle in it: rule 1
// sees its bump as a jump, rule 3 one riser at most. So like phases are
// compared from one window to the next: the mean and the lowest value of
// each window since the warm-up (trend.h: Spans, the last kSpans), alike
// for any shape that repeats once or more a window. When the means rise in
// steady steps (trend.h: steady_step, as the iterations' levels of rule 2;
// means, which heavy noise hardly moves), each at least the samples' noise
// and min_slope over a window, and every low rises with them (at least
// kLowStepShare of a step: a step taken once, split between two windows'
// means, moves the lows once), each closed bucket of the window is
// projected to recur a window later, a step higher: the first like bucket
// whose value reaches the limit is when it is crossed. So is the trend line
// (the window's bucket means carried along the slope: a whole cycle, which
// its bump does not move) plus kNoiseMargin standard deviations of the
// samples' noise (trend.h: sample_noise, from successive changes): under
// heavy noise the first sample over the limit is the one that kills, before
// the line crosses, and the window's peak holds only the noise it happened
// to draw. Whichever crosses first; the policy fires when that is less than
// `horizon` away. Growth that stops (a cache that filled) stops it a window
// later. Rule 1 keeps no margin: under heavy noise its slope comes and goes,
// and a margin would turn the noise into fires.
//
// The cost: per sample O(1) (a bucket, a window's low and sum, the
// projections); per closed bucket, the Theil–Sen slopes (O(kBuckets^2)
// pairs), the noise and the like phases (O(kBuckets)). Memory: kBuckets
// buckets, kSpans + 1 windows, kBoundaries boundaries and scratch space
// reused by every estimate.
//
// `estimator: least-squares` replaces all of that with least-squares slopes
// of the bucket means once two thirds of a window are behind the warm-up
// (trend.h: least_squares_slope: whole window and recent half, the larger),
// projected from the recent peak, and nothing else (no steps, no like
// phases, no noise margin): the naive baseline, kept to compare with on
// recorded timelines (`recycler replay`).
#include <algorithm>
#include <array>
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
// The early decision: buckets since the first after the warm-up (so that the
// samples span more than a third of the window however they fall in their
// buckets); its tests of a clean rise are early_slope's (trend.h).
constexpr int64_t kEarlyBuckets = kEnvelopeBuckets + 3;
// Steps per iteration: the levels at the last kBoundaries boundaries.
constexpr size_t kBoundaries = 5;
// Window over window: the last kSpans windows; each low rises at least
// kLowStepShare of the means' step.
constexpr size_t kSpans = 5;
constexpr double kLowStepShare = 0.25;
// The projection keeps this many standard deviations of the samples' noise
// below the limit: the first noisy sample over it is the one that kills.
constexpr double kNoiseMargin = 3;

double seconds(Duration d) {
  return std::chrono::duration<double>(d).count();
}

Duration whole_seconds(double s) {
  return Duration(std::llround(s) * 1000);
}

std::string size_text(double bytes) {
  return format_size(static_cast<uint64_t>(std::llround(std::max(0.0, bytes))));
}

// The settings it accepts (registered with it: the docs are checked against them).
constexpr std::string_view kKeys[] = {"metric",    "window", "warmup", "horizon",
                                      "min_slope", "limit",  "action", "estimator"};

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
    Args args(node, errors, kKeys);
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
  std::optional<std::string_view> metric() const override { return to_string(s_.metric); }
  std::optional<uint64_t> limit(const std::optional<uint64_t>& memory_max) const override {
    if (gpu_metric(s_.metric)) return std::nullopt;
    return s_.limit.resolve(memory_max);
  }
  bool checkpoints() const override { return s_.action == Decision::Action::Checkpoint; }
  unsigned needs() const override {
    // The baseline ignores iterations: it is the estimator as it was.
    return policies::needs(s_.metric) | (s_.least_squares ? 0u : kNeedsIterations);
  }
  // A percentage of a GPU metric is of the GPU (known from the samples).
  bool needs_memory_max() const override {
    return s_.limit.percent.has_value() && !gpu_metric(s_.metric);
  }
  bool may_loop() const override { return true; }
  // The earliest a slope is trusted: the early decision, kEarlyBuckets of
  // the window's buckets past the warm-up.
  std::optional<FirstDecision> first_decision() const override {
    Duration after = s_.warmup + s_.window * kEarlyBuckets / static_cast<int64_t>(kBuckets);
    return FirstDecision{after, "its warmup " + units::format_duration(s_.warmup) +
                                    ", then over a third of its window " +
                                    units::format_duration(s_.window)};
  }

  std::unique_ptr<PolicyState> start(const WorkerContext& worker) const override {
    auto state = std::make_unique<State>(seconds(s_.window) / kBuckets, seconds(s_.window));
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
    const double x = static_cast<double>(*v);
    if (!s_.least_squares) track_iterations(st, sample, t, x);
    bool closed = false;
    if (t >= seconds(s_.warmup)) {
      closed = st.window.add(t, x);
      st.spans.add(t - seconds(s_.warmup), x);
      if (closed) estimate(st);
    }

    const auto projected = soonest(st, t);
    if (projected) {
      const auto& [trend, p] = *projected;
      // A trend is only ever new on a closed bucket: the outlook is set with it.
      if (closed)
        st.outlook = Outlook{trend->slope, p.eta, summary(st, *trend, p)};
      else
        st.outlook->predicted_s = p.eta;
    } else {
      st.outlook.reset();
    }
    if (Decision d = step_decision(st, t)) return d;
    if (!projected || projected->second.eta >= seconds(s_.horizon)) return Decision::none();
    const auto& [trend, p] = *projected;
    Decision d;
    d.action = s_.action;
    d.reason = summary(st, *trend, p) + " < horizon " + format_duration(s_.horizon);
    d.predicted_s = p.eta;
    return d;
  }

  const Outlook* outlook(const PolicyState& base) const override {
    const auto& st = static_cast<const State&>(base);
    return st.outlook ? &*st.outlook : nullptr;
  }

 private:
  struct Trend {
    double slope;    // bytes per second, > 0
    double covered;  // seconds of samples behind it
    // The highest value lately: of the closed buckets an envelope span back
    // (rule 1), or of the window (rule 4).
    double peak;
    // Rule 4: when the closed buckets' like phases, a step higher each
    // window, first reach the limit (seconds since the start).
    std::optional<double> phase_crosses = std::nullopt;
    // Rule 4: the trend line at `at` (the newest closed bucket's end), and
    // the samples' noise around it, for the margin.
    double level = 0, at = 0;
    std::optional<double> noise = std::nullopt;
  };
  // When the limit is projected to be reached, from what level.
  struct Projection {
    double eta = 0;     // seconds from now
    double level = 0;   // the recent peak, or the trend line now
    double margin = 0;  // > 0: the trend line plus this margin for the noise decided
  };
  // Growth in steps, per iteration (rule 2) or seen in the samples (rule 3).
  struct Steps {
    double step;                        // bytes per step, > 0
    double spacing;                     // seconds between steps (the median)
    double peak;                        // the highest value of the last step, bytes
    double since;                       // when the current step began, seconds since the start
    std::optional<uint64_t> iteration;  // the one about to run, per iteration
  };
  struct Boundary {
    double t = 0;      // seconds since the start
    double level = 0;  // the metric between the iterations
    double peak = 0;   // the highest it went in the iteration that ended there
  };
  struct State final : PolicyState {
    State(double width, double window_length)
        : window(width, kBuckets), spans(window_length, kSpans) {}
    TimePoint started;
    std::optional<uint64_t> limit;
    std::string origin;
    BucketWindow window;
    Spans spans;  // the windows since the warm-up: their lows and means
    // As of the last closed bucket: rule 1's trend, rule 4's like phases.
    std::optional<Trend> trend, like_phases;
    std::optional<Outlook> outlook;  // while there is a trend
    std::optional<Steps> steps;
    // Iterations: the last number, the last boundaries (a ring), the value
    // of the previous sample and the highest since the last boundary.
    std::optional<uint64_t> iteration;
    std::array<Boundary, kBoundaries> boundaries{};
    size_t boundary_count = 0;
    std::optional<double> previous;
    double high = 0;
    // Scratch space reused by every estimate.
    std::vector<Bucket> closed;
    std::vector<Spans::Span> windows;
    std::vector<Point> points, lower, upper, floors;
    std::vector<double> scratch, levels, spacings;
  };

  // Rule 2: records a boundary where the iteration number changes, and
  // projects the next iteration from the steps between the last ones.
  void track_iterations(State& st, const Sample& sample, double t, double x) const {
    const bool boundary = sample.iteration && sample.iteration != st.iteration;
    if (!boundary) {
      st.high = st.previous ? std::max(st.high, x) : x;
      st.previous = x;
      return;
    }
    st.iteration = sample.iteration;
    Boundary b{t, st.previous ? std::min(*st.previous, x) : x, st.previous ? st.high : x};
    st.boundaries[st.boundary_count++ % kBoundaries] = b;
    st.previous = x;
    st.high = x;
    st.steps.reset();
    const size_t n = std::min(st.boundary_count, kBoundaries);
    auto at = [&](size_t k) -> const Boundary& {  // k = 0: the oldest of the last n
      return st.boundaries[(st.boundary_count - n + k) % kBoundaries];
    };
    st.levels.clear();
    st.spacings.clear();
    for (size_t k = 0; k < n; ++k) {
      st.levels.push_back(at(k).level);
      if (k > 0) st.spacings.push_back(at(k).t - at(k - 1).t);
    }
    const auto step = steady_step(st.levels, st.scratch);
    if (!step) return;
    const double spacing = median_of(st.spacings);
    if (spacing <= 0 || *step / spacing < s_.min_slope) return;
    st.steps = Steps{*step, spacing, std::max(b.peak, b.level), t, sample.iteration};
  }

  // Rules 2 and 3: fires when the next step would reach the limit.
  Decision step_decision(const State& st, double t) const {
    if (!st.steps) return Decision::none();
    const Steps& s = *st.steps;
    double peak = s.peak;
    // A staircase's current tread may hold a higher bump than its last estimate saw.
    if (!s.iteration && st.window.current()) peak = std::max(peak, st.window.current()->max);
    const double limit = static_cast<double>(*st.limit);
    if (peak + s.step < limit) return Decision::none();
    Decision d;
    d.action = s_.action;
    const std::string figures = std::string(to_string(s_.metric)) + " " + size_text(peak);
    const std::string cross = " would cross limit " + size_text(limit) + st.origin;
    if (s.iteration)
      d.reason = figures + " (the last iteration's peak) + " + size_text(s.step) +
                 " per iteration" + cross + " in iteration " + std::to_string(*s.iteration);
    else
      d.reason = figures + " (the last step's peak) + " + size_text(s.step) + " per step (every " +
                 format_duration(whole_seconds(s.spacing)) + ")" + cross + " at the next step";
    // When the next step is due: a staircase's may be under way already, not
    // yet told from a bump (its tread is too short), and the one after it
    // is the one projected.
    double due = s.since + s.spacing;
    while (!s.iteration && due <= t) due += s.spacing;
    d.predicted_s = std::max(0.0, due - t);
    return d;
  }

  // Estimates the trend (rule 1), without iterations the staircase (rule 3),
  // and window over window (rule 4) again from the closed buckets.
  void estimate(State& st) const {
    st.trend.reset();
    st.like_phases.reset();
    st.window.closed(st.closed);
    if (!s_.least_squares && !st.iteration) staircase(st);
    if (st.closed.empty()) return;
    const int64_t newest = st.window.current()->index;
    const double covered =
        static_cast<double>(newest - st.closed.front().index) * st.window.width();
    std::optional<double> slope;
    // The envelopes need a third of the window behind each of their points:
    // with two thirds of it, they cover the last third.
    if (covered >= seconds(s_.window) * 2 / 3)
      slope = s_.least_squares
                  ? least_squares_slope(st.closed, st.points)
                  : robust_slope(st.closed, st.window.width(), kEnvelopeBuckets, s_.min_slope,
                                 st.points, st.lower, st.upper, st.scratch);
    else if (!s_.least_squares && newest - st.closed.front().index >= kEarlyBuckets)
      slope = early_slope(st.closed, s_.min_slope, st.points, st.scratch);
    if (slope && *slope >= s_.min_slope)
      st.trend = Trend{*slope, covered, recent_peak(st.closed, newest - kEnvelopeBuckets)};
    if (!s_.least_squares) st.like_phases = window_over_window(st);
  }

  // Rule 4: consecutive windows whose means rise in steady steps above the
  // noise, their lows with them: a shape that repeats once a window (an
  // epoch as long as it) and keeps a little more each time. Each closed
  // bucket's like phase recurs a window later, a step higher.
  std::optional<Trend> window_over_window(State& st) const {
    st.spans.closed(st.windows);
    st.levels.clear();
    for (const Spans::Span& w : st.windows) st.levels.push_back(w.mean());
    const auto step = steady_step(st.levels, st.scratch);
    const double length = st.spans.length();
    if (!step || *step / length < s_.min_slope) return std::nullopt;
    for (size_t k = 1; k < st.windows.size(); ++k)
      if (st.windows[k].low - st.windows[k - 1].low < kLowStepShare * *step) return std::nullopt;
    // The noise around a line of that slope, or a flat one (growth that
    // stopped in this window): the better fit.
    const double noise = std::min(sample_noise(st.closed, *step / length, st.scratch).value_or(0),
                                  sample_noise(st.closed, 0, st.scratch).value_or(0));
    if (*step < noise) return std::nullopt;
    Trend out{*step / length, static_cast<double>(st.levels.size()) * length,
              highest(st.closed).max};
    // The line through the whole window, a whole cycle, which the cycle's
    // bump does not move.
    out.at = static_cast<double>(st.window.current()->index) * st.window.width();
    out.level = line_level(st.closed, out.slope, out.at, st.scratch);
    out.noise = noise;
    for (const Bucket& b : st.closed) {
      const double crosses = like_phase_crosses(st, b, *step);
      out.phase_crosses = std::min(out.phase_crosses.value_or(crosses), crosses);
    }
    return out;
  }

  // When bucket `b`'s like phase, `step` higher every window, reaches the
  // limit: at the start of a like bucket, whole windows later.
  double like_phase_crosses(const State& st, const Bucket& b, double step) const {
    const double windows = std::ceil((static_cast<double>(*st.limit) - b.max) / step);
    return static_cast<double>(b.index) * st.window.width() +
           std::max(0.0, windows) * st.spans.length();
  }

  // Of rules 1 and 4, the trend that reaches the limit soonest, and when.
  std::optional<std::pair<const Trend*, Projection>> soonest(const State& st, double t) const {
    std::optional<std::pair<const Trend*, Projection>> out;
    for (const std::optional<Trend>* trend : {&st.trend, &st.like_phases}) {
      if (!*trend) continue;
      const Projection p = project(st, **trend, t);
      if (!out || p.eta < out->second.eta) out.emplace(&**trend, p);
    }
    return out;
  }

  // Rules 1 and 4, at `t`: the recent peak along the slope (rule 4: the like
  // phases, the current bucket's too, or the trend line with the noise's
  // margin above it, whichever reaches the limit first).
  Projection project(const State& st, const Trend& tr, double t) const {
    const double limit = static_cast<double>(*st.limit);
    const Bucket& current = *st.window.current();
    Projection out{0, std::max(tr.peak, current.max), 0};
    if (tr.phase_crosses) {
      const double step = tr.slope * st.spans.length();
      out.eta = std::min(*tr.phase_crosses, like_phase_crosses(st, current, step)) - t;
    } else {
      out.eta = (limit - out.level) / tr.slope;
    }
    if (tr.noise) {
      const double line = tr.level + tr.slope * (t - tr.at);
      const double margin = kNoiseMargin * *tr.noise;
      if (const double eta = (limit - line - margin) / tr.slope; eta < out.eta)
        out = Projection{eta, line, margin};
    }
    out.eta = std::max(0.0, out.eta);
    return out;
  }

  // Rule 3: a staircase in the bucket minimums, projected one riser ahead.
  void staircase(State& st) const {
    st.steps.reset();
    const double w = st.window.width();
    st.points.clear();
    for (const Bucket& b : st.closed)
      st.points.push_back({static_cast<double>(b.index + 1) * w, b.min});
    auto stairs = find_staircase(st.points, w, st.floors);
    if (!stairs || stairs->step / stairs->spacing < s_.min_slope) return;
    double peak = 0;
    for (const Bucket& b : st.closed)
      if (static_cast<double>(b.index + 1) * w > stairs->previous) peak = std::max(peak, b.max);
    st.steps = Steps{stairs->step, stairs->spacing, peak, stairs->last, std::nullopt};
  }

  // "anon +38 MiB/min over 10m, 2.1 GiB of 2.7 GiB (90% of 3 GiB), limit in 16m";
  // "anon +6 MiB/min over 10m, 3.44 GiB + 75 MiB (3 sigma of noise) of ...";
  // "anon +3 MiB/min over 50m (+30 MiB a window at like phases), 3.59 GiB of ..."
  std::string summary(const State& st, const Trend& tr, const Projection& p) const {
    std::string over = format_duration(whole_seconds(tr.covered));
    if (tr.phase_crosses)
      over += " (+" + size_text(tr.slope * st.spans.length()) + " a window at like phases)";
    std::string level = format_size(static_cast<uint64_t>(std::max(0.0, p.level)));
    if (p.margin > 0)
      level += " + " + size_text(p.margin) + " (" + std::to_string(static_cast<int>(kNoiseMargin)) +
               " sigma of noise)";
    return std::string(to_string(s_.metric)) + " +" + size_text(tr.slope * 60) + "/min over " +
           over + ", " + level + " of " + format_size(*st.limit) + st.origin + ", limit in " +
           format_duration(whole_seconds(p.eta));
  }

  Settings s_;
};

RECYCLER_REGISTER_POLICY("leak", Leak::create, kKeys);

}  // namespace
}  // namespace recycler::policies
