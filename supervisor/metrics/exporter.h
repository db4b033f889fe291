// What GET /metrics says: the supervisor's status snapshot (status.h) and
// its own figures in the Prometheus text format (text.h). Pure: the caller
// gathers the figures (Supervisor::status(), /proc/self, the monitor's
// sample durations, the server's counters) and this writes them. Worker
// series are labelled by program and slot, never pid; every per-program
// series (counters included) is written only for the programs in the
// snapshot, so a program removed by a reload disappears. The series are
// listed in docs/operations.md ("Metrics").
#pragma once

#include <optional>
#include <string>

#include "supervisor/control/status.h"
#include "supervisor/metrics/process_stats.h"
#include "supervisor/metrics/text.h"

namespace recycler::metrics {

struct ServerCounters {
  uint64_t scrapes = 0;
  uint64_t refused = 0;
  uint64_t dropped = 0;
};

struct Figures {
  const SupervisorStatus* status = nullptr;
  std::optional<ProcessStats> process;  // recycler itself; none when /proc could not be read
  const Histogram* sample_duration = nullptr;
  ServerCounters server;
};

std::string render(const Figures& figures);

}  // namespace recycler::metrics
