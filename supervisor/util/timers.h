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
};

}  // namespace recycler
