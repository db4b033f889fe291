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
// WorkerServices and the WorkerCgroup, so this logic runs unchanged against
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

#include "policies/base/enums.h"
#include "supervisor/cgroup/cgroup.h"
#include "supervisor/config/config.h"
#include "supervisor/engine/vocabulary.h"
#include "supervisor/probe/service.h"
#include "supervisor/process/listen.h"
#include "supervisor/process/process.h"
#include "supervisor/util/timers.h"
#include "supervisor/worker/environment.h"
#include "supervisor/worker/restart_backoff.h"

namespace recycler {

enum class WorkerState { Stopped, Starting, Running, Stopping, Exited, Backoff, Failed };
inline constexpr EnumName<WorkerState> kWorkerStateNames[] = {
    {WorkerState::Stopped, "stopped"}, {WorkerState::Starting, "starting"},
    {WorkerState::Running, "running"}, {WorkerState::Stopping, "stopping"},
    {WorkerState::Exited, "exited"},   {WorkerState::Backoff, "backoff"},
    {WorkerState::Failed, "failed"}};
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
//   running:  surging (recycle.mode: surge): the next generation starts
//             beside the main process, in the slot's other cgroup, with the
//             same listening sockets; once it is ready (READY=1 from it, or
//             recycle.ready_after) it becomes the slot's main process, a new
//             run (state running again), and the old generation is stopped
//             gracefully beside it ("retiring", not a state: the slot serves).
//             A next generation that exits or is not ready within
//             recycle.ready_timeout is stopped and the old one serves on; the
//             surge is tried again after the restart backoff, and after
//             restart.crash_loop failures the slot is recycled by restart.
//
// A stop asked during a recycle turns recycling into stop-sigterm; one asked
// during a surge stops the next generation at once.
enum class StopPhase { None, Checkpointing, Recycling, StopSigterm, StopSigkill, Surging };
inline constexpr EnumName<StopPhase> kStopPhaseNames[] = {
    {StopPhase::None, "none"},
    {StopPhase::Checkpointing, "checkpointing"},
    {StopPhase::Recycling, "recycling"},
    {StopPhase::StopSigterm, "stop-sigterm"},
    {StopPhase::StopSigkill, "stop-sigkill"},
    {StopPhase::Surging, "surging"}};
const char* to_string(StopPhase phase);

class Worker;

// What watches one worker: its program's monitor (runtime/monitor.h), told
// of each state change before the supervisor is (WorkerServices), and of
// every whole output line when its program counts requests by pattern.
class WorkerObserver {
 public:
  virtual void on_state_change(Worker& worker) = 0;
  virtual void on_output(Worker& worker, pid_t pid, std::string_view line) = 0;

 protected:
  ~WorkerObserver() = default;
};

// What every worker uses from outside: time, processes, randomness, the
// environment, and the supervisor's hook on state changes.
struct WorkerServices {
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
  // Sees a signalled process of a pre-fork server leave service before it
  // exits (probe/service.h); null: only its exit counts.
  const probe::ServiceProbe* service = nullptr;
  // What a FAILED line (a crash loop, a command that cannot be run) tells the
  // user to do next: with a config file, fix and reload; in wrap mode there
  // is no file to reload.
  std::string failed_advice = "Fix the program, then reload (SIGHUP) or restart recycler.";
};

// Makes the slot's cgroup number `variant` (0 or 1): a surge runs the next
// generation in the variant the current one does not use.
using CgroupFactory =
    std::function<Result<std::unique_ptr<cgroup::WorkerCgroup>>(unsigned variant)>;

class Worker {
 public:
  // `notify_socket`: NOTIFY_SOCKET for its runs, its program's notify socket
  // ("" = none).
  // `sockets`: the program's listen: sockets (null: none). `make_cgroup`:
  // what a surge needs (null: recycle.mode surge recycles by restart).
  Worker(WorkerServices& context, std::shared_ptr<const config::ProgramConfig> program,
         unsigned slot, std::unique_ptr<cgroup::WorkerCgroup> cgroup,
         std::string notify_socket = "", std::shared_ptr<const listen::Set> sockets = nullptr,
         CgroupFactory make_cgroup = nullptr);
  ~Worker();  // removes the slot's cgroup; only destroy a stopped or failed worker
  Worker(const Worker&) = delete;
  Worker& operator=(const Worker&) = delete;

  // Its observer (null: none), told of what happens from now on.
  void observe(WorkerObserver* observer) { observer_ = observer; }

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
  // With recycle.mode surge, the next generation starts beside it instead
  // (StopPhase::Surging) after `delay`.
  bool recycle(Duration delay, RecycleCause cause = {});
  bool recycling() const { return after_exit_.recycled; }
  // READY=1 from `pid` on the program's notify socket: the end of a surge's
  // wait when `pid` belongs to the next generation.
  void notified_ready(pid_t pid);
  // The next generation's main process during a surge; the generation being
  // stopped beside the slot's main process after one.
  std::optional<pid_t> surge_pid() const;
  std::optional<pid_t> retiring_pid() const;
  // Which generation a process of the slot's cgroup `variant` (cgroup::WorkerId)
  // belongs to: the running one, the next one of a surge under way, or the one
  // a surge replaced while it stops. Their requests count in different runs.
  using Generation = engine::Generation;
  Generation generation_in(unsigned variant) const;
  // The next generation's number during a surge (0: none under way).
  unsigned surge_generation() const { return next_ ? next_->generation : 0; }
  // While a worker checkpoints on request, its own clean exit (status 0) is
  // the end of that recycle, not the end of the program: the replacement
  // starts at once, with `cause`. Cleared by the next start.
  void expect_clean_exit(RecycleCause cause);
  // Asks the running main process to checkpoint: `signal` to it (through its
  // pidfd) and expect_clean_exit(cause). Its death by `signal` itself (no
  // handler for it, or it was exiting as it came) ends the recycle like a
  // clean exit, with a warning. 0, or the errno of the failure.
  int checkpoint(int signal, RecycleCause cause);
  // Recycles one process of the worker (a pre-fork server's child): `signal`
  // through a pidfd once it is known to be in the worker's cgroup, SIGKILL
  // after stop.timeout if it is still there; `on_exit` once it has exited
  // (only after Sent). `on_left` once it has left service: it closed the
  // listening sockets it shared with its parent (polled every kLeavePoll,
  // through WorkerServices::service), or, at the latest, when it exits; a
  // Python worker closes them within a request of the signal and may take
  // 50-120 ms more to exit. Forgotten when the worker stops.
  engine::Signalled signal_process(pid_t pid, int signal, std::function<void()> on_exit,
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
  // What the slot does once the running main process has exited and its
  // cgroup has drained (after_drain), as systemd's service_enter_* would:
  struct AfterExit {
    enum class Then {
      Restart,  // it ended on its own: restart.mode decides, after the backoff
      Replace,  // recycled: a fresh start after `delay`, with `cause`
      Resume,   // asked to checkpoint: a clean exit, or death by `signal`, ends the
                // recycle (a start at once, with `cause`); any other end is Restart's
      Stop,     // stopped for good (stop(), kill()): overrides the others
    };
    Then then = Then::Restart;
    Duration delay{0};
    std::optional<RecycleCause> cause;
    int signal = 0;  // Resume: checkpoint()'s signal (0: expect_clean_exit() alone)
    // A recycle was asked of this run: the engine counts its end as one, a
    // stop meanwhile notwithstanding (recycling()).
    bool recycled = false;
  };
  static const char* to_string(AfterExit::Then then);

  // A generation of the slot beside the main one: the next one of a surge,
  // or the one a surge replaced while it stops.
  struct Side {
    std::unique_ptr<Process> process;
    std::unique_ptr<cgroup::WorkerCgroup> cgroup;
    unsigned variant = 0;
    unsigned generation = 0;
    TimePoint started{};
    std::optional<uint64_t> oom_kills_at_start;
    std::unique_ptr<Timer> timer;  // ready/timeout, stop escalation, then the drain poll
    bool stopping = false;         // the stop signal went out
  };
  LaunchSpec launch_spec(unsigned generation, const std::optional<RecycleCause>& cause,
                         cgroup::WorkerCgroup& cgroup);
  Launcher::ExitCallback exit_callback(unsigned generation);
  void exited(unsigned generation, ExitStatus status);
  void begin_surge();
  void surge_ready(const std::string& how);
  void surge_failed(const std::string& why);
  void restart_instead();
  void stop_side(Side& side, int signal);
  void side_exited(std::unique_ptr<Side>& side, const char* which, ExitStatus status);
  void drain_side(std::unique_ptr<Side>* side, TimePoint deadline);
  void kill_sides(bool all);
  bool sides_busy() const { return next_ || retiring_; }
  void set_state(WorkerState s);
  void spawn();
  OutputTag output_tag();
  void on_exit(ExitStatus status);
  void report_exit(const ExitStatus& status, Duration uptime);
  void drain(TimePoint deadline);
  void after_drain();
  AfterExit resume_or_restart(AfterExit after);
  void replace(Duration delay, std::optional<RecycleCause> cause);
  void enter_replace(Duration delay, RecycleCause cause);
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

  WorkerServices& ctx_;
  WorkerObserver* observer_ = nullptr;
  std::shared_ptr<const config::ProgramConfig> program_;
  unsigned slot_;
  std::string name_;
  std::unique_ptr<cgroup::WorkerCgroup> cgroup_;
  std::string notify_socket_;
  std::shared_ptr<const listen::Set> sockets_;
  CgroupFactory make_cgroup_;
  unsigned variant_ = 0;  // of cgroup_
  std::unique_ptr<Side> next_;
  std::unique_ptr<Side> retiring_;
  std::optional<RecycleCause> surge_cause_;  // while a surge is asked or under way
  std::unique_ptr<Timer> surge_timer_;       // the delay before a surge (or its retry)
  bool finish_when_sides_gone_ = false;      // a stop waits for both sides
  RestartBackoff surge_backoff_;
  CrashLoopDetector surge_failures_;
  RestartBackoff backoff_;
  CrashLoopDetector crash_loop_;

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
  AfterExit after_exit_;
  bool stopping_for_good() const { return after_exit_.then == AfterExit::Then::Stop; }
  void enter_stop();
  std::optional<RecycleCause> start_cause_;  // the next start's (a replacement's environment)
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
