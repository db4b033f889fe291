#include "supervisor/runtime/watchdog.h"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>

#include "policies/base/fields.h"
#include "policies/base/units.h"
#include "supervisor/log/log.h"

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

namespace {
std::string stalled(const Progress& p) {
  return p.who + " has stalled: none for " + units::format_duration(p.since) + " (expected every " +
         units::format_duration(p.interval) + ")";
}
}  // namespace

std::optional<std::string> first_stalled(const std::vector<Progress>& progress) {
  for (const Progress& p : progress)
    if (p.since > 3 * p.interval) return stalled(p);
  return std::nullopt;
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
    if (p.since > stall_limit(p.interval)) return {false, stalled(p)};
  return {true, ""};
}

std::unique_ptr<SystemdWatchdog> SystemdWatchdog::start(Timers& timers, ProgressFn progress,
                                                        NotifyFn notify) {
  auto interval =
      watchdog_interval(std::getenv("WATCHDOG_USEC"), std::getenv("WATCHDOG_PID"), ::getpid());
  if (!interval) {
    log::warn("systemd watchdog ignored: {}", interval.error().message);
    return nullptr;
  }
  if (!*interval) return nullptr;
  return std::make_unique<SystemdWatchdog>(timers, **interval, std::move(progress),
                                           std::move(notify));
}

SystemdWatchdog::SystemdWatchdog(Timers& timers, Duration interval, ProgressFn progress,
                                 NotifyFn notify)
    : timers_(timers),
      health_(interval, timers.now()),
      progress_(std::move(progress)),
      notify_(std::move(notify)) {
  log::info("systemd watchdog: WATCHDOG=1 every {} while healthy (WatchdogSec={})",
            units::format_duration(health_.period()), units::format_duration(health_.interval()));
  notify_("WATCHDOG=1");
  timer_ = timers_.after(health_.period(), [this] { tick(); });
}

void SystemdWatchdog::tick() {
  TimePoint now = timers_.now();
  std::vector<Progress> progress;
  progress_(now, progress);
  WatchdogHealth::Verdict verdict = health_.tick(now, progress);
  if (verdict.ping) {
    notify_("WATCHDOG=1");
    if (!unhealthy_.empty()) log::info("systemd watchdog: healthy again; pinging");
    unhealthy_.clear();
  } else if (unhealthy_.empty()) {
    log::error("systemd watchdog: not pinging ({}); systemd restarts recycler if this lasts",
               verdict.why);
    unhealthy_ = verdict.why;
  }
  timer_ = timers_.after(health_.period(), [this] { tick(); });
}

}  // namespace recycler
