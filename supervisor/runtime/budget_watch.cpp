#include "supervisor/runtime/budget_watch.h"

#include <fcntl.h>
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <string_view>

#include "policies/base/units.h"
#include "supervisor/config/summary.h"
#include "supervisor/log/log.h"
#include "supervisor/probe/parse.h"
#include "supervisor/runtime/container_watch.h"
#include "supervisor/runtime/monitor.h"
#include "supervisor/util/fd.h"

namespace recycler {
namespace {

using config::BudgetScope;
using units::format_size;

// A small file's text; nullopt when it cannot be read.
std::optional<std::string> read_small(const std::string& path) {
  if (path.empty()) return std::nullopt;
  Result<std::string> text = read_file_at(AT_FDCWD, path);
  if (!text) return std::nullopt;
  return std::move(text.value());
}

// One worker as the budget's candidate(s): itself, or (its program's budget
// scope: process) each of its processes but the main one.
void add_candidates(const engine::BudgetCandidate& c, const policies::Sample& s,
                    std::optional<uint64_t> bytes, bool processes, const std::string& metric,
                    std::vector<engine::BudgetCandidate>& candidates) {
  if (!processes) {
    if (!bytes) return;
    engine::BudgetCandidate wc = c;
    wc.bytes = *bytes;
    candidates.push_back(wc);
    return;
  }
  for (const policies::ProcessSample& p : s.processes) {
    std::optional<uint64_t> own = engine::budget_figure(p, metric);
    if (p.main || !own) continue;
    engine::BudgetCandidate pc = c;
    pc.pid = p.pid;
    pc.bytes = *own;
    pc.eligible = c.eligible && !p.recycling;
    candidates.push_back(pc);
  }
}

// The workers' last samples: their candidates into `r`, and the sum of their
// figures (nullopt when none had one).
std::optional<uint64_t> read_workers(const Programs& programs, const std::string& metric,
                                     TimePoint now, engine::BudgetReading& r) {
  uint64_t sum = 0;
  bool summed = false;
  for (auto& [name, program] : programs) {
    if (!program.monitor || program.replacing) continue;
    const config::ProgramConfig& cfg = *program.config;
    const engine::RecycleController& ctl = program.monitor->controller();
    bool processes = cfg.budget_processes();
    for (const auto& w : program.workers) {
      unsigned slot = w->slot();
      const policies::Sample* s = ctl.last_sample(slot);
      std::optional<TimePoint> started = ctl.run_started_at(slot);
      if (!s || !started) continue;
      std::optional<uint64_t> bytes = engine::budget_figure(*s, metric);
      if (bytes) {
        sum += *bytes;
        summed = true;
      }
      if (cfg.budget.preference == config::BudgetPreference::Omit) continue;
      bool eligible = ctl.running(slot) && w->state() == WorkerState::Running && !w->recycling() &&
                      now - *started >= cfg.min_uptime;
      engine::BudgetCandidate c{name, slot, 0, 0, *started, cfg.budget.preference, eligible};
      add_candidates(c, *s, bytes, processes, metric, r.candidates);
    }
  }
  if (!summed) return std::nullopt;
  return sum;
}

// The scope's own figures into `r`; returns the file its pressure is read
// from ("" when it has none).
std::string read_scope(const config::BudgetConfig& config, const BudgetWatch::Sources& sources,
                       std::optional<uint64_t> workers_sum, engine::BudgetReading& r) {
  const std::string& metric = config.metric;
  switch (config.scope) {
    case BudgetScope::Workers: {
      if (workers_sum) r.used = workers_sum;
      // A percentage is of the container's limit where recycler runs in one
      // (the workers share it), else of the host's memory (read_host).
      if (config.limit && config.limit->percent && !sources.container.empty())
        r.capacity = read_memory_limit(sources.container, sources.v2);
      return sources.v2 && !sources.workers.empty() ? sources.workers + "/memory.pressure"
                                                    : std::string();
    }
    case BudgetScope::Host: {
      return sources.proc + "/pressure/memory";
    }
    case BudgetScope::Container: {
      const std::string& dir = sources.container;
      if (dir.empty()) break;
      if (metric == "anon") {
        probe::CgroupMemory m;
        if (auto stat = read_small(dir + "/memory.stat"))
          probe::parse_memory_stat(*stat, sources.v2, m);
        r.used = m.anon;
      } else {
        r.used = read_memory_current(dir, sources.v2);
      }
      r.capacity = read_memory_limit(dir, sources.v2);
      return sources.v2 ? dir + "/memory.pressure" : std::string();
    }
  }
  return std::string();
}

// The host's figures: scope host, and the capacity of a percentage
// wherever the container has no limit of its own.
void read_host(const config::BudgetConfig& config, const BudgetWatch::Sources& sources,
               engine::BudgetReading& r) {
  bool percent = config.limit && config.limit->percent;
  if (config.scope != BudgetScope::Host && (!percent || r.capacity)) return;
  auto text = read_small(sources.proc + "/meminfo");
  if (!text) return;
  probe::HostMemory m = probe::parse_meminfo(*text);
  if (!r.capacity) r.capacity = m.total;
  if (config.scope == BudgetScope::Host) {
    if (config.metric == "anon")
      r.used = m.anon;
    else if (m.total && m.available && *m.available <= *m.total)
      r.used = *m.total - *m.available;
  }
}

}  // namespace

BudgetWatch::Sources budget_sources(const cgroup::Manager& cgroups, const cgroup::Paths& paths) {
  BudgetWatch::Sources s;
  s.proc = paths.proc;
  const cgroup::Layout& layout = cgroups.layout();
  s.v2 = layout.mode == cgroup::Mode::V2;
  for (const cgroup::Hierarchy& h : layout.hierarchies)
    if ((s.v2 || h.controller == "memory") && cgroups.enforcing()) s.workers = layout.dir(h);
  s.container = container_memory_dir(layout, paths);
  return s;
}

BudgetWatch::BudgetWatch(Timers& timers, Programs& programs, const config::BudgetConfig& config,
                         Sources sources)
    : timers_(timers),
      programs_(programs),
      config_(config),
      sources_(std::move(sources)),
      budget_(config_) {
  log::info("{}", describe_budget(config_));
  if (config_.timeline) {
    auto writer = timeline::TimelineWriter::create(*config_.timeline, "budget", 0);
    if (!writer) {
      log::warn("budget: no timeline: {}", writer.error().message);
    } else {
      timeline_.emplace(std::move(writer.value()));
      if (Status s = timeline_->start_run(1, 0, timers_.now()); !s)
        log::warn("budget: timeline: {}", s.error().message);
    }
  }
  if (config_.pressure && config_.scope == BudgetScope::Workers && !sources_.v2)
    log::warn(
        "budget.pressure: the workers' memory pressure needs cgroup v2 (memory.pressure); this "
        "machine has {}: use budget.scope: host for the host's /proc/pressure/memory",
        sources_.workers.empty() ? "no worker cgroups" : "cgroup v1");
  arm();
}

void BudgetWatch::arm() {
  tick_ = timers_.aligned(config_.interval, config_.interval, [this] { tick(); });
}

void BudgetWatch::unreadable(const std::string& what) {
  log::warn("budget: cannot read {}; the budget {} until it can", what,
            config_.pressure && config_.limit ? "acts on what it can read" : "does nothing");
}

engine::BudgetReading BudgetWatch::read(TimePoint now) {
  engine::BudgetReading r;
  r.t = now;
  std::optional<uint64_t> workers_sum = read_workers(programs_, config_.metric, now, r);
  std::string pressure_file = read_scope(config_, sources_, workers_sum, r);
  read_host(config_, sources_, r);
  if (config_.pressure)
    if (auto text = read_small(pressure_file))
      r.pressure = probe::parse_pressure_avg10(*text, config_.pressure->full);

  if (config_.limit && !r.used && config_.scope != BudgetScope::Workers && !warned_used_) {
    warned_used_ = true;
    unreadable(std::string(to_string(config_.scope)) + " " + config_.metric);
  }
  if (config_.pressure && !r.pressure && !warned_pressure_ && !pressure_file.empty()) {
    warned_pressure_ = true;
    unreadable(pressure_file);
  }
  return r;
}

void BudgetWatch::tick() {
  arm();
  engine::BudgetReading reading = read(timers_.now());
  record(reading);
  if (auto choice = budget_.evaluate(reading)) act(*choice, reading);
}

// The figure in the `current` column, so that the file replays as a worker's
// trace would (a leak policy on it is the budget's trend).
void BudgetWatch::record(const engine::BudgetReading& reading) {
  if (!timeline_) return;
  policies::Sample s;
  s.t = reading.t;
  s.current = reading.used;
  s.pressure = reading.pressure;
  if (Status written = timeline_->sample(s); !written)
    log::warn("budget: timeline: {}", written.error().message);
}

void BudgetWatch::act(const engine::BudgetChoice& choice, const engine::BudgetReading& reading) {
  auto it = programs_.find(choice.program);
  bool taken =
      it != programs_.end() && it->second.monitor &&
      it->second.monitor->budget_recycle(choice.slot, choice.pid, "budget: " + choice.reason);
  log::Fields fields{{"scope", std::string(to_string(config_.scope))},
                     {"trigger", choice.trigger},
                     {"program", choice.program},
                     {"slot", choice.slot},
                     {"pid", choice.pid},
                     {"bytes", choice.bytes},
                     {"reason", choice.reason}};
  if (reading.used) fields.emplace_back("used_bytes", *reading.used);
  if (auto limit = budget_.view().limit) fields.emplace_back("limit_bytes", *limit);
  if (choice.slope) fields.emplace_back("slope_bytes_per_s", *choice.slope);
  if (!taken) {
    budget_.refused();
    log::event(log::Level::Warn, "budget_refused",
               fmt::format("budget: {}; but {}[{}] has nothing to recycle now: choosing again",
                           choice.reason, choice.program, choice.slot),
               fields);
    return;
  }
  // The program's engine logs the recycle itself ("api[2] recycle: budget: ...
  // (budget policy)"), which status counts; this is the budget's own record.
  log::event(log::Level::Debug, "budget_recycle", "budget: " + choice.reason, fields);
  if (timeline_) {
    std::string detail = fmt::format("{}[{}]: {}", choice.program, choice.slot, choice.reason);
    if (Status s = timeline_->event("recycle", choice.pid, detail); !s)
      log::warn("budget: timeline: {}", s.error().message);
  }
}

BudgetStatus BudgetWatch::status(TimePoint now) const {
  const engine::BudgetView& v = budget_.view();
  BudgetStatus s;
  s.scope = to_string(config_.scope);
  s.metric = config_.metric;
  s.used = v.used;
  s.limit = v.limit;
  s.pressure = v.pressure;
  if (config_.pressure) s.pressure_kind = config_.pressure->full ? "full" : "some";
  s.slope_bytes_per_s = v.slope;
  s.crosses_in_s = v.crosses_in_s;
  s.state = v.state;
  s.recycles = v.recycles;
  s.last_choice = v.last_choice;
  if (v.last_at) s.last_ago_s = std::chrono::duration<double>(now - *v.last_at).count();
  return s;
}

}  // namespace recycler
