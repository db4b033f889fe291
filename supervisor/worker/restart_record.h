// What a slot's runs have come to across restarts (how the last one ended,
// how many followed a recycle, how many crashed, the cause the next start
// follows), and what that decides when a run ends on its own: a restart
// after the jittered backoff, no restart (restart.mode), or failed for good
// (restart.crash_loop). The decision comes back as a value, and time and
// randomness come in as arguments: the worker acts on it (the log line, the
// state, the timer), and the arithmetic is tested without a worker.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <random>
#include <string>

#include "supervisor/config/config.h"
#include "supervisor/process/process.h"
#include "supervisor/util/timers.h"
#include "supervisor/worker/environment.h"
#include "supervisor/worker/restart_backoff.h"

namespace recycler {

class RestartRecord {
 public:
  // What follows a run that ended on its own, or a start that failed.
  struct Decision {
    enum class Then {
      NotRestarted,  // restart.mode: never, or on-failure after a clean exit
      CrashLoop,     // restart.crash_loop.max exits within crash_loop.within: failed
      Restart,       // after `delay`
    };
    Then then = Then::NotRestarted;
    Duration delay{0};     // Restart: the backoff's, jittered
    unsigned attempt = 0;  // Restart: its place in the backoff sequence, from 1
    size_t exits = 0;      // CrashLoop: the exits within the window
  };

  explicit RestartRecord(const config::RestartConfig& restart);

  // A start asked for (from stopped or failed): the backoff and the
  // crash-loop window start over, and a replacement that never started is
  // forgotten; what was counted stays.
  void reset();
  // The next start of the main generation replaces a recycled run, with
  // `cause` (none: it counts as a plain start).
  void replace_next(std::optional<RecycleCause> cause);
  // A start of the main generation: the cause of the recycle it follows,
  // counted, or none. Taken: the start after it is a plain one.
  std::optional<RecycleCause> take_start_cause();
  // A run that follows a recycle with `cause` began otherwise (a surge's
  // next generation took over).
  void recycled(const RecycleCause& cause);
  // The main generation's run ended with `status` after `uptime` (a failed
  // start: zero); `crash`: an end nobody asked for that was not clean.
  void ended(const ExitStatus& status, Duration uptime, bool crash);
  // What follows the run that ended last (`failed_start`: a start that
  // failed), at `now`. Unless restart.mode rules a restart out, the exit
  // goes into the crash-loop window and, short of a crash loop, the backoff
  // takes one step, drawing its jitter from `rng`.
  Decision next(bool failed_start, TimePoint now, std::mt19937_64& rng);

  // How the last run ended (the failure, for a failed start).
  const std::optional<ExitStatus>& last_exit() const { return last_exit_; }
  // Whether that end was a crash (ended()'s `crash`: nobody asked for it,
  // and it was not clean).
  bool last_crashed() const { return last_crash_; }
  uint64_t recycles() const { return recycles_; }
  uint64_t crashes() const { return crashes_; }
  const std::string& last_recycle_reason() const { return last_recycle_reason_; }

 private:
  config::RestartMode mode_;
  RestartBackoff backoff_;
  CrashLoopDetector crash_loop_;
  std::optional<ExitStatus> last_exit_;
  Duration last_uptime_{0};
  bool last_crash_ = false;
  uint64_t recycles_ = 0;
  uint64_t crashes_ = 0;
  std::string last_recycle_reason_;
  std::optional<RecycleCause> start_cause_;  // the next start's (a replacement's environment)
};

}  // namespace recycler
