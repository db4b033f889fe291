// The metrics endpoint (metrics/server.h) as each loaded config asks for it:
// opened, moved or closed to match, and what it serves gathered for
// metrics::render (the status snapshot, recycler's own /proc figures, the
// monitors' sample durations, the server's own counters). Out of Supervisor,
// which hands it the snapshot through a callback.
#pragma once

#include <uv.h>

#include <functional>
#include <memory>
#include <string>

#include "supervisor/config/config.h"
#include "supervisor/control/status.h"
#include "supervisor/metrics/server.h"
#include "supervisor/metrics/text.h"
#include "supervisor/util/timers.h"

namespace recycler {

class MetricsEndpoint {
 public:
  using StatusFn = std::function<SupervisorStatus()>;
  // `loop`, `timers` and `sample_duration` outlive the endpoint; `proc` is
  // where recycler's own figures are read (/proc); `probe` answers
  // /healthz and /readyz.
  MetricsEndpoint(uv_loop_t* loop, Timers& timers, std::string proc,
                  const metrics::Histogram& sample_duration, StatusFn status,
                  metrics::Server::Probe probe);

  // Where `config` asks for an endpoint: opened, moved or closed to match
  // it; false when it cannot listen there (logged; a move that fails keeps
  // the old address where it can).
  bool apply(const config::Config& config);
  void close() { server_.reset(); }

 private:
  Result<std::unique_ptr<metrics::Server>> listen(const config::ListenAddress& address);
  std::string text();

  uv_loop_t* loop_;
  Timers& timers_;
  std::string proc_;
  const metrics::Histogram& sample_duration_;
  StatusFn status_;
  metrics::Server::Probe probe_;
  std::unique_ptr<metrics::Server> server_;
};

}  // namespace recycler
