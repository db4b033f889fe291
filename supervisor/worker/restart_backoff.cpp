#include "supervisor/worker/restart_backoff.h"

#include <algorithm>

namespace recycler {

Millis RestartBackoff::next(Millis uptime, double u) {
  if (uptime >= params_.reset_after) attempt_ = 0;
  // Double without overflow: stop doubling once the cap is reached.
  Millis base = params_.initial;
  for (unsigned i = 0; i < attempt_ && base < params_.max; ++i) base *= 2;
  base = std::min(base, params_.max);
  ++attempt_;
  u = std::clamp(u, 0.0, 1.0);
  auto shortened = static_cast<Millis::rep>(static_cast<double>(base.count()) * params_.jitter * u);
  return base - Millis(shortened);
}

bool CrashLoopDetector::record_exit(TimePoint t) {
  exits_.push_back(t);
  while (!exits_.empty() && t - exits_.front() >= within_) exits_.pop_front();
  return max_ > 0 && exits_.size() >= max_;
}

}  // namespace recycler
