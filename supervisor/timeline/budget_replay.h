// `recycler replay --budget`: recorded traces of several workers (one per
// worker, as their timelines record them: DIR/PROGRAM.SLOT.csv) fed back
// together through the config's budget (engine/budget.h), offline, to see
// when it would have acted and on which worker.
//
// The traces start together at t = 0 and are read every budget.interval:
// each worker's figure is its latest row at or before then, and the budget
// sees their sum (scope: workers; a trace holds no host or container figure,
// nor PSI). A worker is eligible once its program's min_uptime has passed.
// A chosen worker is taken as recycled: from then on it is out of the sum
// and of the candidates (the trace cannot say what its replacement would
// have done), and the budget's wait for it ends there.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "policies/base/sample.h"
#include "supervisor/config/config.h"
#include "supervisor/engine/budget.h"

namespace recycler::timeline {

struct WorkerTrace {
  std::string program;
  unsigned slot = 0;
  std::vector<policies::Sample> samples;
};

struct BudgetReplayed {
  double t = 0;  // seconds
  engine::BudgetChoice choice;
  uint64_t used = 0;  // the sum at the choice
};

// The budget's choices over `traces`. `capacity`: what a percentage limit is of.
std::vector<BudgetReplayed> replay_budget(const config::Config& config,
                                          const std::vector<WorkerTrace>& traces,
                                          std::optional<uint64_t> capacity);

// "api.2.csv" (a timeline's samples file): program "api", slot 2; nullopt
// for any other name.
std::optional<std::pair<std::string, unsigned>> trace_worker(const std::string& path);

// {"t": 31.5, "program": "api", "slot": 2, "trigger": "trend", "used_bytes": ..., "reason": "..."}
std::string to_json(const BudgetReplayed& replayed);

}  // namespace recycler::timeline
