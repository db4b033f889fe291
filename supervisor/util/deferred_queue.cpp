#include "supervisor/util/deferred_queue.h"

#include <utility>

namespace recycler {

void DeferredQueue::defer(std::function<void()> fn) {
  queued_.push_back(std::move(fn));
  if (timer_) return;
  timer_ = timers_.after(Duration{0}, [this] { run_queued(); });
}

void DeferredQueue::run_queued() {
  timer_.reset();
  auto queue = std::move(queued_);
  queued_.clear();
  for (auto& f : queue) f();
}

void DeferredQueue::cancel() {
  timer_.reset();
  queued_.clear();
}

}  // namespace recycler
