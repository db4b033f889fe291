// Pure restart arithmetic for one worker slot: exponential backoff with jitter
// between restarts, and the crash-loop window that gives up on a slot.
#pragma once

#include <chrono>
#include <cstddef>
#include <deque>

namespace recycler {

using Millis = std::chrono::milliseconds;

// delay(n) = min(max, initial * 2^n) * (1 - jitter * u), u uniform in [0, 1):
// jitter only ever shortens a delay, so the cap holds, and slots that crash
// together spread out instead of restarting in lockstep. A run that lasted at
// least reset_after counts as stable and starts the sequence over.
class RestartBackoff {
 public:
  struct Params {
    Millis initial{1000};
    Millis max{60000};
    Millis reset_after{60000};
    double jitter = 0.2;
  };

  explicit RestartBackoff(Params params) : params_(params) {}

  // The delay before the next start, after a run that lasted `uptime`.
  Millis next(Millis uptime, double u);
  void reset() { attempt_ = 0; }
  unsigned attempt() const { return attempt_; }

 private:
  Params params_;
  unsigned attempt_ = 0;
};

// Counts exits inside a sliding window; trips when `max` exits fall within `within`.
class CrashLoopDetector {
 public:
  using TimePoint = std::chrono::steady_clock::time_point;

  CrashLoopDetector(unsigned max, Millis within) : max_(max), within_(within) {}

  // Records an exit at `t`; true when it completes `max` exits within the window.
  bool record_exit(TimePoint t);
  std::size_t exits_in_window() const { return exits_.size(); }
  void reset() { exits_.clear(); }

 private:
  unsigned max_;
  Millis within_;
  std::deque<TimePoint> exits_;
};

}  // namespace recycler
