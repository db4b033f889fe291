// Time for the lifecycle logic: "now" and one-shot timers. The supervisor
// uses libuv's timers; tests use FakeTimers (tests/support) and advance time
// by hand, so backoff, stop timeouts and crash-loop windows run in microseconds.
#pragma once

#include <chrono>
#include <functional>
#include <memory>

#include "policies/base/time.h"

namespace recycler {

using SteadyClock = std::chrono::steady_clock;
using TimePoint = SteadyClock::time_point;

// Destroying the handle cancels the timer (if it has not fired yet).
class Timer {
 public:
  virtual ~Timer() = default;
};

class Timers {
 public:
  virtual ~Timers() = default;
  virtual TimePoint now() const = 0;
  // Calls `fire` once, after `delay`, from the loop. The callback may destroy
  // the returned handle.
  [[nodiscard]] virtual std::unique_ptr<Timer> after(Duration delay,
                                                     std::function<void()> fire) = 0;
  // Like after(), but at the last multiple of `grain` on the clock (counted
  // from its epoch) that is no later than `delay` from now: timers of one
  // grain fire together, in one wake-up of the loop, however their first
  // ones were spread (a sampling tick per program would wake it once per
  // program). Never late; early by less than `grain`; a `grain` of zero, or
  // longer than `delay`, is after().
  // (The loop's implementation also makes timers due at the same instant
  // share one timer of its own: uv.h.)
  [[nodiscard]] virtual std::unique_ptr<Timer> aligned(Duration delay, Duration grain,
                                                       std::function<void()> fire) {
    return after(align(delay, grain, clock_ms()), std::move(fire));
  }
  // `delay` from `now_ms`, moved back to the last multiple of `grain`.
  static Duration align(Duration delay, Duration grain, int64_t now_ms) {
    if (grain <= Duration{0} || delay < grain) return delay;
    int64_t deadline = now_ms + delay.count();
    return Duration{deadline - deadline % grain.count() - now_ms};
  }

 protected:
  // now() in whole milliseconds, as the timers themselves count.
  virtual int64_t clock_ms() const {
    return std::chrono::duration_cast<Duration>(now().time_since_epoch()).count();
  }
};

}  // namespace recycler
