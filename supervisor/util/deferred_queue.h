// Work for a later turn of the loop. An object's callback must not destroy
// the object that runs it (a worker's state hook must not destroy the
// worker), so such work is queued and runs from a zero-delay timer instead:
// one timer for everything queued in a turn, each in the order queued.
// Loop-generic: it only needs Timers (timers.h), so fake timers drive it in
// tests as they drive everything else.
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "supervisor/util/timers.h"

namespace recycler {

class DeferredQueue {
 public:
  // `timers` outlives the queue.
  explicit DeferredQueue(Timers& timers) : timers_(timers) {}

  // Runs `fn` on a later turn of the loop (what `fn` queues in turn waits
  // for the next timer).
  void defer(std::function<void()> fn);
  // Drops what is queued and its timer (before the loop closes).
  void cancel();

 private:
  void run_queued();

  Timers& timers_;
  std::vector<std::function<void()>> queued_;
  std::unique_ptr<Timer> timer_;
};

}  // namespace recycler
