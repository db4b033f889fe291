// What GET /metrics says: the supervisor's figures in the Prometheus text
// format (text.h). Pure: the caller gathers the figures (Supervisor's
// status, /proc/self, the monitor's sample durations, the server's own
// counters) and this writes them; the series and their labels are listed in
// the README ("Metrics").
#pragma once

#include <optional>
#include <string>

#include "supervisor/metrics/process_stats.h"
#include "supervisor/metrics/text.h"

namespace recycler::metrics {

struct ServerCounters {
  uint64_t scrapes = 0;
  uint64_t refused = 0;
  uint64_t dropped = 0;
};

struct Figures {
  std::optional<ProcessStats> process;  // recycler itself; none when /proc could not be read
  const Histogram* sample_duration = nullptr;
  ServerCounters server;
};

std::string render(const Figures& figures);

}  // namespace recycler::metrics
