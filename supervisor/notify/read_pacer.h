// How long a busy notify socket may be left unread after a drain. A worker
// that reports every request it serves (recycler_notify.py holds them back
// below RECYCLER_REQUESTS_BATCH_BELOW; other senders, or a whole-worker
// limit, may not) wakes the supervisor once per request
// when the socket is read as soon as it is readable: at 10,000 requests a
// second that wake-up (a context switch) is most of what counting costs. When
// reports come fast, the socket rests for a moment after each drain and the
// next drain reads a batch, but never for so long that a process could reach
// a request limit unread:
//
//   hold = min(kMaxHold,
//              (requests_left - kMargin) / (kSafety * request rate),   // a limit
//              queue_limit / 4 / datagram rate)                        // the kernel's queue
//
// and none (read on every wake-up, as before) when reports come slower than
// one a millisecond, when the drain left datagrams behind, when the hold
// would be under kMinHold, or when the kernel's queue is short (under
// kShortQueue, or unknown): a sender that finds the queue full keeps its
// count for its next report, so a count could jump past a limit. Rates are
// measured from one drain to the next. Pure: the caller brings the clock and
// the counts.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>

namespace recycler::notify {

// net.unix.max_dgram_qlen below this is short for a worker that reports every
// request (the kernel's default is 10; systemd sets 512): `run` warns
// (socket.h's short_queue_warning), and the socket is never held.
inline constexpr unsigned kShortQueue = 128;

class ReadPacer {
 public:
  using Clock = std::chrono::steady_clock;

  static constexpr std::chrono::microseconds kMaxHold{2000};
  static constexpr std::chrono::microseconds kMinHold{100};
  // Reports a millisecond, at least, before the socket rests at all.
  static constexpr double kBusyPerMs = 1.0;
  // A hold covers twice the requests the measured rate predicts, and leaves
  // kMargin requests of every limit to be read one by one.
  static constexpr double kSafety = 2.0;
  static constexpr uint64_t kMargin = 2;

  struct Drain {
    Clock::time_point at;    // when the drain ended
    uint64_t datagrams = 0;  // read by this drain
    bool emptied = true;     // the queue was empty when it stopped
    uint64_t requests = 0;   // requests counted so far, in all (a running total)
    // The fewest requests any process may still serve before a policy acts
    // on it (recycle_controller.h's requests_left: a process holding its
    // counts back may be one under RECYCLER_REQUESTS_BATCH_BELOW and report
    // them all at once); nullopt when no policy
    // counts them.
    std::optional<uint64_t> requests_left;
    // net.unix.max_dgram_qlen, when known: a hold fills at most a quarter of
    // it, which leaves room for a loop that comes back late.
    std::optional<unsigned> queue_limit;
  };

  // How long to leave the socket unread now; zero to go back to reading it
  // on every wake-up.
  std::chrono::microseconds after(const Drain& drain);

 private:
  std::optional<Clock::time_point> last_at_;
  uint64_t last_requests_ = 0;
};

}  // namespace recycler::notify
