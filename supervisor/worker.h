// One worker slot (api[0], api[1], ...) and its lifecycle:
//
//   stopped -> starting -> running -> stopping -> exited -> backoff -> starting ...
//                                   \-> exited (on its own)  \-> failed (crash loop)
//
// "exited" lasts while leftover processes in the slot's cgroup are killed and
// the cgroup drains; then the slot restarts (per restart.mode, after a
// jittered exponential backoff), stops for good, or, after crash_loop.max
// exits within crash_loop.within, is marked failed and no longer restarted.
//
// Everything outside (time, spawning, cgroups, randomness) comes in through
// WorkerContext and the WorkerCgroup, so this logic runs unchanged against
// libuv and real processes or against fakes in unit tests.
#pragma once

#include <sys/types.h>

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "policies/restart_backoff.h"
#include "supervisor/cgroup/cgroup.h"
#include "supervisor/config/config.h"
#include "supervisor/probe/service.h"
#include "supervisor/process.h"
#include "supervisor/timers.h"

namespace recycler {

enum class WorkerState { Stopped, Starting, Running, Stopping, Exited, Backoff, Failed };
const char* to_string(WorkerState state);

// What the worker has asked of its main process, within Running and Stopping
// (systemd's service states, as finely as recycler needs them):
//
//   running:  none -> checkpointing (the checkpoint signal; a clean exit now
//             ends a recycle, not the program)
//   stopping: recycling (the stop signal: drain, then the replacement starts)
//             stop-sigterm (the stop signal: then stopped for good)
//             stop-sigkill (stop.timeout passed, or kill(): SIGKILL to the cgroup)
//
// A stop asked during a recycle turns recycling into stop-sigterm.
enum class StopPhase { None, Checkpointing, Recycling, StopSigterm, StopSigkill };
const char* to_string(StopPhase phase);

// What came of Worker::signal_process.
enum class SignalResult {
  Sent,
  NotMember,  // gone, or no longer in the worker's cgroup (the pid was reused)
  Gone,       // exited between the look and the signal
};

class Worker;

struct WorkerContext {
  Timers& timers;
  Launcher& launcher;
  std::mt19937_64& rng;
  // The environment workers inherit (recycler's own, minus what systemd meant
  // for recycler alone: NOTIFY_SOCKET, LISTEN_FDS, ...).
  const std::vector<std::string>& base_env;
  // Called after every state change (the supervisor decides when it is done).
  std::function<void(Worker&)> on_state_change;
  // The RLIMIT_NOFILE recycler itself was given, restored in workers whose
  // config sets none (recycler raises its own soft limit; see Supervisor::run).
  std::optional<config::Rlimit> worker_nofile = std::nullopt;
  // Every whole output line of a program that counts requests by pattern.
  std::function<void(Worker&, pid_t, std::string_view)> on_output = nullptr;
  // Sees a signalled process of a pre-fork server leave service before it
  // exits (probe/service.h); null: only its exit counts.
  const probe::ServiceProbe* service = nullptr;
  // What a FAILED line (a crash loop, a command that cannot be run) tells the
  // user to do next: with a config file, fix and reload; in wrap mode there
  // is no file to reload.
  std::string failed_advice = "Fix the program, then reload (SIGHUP) or restart recycler.";
};

// Why a start follows a recycle, for the replacement's environment.
struct RecycleCause {
  std::string reason;   // RECYCLER_RECYCLE_REASON: "anon 612 MiB > 600 MiB (memory policy)"
  bool resume = false;  // RECYCLER_RESUME=1: the worker confirmed a checkpoint before it stopped
};

// The environment of one start of a slot: base, then the program's env, then
// the thread-count variables (unless env sets them), then RECYCLER_* (with
// RECYCLER_RECYCLE_REASON and RECYCLER_RESUME only after a recycle: never
// inherited from recycler's own environment).
std::vector<std::string> worker_environment(const std::vector<std::string>& base,
                                            const config::ProgramConfig& program, unsigned slot,
                                            unsigned generation,
                                            const std::string& notify_socket = "",
                                            const std::optional<RecycleCause>& cause = {});

class Worker {
 public:
  // `notify_socket`: NOTIFY_SOCKET for its runs, its program's notify socket
  // ("" = none).
  Worker(WorkerContext& context, std::shared_ptr<const config::ProgramConfig> program,
         unsigned slot, std::unique_ptr<cgroup::WorkerCgroup> cgroup,
         std::string notify_socket = "");
  ~Worker();  // removes the slot's cgroup; only destroy a stopped or failed worker
  Worker(const Worker&) = delete;
  Worker& operator=(const Worker&) = delete;

  // Starts the slot now (from stopped or failed).
  void start();
  // Graceful stop: the program's stop signal to the main process, then SIGKILL
  // to everything in the cgroup after stop.timeout. `done` runs once the slot
  // is stopped and its cgroup empty (at once if it is not running).
  void stop(std::function<void()> done);
  // Kills every process of the slot now and stops it.
  void kill(std::function<void()> done);
  // Recycles a running worker: the stop signal, SIGKILL to its cgroup after
  // stop.timeout, then a fresh start after `delay` (zero: at once). Not a
  // crash: no backoff, no crash-loop count. False when it is not running.
  // `cause` goes into the replacement's environment.
  bool recycle(Duration delay, RecycleCause cause = {});
  bool recycling() const { return recycle_delay_.has_value(); }
  // While a worker checkpoints on request, its own clean exit (status 0) is
  // the end of that recycle, not the end of the program: the replacement
  // starts at once, with `cause`. Cleared by the next start.
  void expect_clean_exit(RecycleCause cause);
  // Asks the running main process to checkpoint: `signal` to it (through its
  // pidfd) and expect_clean_exit(cause). 0, or the errno of the failure.
  int checkpoint(int signal, RecycleCause cause);
  // Recycles one process of the worker (a pre-fork server's child): `signal`
  // through a pidfd once it is known to be in the worker's cgroup, SIGKILL
  // after stop.timeout if it is still there; `on_exit` once it has exited
  // (only after Sent). `on_left` once it has left service: it closed the
  // listening sockets it shared with its parent (polled every kLeavePoll,
  // through WorkerContext::service), or, at the latest, when it exits; a
  // Python worker closes them within a request of the signal and may take
  // 50-120 ms more to exit. Forgotten when the worker stops.
  SignalResult signal_process(pid_t pid, int signal, std::function<void()> on_exit,
                              std::function<void()> on_left = nullptr);
  size_t signalled_processes() const { return signalled_.size(); }

  // `signal` to the running main process (through its pidfd), as an
  // operator asks (`recycler signal`); false when none runs.
  bool signal(int signal);

  StopPhase phase() const { return phase_; }

  WorkerState state() const { return state_; }
  cgroup::WorkerCgroup& cgroup() const { return *cgroup_; }
  TimePoint started_at() const { return started_at_; }
  const std::string& name() const { return name_; }
  const config::ProgramConfig& program() const { return *program_; }
  unsigned slot() const { return slot_; }
  unsigned generation() const { return generation_; }
  std::optional<pid_t> pid() const;
  // How the last run ended (the failure, for a failed start).
  std::optional<ExitStatus> last_exit() const { return last_exit_; }
  // Starts that followed a recycle, and runs that ended on their own and not
  // cleanly (a crash, a kill nobody asked for, an OOM kill, a failed start).
  uint64_t recycles() const { return recycles_; }
  uint64_t crashes() const { return crashes_; }
  // RECYCLER_RECYCLE_REASON of the last start that followed a recycle.
  const std::string& last_recycle_reason() const { return last_recycle_reason_; }

  // How long "exited" waits for the cgroup to empty after SIGKILL, at most.
  static constexpr Duration kDrainTimeout{5000};
  static constexpr Duration kDrainPoll{10};
  // How often a signalled process is looked at until it has left service.
  static constexpr Duration kLeavePoll{2};

 private:
  void set_state(WorkerState s);
  void spawn();
  OutputTag output_tag();
  void on_exit(ExitStatus status);
  void report_exit(const ExitStatus& status, Duration uptime);
  void drain(TimePoint deadline);
  void after_drain();
  void schedule_restart(Duration uptime, bool failed_start);
  void finish_stop();
  void send_stop_signal(StopPhase phase);
  // `process` gets `signal` now, and `escalate` runs `kill` after
  // stop.timeout unless it is reset first (the process exited). The one
  // escalation, for the main process and for a single process alike. False
  // when the signal could not be sent.
  bool terminate(Process& process, int signal, std::unique_ptr<Timer>& escalate,
                 std::function<void()> kill);
  void set_phase(StopPhase phase);

  WorkerContext& ctx_;
  std::shared_ptr<const config::ProgramConfig> program_;
  unsigned slot_;
  std::string name_;
  std::unique_ptr<cgroup::WorkerCgroup> cgroup_;
  std::string notify_socket_;
  policies::RestartBackoff backoff_;
  policies::CrashLoopDetector crash_loop_;

  WorkerState state_ = WorkerState::Stopped;
  unsigned generation_ = 0;
  std::unique_ptr<Process> process_;
  TimePoint started_at_{};
  std::optional<uint64_t> oom_kills_at_start_;
  std::optional<ExitStatus> last_exit_;
  uint64_t recycles_ = 0;
  uint64_t crashes_ = 0;
  std::string last_recycle_reason_;
  Duration last_uptime_{0};
  bool stop_requested_ = false;
  std::optional<Duration> recycle_delay_;
  std::optional<RecycleCause> cause_;       // for the next start
  std::optional<RecycleCause> clean_exit_;  // expect_clean_exit()
  std::vector<std::function<void()>> stop_done_;
  std::unique_ptr<Timer> timer_;  // backoff, stop timeout or drain poll: one at a time
  StopPhase phase_ = StopPhase::None;
  // Single processes signalled by signal_process, until they exit.
  struct Signalled {
    std::unique_ptr<Process> process;
    std::unique_ptr<Timer> escalate;
    std::function<void()> on_exit;
    std::function<void()> on_left;      // until it has left service
    std::vector<uint64_t> listeners;    // the sockets it shares with its master
    std::unique_ptr<Timer> leave_poll;  // while it still holds them
  };
  void poll_left(pid_t pid);
  std::map<pid_t, Signalled> signalled_;
};

}  // namespace recycler
