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
#include "supervisor/log/log.h"
#include "supervisor/metrics/exporter.h"
#include "supervisor/config/summary.h"

extern char** environ;

namespace recycler {
namespace {

// Notify senders remembered (workers and strangers alike), at most.
constexpr size_t kMaxRemembered = 4096;
// How long a sender found to be no worker is taken at its word.
constexpr std::chrono::seconds kStrangerMemory{1};
// Start-up work done in one turn of the loop, at most (about: one program's
// cgroups or start may take longer); signals wait no longer than that.
constexpr Duration kStartUpSlice{20};

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
                 if (ProgramMonitor* m = monitor_of(w)) m->on_state_change(w);
                 if (w.state() == WorkerState::Running && escapes_)
                   escapes_->started({w.program().name, w.slot()}, w.pid().value_or(0));
                 if (w.state() == WorkerState::Exited) run_ended(w);
                 if (w.state() == WorkerState::Stopped) restarted_slot_stopped(w);
                 schedule_finished_check();
               }},
      procs_(options_.paths.proc) {
  context_.service = &service_;
  if (options_.wrap_mode)
    context_.failed_advice =
        "Fix the command, then run recycler again (a wrapped command has no "
        "config file to reload).";
  context_.on_output = [this](Worker& w, pid_t pid, std::string_view line) {
    if (ProgramMonitor* m = monitor_of(w)) m->on_output(w, pid, line);
  };
  uv_loop_init(&loop_);
  log::observe_events([this](log::Level, std::string_view name, std::string_view,
                             const log::Fields& fields) { counters_.observe(name, fields); });
}

Supervisor::~Supervisor() {
  metrics_.reset();
  log::observe_events(nullptr);
  log::observe_output(nullptr);
  status_timer_.reset();
  control_.reset();
  for (auto& [name, program] : programs_) program.monitor.reset();
  programs_.clear();
  monitor_context_.gpu = nullptr;
  gpu_.reset();  // waits for a query in flight (one NVML call)
  runtime_.reset();
  signals_.clear();
  defer_timer_.reset();
  escape_scan_.reset();
  watchdog_timer_.reset();
  start_up_idle_.reset();
  // Let libuv run the close callbacks that free the handles, then close.
  uv_run(&loop_, UV_RUN_NOWAIT);
  if (uv_loop_close(&loop_) != 0) log::debug("libuv loop closed with handles still open");
}

void Supervisor::defer(std::function<void()> fn) {
  deferred_.push_back(std::move(fn));
  if (defer_timer_) return;
  defer_timer_ = timers_.after(Duration{0}, [this] {
    defer_timer_.reset();
    auto queue = std::move(deferred_);
    deferred_.clear();
    for (auto& f : queue) f();
  });
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
  for (int signum : {SIGTERM, SIGINT, SIGHUP, SIGCHLD}) {
    auto* h = new uv_signal_t;
    uv_signal_init(&loop_, h);
    h->data = this;
    signals_.emplace_back(h);
    uv_signal_start(
        h,
        [](uv_signal_t* s, int sig) {
          if (auto* self = static_cast<Supervisor*>(s->data)) self->on_signal(sig);
        },
        signum);
  }

  // Before any cgroup: a second recycler of this config stops here.
  open_control();
  if (exit_code_ != 0) return exit_code_;
  // Before anything is created: an address in use leaves nothing behind.
  if (!apply_metrics(config_)) return 1;
  start_watchdog();

  auto opened = cgroup::open(cgroup::detect(config_.cgroup_root, options_.paths), options_.paths,
                             {options_.per_run_root});
  if (!opened) {
    log::error("{}", opened.error().message);
    return 1;
  }
  cgroups_ = std::move(opened.value());
  // Orphans of workers come back to recycler, not to init: whatever leaves a
  // worker's cgroup stays in view (escapes.h).
  if (::prctl(PR_SET_CHILD_SUBREAPER, 1) != 0)
    log::warn("cannot become the subreaper of the workers' processes: {}", std::strerror(errno));
  escapes_ = std::make_unique<EscapeTracker>(options_.paths.proc, ::getpid(), *cgroups_);
  scan_for_escapes();
  const cgroup::Layout& layout = cgroups_->layout();
  if (cgroups_->enforcing())
    log::info("recycler {} (pid {}): cgroup {}, worker cgroups under {}", RECYCLER_VERSION,
              ::getpid(), cgroup::to_string(layout.mode), layout.display_root());
  else
    log::warn(
        "recycler {} (pid {}): limits are NOT enforced: {}; workers are tracked by their "
        "session from /proc instead",
        RECYCLER_VERSION, ::getpid(), layout.not_enforced.value_or("no cgroups"));

  open_runtime_dir();
  start_gpu(config_);

  start_up_.emplace();
  start_up_slice();
  uv_run(&loop_, UV_RUN_DEFAULT);
  return exit_code_;
}

void Supervisor::start_watchdog() {
  auto interval =
      watchdog_interval(std::getenv("WATCHDOG_USEC"), std::getenv("WATCHDOG_PID"), ::getpid());
  if (!interval) {
    log::warn("systemd watchdog ignored: {}", interval.error().message);
    return;
  }
  if (!*interval) return;
  watchdog_.emplace(**interval, timers_.now());
  log::info("systemd watchdog: WATCHDOG=1 every {} while healthy (WatchdogSec={})",
            units::format_duration(watchdog_->period()),
            units::format_duration(watchdog_->interval()));
  notify_systemd("WATCHDOG=1");
  watchdog_timer_ = timers_.after(watchdog_->period(), [this] { watchdog_tick(); });
}

void Supervisor::watchdog_tick() {
  TimePoint now = timers_.now();
  std::vector<Progress> progress;
  for (const auto& [name, program] : programs_)
    if (program.monitor) program.monitor->sampling_progress(now, progress);
  if (gpu_)
    if (auto since = gpu_->in_flight_since())
      progress.push_back(
          {"the GPU query", gpu_->interval(), std::chrono::duration_cast<Duration>(now - *since)});
  WatchdogHealth::Verdict verdict = watchdog_->tick(now, progress);
  if (verdict.ping) {
    notify_systemd("WATCHDOG=1");
    if (!watchdog_unhealthy_.empty()) log::info("systemd watchdog: healthy again; pinging");
    watchdog_unhealthy_.clear();
  } else if (watchdog_unhealthy_.empty()) {
    log::error("systemd watchdog: not pinging ({}); systemd restarts recycler if this lasts",
               verdict.why);
    watchdog_unhealthy_ = verdict.why;
  }
  watchdog_timer_ = timers_.after(watchdog_->period(), [this] { watchdog_tick(); });
}

void Supervisor::start_up_slice() {
  if (shutting_down_) {  // SIGTERM or SIGINT: what has started is stopping
    start_up_idle_.reset();
    start_up_.reset();
    return;
  }
  StartUp& s = *start_up_;
  TimePoint until = timers_.now() + kStartUpSlice;
  // Every cgroup is created before anything starts: a failure starts nothing.
  for (; s.creating && s.next < config_.programs.size(); ++s.next) {
    if (timers_.now() >= until) break;
    const config::ProgramConfig& p = config_.programs[s.next];
    Program program;
    program.config = std::make_shared<const config::ProgramConfig>(p);
    if (!create_workers(program)) {
      start_up_idle_.reset();
      start_up_.reset();
      programs_.clear();
      cgroups_->close();
      exit_code_ = 1;
      uv_stop(&loop_);
      return;
    }
    programs_.emplace(p.name, std::move(program));
  }
  if (s.creating && s.next == config_.programs.size()) {
    s.creating = false;
    s.next = 0;
  }
  for (; !s.creating && s.next < config_.programs.size(); ++s.next) {  // in file order
    if (timers_.now() >= until) break;
    Program& program = programs_.at(config_.programs[s.next].name);
    warn_unenforced(*program.config);
    start_program(program);
  }
  if (!s.creating && s.next == config_.programs.size()) {
    start_up_done();
    return;
  }
  // The next slice after a turn of the loop (signals, exits, output). An idle
  // handle, not a zero timer: libuv (before 1.45) runs a timer started from
  // a timer callback in the same pass, so a chain of them never polls.
  if (start_up_idle_) return;
  auto* idle = new uv_idle_t;
  uv_idle_init(&loop_, idle);
  idle->data = this;
  start_up_idle_ = uv::Handle<uv_idle_t>(idle);
  uv_idle_start(idle, [](uv_idle_t* h) {
    if (auto* self = static_cast<Supervisor*>(h->data)) self->start_up_slice();
  });
}

void Supervisor::start_up_done() {
  bool reload_now = start_up_->reload;
  for (const std::string& name : inherited_.close_unused())
    log::warn("socket activation: no program's listen: names socket {}; closed it", name);
  start_up_idle_.reset();
  start_up_.reset();
  status_sent_ = summary_line(status(false));
  notify_systemd("READY=1\nSTATUS=" + status_sent_);
  if (std::getenv("NOTIFY_SOCKET")) notify_status();
  schedule_finished_check();
  if (reload_now) reload();
}

bool Supervisor::create_workers(Program& program) {
  const config::ProgramConfig& cfg = *program.config;
  // Bound before any worker starts, as root; those a reload keeps stay open.
  if (!cfg.listen.empty() || program.sockets) {
    listen::Binder binder(inherited_);
    std::vector<const listen::Socket*> had;
    if (program.sockets)
      for (const auto& socket : program.sockets->sockets()) had.push_back(socket.get());
    auto bound = binder.bind(cfg.listen, program.sockets.get());
    if (!bound) {
      log::error("{}: {}", cfg.name, bound.error().message);
      return false;
    }
    program.sockets = cfg.listen.empty() ? nullptr : std::move(bound.value());
    for (size_t i = 0; program.sockets && i < program.sockets->sockets().size(); ++i) {
      const listen::Socket& socket = *program.sockets->sockets()[i];
      if (std::find(had.begin(), had.end(), &socket) != had.end()) continue;  // kept, said before
      log::info("{}: listening on {} ({}fd {} in its workers, LISTEN_FDNAMES {})", cfg.name,
                socket.spec.address(), socket.inherited ? "from systemd; " : "", 3 + i,
                socket.spec.name);
    }
  }
  program.notify = open_notify_socket(cfg);
  std::string notify_address = program.notify ? program.notify->address() : "";
  for (unsigned slot = 0; slot < cfg.instances; ++slot) {
    auto cg = cgroups_->create(cfg.name, slot, cfg.limits);
    if (!cg) {
      log::error("{}[{}]: {}", cfg.name, slot, cg.error().message);
      program.workers.clear();
      cgroups_->remove_program(cfg.name);
      program.notify.reset();
      if (runtime_) runtime_->remove(cfg.name);
      return false;
    }
    CgroupFactory make_cgroup = [this, name = cfg.name, slot,
                                 limits = cfg.limits](unsigned variant) {
      return cgroups_->create(name, slot, limits, variant);
    };
    program.workers.push_back(std::make_unique<Worker>(context_, program.config, slot,
                                                       std::move(cg.value()), notify_address,
                                                       program.sockets, std::move(make_cgroup)));
  }
  program.monitor =
      std::make_unique<ProgramMonitor>(monitor_context_, program.config, program.workers);
  return true;
}

void Supervisor::clear_workers(Program& program) {
  program.monitor.reset();
  program.workers.clear();  // each removes its cgroup
  if (program.notify && runtime_) runtime_->remove(program.config->name);
  program.notify.reset();
}

ProgramMonitor* Supervisor::monitor_of(const Worker& worker) {
  auto it = programs_.find(worker.program().name);
  return it == programs_.end() ? nullptr : it->second.monitor.get();
}

void Supervisor::start_program(Program& program) {
  for (auto& w : program.workers) w->start();
}

void Supervisor::warn_unenforced(const config::ProgramConfig& program) {
  if (!program.limits.any()) return;
  if (!cgroups_->enforcing()) {
    log::warn("{}: limits not enforced: {}", program.name, describe_limits(program.limits));
    return;
  }
  std::string missing = unenforceable_limits(program.limits, cgroups_->layout().missing);
  if (!missing.empty())
    log::warn("{}: this system lacks the cgroup controller for {}; not enforced", program.name,
              missing);
}

void Supervisor::stop_workers(Program& program, bool force, std::function<void()> done) {
  auto pending = std::make_shared<size_t>(program.workers.size());
  if (*pending == 0) {
    defer(std::move(done));
    return;
  }
  // A worker may report "stopped" synchronously; `done` runs on a later turn of
  // the loop so that it may destroy the workers it waited for.
  for (auto& w : program.workers) {
    auto one_stopped = [this, pending, done] {
      if (--*pending == 0) defer(done);
    };
    if (force)
      w->kill(one_stopped);
    else
      w->stop(one_stopped);
  }
}

void Supervisor::replace_program(const std::string& name,
                                 std::shared_ptr<const config::ProgramConfig> next) {
  Program& program = programs_.at(name);
  program.next = std::move(next);
  if (program.replacing) return;  // the stop under way picks up the latest `next`
  program.replacing = true;
  stop_workers(program, false, [this, name] {
    auto it = programs_.find(name);
    if (it == programs_.end() || shutting_down_) return;
    Program& p = it->second;
    clear_workers(p);
    p.replacing = false;
    if (!p.next) {
      cgroups_->remove_program(name);
      programs_.erase(it);
      log::info("{}: stopped and removed", name);
      schedule_finished_check();
      return;
    }
    p.config = std::move(p.next);
    p.next = nullptr;
    warn_unenforced(*p.config);
    if (create_workers(p))
      start_program(p);
    else
      schedule_finished_check();
  });
}

void Supervisor::open_runtime_dir() {
  std::optional<std::string> base = notify::default_runtime_base();
  std::string why = "no runtime directory (not root and XDG_RUNTIME_DIR unset)";
  if (base) {
    auto opened = notify::RuntimeDir::open(*base);
    if (opened) {
      runtime_.emplace(std::move(*opened));
      return;
    }
    why = opened.error().message;
  }
  log::warn(
      "notify sockets are in the abstract namespace, where any local process can send to "
      "them: {}",
      why);
}

std::unique_ptr<notify::NotifySocket> Supervisor::open_notify_socket(
    const config::ProgramConfig& program) {
  std::string name = program.name;
  auto handler = [this, name](const notify::NotifySocket::Datagram& d) { on_notify(name, d); };
  Result<std::unique_ptr<notify::NotifySocket>> opened = Error{"no runtime directory"};
  if (runtime_) {
    notify::RuntimeDir::Access access{program.uid, program.gid};
    auto dir = runtime_->make_private_dir(name, access);
    opened = dir ? notify::NotifySocket::open_in(&loop_, dir->get(), runtime_->path() + "/" + name,
                                                 "notify", access, handler)
                 : Result<std::unique_ptr<notify::NotifySocket>>(dir.error());
    if (!opened)
      log::warn("{}: notify socket in the abstract namespace instead: {}", name,
                opened.error().message);
  }
  if (!opened) opened = notify::NotifySocket::open(&loop_, handler);
  if (!opened) {
    log::warn(
        "{}: no notify socket for its workers (request counts and READY=1 will not reach "
        "recycler): {}",
        name, opened.error().message);
    return nullptr;
  }
  std::optional<unsigned> queue = notify::kernel_queue_limit();
  if (program.request_counting_policy() && !warned_short_queue_) {
    warned_short_queue_ = true;
    if (auto warning = notify::short_queue_warning(queue))
      log::warn("{}", *warning);  // host-wide: once
  }
  // A worker that reports every request would wake the loop once per request:
  // while reports come fast and every request limit is far, the socket rests
  // between reads and each read takes a batch.
  auto pace = [this, name, queue,
               pacer = notify::ReadPacer{}](const notify::NotifySocket::Drained& d) mutable {
    auto it = programs_.find(name);
    const ProgramMonitor* m = it == programs_.end() ? nullptr : it->second.monitor.get();
    return pacer.after({.at = notify::ReadPacer::Clock::now(),
                        .datagrams = d.datagrams,
                        .emptied = d.emptied,
                        .requests = m ? m->controller().requests_counted() : 0,
                        .requests_left = m ? m->controller().requests_left() : std::nullopt,
                        .queue_limit = queue});
  };
  if (!(*opened)->set_pacing(&loop_, std::move(pace)))
    log::debug("{}: its notify socket is read on every wake-up (no timerfd)", name);
  return std::move(opened.value());
}

void Supervisor::on_notify(const std::string& program, const notify::NotifySocket::Datagram& d) {
  unsigned variant = 0;
  Worker* worker = worker_of(d.pid, &variant);
  // A worker of another program that can reach this socket speaks for that
  // program only on its own.
  bool foreign = worker == nullptr || worker->program().name != program;
  notify::NotifyMessage message;
  if (!foreign) message = notify::parse_message(d.data);
  if (foreign) ++notify_foreign_;
  if (!message.problems.empty()) ++notify_malformed_;
  // Whatever a process sends costs at most one warning every 10 s.
  if ((foreign || !message.problems.empty()) &&
      timers_.now() - notify_warned_ >= std::chrono::seconds(10)) {
    notify_warned_ = timers_.now();
    if (foreign)
      log::warn(
          "notify socket of {}: ignored a message from pid {}, which is not one of its workers "
          "({} so far)",
          program, d.pid, notify_foreign_);
    else
      log::warn("notify socket: {}: malformed message from pid {} ({} so far): {}", worker->name(),
                d.pid, notify_malformed_, message.problems.front());
  }
  if (foreign) return;
  // A worker that says RECYCLER_REQUEST=1 (not ..._REQUESTS) is never
  // recycled by its request count: tell the operator, once per program.
  if (message.unknown_key) {
    auto p = programs_.find(program);
    if (p != programs_.end() && !p->second.warned_unknown_key) {
      p->second.warned_unknown_key = true;
      log::warn(
          "notify socket: {}: pid {} sent the key {}, which recycler does not know: it is "
          "ignored (recycler's keys: RECYCLER_REQUESTS, RECYCLER_ITERATION, "
          "RECYCLER_DEVICE_BYTES, RECYCLER_CHECKPOINTED; warned once per program)",
          worker->name(), d.pid, *message.unknown_key);
    }
  }
  if (message.ready) worker->notified_ready(d.pid);
  ProgramMonitor* m = monitor_of(*worker);
  if (!m) return;
  // During a surge and after one, two generations of the slot report: each
  // counts in its own run.
  Worker::Generation generation = worker->generation_in(variant);
  m->on_notify(*worker, generation, d.pid, message);
  // A process that can hear answers (an autobound socket, as recycler_notify
  // has) learns its request limit and, at it, that its report was acted on:
  // what the report led to (a signal) has been done by now.
  if (!d.from || !message.requests) return;
  notify::Answer answer = m->answer(*worker, generation, d.pid, *message.requests);
  if (!answer || !same_network_namespace(d.pid)) return;
  auto it = programs_.find(program);
  if (it != programs_.end() && it->second.notify)
    it->second.notify->answer(*d.from, notify::format_answer(answer));
}

// An abstract socket address means something in one network namespace only:
// a sender in another one (it reached the socket by its path) would have
// recycler's answer land on whatever socket holds that name in recycler's.
bool Supervisor::same_network_namespace(pid_t pid) {
  // recycler's own stays what it was at start (it never changes namespaces).
  static const std::optional<std::pair<dev_t, ino_t>> own =
      []() -> std::optional<std::pair<dev_t, ino_t>> {
    struct stat s {};
    if (::stat("/proc/self/ns/net", &s) != 0) return std::nullopt;
    return std::pair{s.st_dev, s.st_ino};
  }();
  struct stat theirs {};
  if (!own) return false;
  std::string path = fmt::format("/proc/{}/ns/net", pid);
  return ::stat(path.c_str(), &theirs) == 0 && std::pair{theirs.st_dev, theirs.st_ino} == *own;
}

Worker* Supervisor::worker_of(pid_t pid, unsigned* variant) {
  auto live = [](const Worker& w) {
    return w.state() == WorkerState::Running || w.state() == WorkerState::Stopping;
  };
  if (auto it = senders_.find(pid); it != senders_.end()) {
    auto p = programs_.find(it->second.program);
    if (p != programs_.end() && it->second.slot < p->second.workers.size()) {
      Worker& w = *p->second.workers[it->second.slot];
      if (w.generation() == it->second.generation && live(w)) {
        if (variant) *variant = it->second.variant;
        return &w;
      }
    }
    senders_.erase(it);
  }
  if (pid <= 0) return nullptr;
  TimePoint now = timers_.now();
  if (auto it = strangers_.find(pid); it != strangers_.end()) {
    if (now < it->second) return nullptr;
    strangers_.erase(it);
  }
  Worker* found = nullptr;
  unsigned found_variant = 0;
  if (auto id = cgroups_->owner_of(pid)) {
    auto p = programs_.find(id->program);
    if (p != programs_.end() && id->slot < p->second.workers.size() &&
        live(*p->second.workers[id->slot])) {
      found = p->second.workers[id->slot].get();
      found_variant = id->variant;
    }
  }
  if (!found) {
    // Bounded: a stranger with many pids refills it at one /proc read each.
    if (strangers_.size() >= kMaxRemembered) strangers_.clear();
    strangers_[pid] = now + kStrangerMemory;
    return nullptr;
  }
  if (senders_.size() >= kMaxRemembered) senders_.clear();  // refilled on demand
  senders_[pid] = Sender{found->program().name, found->slot(), found->generation(), found_variant};
  if (variant) *variant = found_variant;
  return found;
}

void Supervisor::on_signal(int signum) {
  switch (signum) {
    case SIGCHLD:
      processes_.reap_children();
      break;
    case SIGHUP:
      if (shutting_down_) break;
      if (start_up_)  // once every program has started
        start_up_->reload = true;
      else
        reload();
      break;
    case SIGTERM:
      if (!shutting_down_) {
        log::info("SIGTERM: stopping every program");
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
  }
}

void Supervisor::start_gpu(const config::Config& config) {
  std::optional<std::string> library = config.nvml_library();
  if (!library) return;
  if (gpu_) {
    if (*library != gpu_library_)
      log::warn("gpu.nvml: NVML stays {} until recycler restarts (a loaded library stays)",
                gpu_library_);
    return;
  }
  gpu_library_ = *library;
  gpu_ = std::make_unique<gpu::Sampler>(&loop_, timers_, *library, options_.paths.proc, ::getpid());
  monitor_context_.gpu = gpu_.get();
}

bool Supervisor::apply_metrics(const config::Config& config) {
  if (!config.metrics) {
    if (metrics_) log::info("metrics: no longer served on {}", metrics_->url());
    metrics_.reset();
    return true;
  }
  if (metrics_ && metrics_->address() == config.metrics->listen) return true;
  auto listen = [this](const config::ListenAddress& address) {
    return metrics::Server::listen(&loop_, timers_, address, [this] { return metrics_text(); });
  };
  auto server = listen(config.metrics->listen);
  if (!server && metrics_) {
    // A reload that keeps the port and changes the host (127.0.0.1 to
    // 0.0.0.0) needs the old socket closed first; if the new one still
    // fails, the old address comes back.
    config::ListenAddress old = metrics_->address();
    metrics_.reset();
    server = listen(config.metrics->listen);
    if (!server) {
      log::error("{}", server.error().message);
      if (auto back = listen(old)) {
        metrics_ = std::move(back.value());
        log::warn("metrics: still serving {}", metrics_->url());
      }
      return false;
    }
  }
  if (!server) {
    log::error("{}", server.error().message);
    return false;
  }
  if (metrics_) log::info("metrics: no longer served on {}", metrics_->url());
  metrics_ = std::move(server.value());
  log::info("metrics: serving {}", metrics_->url());
  return true;
}

std::string Supervisor::metrics_text() {
  SupervisorStatus snapshot = status();
  metrics::Figures figures;
  figures.status = &snapshot;
  auto process = metrics::read_process_stats(options_.paths.proc);
  if (process) figures.process = *process;
  figures.sample_duration = &monitor_context_.sample_duration;
  if (metrics_) {
    const metrics::Server::Stats& s = metrics_->stats();
    figures.server = {s.scrapes, s.refused, s.dropped};
  }
  return metrics::render(figures);
}

Supervisor::ReloadOutcome Supervisor::reload() {
  ReloadOutcome out;
  if (options_.config_path.empty()) {
    out.message = "nothing to reload (recycler was started without a config file)";
    log::warn("SIGHUP: {}", out.message);
    return out;
  }
  log::info("SIGHUP: reloading {}", options_.config_path);
  config::LoadResult loaded = config::load_file(options_.config_path);
  for (const config::Diagnostic& w : loaded.warnings) {
    log::warn("{}", w.str());
    out.warnings.push_back(w.str());
  }
  if (!loaded.config) {
    for (const config::Diagnostic& e : loaded.errors) {
      log::error("{}", e.str());
      out.errors.push_back(e.str());
    }
    out.message = fmt::format(
        "reload failed: {} error{} in {}; the running configuration stays in effect",
        loaded.errors.size(), loaded.errors.size() == 1 ? "" : "s", options_.config_path);
    log::error("{}", out.message);
    return out;
  }
  config::Config next = std::move(*loaded.config);
  if (!options_.cgroup_root.empty()) next.cgroup_root = options_.cgroup_root;
  if (next.cgroup_root != config_.cgroup_root) {
    out.message = fmt::format(
        "reload failed: cgroup_root cannot change while recycler runs ({} -> {}); the "
        "running configuration stays in effect (restart recycler to move it)",
        config_.cgroup_root, next.cgroup_root);
    log::error("{}", out.message);
    return out;
  }
  if (next.control != config_.control)
    log::warn("control: the control socket stays as it is until recycler restarts");
  log::init(next.log.level, next.log.format);
  start_gpu(next);
  apply_metrics(next);

  std::vector<std::string> names;
  for (auto& [name, program] : programs_) names.push_back(name);
  for (const std::string& name : names) {
    Program& program = programs_.at(name);
    const config::ProgramConfig* wanted = next.find(name);
    const auto& current = program.replacing ? program.next : program.config;
    if (!wanted) {
      if (program.replacing && !program.next) continue;
      log::info("{}: no longer in the config; stopping it", name);
      replace_program(name, nullptr);
      out.stopped.push_back(name);
    } else if (!current || *wanted != *current) {
      log::info("{}: its configuration changed; restarting it", name);
      replace_program(name, std::make_shared<const config::ProgramConfig>(*wanted));
      out.restarted.push_back(name);
    } else {
      out.unchanged.push_back(name);
    }
  }
  for (const config::ProgramConfig& p : next.programs) {
    if (programs_.count(p.name)) continue;
    Program program;
    program.config = std::make_shared<const config::ProgramConfig>(p);
    log::info("{}: new in the config; starting it", p.name);
    if (!create_workers(program)) continue;
    warn_unenforced(*program.config);
    auto& inserted = programs_.emplace(p.name, std::move(program)).first->second;
    start_program(inserted);
    out.started.push_back(p.name);
  }
  // What replaces a program starts afresh: an operator's stop does not hold it.
  auto replaced = [&](const auto& h) {
    return std::find(out.unchanged.begin(), out.unchanged.end(), h.first) == out.unchanged.end();
  };
  std::erase_if(held_, replaced);
  std::erase_if(restarting_, replaced);
  config_ = std::move(next);
  out.ok = true;
  out.message = fmt::format("reloaded: {} unchanged, {} restarted, {} stopped, {} started",
                            out.unchanged.size(), out.restarted.size(), out.stopped.size(),
                            out.started.size());
  log::info("{}", out.message);
  return out;
}

void Supervisor::notify_status() {
  status_timer_ = timers_.after(std::chrono::seconds(1), [this] {
    if (shutting_down_) return;
    std::string line = summary_line(status(false));
    if (line != status_sent_) {
      status_sent_ = line;
      notify_systemd("STATUS=" + line);
    }
    notify_status();
  });
}

SupervisorStatus Supervisor::status(bool workers) const {
  SupervisorStatus out;
  out.pid = ::getpid();
  out.uptime_s = std::chrono::duration<double>(timers_.now() - started_at_).count();
  out.config_path = options_.config_path;
  for (const auto& [name, program] : programs_) {
    ProgramStatus& p = out.programs.emplace_back();
    p.name = name;
    p.instances = program.config->instances;
    if (program.notify) {
      p.notify_messages = program.notify->stats().received;
      p.notify_reads = program.notify->stats().reads;
      p.notify_answers = program.notify->stats().answers;
      p.notify_answers_dropped = program.notify->stats().answers_dropped;
    }
    for (const auto& w : program.workers) {
      if (w->state() == WorkerState::Running) ++p.running;
      if (workers) p.workers.push_back(worker_status(*w, program.monitor.get()));
    }
    out.workers += static_cast<unsigned>(program.workers.size());
    out.workers_running += p.running;
  }
  counters_.fill(out);
  return out;
}

WorkerStatus Supervisor::worker_status(const Worker& w, const ProgramMonitor* monitor) const {
  WorkerStatus s;
  const config::ProgramConfig& cfg = w.program();
  s.program = cfg.name;
  s.slot = w.slot();
  s.state = to_string(w.state());
  if ((w.state() == WorkerState::Running || w.state() == WorkerState::Stopping) &&
      w.phase() != StopPhase::None)
    s.phase = to_string(w.phase());
  s.pid = w.pid();
  s.generation = w.generation();
  s.restarts_recycles = w.recycles();
  s.restarts_crashes = w.crashes();
  s.last_recycle_reason = w.last_recycle_reason();
  // A pre-fork server's processes recycled one by one count as its recycles.
  if (const StatusCounters::SlotRecycles* r = counters_.slot(cfg.name, w.slot())) {
    s.process_recycles = r->processes;
    s.restarts_recycles += r->processes;
    if (r->last_was_process) s.last_recycle_reason = r->last_process_reason;
  }
  if (s.pid) {
    auto up = timers_.now() - w.started_at();
    s.uptime_s = std::chrono::duration<double>(up).count();
    s.start_time = std::chrono::duration_cast<std::chrono::seconds>(
                       (std::chrono::system_clock::now() - up).time_since_epoch())
                       .count();
  }
  s.memory_metric = "current";
  std::optional<policies::Metric> process_metric;
  bool per_process = false;  // some policy looks at each process
  for (const config::PolicyConfig& p : cfg.policies) {
    if ((p.policy->needs() & policies::kNeedsProcesses) || p.policy->per_process())
      per_process = true;
    if (s.memory_metric != "current" || !p.policy->metric()) continue;
    s.memory_metric = std::string(*p.policy->metric());
    s.limit = p.policy->limit(cfg.limits.memory_max);
    if (p.policy->per_process()) {
      s.memory_scope = "process";
      process_metric = policies::parse_metric(s.memory_metric);
    }
  }
  if (!s.limit && s.memory_scope == "worker") s.limit = cfg.limits.memory_max;
  const engine::RecycleController* controller = monitor ? &monitor->controller() : nullptr;
  const policies::Sample* last = controller ? controller->last_sample(w.slot()) : nullptr;
  if (last && s.pid) {
    using policies::Metric;
    for (Metric m : {Metric::Current, Metric::Anon, Metric::File, Metric::Rss, Metric::Pss,
                     Metric::Uss, Metric::Device, Metric::Gpu, Metric::GpuTotal})
      if (auto v = policies::value(*last, m)) s.memory[std::string(policies::to_string(m))] = *v;
    s.threads = last->threads;
    s.requests = controller->requests_served(w.slot());
    if (per_process) {
      for (const policies::ProcessSample& p : last->processes) {
        ProcessStatus& ps = s.processes.emplace_back();
        ps.pid = p.pid;
        ps.main = p.main;
        ps.recycling = p.recycling;
        if (process_metric) ps.memory = policies::value(p, *process_metric);
        ps.requests = p.requests;
        ps.request_limit = controller->process_request_limit(w.slot(), p.pid);
        if (ps.memory) s.process_memory = std::max(s.process_memory.value_or(0), *ps.memory);
      }
      std::stable_sort(s.processes.begin(), s.processes.end(),
                       [](const ProcessStatus& a, const ProcessStatus& b) {
                         return a.memory.value_or(0) > b.memory.value_or(0);
                       });
      if (s.processes.size() > kMaxStatusProcesses) s.processes.resize(kMaxStatusProcesses);
    }
    for (auto [policy, outlook] : controller->outlooks(w.slot()))
      s.outlooks.push_back(
          {std::string(cfg.policies[policy].policy->name()), outlook->slope, outlook->predicted_s});
  }
  // No policy samples the cgroup: its figures are read now (one read each).
  if (s.pid && !s.memory.count("current")) {
    if (auto dir = w.cgroup().memory_dir()) {
      probe::CgroupMemory m = probe::CgroupReader(dir->fd, dir->v2).read(false);
      if (m.current) s.memory["current"] = *m.current;
      if (m.anon && !s.memory.count("anon")) s.memory["anon"] = *m.anon;
      if (m.file && !s.memory.count("file")) s.memory["file"] = *m.file;
    }
  }
  return s;
}

void Supervisor::shutdown(int exit_code, bool force) {
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
  notify_systemd("STOPPING=1");
  size_t total = 0;
  for (auto& [name, program] : programs_) total += program.workers.size();
  auto pending = std::make_shared<size_t>(total);
  if (total == 0) {
    defer([this] { finish_shutdown(); });
    return;
  }
  for (auto& [name, program] : programs_) {
    for (auto& w : program.workers) {
      auto one_stopped = [this, pending] {
        if (--*pending == 0) defer([this] { finish_shutdown(); });
      };
      if (force)
        w->kill(one_stopped);
      else
        w->stop(one_stopped);
    }
  }
}

void Supervisor::run_ended(const Worker& worker) {
  // What left the worker's cgroup goes with its run: one scan for all the
  // runs that end in the same turn of the loop (a stop of many workers). At
  // shutdown, finish_shutdown kills whatever is left anyway.
  if (!escapes_ || shutting_down_) return;
  runs_ended_.push_back({worker.program().name, worker.slot()});
  if (runs_ended_.size() > 1) return;
  defer([this] {
    escapes_->scan();
    for (const cgroup::WorkerId& id : runs_ended_) escapes_->kill(id);
    runs_ended_.clear();
  });
}

void Supervisor::scan_for_escapes() {
  escape_scan_ = timers_.after(EscapeTracker::kScanInterval, [this] {
    escapes_->scan();
    scan_for_escapes();
  });
}

void Supervisor::finish_shutdown() {
  for (auto& [name, program] : programs_) {
    clear_workers(program);
    cgroups_->remove_program(name);
  }
  programs_.clear();
  escape_scan_.reset();
  status_timer_.reset();
  control_.reset();
  watchdog_timer_.reset();
  start_up_idle_.reset();
  start_up_.reset();
  // Nothing a worker started outlives recycler, in a cgroup or not.
  if (escapes_) escapes_->kill_all(std::chrono::seconds(1));
  cgroups_->close();
  signals_.clear();
  runtime_.reset();
  metrics_.reset();
  log::info("recycler stopped");
  uv_stop(&loop_);
}

void Supervisor::schedule_finished_check() {
  if (shutting_down_ || finished_check_pending_) return;
  finished_check_pending_ = true;
  defer([this] {
    finished_check_pending_ = false;
    check_finished();
  });
}

void Supervisor::check_finished() {
  if (shutting_down_ || start_up_) return;  // start_up_done checks again
  if (!held_.empty()) return;               // an operator stopped them and may start them again
  for (auto& [name, program] : programs_) {
    if (program.replacing) return;
    for (auto& w : program.workers)
      if (w->state() != WorkerState::Stopped && w->state() != WorkerState::Failed) return;
  }
  log::info("every program has exited and none will be restarted; recycler exits");
  shutdown(finished_exit_code(), false);
}

int Supervisor::finished_exit_code() const {
  int code = 0;
  for (const auto& [name, program] : programs_) {
    for (const auto& w : program.workers) {
      auto exit = w->last_exit();
      if (options_.wrap_mode) return exit ? exit->shell_code() : 1;
      if (w->state() == WorkerState::Failed || !exit || !exit->success()) code = 1;
    }
  }
  return code;
}

}  // namespace recycler
