#include "supervisor/metrics/exporter.h"

#include <set>

namespace recycler::metrics {
namespace {

void process_series(TextWriter& w, const ProcessStats& p) {
  w.family("process_cpu_seconds_total", "Total user and system CPU time spent in seconds.",
           Type::Counter);
  w.sample("process_cpu_seconds_total", {}, p.cpu_seconds);
  w.family("process_resident_memory_bytes", "Resident memory size in bytes.", Type::Gauge);
  w.sample("process_resident_memory_bytes", {}, p.resident_bytes);
  w.family("process_virtual_memory_bytes", "Virtual memory size in bytes.", Type::Gauge);
  w.sample("process_virtual_memory_bytes", {}, p.virtual_bytes);
  w.family("process_start_time_seconds", "Start time of the process since unix epoch in seconds.",
           Type::Gauge);
  w.sample("process_start_time_seconds", {}, p.start_time_seconds);
  if (p.open_fds) {
    w.family("process_open_fds", "Number of open file descriptors.", Type::Gauge);
    w.sample("process_open_fds", {}, *p.open_fds);
  }
  if (p.max_fds) {
    w.family("process_max_fds", "Maximum number of open file descriptors.", Type::Gauge);
    w.sample("process_max_fds", {}, *p.max_fds);
  }
}

void server_series(TextWriter& w, const ServerCounters& s) {
  w.family("recycler_metrics_scrapes_total",
           "Requests to the metrics endpoint, by outcome: served, refused (4xx, 5xx) or dropped "
           "(closed without a response: timeouts, evictions, too many clients).",
           Type::Counter);
  w.sample("recycler_metrics_scrapes_total", {{"outcome", "served"}}, s.scrapes);
  w.sample("recycler_metrics_scrapes_total", {{"outcome", "refused"}}, s.refused);
  w.sample("recycler_metrics_scrapes_total", {{"outcome", "dropped"}}, s.dropped);
}

// One family over every worker: `value` writes the worker's samples, if any.
template <typename Each>
void per_worker(TextWriter& w, const SupervisorStatus& s, std::string_view name,
                std::string_view help, Type type, Each each) {
  w.family(name, help, type);
  std::string slot;
  for (const ProgramStatus& p : s.programs)
    for (const WorkerStatus& worker : p.workers) {
      slot = std::to_string(worker.slot);
      each(worker, Label{"program", worker.program}, Label{"slot", slot});
    }
}

// Memory: what each worker holds, and the limits its policies compare it with.
void worker_memory_series(TextWriter& w, const SupervisorStatus& s) {
  per_worker(
      w, s, "recycler_worker_memory_bytes",
      "The worker's memory at its last sample, by metric (current, anon, file: its "
      "cgroup; rss, pss, uss: its processes; device: reported by the worker; gpu, "
      "gpu_total: NVML).",
      Type::Gauge, [&](const WorkerStatus& x, Label program, Label slot) {
        for (const auto& [metric, bytes] : x.memory)
          w.sample("recycler_worker_memory_bytes", {program, slot, {"metric", metric}}, bytes);
      });
  per_worker(w, s, "recycler_worker_memory_limit_bytes",
             "The limit on the memory metric its policies watch (else the cgroup's memory_max); "
             "a limit on each process is recycler_worker_process_memory_limit_bytes.",
             Type::Gauge, [&](const WorkerStatus& x, Label program, Label slot) {
               if (x.limit && x.memory_scope != "process")
                 w.sample("recycler_worker_memory_limit_bytes",
                          {program, slot, {"metric", x.memory_metric}}, *x.limit);
             });
  // scope: process: the limit is each process's, so it is compared with the
  // largest process, never with the worker's sum.
  per_worker(w, s, "recycler_worker_process_memory_max_bytes",
             "The largest figure of one of the worker's processes, on the metric a scope: "
             "process policy watches.",
             Type::Gauge, [&](const WorkerStatus& x, Label program, Label slot) {
               if (x.memory_scope == "process" && x.process_memory)
                 w.sample("recycler_worker_process_memory_max_bytes",
                          {program, slot, {"metric", x.memory_metric}}, *x.process_memory);
             });
  per_worker(w, s, "recycler_worker_process_memory_limit_bytes",
             "The limit a scope: process policy sets on each of the worker's processes.",
             Type::Gauge, [&](const WorkerStatus& x, Label program, Label slot) {
               if (x.memory_scope == "process" && x.limit)
                 w.sample("recycler_worker_process_memory_limit_bytes",
                          {program, slot, {"metric", x.memory_metric}}, *x.limit);
             });
}

// The worker's current run: its load, its start, and how often the slot was
// restarted.
void worker_run_series(TextWriter& w, const SupervisorStatus& s) {
  per_worker(w, s, "recycler_worker_requests_total",
             "Requests the worker's current run has served (resets when it restarts).",
             Type::Counter, [&](const WorkerStatus& x, Label program, Label slot) {
               if (x.requests)
                 w.sample("recycler_worker_requests_total", {program, slot}, *x.requests);
             });
  per_worker(w, s, "recycler_worker_threads", "Threads of the worker's processes.", Type::Gauge,
             [&](const WorkerStatus& x, Label program, Label slot) {
               if (x.threads)
                 w.sample("recycler_worker_threads", {program, slot}, uint64_t{*x.threads});
             });
  per_worker(w, s, "recycler_worker_start_time_seconds",
             "When the worker's current run started, unix seconds.", Type::Gauge,
             [&](const WorkerStatus& x, Label program, Label slot) {
               if (x.start_time)
                 w.sample("recycler_worker_start_time_seconds", {program, slot},
                          static_cast<double>(*x.start_time));
             });
  per_worker(w, s, "recycler_worker_generation",
             "The worker slot's run number (1 for the first start, one more per restart).",
             Type::Gauge, [&](const WorkerStatus& x, Label program, Label slot) {
               w.sample("recycler_worker_generation", {program, slot}, uint64_t{x.generation});
             });
  per_worker(w, s, "recycler_worker_restarts_total",
             "Restarts of the worker slot, by cause: a recycle (a process of a pre-fork worker "
             "recycled on its own counts too), or a crash (its run ended on its own, not "
             "cleanly).",
             Type::Counter, [&](const WorkerStatus& x, Label program, Label slot) {
               w.sample("recycler_worker_restarts_total", {program, slot, {"cause", "recycle"}},
                        x.restarts_recycles);
               w.sample("recycler_worker_restarts_total", {program, slot, {"cause", "crash"}},
                        x.restarts_crashes);
             });
}

// What the predicting policies expect.
void worker_outlook_series(TextWriter& w, const SupervisorStatus& s) {
  per_worker(w, s, "recycler_worker_leak_slope_bytes_per_second",
             "How fast a predicting policy sees the worker's memory grow.", Type::Gauge,
             [&](const WorkerStatus& x, Label program, Label slot) {
               for (const OutlookStatus& o : x.outlooks)
                 w.sample("recycler_worker_leak_slope_bytes_per_second",
                          {program, slot, {"policy", o.policy}}, o.slope_bytes_per_s);
             });
  per_worker(w, s, "recycler_worker_seconds_to_limit",
             "When a predicting policy expects the worker to reach its limit, seconds from now.",
             Type::Gauge, [&](const WorkerStatus& x, Label program, Label slot) {
               for (const OutlookStatus& o : x.outlooks)
                 w.sample("recycler_worker_seconds_to_limit", {program, slot, {"policy", o.policy}},
                          o.seconds_to_limit);
             });
}

void worker_series(TextWriter& w, const SupervisorStatus& s) {
  per_worker(w, s, "recycler_worker_up", "Whether the worker slot's process is running (1) or not.",
             Type::Gauge, [&](const WorkerStatus& x, Label program, Label slot) {
               w.sample("recycler_worker_up", {program, slot}, uint64_t{x.running() ? 1u : 0u});
             });
  worker_memory_series(w, s);
  worker_run_series(w, s);
  worker_outlook_series(w, s);
}

// Recycles decided, each counted once per program (and per gang).
void recycle_series(TextWriter& w, const SupervisorStatus& s) {
  std::set<std::string_view> present;
  for (const ProgramStatus& p : s.programs) present.insert(p.name);
  w.family("recycler_recycles_total",
           "Recycles decided, by program, policy (control: an operator's) and action.",
           Type::Counter);
  for (const auto& [key, n] : s.recycles_by)
    if (present.count(key.program))
      w.sample("recycler_recycles_total",
               {{"program", key.program}, {"policy", key.policy}, {"action", key.action}}, n);
  w.family("recycler_gang_recycles_total",
           "Recycles of a gang program's ranks together (config gang:), each counted once, by "
           "program.",
           Type::Counter);
  for (const ProgramStatus& p : s.programs)
    if (p.gang) w.sample("recycler_gang_recycles_total", {{"program", p.name}}, p.gang_recycles);
}

void budget_series(TextWriter& w, const BudgetStatus& b) {
  const Label scope[] = {{"scope", b.scope}, {"metric", b.metric}};
  w.family("recycler_budget_used_bytes",
           "The budget's figure (config budget:): the sum of the workers', the host's or the "
           "container's memory by its metric.",
           Type::Gauge);
  if (b.used) w.sample("recycler_budget_used_bytes", scope, *b.used);
  w.family("recycler_budget_limit_bytes",
           "The budget's limit, resolved (a percentage of the "
           "host's or the container's memory).",
           Type::Gauge);
  if (b.limit) w.sample("recycler_budget_limit_bytes", scope, *b.limit);
  w.family("recycler_budget_growth_bytes_per_second",
           "How fast the budget's figure grows (Theil-Sen over budget.growth_window).",
           Type::Gauge);
  if (b.slope_bytes_per_s)
    w.sample("recycler_budget_growth_bytes_per_second", scope, *b.slope_bytes_per_s);
  w.family("recycler_budget_pressure_percent",
           "The memory pressure the budget watches: PSI avg10, some or full.", Type::Gauge);
  if (b.pressure)
    w.sample("recycler_budget_pressure_percent", {{"scope", b.scope}, {"kind", b.pressure_kind}},
             *b.pressure);
  w.family("recycler_budget_recycles_total",
           "Workers the budget chose and recycled gracefully since recycler started or the "
           "budget was reloaded.",
           Type::Counter);
  w.sample("recycler_budget_recycles_total", {{"scope", b.scope}}, b.recycles);
}

void container_series(TextWriter& w, const ContainerStatus& c) {
  w.family("recycler_container_memory_bytes",
           "Memory of the container recycler runs in (its memory cgroup's usage).", Type::Gauge);
  if (c.current) w.sample("recycler_container_memory_bytes", std::span<const Label>{}, *c.current);
  w.family("recycler_container_memory_limit_bytes",
           "The container's memory limit, as last read (a pod resized in place changes it).",
           Type::Gauge);
  if (c.limit)
    w.sample("recycler_container_memory_limit_bytes", std::span<const Label>{}, *c.limit);
  w.family("recycler_container_oom_kills_total",
           "Processes the kernel's OOM killer ended in the container, recycler's workers or not.",
           Type::Counter);
  if (c.oom_kills)
    w.sample("recycler_container_oom_kills_total", std::span<const Label>{}, *c.oom_kills);
  w.family("recycler_container_memory_pressure_percent",
           "The container's memory pressure, PSI some avg10 (cgroup v2).", Type::Gauge);
  if (c.pressure)
    w.sample("recycler_container_memory_pressure_percent", std::span<const Label>{}, *c.pressure);
}

// Exits by reason, then the OOM kills among them again on their own.
void exit_series(TextWriter& w, const SupervisorStatus& s) {
  w.family("recycler_exits_total",
           "Worker runs that ended, by program and reason: clean (asked for, or status 0), "
           "crash (a non-zero status), oom_kill (the kernel's OOM killer), signal (killed by a "
           "signal nobody asked for).",
           Type::Counter);
  std::map<std::string_view, uint64_t> oom_kills;
  for (const ProgramStatus& p : s.programs) {
    oom_kills[p.name] = 0;
    for (ExitReason r :
         {ExitReason::Clean, ExitReason::Crash, ExitReason::OomKill, ExitReason::Signal}) {
      auto it = s.exits_by.find({p.name, r});
      uint64_t n = it == s.exits_by.end() ? 0 : it->second;
      w.sample("recycler_exits_total", {{"program", p.name}, {"reason", to_string(r)}}, n);
      if (r == ExitReason::OomKill) oom_kills[p.name] = n;
    }
  }
  w.family("recycler_oom_kills_total", "Worker runs the kernel's OOM killer ended, by program.",
           Type::Counter);
  for (const auto& [program, n] : oom_kills)
    w.sample("recycler_oom_kills_total", {{"program", program}}, n);
}

void notify_series(TextWriter& w, const SupervisorStatus& s) {
  w.family("recycler_notify_messages_total",
           "Messages read from the program's notify socket (request reports, READY=1, ...).",
           Type::Counter);
  for (const ProgramStatus& p : s.programs)
    if (p.notify_messages)
      w.sample("recycler_notify_messages_total", {{"program", p.name}}, *p.notify_messages);
  w.family("recycler_notify_reads_total",
           "Reads of the program's notify socket that took messages: under load each takes a "
           "batch, so fewer than the messages.",
           Type::Counter);
  for (const ProgramStatus& p : s.programs)
    if (p.notify_reads)
      w.sample("recycler_notify_reads_total", {{"program", p.name}}, *p.notify_reads);
  w.family("recycler_notify_answers_total",
           "Answers sent on the program's notify socket (a process's request limit, the count "
           "seen at it), by whether they went or were dropped (unread answers filled the socket's "
           "buffer, or the process was gone).",
           Type::Counter);
  for (const ProgramStatus& p : s.programs) {
    if (p.notify_answers)
      w.sample("recycler_notify_answers_total", {{"program", p.name}, {"result", "sent"}},
               *p.notify_answers);
    if (p.notify_answers_dropped)
      w.sample("recycler_notify_answers_total", {{"program", p.name}, {"result", "dropped"}},
               *p.notify_answers_dropped);
  }
}

void program_counters(TextWriter& w, const SupervisorStatus& s) {
  recycle_series(w, s);
  if (s.budget) budget_series(w, *s.budget);
  if (s.container) container_series(w, *s.container);
  exit_series(w, s);
  notify_series(w, s);
}

}  // namespace

std::string render(const Figures& f) {
  TextWriter w;
  if (f.status) {
    // About 1.5 KiB per worker: one allocation, not a dozen regrowths.
    size_t workers = 0;
    for (const ProgramStatus& p : f.status->programs) workers += p.workers.size();
    w.reserve(8192 + workers * 2048);
    worker_series(w, *f.status);
    program_counters(w, *f.status);
  }
  if (f.sample_duration) {
    w.family("recycler_sample_duration_seconds",
             "Time the monitor spends reading one worker's probes per sample.", Type::Histogram);
    w.histogram("recycler_sample_duration_seconds", {}, *f.sample_duration);
  }
  server_series(w, f.server);
  if (f.process) process_series(w, *f.process);
  return w.take();
}

}  // namespace recycler::metrics
