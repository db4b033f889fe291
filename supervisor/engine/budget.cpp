#include "supervisor/engine/budget.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <utility>

#include "policies/base/units.h"

namespace recycler::engine {
namespace {

using config::BudgetPreference;
using units::format_duration;
using units::format_size;

// "38 MiB/min": a slope in bytes per second.
std::string per_minute(double slope) {
  return format_size(static_cast<uint64_t>(std::llround(std::max(0.0, slope) * 60))) + "/min";
}

Duration whole_seconds(double s) {
  return std::chrono::duration_cast<Duration>(std::chrono::seconds(std::llround(std::max(0.0, s))));
}

// Prefer first, then those without a preference, then avoid.
int rank(BudgetPreference p) {
  switch (p) {
    case BudgetPreference::Prefer:
      return 0;
    case BudgetPreference::None:
      return 1;
    case BudgetPreference::Avoid:
      return 2;
    case BudgetPreference::Omit:
      return 3;
  }
  return 3;
}

std::string worker_name(const BudgetCandidate& c) {
  std::string name = c.program + "[" + std::to_string(c.slot) + "]";
  if (c.pid) name += " pid " + std::to_string(c.pid);
  return name;
}

// What choose() settles on: the candidate, the slope it was chosen by
// (choose: fastest), and why, when a level's fallback gave it.
struct Pick {
  const BudgetCandidate* best = nullptr;
  std::optional<double> best_slope;
  std::string why;
};

// One preference level (rank): its candidate by `choose`, else the one that
// grew the most (fastest), else the largest. `freed(c)`: what recycling c
// frees; `slope(c)`: how fast it grows.
template <typename Freed, typename Slope>
void pick_in_level(const std::vector<BudgetCandidate>& candidates, int level,
                   config::BudgetChoose choose, double need, Freed freed, Slope slope, Pick& pick) {
  const BudgetCandidate* largest = nullptr;
  const BudgetCandidate* grew_most = nullptr;
  for (const BudgetCandidate& c : candidates) {
    if (!c.eligible || rank(c.preference) != level) continue;
    if (!largest || c.bytes > largest->bytes) largest = &c;
    if (choose == config::BudgetChoose::Newest) {
      if (!pick.best || c.started > pick.best->started) pick.best = &c;
    } else if (choose == config::BudgetChoose::Fastest) {
      double f = freed(c);
      if (f > 0 && (!grew_most || f > freed(*grew_most))) grew_most = &c;
      // Only one whose recycle frees what is needed: a small leaker
      // recycled over and over while the others fill the box would not.
      if (f < need) continue;
      std::optional<double> s = slope(c);
      if (s && *s > 0 && (!pick.best_slope || *s > *pick.best_slope)) {
        pick.best = &c;
        pick.best_slope = s;
      }
    }
  }
  if (pick.best) return;
  if (choose == config::BudgetChoose::Fastest && grew_most) {
    pick.best = grew_most;
    pick.why = "grew the most, +" + format_size(static_cast<uint64_t>(freed(*pick.best))) +
               " since it started, " + format_size(pick.best->bytes);
  } else if (largest) {
    pick.best = largest;
    pick.why = std::string(choose == config::BudgetChoose::Largest ? "largest, "
                                                                   : "largest (none grows), ") +
               format_size(pick.best->bytes);
  }
}

// The second half of the choice's reason: why this one.
std::string explain(const Pick& pick, config::BudgetChoose choose, TimePoint now) {
  const BudgetCandidate& best = *pick.best;
  std::string why = pick.why;
  if (pick.best_slope)
    why = "fastest-growing, " + per_minute(*pick.best_slope) + ", " + format_size(best.bytes);
  else if (choose == config::BudgetChoose::Newest)
    why =
        "newest, started " +
        format_duration(whole_seconds(std::chrono::duration<double>(now - best.started).count())) +
        " ago, " + format_size(best.bytes);
  if (best.preference == BudgetPreference::Prefer) why += ", preferred";
  if (best.preference == BudgetPreference::Avoid) why += ", avoided but nothing else is left";
  return why;
}

}  // namespace

std::optional<uint64_t> budget_figure(const policies::Sample& s, std::string_view metric) {
  if (metric == "current") return s.current;
  if (metric == "anon") return s.anon;
  std::optional<uint64_t> sum;
  for (const policies::ProcessSample& p : s.processes)
    if (auto v = budget_figure(p, metric)) sum = sum.value_or(0) + *v;
  return sum;
}

std::optional<uint64_t> budget_figure(const policies::ProcessSample& p, std::string_view metric) {
  if (metric == "pss") return p.pss;
  if (metric == "uss") return p.uss;
  return p.rss;
}

Budget::Budget(const config::BudgetConfig& config) : config_(config) {}

double Budget::seconds(TimePoint t) const {
  return std::chrono::duration<double>(t - *epoch_).count();
}

// Keeps the points within `span` seconds of the newest, at most kMaxPoints:
// past that every other one of the older half goes, so the series still
// spans the window.
void Budget::add_point(Series& s, double t, double v, double span) {
  s.points.push_back({t, v});
  auto old = std::find_if(s.points.begin(), s.points.end(),
                          [&](const policies::Point& p) { return p.t >= t - span; });
  s.points.erase(s.points.begin(), old);
  if (s.points.size() > kMaxPoints) {
    size_t half = s.points.size() / 2;
    std::vector<policies::Point> kept;
    kept.reserve(s.points.size());
    for (size_t i = 0; i < s.points.size(); ++i)
      if (i >= half || i % 2 == 0) kept.push_back(s.points[i]);
    s.points = std::move(kept);
  }
}

std::optional<double> Budget::slope_of(const Series& s) {
  if (s.points.size() < 3) return std::nullopt;
  return policies::theil_sen(s.points, scratch_);
}

// The trigger that holds as of `r`, as the first half of the reason, and its
// kind; nullopt while none does.
std::optional<std::string> Budget::trigger(const BudgetReading& r, std::optional<uint64_t> limit,
                                           std::string& kind) {
  std::string scope = to_string(config_.scope);
  std::optional<std::string> found;
  // Usage, held for: (every clock runs on every reading, whichever fires).
  if (limit && r.used && *r.used > *limit) {
    if (!over_since_) over_since_ = r.t;
    if (r.t - *over_since_ >= config_.held && !found) {
      kind = "usage";
      found = fmt::format("{} {} {} > {}{}", scope, config_.metric, format_size(*r.used),
                          format_size(*limit),
                          config_.held.count() > 0 ? " for " + format_duration(config_.held) : "");
    }
  } else {
    over_since_.reset();
  }
  if (const auto& p = config_.pressure; p && r.pressure && *r.pressure > p->percent) {
    if (!pressed_since_) pressed_since_ = r.t;
    if (r.t - *pressed_since_ >= p->held && !found) {
      kind = "pressure";
      found =
          fmt::format("{} memory pressure {} avg10 {:.1f}% > {:g}% for {}", scope,
                      p->full ? "full" : "some", *r.pressure, p->percent, format_duration(p->held));
    }
  } else {
    pressed_since_.reset();
  }
  // The projection: the leak policy's estimator, whose limit is the budget's.
  if (config_.trend && limit && r.used) {
    if (!trend_ || trend_limit_ != limit) {
      policies::WorkerContext context;
      context.started = r.t;
      context.memory_max = *limit;
      trend_ = config_.trend->start(context);
      trend_limit_ = limit;
    }
    policies::Sample s;
    s.t = r.t;
    s.current = *r.used;
    policies::Decision d = config_.trend->evaluate(s, *trend_);
    if (d && !found) {
      kind = "trend";
      // Over the limit already (before usage's `for:` has passed): said so.
      std::string when =
          *r.used > *limit ? std::string(" (the trend is over it)")
          : d.predicted_s  ? ", trend crosses in " + format_duration(whole_seconds(*d.predicted_s))
                           : std::string();
      found = fmt::format("{} {} {} {} {}{}", scope, config_.metric, format_size(*r.used),
                          *r.used > *limit ? ">" : "of", format_size(*limit), when);
    }
  }
  return found;
}

std::optional<BudgetChoice> Budget::choose(const BudgetReading& r, double need) {
  // What recycling `c` frees: what it grew since it was first seen (its
  // replacement takes its start-up memory again).
  auto freed = [&](const BudgetCandidate& c) {
    auto it = workers_.find(key_of(c));
    return it == workers_.end() ? 0.0
                                : std::max(0.0, static_cast<double>(c.bytes) - it->second.first);
  };
  auto slope = [&](const BudgetCandidate& c) { return slope_of(workers_.find(key_of(c))->second); };
  Pick pick;
  for (int level = 0; level < 3 && !pick.best; ++level)
    pick_in_level(r.candidates, level, config_.choose, need, freed, slope, pick);
  if (!pick.best) return std::nullopt;
  const BudgetCandidate& best = *pick.best;
  BudgetChoice choice;
  choice.program = best.program;
  choice.slot = best.slot;
  choice.pid = best.pid;
  choice.bytes = best.bytes;
  choice.slope = pick.best_slope;
  choice.reason = "recycling " + worker_name(best) + ": " + explain(pick, config_.choose, r.t);
  victim_ = key_of(best);
  victim_name_ = worker_name(best);
  return choice;
}

void Budget::start_over() {
  over_since_.reset();
  pressed_since_.reset();
  trend_.reset();
}

std::optional<BudgetChoice> Budget::evaluate(const BudgetReading& r) {
  if (!epoch_) epoch_ = r.t;
  const double now = seconds(r.t);
  const double span = std::chrono::duration<double>(config_.growth_window).count();
  std::optional<uint64_t> limit;
  if (config_.limit) limit = config_.limit->resolve(r.capacity);

  // Every candidate's growth, over growth_window; forgotten once gone.
  for (auto& [key, series] : workers_) series.seen = false;
  for (const BudgetCandidate& c : r.candidates) {
    auto [it, fresh] = workers_.try_emplace(key_of(c));
    Series& s = it->second;
    if (fresh) s.first = static_cast<double>(c.bytes);
    s.seen = true;
    add_point(s, now, static_cast<double>(c.bytes), span);
  }
  std::erase_if(workers_, [](const auto& e) { return !e.second.seen; });
  if (r.used) add_point(used_, now, static_cast<double>(*r.used), span);

  // The victim being recycled: until its run (or process) is gone, then the cool-down.
  if (victim_) {
    bool gone = std::none_of(r.candidates.begin(), r.candidates.end(),
                             [&](const BudgetCandidate& c) { return key_of(c) == *victim_; });
    if (gone) {
      victim_.reset();
      cooling_until_ = r.t + config_.cooldown;
    }
  }
  bool waiting = victim_ || (cooling_until_ && r.t < *cooling_until_);
  std::optional<BudgetChoice> choice;
  stuck_.clear();
  if (waiting) {
    start_over();
  } else {
    std::string kind;
    if (auto why = trigger(r, limit, kind)) {
      // What the victim's recycle must free: the excess over the limit, and
      // what the figure grows by before the budget can act again.
      double excess =
          limit && r.used && *r.used > *limit ? static_cast<double>(*r.used - *limit) : 0;
      double wait =
          std::chrono::duration<double>(config_.cooldown + config_.held + config_.interval).count();
      double need = excess + std::max(0.0, slope_of(used_).value_or(0)) * wait;
      if (auto c = choose(r, need)) {
        c->trigger = kind;
        c->reason = *why + "; " + c->reason;
        ++view_.recycles;
        previous_choice_ = std::exchange(view_.last_choice, c->reason);
        previous_at_ = std::exchange(view_.last_at, r.t);
        start_over();
        choice = std::move(c);
      } else {
        stuck_ = *why + "; no worker can be recycled now";
      }
    }
  }
  update_view(r, limit);
  return choice;
}

void Budget::update_view(const BudgetReading& r, std::optional<uint64_t> limit) {
  view_.used = r.used;
  view_.limit = limit;
  view_.pressure = r.pressure;
  view_.slope = slope_of(used_);
  view_.crosses_in_s.reset();
  if (view_.slope && *view_.slope > 0 && limit && r.used && *r.used < *limit)
    view_.crosses_in_s = static_cast<double>(*limit - *r.used) / *view_.slope;
  if (!stuck_.empty()) {
    view_.state = stuck_;
  } else if (victim_) {
    view_.state = "waiting for " + victim_name_ + " to recycle";
  } else if (cooling_until_ && r.t < *cooling_until_) {
    view_.state = "cooling down " +
                  format_duration(std::chrono::duration_cast<Duration>(*cooling_until_ - r.t));
  } else if (over_since_) {
    view_.state = "over the limit for " +
                  format_duration(std::chrono::duration_cast<Duration>(r.t - *over_since_));
  } else if (pressed_since_) {
    view_.state = "under pressure for " +
                  format_duration(std::chrono::duration_cast<Duration>(r.t - *pressed_since_));
  } else {
    view_.state = "ok";
  }
}

void Budget::refused() {
  victim_.reset();
  cooling_until_.reset();
  // Not carried out: not counted, and the last choice is the one before.
  if (view_.recycles > 0) --view_.recycles;
  view_.last_choice = std::move(previous_choice_);
  view_.last_at = previous_at_;
}

}  // namespace recycler::engine
