#include "supervisor/metrics/exporter.h"

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

}  // namespace

std::string render(const Figures& f) {
  TextWriter w;
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
