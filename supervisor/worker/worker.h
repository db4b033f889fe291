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
#include "supervisor/worker/after_exit.h"
#include "supervisor/worker/environment.h"
#include "supervisor/worker/process_signals.h"
#include "supervisor/worker/restart_record.h"
#include "supervisor/worker/slot.h"
#include "supervisor/worker/surge.h"

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
//             stop-checkpoint (a program that checkpoints: the checkpoint
//               signal, then stop-sigterm once it confirms or the window ends)
//             stop-sigterm (the stop signal: then stopped for good)
//             stop-sigkill (stop.timeout passed, or kill(): SIGKILL to the cgroup)
//
//   running:  surging (recycle.mode: surge; surge.h): the next generation
//             starts beside the main process and takes over once ready.
//
// A stop asked during a recycle turns recycling into stop-sigterm; one asked
// during a surge stops the next generation at once.
enum class StopPhase {
  None,
  Checkpointing,
  Recycling,
  StopCheckpoint,
  StopSigterm,
  StopSigkill,
  Surging
};
inline constexpr EnumName<StopPhase> kStopPhaseNames[] = {
    {StopPhase::None, "none"},
    {StopPhase::Checkpointing, "checkpointing"},
    {StopPhase::Recycling, "recycling"},
    {StopPhase::StopCheckpoint, "stop-checkpoint"},
    {StopPhase::StopSigterm, "stop-sigterm"},
    {StopPhase::StopSigkill, "stop-sigkill"},
    {StopPhase::Surging, "surging"}};
const char* to_string(StopPhase phase);

class Worker;

// What a gang (worker/gang.h) hears of one rank during its recycle
// (Worker::Checkpoints::recycle_in_gang).
struct GangHooks {
  // It confirmed its checkpoint: its stop signal waits for release_stop().
  std::function<void()> checkpointed;
  // Its run is over and its cgroup drained: its start waits for release_start().
  std::function<void()> parked;
};

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
  // What `devices: {gpus: auto}` shares out (runtime/gpu_pool.h), resolved
  // before a program that asks for it gets its workers; null: nothing.
  const std::vector<std::string>* gpus_auto = nullptr;
  // What a FAILED line (a crash loop, a command that cannot be run) tells the
  // user to do next: with a config file, fix and reload; in wrap mode there
  // is no file to reload.
  std::string failed_advice = "Fix the program, then reload (SIGHUP) or restart recycler.";
  // Where /proc is (Paths::proc): the checkpoint signal's `children` reads
  // parents there.
  std::string proc = "/proc";
};

class Worker final {
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
  // A running program that checkpoints (ProgramConfig::checkpoints) is asked
  // to first: its checkpoint signal, then the stop signal once it confirms
  // (checkpoint_confirmed) or `checkpoint_within` has passed (default:
  // checkpoint.timeout; zero: no checkpoint); its exit meanwhile ends the
  // stop. A start after a confirmed one resumes (RECYCLER_RESUME=1).
  void stop(std::function<void()> done, std::optional<Duration> checkpoint_within = std::nullopt);
  // Its checkpoints: asked before a recycle, before a stop and as one rank
  // of a gang's recycle, their confirmations (RECYCLER_CHECKPOINTED=1), and
  // what its next start resumes from (worker_checkpoints.h).
  class Checkpoints;
  Checkpoints& checkpoints() { return *checkpoints_; }
  const Checkpoints& checkpoints() const { return *checkpoints_; }
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
  void notified_ready(pid_t pid) { surge_.notified_ready(pid); }
  // The slot's surge, read-only: the next generation's main process while one
  // is under way, the one a surge replaced while it stops, and which
  // generation a process of a given cgroup variant belongs to (their requests
  // count in different runs).
  const Surge& surge() const { return surge_; }
  // Recycles one process of the worker (a pre-fork server's child): `signal`
  // once it is known to be in the worker's cgroup, SIGKILL after
  // stop.timeout; `on_exit` once it has exited, `on_left` once it has left
  // service (process_signals.h). Forgotten when the worker stops.
  engine::Signalled signal_process(pid_t pid, int signal, std::function<void()> on_exit,
                                   std::function<void()> on_left = nullptr) {
    return signals_.signal(*main_.cgroup, pid, signal, std::move(on_exit), std::move(on_left));
  }
  size_t signalled_processes() const { return signals_.size(); }

  // `signal` to the running main process (through its pidfd), as an
  // operator asks (`recycler signal`); false when none runs.
  bool signal(int signal);

  StopPhase phase() const { return phase_; }

  WorkerState state() const { return state_; }
  cgroup::WorkerCgroup& cgroup() const { return *main_.cgroup; }
  TimePoint started_at() const { return main_.started; }
  const std::string& name() const { return slot_.name(); }
  const config::ProgramConfig& program() const { return slot_.program(); }
  unsigned slot() const { return slot_.index(); }
  unsigned generation() const { return main_.generation; }
  std::optional<pid_t> pid() const;
  // How its runs ended: the last exit (the failure, for a failed start), the
  // starts that followed a recycle and their last reason, the crashes.
  const RestartRecord& record() const { return record_; }

 private:
  // What a surge sees of the main generation and hands over (SurgeHost,
  // surge.h); defined in worker.cpp.
  class SurgeSide;

  // A stop of the slot, or its main process's exit, during a surge.
  void end_surge(bool all);
  void set_state(WorkerState s);
  Result<std::unique_ptr<Process>> launch(unsigned generation,
                                          const std::optional<RecycleCause>& cause,
                                          cgroup::WorkerCgroup& cgroup);
  void spawn();
  void on_exit(ExitStatus status);
  void after_drain();
  void replace(Duration delay, std::optional<RecycleCause> cause);
  void schedule_restart(bool failed_start);
  void finish_stop();
  void send_stop_signal(StopPhase phase);

  WorkerServices& ctx_;
  WorkerObserver* observer_ = nullptr;
  Slot slot_;                              // who it is, and how each of its runs starts
  GenerationRun main_;                     // the running generation, or the last one
  std::unique_ptr<SurgeSide> surge_side_;  // before surge_, which holds on to it
  Surge surge_;
  ProcessSignals signals_;  // single processes signalled, until they exit
  RestartRecord record_;    // how its runs ended, and whether the next one comes

  WorkerState state_ = WorkerState::Stopped;
  AfterExit after_exit_;
  std::vector<std::function<void()>> stop_done_;
  std::unique_ptr<Timer> timer_;  // backoff, stop timeout or drain poll: one at a time
  StopPhase phase_ = StopPhase::None;
  std::unique_ptr<Checkpoints> checkpoints_;
};

}  // namespace recycler
