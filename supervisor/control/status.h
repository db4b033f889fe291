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

#include "policies/base/enums.h"
#include "supervisor/log/fields.h"

namespace recycler {

// A predicting policy's view of one worker's growth (policies::Outlook).
struct OutlookStatus {
  std::string policy;
  double slope_bytes_per_s = 0;
  double seconds_to_limit = 0;
};

// One process of a worker whose policies look at each process (a pre-fork
// server's master and workers under scope: process), from its last sample.
struct ProcessStatus {
  pid_t pid = 0;
  bool main = false;       // the worker's main process (the master)
  bool recycling = false;  // signalled, or waiting its turn
  // Its figure of WorkerStatus::memory_metric (rss, pss, uss or gpu), bytes.
  std::optional<uint64_t> memory;
  std::optional<uint64_t> requests;       // served since it was first seen
  std::optional<uint64_t> request_limit;  // the limit drawn for it (jitter included)
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
  // Starts that followed a recycle, and processes recycled one by one (scope: process).
  uint64_t restarts_recycles = 0;
  uint64_t process_recycles = 0;  // of those, the processes recycled one by one
  uint64_t restarts_crashes = 0;  // runs that ended on their own, not cleanly
  // Every figure of the last sample that is known, bytes: anon, current, file,
  // rss, pss, uss, device, gpu, gpu_total.
  std::map<std::string, uint64_t> memory;
  std::string memory_metric;  // what its policies watch ("current" when none says)
  // "process" where that policy watches each process (scope: process): then
  // `limit` is each process's and `process_memory` the largest process's
  // figure, while memory[memory_metric] stays the sum over the processes.
  std::string memory_scope = "worker";
  std::optional<uint64_t> limit;  // that metric's limit, else the cgroup's memory_max
  std::optional<uint64_t> process_memory;
  // Its processes (at most kMaxStatusProcesses, largest first) where a
  // policy looks at each process or counts each one's requests; else empty.
  std::vector<ProcessStatus> processes;
  std::optional<uint64_t> requests;
  std::optional<uint32_t> threads;
  std::vector<OutlookStatus> outlooks;
  std::string last_recycle_reason;  // "" before the first recycle
  // What its run last said with STATUS= (sd_notify), as `systemctl status`
  // shows it: text from the worker, escaped where printed; "" for none.
  std::string status_text;
  // Whether it can take work (ProgramMonitor::readiness; GET /readyz), and
  // if not, why ("starting", "no READY=1 from this run yet", ...).
  bool ready = false;
  std::string not_ready;

  bool running() const { return state == "running"; }
};

// Processes listed per worker in status (a pre-fork server has a few dozen).
inline constexpr size_t kMaxStatusProcesses = 256;

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
  // config gang: its ranks are recycled together; each such recycle counts
  // once here (event gang_recycle), with the reason of the last one.
  bool gang = false;
  uint64_t gang_recycles = 0;
  std::string gang_last_reason;
};

// How a run ended, as counted (classify_exit).
enum class ExitReason { Clean, Crash, OomKill, Signal };
inline constexpr EnumName<ExitReason> kExitReasonNames[] = {{ExitReason::Clean, "clean"},
                                                            {ExitReason::Crash, "crash"},
                                                            {ExitReason::OomKill, "oom_kill"},
                                                            {ExitReason::Signal, "signal"}};
const char* to_string(ExitReason reason);

struct RecycleCountKey {
  std::string program, policy, action;
  auto operator<=>(const RecycleCountKey&) const = default;
};

// The top-level budget (config budget:, engine/budget.h), as of its last reading.
struct BudgetStatus {
  std::string scope, metric;
  std::optional<uint64_t> used, limit;
  std::optional<double> pressure;           // PSI avg10, percent (some or full, `pressure_kind`)
  std::string pressure_kind;                // "some", "full"; "" without a pressure trigger
  std::optional<double> slope_bytes_per_s;  // the scope's figure over growth_window
  std::optional<double> crosses_in_s;       // at that slope
  std::string state;                        // "ok", "over the limit for 3s", ...
  uint64_t recycles = 0;                    // choices made since it started (or was reloaded)
  std::string last_choice;                  // its reason; "" before the first
  std::optional<double> last_ago_s;
};

// The memory cgroup recycler runs in (its container; runtime/container_watch.h),
// as of its last reading.
struct ContainerStatus {
  std::string dir;
  std::optional<uint64_t> limit, current, oom_kills;
  std::optional<double> pressure;  // v2 memory.pressure some avg10, percent
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
  std::optional<BudgetStatus> budget;
  std::optional<ContainerStatus> container;
};

// Counts exits and recycles from the log events that report them.
class StatusCounters {
 public:
  // A worker slot's processes recycled one by one (scope: process), and
  // whether the slot's last recycle was one of them, with its reason
  // ("pid 4242: uss 201 MiB > 200 MiB (memory policy)").
  struct SlotRecycles {
    uint64_t processes = 0;
    bool last_was_process = false;
    std::string last_process_reason;
  };
  // Every structured event (log::event): "exit" and "oom_kill" count an exit
  // by its reason, "recycle" a recycle by program, policy and action,
  // "gang_recycle" a gang's; others are ignored.
  void observe(std::string_view event, const log::Fields& fields);
  // Copies the totals into `status` (recycles, oom_kills, exits, exits_by,
  // recycles_by, and each gang program's gang_recycles and gang_last_reason).
  void fill(SupervisorStatus& status) const;
  // nullptr before the slot's first recycle.
  const SlotRecycles* slot(const std::string& program, unsigned slot) const;

 private:
  std::map<std::pair<std::string, unsigned>, SlotRecycles> slots_;
  std::map<ExitReason, uint64_t> exits_;
  std::map<std::pair<std::string, ExitReason>, uint64_t> exits_by_;
  std::map<RecycleCountKey, uint64_t> recycles_;
  std::map<std::string, std::pair<uint64_t, std::string>> gangs_;  // by program
};

// An exit as the "exit"/"oom_kill" event reports it: an OOM kill; clean when
// recycler asked for it (a stop or a recycle) or the status is 0; killed by a
// signal nobody asked for; else a crash (a non-zero status).
ExitReason classify_exit(bool oom_kill, bool requested, bool signaled, int status);

// "3 programs, 7 workers running, 12 recycles, 0 OOM kills" (systemd's STATUS=).
std::string summary_line(const SupervisorStatus& status);

}  // namespace recycler
