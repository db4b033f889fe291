#include "supervisor/runtime/supervisor.h"

#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <cstring>

#include "policies/base/units.h"
#include "policies/metric.h"
#include "supervisor/config/parse.h"
#include "supervisor/config/summary.h"
#include "supervisor/log/log.h"
#include "supervisor/metrics/exporter.h"
#include "supervisor/runtime/preempt.h"

extern char** environ;

namespace recycler {
namespace {

// Meant for recycler itself (systemd notify, watchdog and socket activation;
// its cgroup root): a worker that inherited them would talk to systemd behind
// recycler's back, or a nested recycler would take its parent's root.
bool inherited_by_workers(const std::string& kv) {
  for (const char* name : {"NOTIFY_SOCKET=", "LISTEN_FDS=", "LISTEN_PID=", "LISTEN_FDNAMES=",
                           "WATCHDOG_PID=", "WATCHDOG_USEC=", "RECYCLER_CGROUP_ROOT="})
    if (kv.rfind(name, 0) == 0) return false;
  return true;
}

std::vector<std::string> environment_for_workers() {
  std::vector<std::string> env;
  for (char** e = environ; e && *e; ++e)
    if (inherited_by_workers(*e)) env.emplace_back(*e);
  return env;
}

// Each worker slot holds a few fds (output pipes, a pidfd, a cgroup directory)
// and systemd's default soft RLIMIT_NOFILE of 1024 would cap recycler at a few
// hundred workers. As systemd recommends, raise the soft limit to the hard one
// for recycler alone and give workers the original: programs built on
// select() break with descriptors above 1024.
std::optional<config::Rlimit> raise_nofile_limit() {
  rlimit nofile{};
  if (::getrlimit(RLIMIT_NOFILE, &nofile) != 0 || nofile.rlim_cur >= nofile.rlim_max)
    return std::nullopt;
  config::Rlimit original{RLIMIT_NOFILE, nofile.rlim_cur, nofile.rlim_max};
  nofile.rlim_cur = nofile.rlim_max;
  if (::setrlimit(RLIMIT_NOFILE, &nofile) != 0) return std::nullopt;
  return original;
}

// The signals recycler handles. USR1 and USR2 too: without a handler they
// would end recycler at once and leave every worker behind (a scheduler's
// notice sent to a config without preempt:, or a reload that adds it).
// SIGQUIT too: a container image's StopSignal may be QUIT, and as PID 1 a
// signal without a handler is dropped by the kernel.
std::vector<int> signals_to_catch(const config::Config& config) {
  std::vector<int> caught = {SIGTERM, SIGINT, SIGHUP, SIGCHLD, SIGUSR1, SIGUSR2, SIGQUIT};
  if (config.preempt &&
      std::find(caught.begin(), caught.end(), config.preempt->signal) == caught.end())
    caught.push_back(config.preempt->signal);
  return caught;
}

// The cgroup hierarchy the workers' cgroups go under; null (logged) when it
// cannot be used.
std::unique_ptr<cgroup::Manager> open_cgroups(const std::string& root,
                                              const SupervisorOptions& options) {
  auto opened =
      cgroup::open(cgroup::detect(root, options.paths), options.paths, {options.per_run_root});
  if (!opened) {
    log::error("{}", opened.error().message);
    return nullptr;
  }
  return std::move(opened.value());
}

// The line that says recycler runs: its version and pid, and whether (and
// how) its workers' cgroups enforce their limits.
void log_cgroup_mode(const cgroup::Manager& cgroups) {
  const cgroup::Layout& layout = cgroups.layout();
  if (cgroups.enforcing())
    log::info("recycler {} (pid {}): cgroup {}, worker cgroups under {}", RECYCLER_VERSION,
              ::getpid(), cgroup::to_string(layout.mode), layout.display_root());
  else
    log::warn(
        "recycler {} (pid {}): no worker cgroups: {}. So limits are NOT enforced (limits: "
        "memory_max, ...); policies still recycle on what /proc shows (rss, pss, uss, threads, "
        "requests; the cgroup figures current and anon are unknown); workers are tracked by "
        "their session, and a stop kills their processes, not a cgroup",
        RECYCLER_VERSION, ::getpid(), layout.not_enforced.value_or("no cgroups"));
}

}  // namespace

void notify_systemd(const std::string& state) {
  if (const char* address = std::getenv("NOTIFY_SOCKET")) notify::send_datagram(address, state);
}

Supervisor::Supervisor(config::Config config, SupervisorOptions options)
    : config_(std::move(config)),
      options_(std::move(options)),
      rng_(std::random_device{}()),
      base_env_(environment_for_workers()),
      context_{timers_, processes_, rng_, base_env_,
               [this](Worker& w) {
                 if (w.state() == WorkerState::Running && escapes_)
                   escapes_->run_started({w.program().name, w.slot()}, w.pid().value_or(0));
                 // At shutdown, finish_shutdown kills whatever is left anyway.
                 if (w.state() == WorkerState::Exited && escapes_ && !shutting_down_)
                   escapes_->run_ended({w.program().name, w.slot()});
                 if (w.state() == WorkerState::Stopped) commands_.slot_stopped(w);
                 finished_.schedule();
               }},
      procs_(options_.paths.proc),
      gpu_(&loop_, timers_, options_.paths.proc,
           [this](gpu::Sampler* sampler) { monitor_context_.gpu = sampler; }),
      router_(&loop_,
              {.place = [this](pid_t pid) -> std::optional<notify::Place> {
                 auto id = cgroups_ ? cgroups_->owner_of(pid) : std::nullopt;
                 if (!id) return std::nullopt;
                 return notify::Place{id->program, id->slot, id->variant};
               },
               .receiver = [this](const std::string& name) -> notify::Receiver* {
                 auto it = programs_.find(name);
                 return it == programs_.end() ? nullptr : it->second.monitor.get();
               },
               .now = [this] { return timers_.now(); }},
              options_.paths.proc),
      metrics_(
          &loop_, timers_, options_.paths.proc, monitor_context_.sample_duration,
          [this] { return status(); }, [this](metrics::http::Path path) { return probe(path); }),
      systemd_status_(
          timers_, [this] { return summary_line(status(false)); }, notify_systemd),
      commands_(&loop_, timers_, programs_, deferred_,
                {.status = [this] { return status(); },
                 .reload = [this] { return reload(); },
                 .starting = [this] { return start_up_ != nullptr; },
                 .stopping = [this] { return shutting_down_; }}),
      finished_(programs_, config_, options_.wrap_mode, commands_, deferred_,
                {.stopping = [this] { return shutting_down_; },
                 .starting = [this] { return start_up_ != nullptr; },
                 .finish = [this](int code) { shutdown(code, false); }}) {
  context_.service = &service_;
  context_.proc = options_.paths.proc;
  context_.gpus_auto = &gpu_pool_.entries();
  monitor_context_.launcher = &processes_;
  monitor_context_.gpus_auto = &gpu_pool_.entries();
  monitor_context_.base_env = &base_env_;
  if (options_.wrap_mode)
    context_.failed_advice =
        "Fix the command, then run recycler again (a wrapped command has no "
        "config file to reload).";
  uv_loop_init(&loop_);
  // Every event counts (status.h), and goes to `recycler events` once the
  // control socket is open.
  log::observe_events([this](log::Level level, std::string_view name, std::string_view message,
                             const log::Fields& fields) {
    counters_.observe(name, fields);
    commands_.publish_event(level, name, message, fields);
  });
}

Supervisor::~Supervisor() {
  metrics_.close();
  log::observe_events(nullptr);
  log::observe_output(nullptr);
  systemd_status_.stop();
  commands_.close();
  budget_.reset();
  container_.close();
  for (auto& [name, program] : programs_) program.monitor.reset();
  programs_.clear();
  gpu_.stop();  // waits for a query in flight (one NVML call)
  router_.close();
  signals_.clear();
  deferred_.cancel();
  escapes_.reset();
  watchdog_.reset();
  start_up_.reset();
  // Let libuv run the close callbacks that free the handles, then close.
  uv_run(&loop_, UV_RUN_NOWAIT);
  if (uv_loop_close(&loop_) != 0) log::debug("libuv loop closed with handles still open");
}

int Supervisor::run() {
  log::init(config_.log.level, config_.log.format);
  // From here on a stalled reader of stderr cannot stall supervision.
  log::attach(&loop_);
  struct Detach {
    ~Detach() { log::detach(); }
  } detach;
  started_at_ = timers_.now();
  context_.worker_nofile = raise_nofile_limit();
  // First: a signal during start-up is handled once the loop runs, never by
  // the default action that would leave cgroups behind.
  signals_.catch_all(&loop_, signals_to_catch(config_), this, [](uv_signal_t* s, int sig) {
    if (auto* self = static_cast<Supervisor*>(s->data)) self->on_signal(sig);
  });

  // Before any cgroup: a second recycler of this config stops here.
  if (!commands_.open(config_, options_.config_path, options_.wrap_mode)) return 1;
  // Before anything is created: an address in use leaves nothing behind.
  if (!metrics_.apply(config_)) return 1;
  watchdog_ = SystemdWatchdog::start(
      timers_,
      [this](TimePoint now, std::vector<Progress>& progress) {
        sampling_progress(programs_, now, progress);
        gpu_.progress(now, progress);
      },
      notify_systemd);

  cgroups_ = open_cgroups(config_.cgroup_root, options_);
  if (!cgroups_) return 1;
  // Orphans of workers come back to recycler, not to init: whatever leaves a
  // worker's cgroup stays in view (escapes.h).
  if (::prctl(PR_SET_CHILD_SUBREAPER, 1) != 0)
    log::warn("cannot become the subreaper of the workers' processes: {}", std::strerror(errno));
  escapes_ =
      std::make_unique<EscapeWatch>(timers_, deferred_, options_.paths.proc, ::getpid(), *cgroups_);
  log_cgroup_mode(*cgroups_);
  container_.open(cgroups_->layout(), options_.paths);

  router_.open_runtime_dir();
  gpu_.apply(config_);

  if (config_.preempt && config_.preempt->then == config::PreemptThen::Requeue && !slurm_job_id())
    log::warn(
        "preempt.then: requeue, but recycler is not in a Slurm job (no SLURM_JOB_ID): a "
        "preemption will exit with status {} without a requeue",
        config_.preempt->exit_status());
  apply_budget(config_);
  start_up();
  uv_run(&loop_, UV_RUN_DEFAULT);
  preemption_.requeue_if_asked();  // every worker has stopped
  return exit_code_;
}

void Supervisor::apply_budget(const config::Config& next) {
  if (budget_ && next.budget && budget_->config() == *next.budget) return;
  budget_.reset();
  if (!next.budget || shutting_down_) return;
  budget_ = std::make_unique<BudgetWatch>(timers_, programs_, *next.budget,
                                          budget_sources(*cgroups_, options_.paths));
}

void Supervisor::start_up_finished(StartUp::Outcome outcome, bool reload_now) {
  start_up_.reset();
  switch (outcome) {
    case StartUp::Outcome::Cancelled:  // SIGTERM or SIGINT: what has started is stopping
      return;
    case StartUp::Outcome::Failed:
      programs_.clear();
      cgroups_->close();
      exit_code_ = 1;
      uv_stop(&loop_);
      return;
    case StartUp::Outcome::Started:
      break;
  }
  for (const std::string& name : inherited_.close_unused())
    log::warn("socket activation: no program's listen: names socket {}; closed it", name);
  systemd_status_.ready();
  container_.check_fit();
  finished_.schedule();
  if (reload_now) reload();
}

void Supervisor::on_signal(int signum) {
  if (config_.preempt && config_.preempt->signal == signum) return preempt();
  switch (signum) {
    case SIGCHLD:
      processes_.reap_children();
      break;
    case SIGHUP:
      if (shutting_down_) break;
      if (start_up_)  // once every program has started
        start_up_->reload_when_started();
      else
        reload();
      break;
    case SIGTERM:
    case SIGQUIT:
      if (!shutting_down_) {
        log::info("{}: stopping every program", units::signal_name(signum));
        shutdown(0, false);
      }
      break;
    case SIGINT:
      if (!shutting_down_) {
        log::info("SIGINT: stopping every program (interrupt again to kill them at once)");
        shutdown(0, false);
      } else if (!forced_) {
        log::warn("second SIGINT: killing every worker now");
        shutdown(130, true);
      }
      break;
    default:  // USR1, USR2, or a preempt.signal a reload has removed
      log::warn(
          "{}: ignored (the config has no preempt: section for it; see "
          "docs/configuration.md#preempt)",
          units::signal_name(signum));
      break;
  }
}

void Supervisor::preempt() {
  const config::PreemptConfig& p = *config_.preempt;
  std::string sig = units::signal_name(p.signal);
  if (preemption_.active()) return log::info("{} again: the preemption goes on", sig);
  if (shutting_down_)
    return log::warn("{}: every program is stopping already; not preempting", sig);
  preemption_.begin(p, programs_, [this] { shutdown(exit_code_, true); });
  shutdown(p.exit_status(), false, p.deadline);
}

void Supervisor::shutdown(int exit_code, bool force, std::optional<Duration> preempt_deadline) {
  bool first = !shutting_down_;
  shutting_down_ = true;
  exit_code_ = exit_code;
  forced_ = forced_ || force;
  if (!first) {
    // Escalation: the stops under way finish through their own callbacks.
    for (auto& [name, program] : programs_)
      for (auto& w : program.workers) w->kill(nullptr);
    return;
  }
  systemd_status_.stopping();
  budget_.reset();  // nothing more to choose while everything stops
  size_t total = 0;
  for (auto& [name, program] : programs_) total += program.workers.size();
  auto pending = std::make_shared<size_t>(total);
  if (total == 0) {
    deferred_.defer([this] { finish_shutdown(); });
    return;
  }
  for (auto& [name, program] : programs_) {
    for (auto& w : program.workers) {
      auto one_stopped = [this, pending] {
        if (--*pending == 0) deferred_.defer([this] { finish_shutdown(); });
      };
      if (force)
        w->kill(one_stopped);
      else if (preempt_deadline)
        w->stop(one_stopped, config::preempt_checkpoint_window(w->program(), *preempt_deadline));
      else
        w->stop(one_stopped);
    }
  }
}

void Supervisor::finish_shutdown() {
  preemption_.disarm();
  for (auto& [name, program] : programs_) {
    clear_workers(program, router_);
    cgroups_->remove_program(name);
  }
  programs_.clear();
  systemd_status_.stop();
  commands_.close();
  watchdog_.reset();
  start_up_.reset();
  container_.close();
  // Nothing a worker started outlives recycler, in a cgroup or not.
  if (escapes_) escapes_->kill_all();
  cgroups_->close();
  signals_.clear();
  router_.close();
  metrics_.close();
  log::info("recycler stopped");
  uv_stop(&loop_);
}

}  // namespace recycler
