#include "supervisor/worker/restart_record.h"

#include <utility>

namespace recycler {

RestartRecord::RestartRecord(const config::RestartConfig& restart)
    : mode_(restart.mode),
      backoff_({restart.backoff.initial, restart.backoff.max, restart.backoff.reset_after, 0.2}),
      crash_loop_(restart.crash_loop.max, restart.crash_loop.within) {}

void RestartRecord::reset() {
  backoff_.reset();
  crash_loop_.reset();
  start_cause_.reset();  // a replacement stopped before it started: this start is not one
}

void RestartRecord::replace_next(std::optional<RecycleCause> cause) {
  start_cause_ = std::move(cause);
}

std::optional<RecycleCause> RestartRecord::take_start_cause() {
  std::optional<RecycleCause> cause = std::exchange(start_cause_, std::nullopt);
  if (cause) recycled(*cause);
  return cause;
}

void RestartRecord::recycled(const RecycleCause& cause) {
  ++recycles_;
  last_recycle_reason_ = cause.reason;
}

void RestartRecord::ended(const ExitStatus& status, Duration uptime, bool crash) {
  last_exit_ = status;
  last_uptime_ = uptime;
  last_crash_ = crash;
  if (crash) ++crashes_;
}

RestartRecord::Decision RestartRecord::next(bool failed_start, TimePoint now,
                                            std::mt19937_64& rng) {
  bool clean = !failed_start && last_exit_ && last_exit_->success();
  bool restart =
      mode_ == config::RestartMode::Always || (mode_ == config::RestartMode::OnFailure && !clean);
  if (!restart) return {Decision::Then::NotRestarted};
  if (crash_loop_.record_exit(now))
    return {.then = Decision::Then::CrashLoop, .exits = crash_loop_.exits_in_window()};
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  Duration delay = backoff_.next(last_uptime_, unit(rng));
  return {.then = Decision::Then::Restart, .delay = delay, .attempt = backoff_.attempt()};
}

}  // namespace recycler
