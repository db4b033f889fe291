// A snapshot of what the supervisor runs, as plain data: produced from the
// loop by Supervisor::status() at any time (no probe is read for it, apart
// from the cgroup's memory figures of a worker no policy samples), and read
// by the control socket (`recycler status`, `top`), the metrics endpoint and
// systemd's STATUS= line.
//
// The cumulative counters (exits by reason, recycles by program, policy and
// action) outlive reloads: StatusCounters keeps them in the supervisor and
// counts them from the structured log events that report them ("exit",
// "oom_kill", "recycle"), the same ones an operator reads.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include "supervisor/log_fields.h"

namespace recycler {

// A predicting policy's view of one worker's growth (policies::Outlook).
struct OutlookStatus {
  std::string policy;
  double slope_bytes_per_s = 0;
  double seconds_to_limit = 0;
};

struct WorkerStatus {
  std::string program;
  unsigned slot = 0;
  std::string state;  // to_string(WorkerState): running, starting, stopping, ...
  std::string phase;  // to_string(StopPhase) within running and stopping, else ""
  std::optional<pid_t> pid;
  double uptime_s = 0;                // of the current run; 0 when none runs
  std::optional<int64_t> start_time;  // of the current run, unix seconds
  unsigned generation = 0;
  uint64_t restarts_recycles = 0;  // starts that followed a recycle
  uint64_t restarts_crashes = 0;   // runs that ended on their own, not cleanly
  // Every figure of the last sample that is known, bytes: anon, current, file,
  // rss, pss, uss, device, gpu, gpu_total.
  std::map<std::string, uint64_t> memory;
  std::string memory_metric;      // what its policies watch ("current" when none says)
  std::optional<uint64_t> limit;  // that metric's limit, else the cgroup's memory_max
  std::optional<uint64_t> requests;
  std::optional<uint32_t> threads;
  std::vector<OutlookStatus> outlooks;
  std::string last_recycle_reason;  // "" before the first recycle

  bool running() const { return state == "running"; }
};

struct ProgramStatus {
  std::string name;
  unsigned instances = 0;
  unsigned running = 0;  // slots in state running
  std::vector<WorkerStatus> workers;
  // Its notify socket's: messages read, and the reads that took them (under
  // load a read takes a batch, notify/read_pacer.h); nullopt without a socket.
  std::optional<uint64_t> notify_messages, notify_reads;
  // Answers sent to its workers (request limits, counts seen), and those that
  // could not go (a full queue, a sender gone).
  std::optional<uint64_t> notify_answers, notify_answers_dropped;
};

// How a run ended, as counted (classify_exit).
enum class ExitReason { Clean, Crash, OomKill, Signal };
const char* to_string(ExitReason reason);  // "clean", "crash", "oom_kill", "signal"

struct RecycleCountKey {
  std::string program, policy, action;
  auto operator<=>(const RecycleCountKey&) const = default;
};

struct SupervisorStatus {
  pid_t pid = 0;
  double uptime_s = 0;
  std::string config_path;  // "" in wrap mode
  std::vector<ProgramStatus> programs;
  unsigned workers = 0;
  unsigned workers_running = 0;
  uint64_t recycles = 0;
  uint64_t oom_kills = 0;
  std::map<ExitReason, uint64_t> exits;  // every reason, 0 when none
  std::map<RecycleCountKey, uint64_t> recycles_by;
  // Exits by program and reason (those that happened).
  std::map<std::pair<std::string, ExitReason>, uint64_t> exits_by;
};

// Counts exits and recycles from the log events that report them.
class StatusCounters {
 public:
  // Every structured event (log::event): "exit" and "oom_kill" count an exit
  // by its reason, "recycle" a recycle by program, policy and action; others
  // are ignored.
  void observe(std::string_view event, const log::Fields& fields);
  // Copies the totals into `status` (recycles, oom_kills, exits, exits_by, recycles_by).
  void fill(SupervisorStatus& status) const;

 private:
  std::map<ExitReason, uint64_t> exits_;
  std::map<std::pair<std::string, ExitReason>, uint64_t> exits_by_;
  std::map<RecycleCountKey, uint64_t> recycles_;
};

// An exit as the "exit"/"oom_kill" event reports it: an OOM kill; clean when
// recycler asked for it (a stop or a recycle) or the status is 0; killed by a
// signal nobody asked for; else a crash (a non-zero status).
ExitReason classify_exit(bool oom_kill, bool requested, bool signaled, int status);

// "3 programs, 7 workers running, 12 recycles, 0 OOM kills" (systemd's STATUS=).
std::string summary_line(const SupervisorStatus& status);

}  // namespace recycler
