#include "supervisor/notify/read_pacer.h"

#include <algorithm>

namespace recycler::notify {

std::chrono::microseconds ReadPacer::after(const Drain& drain) {
  using std::chrono::microseconds;
  std::optional<Clock::time_point> since = last_at_;
  // A count that went down belongs to another run of the counting (a reload):
  // this drain measures nothing then.
  uint64_t requests = drain.requests >= last_requests_ ? drain.requests - last_requests_ : 0;
  last_at_ = drain.at;
  last_requests_ = drain.requests;
  if (!since || !drain.emptied || drain.datagrams == 0) return microseconds{0};
  double elapsed_ms = std::chrono::duration<double, std::milli>(drain.at - *since).count();
  if (elapsed_ms <= 0) return microseconds{0};
  double datagrams_per_ms = static_cast<double>(drain.datagrams) / elapsed_ms;
  if (datagrams_per_ms < kBusyPerMs) return microseconds{0};

  if (!drain.queue_limit || *drain.queue_limit < kShortQueue) return microseconds{0};
  double hold_ms = std::chrono::duration<double, std::milli>(kMaxHold).count();
  hold_ms = std::min(hold_ms, (*drain.queue_limit / 4.0) / datagrams_per_ms);
  if (drain.requests_left) {
    if (*drain.requests_left <= kMargin) return microseconds{0};
    // Any datagram may be a request: the faster of the two rates.
    double per_ms = std::max(static_cast<double>(requests) / elapsed_ms, datagrams_per_ms);
    hold_ms =
        std::min(hold_ms, static_cast<double>(*drain.requests_left - kMargin) / (kSafety * per_ms));
  }
  auto hold = microseconds{static_cast<int64_t>(hold_ms * 1000.0)};
  return hold < kMinHold ? microseconds{0} : hold;
}

}  // namespace recycler::notify
