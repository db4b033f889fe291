// The supervisor: one libuv loop, one thread. It owns the cgroup manager, the
// programs and their worker slots, and reacts to signals:
//   SIGTERM/SIGINT  stop every worker in parallel, remove their cgroups, exit 0
//   second SIGINT   kill every worker at once
//   preempt.signal  (config `preempt:`; USR1, say, or TERM itself) checkpoint
//                   the programs that checkpoint, stop every worker by
//                   preempt.deadline, exit preempt.exit_code (requeue first
//                   with then: requeue; preempt.h)
//   SIGHUP          reload the config file: unchanged programs keep running,
//                   changed ones restart, removed ones stop, new ones start;
//                   an invalid file is reported and the old config stays
//   SIGCHLD         reap (fallback for pidfds, and orphans when PID 1)
// Under systemd (Type=notify) it reports READY=1, STATUS= and STOPPING=1
// (systemd_status.h), and with WatchdogSec= pings WATCHDOG=1 while healthy
// (watchdog.h).
// When every slot has stopped for good (exited without restart, or failed),
// recycler exits too. recycler is the subreaper of its workers' processes:
// what leaves a worker's cgroup is noticed and killed (escapes.h).
#pragma once

#include <uv.h>

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "supervisor/cgroup/cgroup.h"
#include "supervisor/config/config.h"
#include "supervisor/control/server.h"
#include "supervisor/control/status.h"
#include "supervisor/metrics/server.h"
#include "supervisor/notify/read_pacer.h"
#include "supervisor/notify/router.h"
#include "supervisor/probe/probe.h"
#include "supervisor/probe/service.h"
#include "supervisor/process/escapes.h"
#include "supervisor/process/listen.h"
#include "supervisor/process/process.h"
#include "supervisor/runtime/budget_watch.h"
#include "supervisor/runtime/container_limits.h"
#include "supervisor/runtime/control_actions.h"
#include "supervisor/runtime/escape_watch.h"
#include "supervisor/runtime/finish_check.h"
#include "supervisor/runtime/gpu_pool.h"
#include "supervisor/runtime/gpu_sampling.h"
#include "supervisor/runtime/metrics_endpoint.h"
#include "supervisor/runtime/monitor.h"
#include "supervisor/runtime/preempt.h"
#include "supervisor/runtime/program.h"
#include "supervisor/runtime/start_up.h"
#include "supervisor/runtime/systemd_status.h"
#include "supervisor/runtime/watchdog.h"
#include "supervisor/util/deferred_queue.h"
#include "supervisor/util/uv.h"
#include "supervisor/worker/worker.h"

namespace recycler {

struct SupervisorOptions {
  std::string config_path;    // reread on SIGHUP; "" in wrap mode (nothing to reload)
  bool wrap_mode = false;     // exit with the wrapped command's own status
  bool per_run_root = false;  // cgroup_root is this run's own (see cgroup::OpenOptions)
  // Set by `run --cgroup-root` / RECYCLER_CGROUP_ROOT: the file's cgroup_root
  // is ignored, at start and on reload (one root per recycler@ instance).
  std::string cgroup_root;
  cgroup::Paths paths;
};

class Supervisor {
 public:
  Supervisor(config::Config config, SupervisorOptions options);
  ~Supervisor();
  Supervisor(const Supervisor&) = delete;
  Supervisor& operator=(const Supervisor&) = delete;

  // Sets up cgroups, starts every program and runs until stopped; the exit code.
  int run();

  // A snapshot of every program and worker (status.h), from the loop; with
  // `workers` false, only the totals (no worker is looked at but for its
  // state).
  SupervisorStatus status(bool workers = true) const;
  // GET /healthz: no worker's sampling (nor the GPU query) has stalled;
  // GET /readyz: recycler is not stopping and every slot is ready
  // (ProgramMonitor::readiness). The answer's line says why not.
  metrics::Server::ProbeAnswer probe(metrics::http::Path path) const;

 private:
  // Start-up runs from the loop, a slice at a time (start_up.h). SIGTERM or
  // SIGINT meanwhile stops what has started and starts nothing more; a
  // SIGHUP waits until all have started.
  void start_up();
  void start_up_finished(StartUp::Outcome outcome, bool reload);
  bool create_workers(Program& program);
  void replace_program(const std::string& name, std::shared_ptr<const config::ProgramConfig> next);

  void on_signal(int signum);
  // Rereads the config file (SIGHUP, `recycler reload`): what changed, or why not.
  ReloadOutcome reload();
  // A reload's changes to the programs: the unchanged kept, the changed
  // restarted, the removed stopped, the new started.
  void reload_programs(const config::Config& next, ReloadOutcome& out);
  void apply_budget(const config::Config& next);

  // `preempt_deadline`: a preemption's (config `preempt:`): each worker's
  // checkpoint gets preempt_checkpoint_window() of it.
  void shutdown(int exit_code, bool force, std::optional<Duration> preempt_deadline = std::nullopt);
  // The preemption signal: checkpoint, stop every program by the deadline,
  // then exit (and requeue the Slurm job) with preempt.exit_code.
  void preempt();
  void finish_shutdown();

  config::Config config_;
  SupervisorOptions options_;
  uv_loop_t loop_{};
  uv::LoopTimers timers_{&loop_};
  ProcessTable processes_{&loop_};
  std::mt19937_64 rng_;
  std::vector<std::string> base_env_;
  GpuPool gpu_pool_{base_env_};  // devices: {gpus: auto}
  probe::ProcServiceProbe service_;
  // Sockets systemd passed to recycler (socket activation), until a
  // program's listen: takes them.
  listen::Inherited inherited_ = listen::Inherited::from_environment();
  WorkerServices context_;
  probe::ProcessReader procs_;
  MonitorContext monitor_context_{&loop_, timers_, procs_, rng_};
  GpuSampling gpu_;
  // The programs' notify sockets, and where what their workers send goes.
  notify::Router router_;
  std::unique_ptr<cgroup::Manager> cgroups_;
  MetricsEndpoint metrics_;
  // Processes that leave their worker's cgroup (escapes.h), once cgroups are open.
  std::unique_ptr<EscapeWatch> escapes_;
  Programs programs_;
  // config budget: (budget_watch.h), once the programs exist; rebuilt when a
  // reload changes the section.
  std::unique_ptr<BudgetWatch> budget_;
  // The container recycler runs in (its memory cgroup), when it has one.
  ContainerLimits container_{timers_, monitor_context_, programs_, config_};
  uv::Signals signals_;  // from start-up on
  // Work that destroys workers, so must not run inside one of their callbacks.
  DeferredQueue deferred_{timers_};
  std::unique_ptr<StartUp> start_up_;  // while starting up

  // Exits and recycles since recycler started, across reloads (status.h).
  StatusCounters counters_;
  TimePoint started_at_{};
  SystemdStatus systemd_status_;
  // The control socket and what its commands do (control_actions.h).
  OperatorCommands commands_;
  // Whether recycler is done once its programs have stopped by themselves.
  FinishCheck finished_;
  // systemd's watchdog (watchdog.h): WATCHDOG=1 each period while healthy.
  std::unique_ptr<SystemdWatchdog> watchdog_;

  bool shutting_down_ = false;
  bool forced_ = false;
  int exit_code_ = 0;
  Preemption preemption_{timers_};
};

// Destroys a program's monitor and workers (each removes its cgroup) and
// closes its notify socket.
void clear_workers(Program& program, notify::Router& router);

// Tells systemd (Type=notify) about recycler itself, when NOTIFY_SOCKET is set.
void notify_systemd(const std::string& state);

}  // namespace recycler
