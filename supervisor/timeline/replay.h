// `recycler replay`: a recorded trace (trace.h) fed back through a program's
// decision engine offline, to see when its policies would have fired and
// what recycler would have done, and to tune them.
//
// It drives the runtime's own RecycleController (engine/recycle_controller.h)
// with a simulated worker, so precedence, the recycle queue and the
// checkpoint protocol are the runtime's. Time is the trace's own: the worker
// starts at t = 0 (WorkerContext{started = TimePoint{}, memory_max from the
// program's limits, seed}) and the Samples come in order. A trace is one run,
// and the simulated worker goes on as it did in the trace:
//   - a recycle is taken as under way to the end of the trace (so recycler
//     would act on that one decision: `acted`), and the policies keep their
//     state and go on being evaluated;
//   - a checkpoint asked for is never confirmed (the trace cannot say), so
//     checkpoint.timeout applies in trace time;
//   - a process signalled (scope: process) exits before the next Sample.
// A decision is reported when a policy starts firing, that is when it did not
// fire on the previous Sample or fired at another pid, so a memory limit
// exceeded for 500 Samples is reported once, and again only after it went
// quiet and fired anew.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "policies/policy.h"
#include "supervisor/config/config.h"

namespace recycler::timeline {

struct ReplayOptions {
  uint64_t seed = 0;           // WorkerContext::seed (jitter)
  bool stop_at_first = false;  // report only the first decision
};

struct Replayed {
  double t = 0;        // seconds, the Sample's t
  std::string policy;  // its name ("memory")
  policies::Decision decision;
};

struct ReplayRun {
  // When each policy started firing, in order of time (and of the policies
  // in the config for the same Sample).
  std::vector<Replayed> reported;
  // The decisions recycler carried out (its `recycle` log lines and timeline
  // events), at the Sample they were taken on.
  std::vector<Replayed> acted;
};

ReplayRun replay_run(const config::ProgramConfig& program,
                     const std::vector<policies::Sample>& samples,
                     const ReplayOptions& options = {});

// replay_run(...).reported
std::vector<Replayed> replay(const config::ProgramConfig& program,
                             const std::vector<policies::Sample>& samples,
                             const ReplayOptions& options = {});

}  // namespace recycler::timeline
