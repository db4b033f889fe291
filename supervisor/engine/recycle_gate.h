// Pure bookkeeping the supervisor consults before it acts on a Decision: how
// many of a program's workers may recycle at once, and whether a worker is
// being recycled in a loop.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstddef>
#include <deque>
#include <string>
#include <string_view>
#include <vector>

#include "policies/base/time.h"

namespace recycler::engine {

// What is being recycled: a whole worker slot, or one process inside it.
struct RecycleKey {
  unsigned slot = 0;
  pid_t pid = 0;  // 0: the whole worker
  bool operator==(const RecycleKey&) const = default;
};

// At most `max_concurrent` recycles in flight; the rest wait in FIFO order,
// each key at most once. A cap of kNoCap admits every key at once.
class RecycleQueue {
 public:
  static constexpr unsigned kNoCap = 0;
  explicit RecycleQueue(unsigned max_concurrent);

  enum class Admit { Now, Queued, AlreadyInFlight, AlreadyQueued };
  Admit request(RecycleKey key);

  // A recycle in flight finished or was abandoned, or a queued key no longer
  // applies: removes it; returns the keys that may go now (moved from the
  // queue to in flight, FIFO).
  std::vector<RecycleKey> finish(RecycleKey key);
  // Removes every key of a slot (the worker stopped): same return as finish.
  std::vector<RecycleKey> forget_slot(unsigned slot);

  bool in_flight(RecycleKey key) const;
  bool queued(RecycleKey key) const;
  size_t in_flight_count() const { return in_flight_.size(); }
  size_t waiting() const { return waiting_.size(); }
  unsigned max_concurrent() const { return max_; }  // kNoCap: none
  // Recycles already in flight carry on under a lower cap; the next finish()
  // admits up to a higher one.
  void set_max_concurrent(unsigned max_concurrent);

 private:
  std::vector<RecycleKey> admit();
  bool has_room() const { return max_ == kNoCap || in_flight_.size() < max_; }

  unsigned max_;
  std::vector<RecycleKey> in_flight_;
  std::deque<RecycleKey> waiting_;
};

// Per worker slot. A replacement that trips the same may_loop policy within
// min_uptime of starting is a recycle loop (e.g. a Celery child that starts
// near its memory limit): its next start is delayed exponentially instead of
// looping.
class RecycleLoopGuard {
 public:
  RecycleLoopGuard(Duration min_uptime, Duration initial, Duration max);

  // A policy recycled the worker after `uptime`. Returns the delay before the
  // replacement starts: zero normally; when `may_loop` and the same `policy`
  // (by name/index string) also recycled the previous run and uptime <
  // min_uptime: initial, 2*initial, 4*initial ... capped at max. Any recycle
  // after uptime >= min_uptime, or by another policy, resets the count.
  Duration on_recycle(Duration uptime, bool may_loop, std::string_view policy);
  // The run ended otherwise (it crashed or was stopped): the next recycle has
  // no previous one to loop with.
  void reset();
  unsigned loops() const { return loops_; }  // consecutive loops so far (0 = none)

 private:
  Duration min_uptime_;
  Duration initial_;
  Duration max_;
  std::string last_policy_;  // "" when the previous run was not recycled
  unsigned loops_ = 0;
};

}  // namespace recycler::engine
