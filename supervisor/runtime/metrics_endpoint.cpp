#include "supervisor/runtime/metrics_endpoint.h"

#include <utility>

#include "supervisor/log/log.h"
#include "supervisor/metrics/exporter.h"

namespace recycler {

MetricsEndpoint::MetricsEndpoint(uv_loop_t* loop, Timers& timers, std::string proc,
                                 const metrics::Histogram& sample_duration, StatusFn status,
                                 metrics::Server::Probe probe)
    : loop_(loop),
      timers_(timers),
      proc_(std::move(proc)),
      sample_duration_(sample_duration),
      status_(std::move(status)),
      probe_(std::move(probe)) {}

Result<std::unique_ptr<metrics::Server>> MetricsEndpoint::listen(
    const config::ListenAddress& address) {
  return metrics::Server::listen(
      loop_, timers_, address, [this] { return text(); }, metrics::Server::Limits{}, probe_);
}

bool MetricsEndpoint::apply(const config::Config& config) {
  if (!config.metrics) {
    if (server_) log::info("metrics: no longer served on {}", server_->url());
    server_.reset();
    return true;
  }
  if (server_ && server_->address() == config.metrics->listen) return true;
  auto server = listen(config.metrics->listen);
  if (!server && server_) {
    // A reload that keeps the port and changes the host (127.0.0.1 to
    // 0.0.0.0) needs the old socket closed first; if the new one still
    // fails, the old address comes back.
    config::ListenAddress old = server_->address();
    server_.reset();
    server = listen(config.metrics->listen);
    if (!server) {
      log::error("{}", server.error().message);
      if (auto back = listen(old)) {
        server_ = std::move(back.value());
        log::warn("metrics: still serving {}", server_->url());
      }
      return false;
    }
  }
  if (!server) {
    log::error("{}", server.error().message);
    return false;
  }
  if (server_) log::info("metrics: no longer served on {}", server_->url());
  server_ = std::move(server.value());
  log::info("metrics: serving {}", server_->url());
  return true;
}

std::string MetricsEndpoint::text() {
  SupervisorStatus snapshot = status_();
  metrics::Figures figures;
  figures.status = &snapshot;
  auto process = metrics::read_process_stats(proc_);
  if (process) figures.process = *process;
  figures.sample_duration = &sample_duration_;
  if (server_) {
    const metrics::Server::Stats& s = server_->stats();
    figures.server = {s.scrapes, s.refused, s.dropped};
  }
  return metrics::render(figures);
}

}  // namespace recycler
