// The top-level budget (config `budget:`) on the loop: every budget.interval
// it reads the scope's figure (the sum of the workers' last samples; the
// host's /proc/meminfo and /proc/pressure/memory; or the memory files of the
// cgroup recycler runs in) and every worker's, hands them to the pure
// decision (engine/budget.h), and gives its one choice to the victim's
// program (ProgramMonitor::budget_recycle), whose engine carries it out
// through its queue, loop guard and checkpoint. Reads a few small files per
// interval and never waits on a worker.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "supervisor/cgroup/cgroup.h"
#include "supervisor/config/config.h"
#include "supervisor/control/status.h"
#include "supervisor/engine/budget.h"
#include "supervisor/runtime/program.h"
#include "supervisor/timeline/writer.h"
#include "supervisor/util/timers.h"

namespace recycler {

class BudgetWatch {
 public:
  // Where the scope's figures are read: data, so tests can point elsewhere.
  struct Sources {
    std::string proc = "/proc";
    // The cgroup recycler runs in, in its memory hierarchy (scope:
    // container; "" when it has none), and the workers' root (scope:
    // workers: its memory.pressure on v2).
    std::string container;
    std::string workers;
    bool v2 = false;
  };

  BudgetWatch(Timers& timers, Programs& programs, const config::BudgetConfig& config,
              Sources sources);
  BudgetWatch(const BudgetWatch&) = delete;
  BudgetWatch& operator=(const BudgetWatch&) = delete;

  const config::BudgetConfig& config() const { return config_; }
  // What status and metrics show.
  BudgetStatus status(TimePoint now) const;

 private:
  void arm();
  void tick();
  engine::BudgetReading read(TimePoint now);
  void act(const engine::BudgetChoice& choice, const engine::BudgetReading& reading);
  // Said once: a figure the config asks for that cannot be read here.
  void unreadable(const std::string& what);

  Timers& timers_;
  Programs& programs_;
  config::BudgetConfig config_;
  Sources sources_;
  engine::Budget budget_;
  std::unique_ptr<Timer> tick_;
  // budget.timeline: the figure at each evaluation, the choices as events.
  std::optional<timeline::TimelineWriter> timeline_;
  void record(const engine::BudgetReading& reading);
  bool warned_used_ = false, warned_pressure_ = false;
};

// Where this recycler's budget reads its figures: its own cgroup from
// /proc/self/cgroup (in the memory hierarchy the manager found), the
// workers' root, /proc.
BudgetWatch::Sources budget_sources(const cgroup::Manager& cgroups, const cgroup::Paths& paths);

}  // namespace recycler
