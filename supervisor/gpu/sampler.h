// GPU figures for the runtime: one NVML query per interval for every worker
// together, run on libuv's thread pool (uv_queue_work) so that a slow driver
// never holds up the loop, and the latest snapshot kept for the monitors,
// which attribute it to each worker's processes when they sample
// (gpu/usage.h). A figure is thus at most one interval older than the
// sample that carries it.
//
// NVML is opened by the first query, not on the loop. When it cannot be
// opened or stops answering (the driver went away), the snapshot is dropped,
// GPU figures are empty (the policies reading them have no opinion, host
// memory is supervised as before), a warning says so once, and every
// interval tries again; an info line says when it answers again.
#pragma once

#include <sys/types.h>
#include <uv.h>

#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "supervisor/gpu/nvml.h"
#include "supervisor/gpu/usage.h"
#include "supervisor/util/fd.h"
#include "supervisor/util/timers.h"

namespace recycler::gpu {

class Sampler {
 public:
  // `library`: what Nvml::open loads; `proc_root`: where NSpid is read
  // (host_pid); `self`: recycler's own pid there.
  Sampler(uv_loop_t* loop, Timers& timers, std::string library, const std::string& proc_root,
          pid_t self);
  // Waits for a query in flight (one NVML call): destroy it outside the
  // loop's callbacks, before the loop is closed.
  ~Sampler();
  Sampler(const Sampler&) = delete;
  Sampler& operator=(const Sampler&) = delete;

  // Queries every `interval` from now on; the shortest interval asked for wins.
  void want(Duration interval);

  // The latest snapshot; null before the first answer and while NVML fails.
  const Snapshot* latest() const { return latest_ ? &*latest_ : nullptr; }
  // The usage of processes `pids` (recycler's pid numbers) in the latest
  // snapshot; empty figures when there is none.
  Usage usage(std::span<const pid_t> pids) const;
  // Whether NVML's pids cannot be mapped to recycler's here (a pod's pid
  // namespace; usage.h's host_pid_namespace): usage() is then unknown while
  // any process holds GPU memory.
  bool host_hidden() const { return host_hidden_; }
  // attribute_devices over the latest snapshot; empty figures without one.
  Usage device_usage(std::span<const unsigned> devices) const {
    return latest_ ? attribute_devices(*latest_, devices) : Usage{};
  }
  // Queries answered so far (for tests and figures).
  uint64_t answered() const { return answered_; }
  // For the watchdog: since when the query under way has been running, and
  // the interval queries are asked for at; nullopt when none is under way.
  std::optional<TimePoint> in_flight_since() const;
  Duration interval() const { return interval_.value_or(Duration{}); }

 private:
  struct Query;  // one uv_work_t and what it brings back
  void tick();
  void done(Query& q);

  uv_loop_t* loop_;
  Timers& timers_;
  std::string library_;
  UniqueFd proc_;
  bool nested_ = false;  // pids need host_pid
  // The host's pids are not visible from here (a pod): NVML's cannot be mapped.
  bool host_hidden_ = false;
  bool said_hidden_ = false;
  std::optional<Duration> interval_;
  std::unique_ptr<Timer> timer_;
  std::unique_ptr<Nvml> nvml_;  // touched only by the thread running a query
  std::unique_ptr<Query> in_flight_;
  std::optional<Snapshot> latest_;
  std::optional<std::string> failing_;  // the last failure, while it lasts
  std::set<std::string> noted_;         // notes already logged
  uint64_t answered_ = 0;
};

}  // namespace recycler::gpu
