// The whole box's memory (config `budget:`), as one pure decision: each
// evaluation takes a reading of the scope (the sum of the supervised
// workers, the host, or the container recycler runs in) and of every worker
// that could be recycled, and returns at most one choice. No event loop, no
// I/O, time from the readings: tests/unit/budget_test.cpp drives it with
// fake time, and `recycler replay --budget` with recorded traces.
//
//   triggers (any one):
//     usage     the scope's figure over `limit` (a size, or a percentage of
//               the scope's capacity), held `for:`
//     pressure  PSI avg10 (some or full) over its threshold, held its `for:`
//     trend     the leak policy's estimator over the scope's figure projects
//               it to reach `limit` within `horizon`
//   then one victim, never more:
//     eligible  running, not being recycled, past its program's min_uptime
//               (the runtime says which); never one whose program omits it
//     order     programs that prefer it first, those that avoid it last; within
//               a rank by `choose`: fastest-growing over `growth_window`
//               (Theil–Sen) among those whose recycle frees enough: the
//               excess over the limit, and what the figure grows by during
//               cooldown + for + interval (what a recycle frees is what the
//               worker grew since it was first seen); when none does, the one
//               that grew the most; when none grew, the largest), largest, newest
//   then it waits: until the victim's run (or process) is gone, then
//   `cooldown`, with the triggers' clocks and the trend started over, so the
//   box must be over its budget again, for as long again, before the next
//   choice. The replacement is a new candidate once past its min_uptime;
//   the program's own engine still applies its queue and loop guard.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include "policies/base/sample.h"
#include "policies/policy.h"
#include "policies/trend.h"
#include "supervisor/config/config.h"

namespace recycler::engine {

using policies::TimePoint;

// A worker (or one process of a pre-fork worker) the budget could recycle.
struct BudgetCandidate {
  std::string program;
  unsigned slot = 0;
  pid_t pid = 0;  // a process of the worker (its program's budget scope: process); 0: the worker
  uint64_t bytes = 0;  // by the budget's metric
  TimePoint started;   // its run's start: with `pid`, what tells one run (or process) from the next
  config::BudgetPreference preference = config::BudgetPreference::None;
  bool eligible = true;  // running, not being recycled, past min_uptime
};

struct BudgetReading {
  TimePoint t;
  std::optional<uint64_t> used;      // the scope's figure by the metric; empty: unreadable
  std::optional<uint64_t> capacity;  // what a percentage limit is of
  std::optional<double> pressure;    // PSI avg10, percent (some or full, as configured)
  std::vector<BudgetCandidate> candidates;
};

struct BudgetChoice {
  std::string program;
  unsigned slot = 0;
  pid_t pid = 0;
  std::string trigger;  // "usage", "pressure" or "trend"
  // "workers current 410 MiB > 400 MiB for 5s; recycling api[2]: fastest-growing, 38 MiB/min"
  std::string reason;
  // Its figures, for the log's fields.
  uint64_t bytes = 0;
  std::optional<double> slope;  // bytes per second, when chosen as fastest
};

// What status and metrics show.
struct BudgetView {
  std::optional<uint64_t> used, limit;
  std::optional<double> pressure;
  std::optional<double> slope;         // the scope's figure, bytes per second over growth_window
  std::optional<double> crosses_in_s;  // at that slope, when it grows and is under the limit
  std::string state = "ok";  // "ok", "over for 3s", "waiting for api[1]", "cooling down 20s"
  uint64_t recycles = 0;
  std::string last_choice;  // the last choice's reason
  std::optional<TimePoint> last_at;
};

// A worker's figure by the budget's metric: its cgroup's current or anon, or
// rss, pss or uss summed over its processes; empty when not measured.
std::optional<uint64_t> budget_figure(const policies::Sample& sample, std::string_view metric);
// One process's figure (a candidate of a program whose budget scope is
// process): by the metric where it is a process's (rss, pss, uss), else rss.
std::optional<uint64_t> budget_figure(const policies::ProcessSample& process,
                                      std::string_view metric);

class Budget {
 public:
  explicit Budget(const config::BudgetConfig& config);

  // One reading, in time order. At most one choice, which the caller hands
  // to the victim's program (through its engine's queue); then refused()
  // when that program could not take it.
  std::optional<BudgetChoice> evaluate(const BudgetReading& reading);
  // The last choice was not carried out (the worker was no longer running):
  // the wait for it ends, and the next reading may choose again.
  void refused();
  const BudgetView& view() const { return view_; }

  // Points kept per candidate and for the scope's own slope (bounded
  // whatever the interval and the window).
  static constexpr size_t kMaxPoints = 64;

 private:
  using Key = std::tuple<std::string, unsigned, pid_t, TimePoint>;
  static Key key_of(const BudgetCandidate& c) { return {c.program, c.slot, c.pid, c.started}; }
  struct Series {
    std::vector<policies::Point> points;
    double first = 0;   // the figure when first seen: about what a replacement starts with
    bool seen = false;  // in the latest reading
  };
  static void add_point(Series& s, double t, double v, double span);
  std::optional<double> slope_of(const Series& s);
  double seconds(TimePoint t) const;

  std::optional<std::string> trigger(const BudgetReading& r, std::optional<uint64_t> limit,
                                     std::string& kind);
  // `need`: what the victim's recycle must free (bytes): the excess over
  // the limit and the figure's growth until the budget can act again.
  std::optional<BudgetChoice> choose(const BudgetReading& r, double need);
  void start_over();
  void update_view(const BudgetReading& r, std::optional<uint64_t> limit);

  config::BudgetConfig config_;
  std::optional<TimePoint> epoch_;  // the first reading: the points' t = 0
  std::optional<TimePoint> over_since_, pressed_since_;
  // The trend: the leak policy's state over the scope's figure, started
  // afresh after each choice and whenever the limit changes.
  std::unique_ptr<policies::PolicyState> trend_;
  std::optional<uint64_t> trend_limit_;
  Series used_;
  std::map<Key, Series> workers_;
  // The victim being recycled, until it is gone; then no choice before `cooling_until_`.
  std::optional<Key> victim_;
  std::string victim_name_;
  std::optional<TimePoint> cooling_until_;
  std::vector<double> scratch_;
  std::string stuck_;  // a trigger held with no candidate, as of the last reading
  // The view's last choice before the latest, for refused().
  std::string previous_choice_;
  std::optional<TimePoint> previous_at_;
  BudgetView view_;
};

}  // namespace recycler::engine
