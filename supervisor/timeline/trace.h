// Memory timelines: every Sample of a worker as one CSV row, and the events of
// its runs in a file beside it, so that `recycler replay` can feed a recorded
// trace back through a config's policies to tune them offline.
//
// Samples file, DIR/PROGRAM.SLOT.csv (one run per file: t starts at 0 again):
//
//   t,current,anon,file,rss,pss,uss,device,requests,threads,gpu,gpu_total,iteration
//   12.345,524288000,419430400,104857600,430000000,,,,1200,9,,,
//
//   t          seconds since the worker started, 3 decimals
//   current..  bytes: the cgroup's current, anon and file; rss, pss and uss
//              summed over the worker's processes; device bytes it reported
//   requests   completed since the worker started (cumulative)
//   threads    every thread of every process of the worker
//   gpu        GPU memory (NVML) on the device where the worker holds the most
//   gpu_total  GPU memory summed over devices
//   iteration  the last iteration the worker reported (RECYCLER_ITERATION):
//              where it changes, an iteration boundary
//   an empty cell: not measured in that sample
//
// Reading a trace back (read_trace): the header names the columns, any subset
// of the ones above in any order as long as `t` is there, so traces can be
// made by hand from other monitoring (and those recorded before a column was
// added still load). Blank lines, CRLF line ends, a UTF-8
// BOM, spaces around cells, double quotes around a whole cell and decimal
// sizes and counts ("1048576.0", rounded down) are tolerated. An unknown or
// repeated column, a bad or negative number, a decreasing t, or a row with
// the wrong number of cells is an error "FILE:LINE: column NAME: ...".
// Each row becomes a Sample with t = TimePoint{} + t seconds. rss, pss, uss,
// requests, threads and gpu also go into one synthetic process (pid 1, not the
// main process) when the row has any of them, and requests and threads into
// the Sample's own fields too: policies with scope: worker and scope: process
// both see them.
//
// Events file, DIR/PROGRAM.SLOT.events.csv:
//
//   time,generation,t,event,pid,detail
//   2026-11-22T10:15:03.123Z,3,0.002,start,4242,
//   2026-11-22T10:31:40.456Z,3,997.335,recycle,4242,"anon 612 MiB > 600 MiB, memory policy"
//
//   time        wall clock, ISO 8601 UTC with milliseconds
//   generation  which run of the slot (RECYCLER_GENERATION)
//   t           seconds since that run started
//   event       start, recycle, checkpoint, checkpointed or exit
//   pid         the worker's main process; empty when there is none
//   detail      free text (the recycle reason, the exit status), quoted as
//               RFC 4180 says when it holds a comma, a quote or a line break
#pragma once

#include <sys/types.h>

#include <chrono>
#include <istream>
#include <string>
#include <string_view>
#include <vector>

#include "policies/policy.h"
#include "supervisor/util/result.h"

namespace recycler::timeline {

using policies::Sample;
using policies::TimePoint;
using WallClock = std::chrono::system_clock;

inline constexpr std::string_view kSamplesHeader =
    "t,current,anon,file,rss,pss,uss,device,requests,threads,gpu,gpu_total,iteration";
inline constexpr std::string_view kEventsHeader = "time,generation,t,event,pid,detail";

// The samples row of `sample` (without its newline), t relative to `started`.
std::string format_row(const Sample& sample, TimePoint started);
// The same appended to `out`: the writer formats into one reused buffer.
void append_row(std::string& out, const Sample& sample, TimePoint started);

// An events row (without its newline).
void append_event_row(std::string& out, WallClock::time_point time, unsigned generation,
                      std::chrono::milliseconds since_start, std::string_view event, pid_t pid,
                      std::string_view detail);
// "2026-11-22T10:15:03.123Z"
std::string format_utc(WallClock::time_point time);
// `field` as one CSV cell: as is, or quoted with its quotes doubled when it
// holds a comma, a quote or a line break.
void append_csv_field(std::string& out, std::string_view field);

// Every Sample of a samples file; `name` is the file name errors start with.
Result<std::vector<Sample>> read_trace(std::istream& in, const std::string& name);
// A regular file of at most kMaxTraceBytes (a FIFO or /dev/zero is refused).
inline constexpr uint64_t kMaxTraceBytes = uint64_t{1} << 30;
Result<std::vector<Sample>> read_trace_file(const std::string& path);

// Seconds since TimePoint{}: a trace's t.
double seconds(TimePoint t);

}  // namespace recycler::timeline
