#include "supervisor/runtime/watchdog.h"

#include <algorithm>

#include "policies/base/fields.h"
#include "policies/base/units.h"

namespace recycler {

Result<std::optional<Duration>> watchdog_interval(const char* usec, const char* pid, pid_t self) {
  if (!usec || !*usec) return std::optional<Duration>{};
  if (pid && *pid) {
    auto owner = fields::parse_digits(pid);
    if (!owner) return Error{"WATCHDOG_PID: not a pid: " + units::quote(pid)};
    if (*owner != static_cast<uint64_t>(self)) return std::optional<Duration>{};  // not ours
  }
  auto micros = fields::parse_digits(usec);
  if (!micros || *micros == 0)
    return Error{"WATCHDOG_USEC: not a positive number of microseconds: " + units::quote(usec)};
  // Milliseconds are the loop's resolution; a shorter interval is no use.
  return std::optional<Duration>{Duration{std::max<uint64_t>(*micros / 1000, 1)}};
}

WatchdogHealth::WatchdogHealth(Duration interval, TimePoint start)
    : interval_(interval),
      period_(std::max(interval / 2, Duration{1})),
      expected_(start + period_) {}

Duration WatchdogHealth::stall_limit(Duration progress_interval) const {
  return std::max(3 * progress_interval, period_);
}

WatchdogHealth::Verdict WatchdogHealth::tick(TimePoint now, const std::vector<Progress>& progress) {
  Duration late = std::chrono::duration_cast<Duration>(now - expected_);
  expected_ = now + period_;
  if (late >= period_ / 2)
    return {false, "the loop was blocked: this watchdog tick came " + units::format_duration(late) +
                       " late"};
  for (const Progress& p : progress)
    if (p.since > stall_limit(p.interval))
      return {false, p.who + " has stalled: none for " + units::format_duration(p.since) +
                         " (expected every " + units::format_duration(p.interval) + ")"};
  return {true, ""};
}

}  // namespace recycler
