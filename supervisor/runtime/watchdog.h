// systemd's watchdog (WatchdogSec= in the unit): recycler sends WATCHDOG=1
// every half interval, from a timer of its loop, while it is healthy; when
// the pings stop, systemd kills it (SIGABRT) and Restart= brings it back.
//
// Healthy, at each ping tick, means all of:
//   - the loop turns on time: the tick is less than half a ping period late
//     (a loop blocked for a quarter of WatchdogSec or more is not supervising:
//     the memory fast path answers in milliseconds when it is);
//   - sampling keeps up: every worker being sampled has had its sampling tick
//     within max(3 x its program's sample_interval, the ping period);
//   - GPU figures keep coming, when a config asks for them: no NVML query has
//     been in flight longer than max(3 x the GPU sampling interval, the ping
//     period) (a driver hung on the thread pool leaves the loop turning but
//     the gpu policies blind).
// A tick that is unhealthy sends nothing and logs why, once per stretch.
//
// The decisions are pure (time and lags in, a verdict out: WatchdogHealth);
// SystemdWatchdog reads the environment, runs the timer and sends the pings
// through what the supervisor hands it (its notify function, and what is
// making progress).
#pragma once

#include <sys/types.h>

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "policies/base/time.h"
#include "supervisor/util/result.h"
#include "supervisor/util/timers.h"

namespace recycler {

// The watchdog interval systemd expects, as sd_watchdog_enabled() reads it:
// WATCHDOG_USEC (microseconds, > 0) and, when set, WATCHDOG_PID naming this
// process (else the variables are meant for another one: nullopt). Null
// arguments are unset variables. An error for values that are not numbers.
Result<std::optional<Duration>> watchdog_interval(const char* usec, const char* pid, pid_t self);

// Something that should make progress every `interval`: one worker's
// sampling, or the GPU sampler's query.
struct Progress {
  std::string who;    // "api[0] sampling", "GPU query"
  Duration interval;  // how often it should progress
  Duration since;     // since it last did
};

// The first of `progress` that has gone more than three of its intervals
// without progress, said as "api[0] sampling has stalled: none for 12s
// (expected every 1s)"; nullopt when none has (GET /healthz).
std::optional<std::string> first_stalled(const std::vector<Progress>& progress);

class WatchdogHealth {
 public:
  // `interval`: WatchdogSec. Ticks come every period() from `start`.
  WatchdogHealth(Duration interval, TimePoint start);

  Duration interval() const { return interval_; }
  Duration period() const { return period_; }
  // How long something may go without progress before it counts as stalled.
  Duration stall_limit(Duration progress_interval) const;

  struct Verdict {
    bool ping = false;
    std::string why;  // when not: what is unhealthy
  };
  // A tick at `now` (the next is expected a period later).
  Verdict tick(TimePoint now, const std::vector<Progress>& progress);

 private:
  Duration interval_;
  Duration period_;
  TimePoint expected_;
};

// The watchdog on the loop: WATCHDOG=1 through `notify` every period while
// WatchdogHealth says so, with what `progress` reports at each tick; one
// line when it stops pinging and one when it starts again.
class SystemdWatchdog {
 public:
  using ProgressFn = std::function<void(TimePoint now, std::vector<Progress>& out)>;
  using NotifyFn = std::function<void(const std::string& state)>;
  // From systemd's WATCHDOG_USEC and WATCHDOG_PID: null when it asked for
  // none (or for another process), or asked wrongly (said once).
  static std::unique_ptr<SystemdWatchdog> start(Timers& timers, ProgressFn progress,
                                                NotifyFn notify);
  SystemdWatchdog(Timers& timers, Duration interval, ProgressFn progress, NotifyFn notify);

 private:
  void tick();

  Timers& timers_;
  WatchdogHealth health_;
  ProgressFn progress_;
  NotifyFn notify_;
  std::unique_ptr<Timer> timer_;
  std::string unhealthy_;  // why the last tick sent nothing ("" when it pinged)
};

}  // namespace recycler
