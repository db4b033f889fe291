// The standard process_* figures of a Prometheus client, for recycler
// itself, read from /proc (the root is a parameter: tests give a fixture).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "supervisor/util/result.h"

namespace recycler::metrics {

struct ProcessStats {
  double cpu_seconds = 0;            // process_cpu_seconds_total: utime + stime
  uint64_t resident_bytes = 0;       // process_resident_memory_bytes
  uint64_t virtual_bytes = 0;        // process_virtual_memory_bytes
  double start_time_seconds = 0;     // process_start_time_seconds: since the epoch
  std::optional<uint64_t> open_fds;  // process_open_fds
  std::optional<uint64_t> max_fds;   // process_max_fds: the soft RLIMIT_NOFILE
};

// From the text of /proc/PID/stat and /proc/stat (its btime line).
std::optional<ProcessStats> parse_process_stats(std::string_view pid_stat,
                                                std::string_view proc_stat, long ticks_per_second,
                                                long page_size);

// Reads PROC/self/stat, PROC/stat, counts PROC/self/fd and asks getrlimit.
Result<ProcessStats> read_process_stats(const std::string& proc_root);

}  // namespace recycler::metrics
