// `recycler replay`: a recorded trace (trace.h) fed back through a program's
// policies offline, to see when they would have fired and tune them.
//
// Time is the trace's own: each policy starts as the worker did at t = 0
// (WorkerContext{started = TimePoint{}, memory_max from the program's limits})
// and sees the Samples in order. The worker is never recycled: the policies
// keep their state and go on being evaluated to the end of the trace. A
// decision is reported when a policy starts firing, that is when it did not
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

// The decisions of `program`'s policies over `samples`, in order of time (and
// of the policies in the config for the same Sample).
std::vector<Replayed> replay(const config::ProgramConfig& program,
                             const std::vector<policies::Sample>& samples,
                             const ReplayOptions& options = {});

}  // namespace recycler::timeline
