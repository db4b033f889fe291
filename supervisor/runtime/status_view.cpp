// What Supervisor (supervisor.h) shows of itself: the status snapshot the
// control socket, systemd's STATUS= line (systemd_status.h) and the metrics
// endpoint (metrics_endpoint.h) are made of.
#include <unistd.h>

#include <algorithm>

#include "policies/base/units.h"
#include "policies/metric.h"
#include "supervisor/config/summary.h"
#include "supervisor/log/log.h"
#include "supervisor/runtime/supervisor.h"

namespace recycler {
namespace {

// How a worker's policies look at its memory: whether one looks at each
// process, and the metric one reads there.
struct WatchedMemory {
  bool per_process = false;
  std::optional<policies::Metric> process_metric;
};

// The memory metric the first policy with one watches (else "current"), its
// limit and scope.
WatchedMemory fill_watched_memory(WorkerStatus& s, const config::ProgramConfig& cfg,
                                  std::optional<uint64_t> memory_max) {
  WatchedMemory watched;
  s.memory_metric = "current";
  for (const config::PolicyConfig& p : cfg.policies) {
    if ((p.policy->needs() & policies::kNeedsProcesses) || p.policy->per_process())
      watched.per_process = true;
    if (s.memory_metric != "current" || !p.policy->metric()) continue;
    s.memory_metric = std::string(*p.policy->metric());
    s.limit = p.policy->limit(memory_max);
    if (p.policy->per_process()) {
      s.memory_scope = "process";
      watched.process_metric = policies::parse_metric(s.memory_metric);
    }
  }
  if (!s.limit && s.memory_scope == "worker") s.limit = cfg.limits.memory_max;
  return watched;
}

// The processes of the slot's last sample, largest first.
void fill_sampled_processes(WorkerStatus& s, const engine::RecycleController& controller,
                            unsigned slot, const policies::Sample& last,
                            const std::optional<policies::Metric>& metric) {
  for (const policies::ProcessSample& p : last.processes) {
    ProcessStatus& ps = s.processes.emplace_back();
    ps.pid = p.pid;
    ps.main = p.main;
    ps.recycling = p.recycling;
    if (metric) ps.memory = policies::value(p, *metric);
    ps.requests = p.requests;
    ps.request_limit = controller.process_request_limit(slot, p.pid);
    if (ps.memory) s.process_memory = std::max(s.process_memory.value_or(0), *ps.memory);
  }
  std::stable_sort(s.processes.begin(), s.processes.end(),
                   [](const ProcessStatus& a, const ProcessStatus& b) {
                     return a.memory.value_or(0) > b.memory.value_or(0);
                   });
  if (s.processes.size() > kMaxStatusProcesses) s.processes.resize(kMaxStatusProcesses);
}

// What the slot's last sample says: memory, threads, requests, processes
// and the predicting policies' outlooks.
void fill_sampled(WorkerStatus& s, const config::ProgramConfig& cfg,
                  const engine::RecycleController& controller, unsigned slot,
                  const policies::Sample& last, const WatchedMemory& watched) {
  using policies::Metric;
  for (Metric m : {Metric::Current, Metric::Anon, Metric::File, Metric::Rss, Metric::Pss,
                   Metric::Uss, Metric::Device, Metric::Gpu, Metric::GpuTotal})
    if (auto v = policies::value(last, m)) s.memory[std::string(policies::to_string(m))] = *v;
  s.threads = last.threads;
  s.requests = controller.requests_served(slot);
  if (watched.per_process)
    fill_sampled_processes(s, controller, slot, last, watched.process_metric);
  for (auto [policy, outlook] : controller.outlooks(slot))
    s.outlooks.push_back(
        {std::string(cfg.policies[policy].policy->name()), outlook->slope, outlook->predicted_s});
}

// No policy samples the cgroup: its figures are read now (one read each).
void fill_cgroup_memory(WorkerStatus& s, const Worker& w) {
  if (!s.pid || s.memory.count("current")) return;
  if (auto dir = w.cgroup().memory_dir()) {
    probe::CgroupMemory m = probe::CgroupReader(dir->fd, dir->v2).read(false);
    if (m.current) s.memory["current"] = *m.current;
    if (m.anon && !s.memory.count("anon")) s.memory["anon"] = *m.anon;
    if (m.file && !s.memory.count("file")) s.memory["file"] = *m.file;
  }
}

// Whether `w` can take work: its monitor's view, else whether it runs.
ProgramMonitor::Readiness readiness_of(const Worker& w, const ProgramMonitor* monitor) {
  if (monitor) return monitor->readiness(w.slot());
  bool running = w.state() == WorkerState::Running;
  return {running, running ? std::string() : std::string(to_string(w.state()))};
}

WorkerStatus status_of_worker(const Worker& w, const ProgramMonitor* monitor,
                              const StatusCounters& counters, const Timers& timers) {
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
  s.restarts_recycles = w.record().recycles();
  s.restarts_crashes = w.record().crashes();
  s.last_recycle_reason = w.record().last_recycle_reason();
  // A pre-fork server's processes recycled one by one count as its recycles.
  if (const StatusCounters::SlotRecycles* r = counters.slot(cfg.name, w.slot())) {
    s.process_recycles = r->processes;
    s.restarts_recycles += r->processes;
    if (r->last_was_process) s.last_recycle_reason = r->last_process_reason;
  }
  if (s.pid) {
    auto up = timers.now() - w.started_at();
    s.uptime_s = std::chrono::duration<double>(up).count();
    s.start_time = std::chrono::duration_cast<std::chrono::seconds>(
                       (std::chrono::system_clock::now() - up).time_since_epoch())
                       .count();
  }
  WatchedMemory watched = fill_watched_memory(
      s, cfg, monitor ? monitor->controller().memory_max() : cfg.limits.memory_max);
  const engine::RecycleController* controller = monitor ? &monitor->controller() : nullptr;
  const policies::Sample* last = controller ? controller->last_sample(w.slot()) : nullptr;
  if (last && s.pid) fill_sampled(s, cfg, *controller, w.slot(), *last, watched);
  if (controller && s.pid) s.status_text = controller->status_text(w.slot());
  fill_cgroup_memory(s, w);
  ProgramMonitor::Readiness r = readiness_of(w, monitor);
  s.ready = r.ready;
  s.not_ready = std::move(r.why);
  return s;
}

}  // namespace

SupervisorStatus Supervisor::status(bool workers) const {
  SupervisorStatus out;
  out.pid = ::getpid();
  out.uptime_s = std::chrono::duration<double>(timers_.now() - started_at_).count();
  out.config_path = options_.config_path;
  for (const auto& [name, program] : programs_) {
    ProgramStatus& p = out.programs.emplace_back();
    p.name = name;
    p.instances = program.config->instances;
    p.gang = program.config->gang.has_value();
    if (const notify::NotifySocket* socket = router_.socket(name)) {
      p.notify_messages = socket->stats().received;
      p.notify_reads = socket->stats().reads;
      p.notify_answers = socket->stats().answers;
      p.notify_answers_dropped = socket->stats().answers_dropped;
    }
    for (const auto& w : program.workers) {
      if (w->state() == WorkerState::Running) ++p.running;
      if (workers)
        p.workers.push_back(status_of_worker(*w, program.monitor.get(), counters_, timers_));
    }
    out.workers += static_cast<unsigned>(program.workers.size());
    out.workers_running += p.running;
  }
  counters_.fill(out);
  if (budget_) out.budget = budget_->status(timers_.now());
  // Only a limited cgroup is a container's (or a unit's) to show; the host's
  // own root has none.
  out.container = container_.status();
  return out;
}

metrics::Server::ProbeAnswer Supervisor::probe(metrics::http::Path path) const {
  if (path == metrics::http::Path::Healthz) {
    std::vector<Progress> progress;
    sampling_progress(programs_, timers_.now(), progress);
    gpu_.progress(timers_.now(), progress);
    if (auto why = first_stalled(progress)) return {false, *why};
    return {true, shutting_down_ ? "ok (stopping)" : "ok"};
  }
  if (shutting_down_) return {false, "not ready: stopping"};
  unsigned slots = 0, ready = 0;
  std::string first;
  for (const auto& [name, program] : programs_)
    for (const auto& w : program.workers) {
      ++slots;
      ProgramMonitor::Readiness r = readiness_of(*w, program.monitor.get());
      if (r.ready)
        ++ready;
      else if (first.empty())
        first = w->name() + ": " + r.why;
    }
  if (slots == 0) return {false, "not ready: no workers"};
  if (ready < slots)
    return {false, fmt::format("not ready: {} of {} workers ready; {}", ready, slots, first)};
  return {true, fmt::format("ready: {} workers", slots)};
}

}  // namespace recycler
