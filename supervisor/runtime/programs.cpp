// Supervisor's programs (supervisor.h): their workers created (at start-up
// and later), started, stopped and replaced, and the reload that decides
// which.
#include <algorithm>

#include "policies/base/units.h"
#include "policies/metric.h"
#include "supervisor/cgroup/memory_settings.h"
#include "supervisor/cgroup/oomd_marks.h"
#include "supervisor/config/parse.h"
#include "supervisor/config/summary.h"
#include "supervisor/log/log.h"
#include "supervisor/metrics/exporter.h"
#include "supervisor/runtime/preempt.h"
#include "supervisor/runtime/supervisor.h"
#include "supervisor/worker/worker_checkpoints.h"

namespace recycler {
namespace {

// What of its limits (and the defaults of the memory settings) this host
// cannot apply, at each start of the program.
void warn_unenforced(const config::ProgramConfig& program, const cgroup::Manager& cgroups) {
  if (!cgroups.enforcing()) {
    if (program.limits.any())
      log::warn("{}: limits not enforced: {}", program.name, describe_limits(program.limits));
    return;
  }
  std::string missing = unenforceable_limits(program.limits, cgroups.layout().missing);
  if (!missing.empty())
    log::warn("{}: this system lacks the cgroup controller for {}; not enforced", program.name,
              missing);
  for (const std::string& why : cgroup::unapplied_settings(program.limits, cgroups.layout()))
    log::warn("{}: {}", program.name, why);
}

// The config file reread for a reload, with the cgroup root it must keep
// (`running_root`; `options`' root wins over the file's); nullopt when it
// cannot be used (logged, and said in `out`). Its warnings are in `out`.
std::optional<config::Config> load_for_reload(const SupervisorOptions& options,
                                              const std::string& running_root, ReloadOutcome& out) {
  if (options.config_path.empty()) {
    out.message = "nothing to reload (recycler was started without a config file)";
    log::warn("SIGHUP: {}", out.message);
    return std::nullopt;
  }
  log::info("SIGHUP: reloading {}", options.config_path);
  config::LoadResult loaded = config::load_file(options.config_path);
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
        loaded.errors.size(), loaded.errors.size() == 1 ? "" : "s", options.config_path);
    log::error("{}", out.message);
    return std::nullopt;
  }
  config::Config next = std::move(*loaded.config);
  if (!options.cgroup_root.empty()) next.cgroup_root = options.cgroup_root;
  if (next.cgroup_root != running_root) {
    out.message = fmt::format(
        "reload failed: cgroup_root cannot change while recycler runs ({} -> {}); the "
        "running configuration stays in effect (restart recycler to move it)",
        running_root, next.cgroup_root);
    log::error("{}", out.message);
    return std::nullopt;
  }
  return next;
}

// The program's place in the budget, on the worker's cgroup for
// systemd-oomd and oomd (cgroup/oomd_marks.h); what cannot be written is said
// at debug level: it matters only where one of them runs.
void mark_for_oomd(const config::ProgramConfig& cfg, const cgroup::WorkerCgroup& cg) {
  std::string why = cgroup::mark_for_oomd(cg, cfg.budget.preference);
  if (!why.empty())
    log::debug("{}: cannot mark {} for systemd-oomd and oomd ({}): {}", cfg.name, cg.path(),
               to_string(cfg.budget.preference), why);
}

// Stops every worker of `program` (`force`: kills them), then `done` on a
// later turn of the loop, so that it may destroy the workers it waited for
// (a worker may report "stopped" synchronously).
void stop_workers(Program& program, bool force, DeferredQueue& deferred,
                  std::function<void()> done) {
  auto pending = std::make_shared<size_t>(program.workers.size());
  if (*pending == 0) {
    deferred.defer(std::move(done));
    return;
  }
  for (auto& w : program.workers) {
    auto one_stopped = [&deferred, pending, done] {
      if (--*pending == 0) deferred.defer(done);
    };
    if (force)
      w->kill(one_stopped);
    else
      w->stop(one_stopped);
  }
}

}  // namespace

void clear_workers(Program& program, notify::Router& router) {
  program.monitor.reset();
  program.workers.clear();  // each removes its cgroup
  router.remove(program.config->name);
}

void Supervisor::start_up() {
  StartUp::Steps steps{
      .create =
          [this](const config::ProgramConfig& p) {
            Program program;
            program.config = std::make_shared<const config::ProgramConfig>(p);
            if (!create_workers(program)) return false;
            programs_.emplace(p.name, std::move(program));
            return true;
          },
      .start =
          [this](const config::ProgramConfig& p) {
            Program& program = programs_.at(p.name);
            warn_unenforced(*program.config, *cgroups_);
            // A requeued Slurm job's trainers resume from what its last run saved.
            if (auto n = slurm_restart_count(); n && program.config->checkpoints())
              for (auto& w : program.workers)
                w->checkpoints().resume_at_next_start(
                    fmt::format("the Slurm job was requeued (SLURM_RESTART_COUNT={})", *n));
            program.start_workers();
          },
      .cancelled = [this] { return shutting_down_; },
      .finished = [this](StartUp::Outcome outcome,
                         bool reload_now) { start_up_finished(outcome, reload_now); },
  };
  start_up_ = std::make_unique<StartUp>(&loop_, timers_, config_.programs, std::move(steps));
  start_up_->begin();
}

bool Supervisor::create_workers(Program& program) {
  const config::ProgramConfig& cfg = *program.config;
  if (cfg.devices.gpus_auto) {
    Status pool = gpu_pool_.resolve(cfg, config_.gpu.value_or(config::GpuConfig{}).nvml);
    if (!pool) {
      log::error("{}: {}", cfg.name, pool.error().message);
      return false;
    }
  }
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
  std::string notify_address =
      router_.open_socket({cfg.name, {cfg.uid, cfg.gid}, cfg.request_counting_policy() != nullptr});
  for (unsigned slot = 0; slot < cfg.instances; ++slot) {
    auto cg = cgroups_->create(cfg.name, slot, cfg.limits);
    if (!cg) {
      log::error("{}[{}]: {}", cfg.name, slot, cg.error().message);
      program.workers.clear();
      cgroups_->remove_program(cfg.name);
      router_.remove(cfg.name);
      return false;
    }
    mark_for_oomd(cfg, **cg);
    CgroupFactory make_cgroup = [this, name = cfg.name, slot, limits = cfg.limits,
                                 config = program.config](unsigned variant) {
      auto next = cgroups_->create(name, slot, limits, variant);
      if (next) mark_for_oomd(*config, **next);
      return next;
    };
    program.workers.push_back(std::make_unique<Worker>(context_, program.config, slot,
                                                       std::move(cg.value()), notify_address,
                                                       program.sockets, std::move(make_cgroup)));
  }
  program.monitor =
      std::make_unique<ProgramMonitor>(monitor_context_, program.config, program.workers);
  return true;
}

void Supervisor::replace_program(const std::string& name,
                                 std::shared_ptr<const config::ProgramConfig> next) {
  Program& program = programs_.at(name);
  program.next = std::move(next);
  if (program.replacing) return;  // the stop under way picks up the latest `next`
  program.replacing = true;
  stop_workers(program, false, deferred_, [this, name] {
    auto it = programs_.find(name);
    if (it == programs_.end() || shutting_down_) return;
    Program& p = it->second;
    clear_workers(p, router_);
    p.replacing = false;
    if (!p.next) {
      cgroups_->remove_program(name);
      programs_.erase(it);
      log::info("{}: stopped and removed", name);
      finished_.schedule();
      return;
    }
    p.config = std::move(p.next);
    p.next = nullptr;
    warn_unenforced(*p.config, *cgroups_);
    if (create_workers(p))
      p.start_workers();
    else
      finished_.schedule();
  });
}

ReloadOutcome Supervisor::reload() {
  ReloadOutcome out;
  std::optional<config::Config> next = load_for_reload(options_, config_.cgroup_root, out);
  if (!next) return out;
  if (next->control != config_.control)
    log::warn("control: the control socket stays as it is until recycler restarts");
  if (next->preempt && !signals_.caught(next->preempt->signal))
    log::warn("preempt.signal: recycler handles {} only once restarted; until then it is ignored",
              units::signal_name(next->preempt->signal));
  log::init(next->log.level, next->log.format);
  gpu_.apply(*next);
  metrics_.apply(*next);
  reload_programs(*next, out);
  apply_budget(*next);
  container_.check_fit(*next);
  commands_.reloaded(out.unchanged);
  config_ = std::move(*next);
  out.ok = true;
  out.message = fmt::format("reloaded: {} unchanged, {} restarted, {} stopped, {} started",
                            out.unchanged.size(), out.restarted.size(), out.stopped.size(),
                            out.started.size());
  log::info("{}", out.message);
  return out;
}

void Supervisor::reload_programs(const config::Config& next, ReloadOutcome& out) {
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
    warn_unenforced(*program.config, *cgroups_);
    auto& inserted = programs_.emplace(p.name, std::move(program)).first->second;
    inserted.start_workers();
    out.started.push_back(p.name);
  }
}

}  // namespace recycler
