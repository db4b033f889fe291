#include "supervisor/engine/recycle_gate.h"

#include <algorithm>

namespace recycler::engine {

RecycleQueue::RecycleQueue(unsigned max_concurrent) : max_(max_concurrent) {}

RecycleQueue::Admit RecycleQueue::request(RecycleKey key) {
  if (in_flight(key)) return Admit::AlreadyInFlight;
  if (queued(key)) return Admit::AlreadyQueued;
  // Keys already waiting go first, even when a lowered cap has room again.
  if (waiting_.empty() && has_room()) {
    in_flight_.push_back(key);
    return Admit::Now;
  }
  waiting_.push_back(key);
  return Admit::Queued;
}

std::vector<RecycleKey> RecycleQueue::finish(RecycleKey key) {
  std::erase(in_flight_, key);
  std::erase(waiting_, key);
  return admit();
}

std::vector<RecycleKey> RecycleQueue::forget_slot(unsigned slot) {
  auto of_slot = [slot](const RecycleKey& k) { return k.slot == slot; };
  std::erase_if(in_flight_, of_slot);
  std::erase_if(waiting_, of_slot);
  return admit();
}

bool RecycleQueue::in_flight(RecycleKey key) const {
  return std::find(in_flight_.begin(), in_flight_.end(), key) != in_flight_.end();
}

bool RecycleQueue::queued(RecycleKey key) const {
  return std::find(waiting_.begin(), waiting_.end(), key) != waiting_.end();
}

void RecycleQueue::set_max_concurrent(unsigned max_concurrent) {
  max_ = max_concurrent;
}

std::vector<RecycleKey> RecycleQueue::admit() {
  std::vector<RecycleKey> now;
  while (!waiting_.empty() && has_room()) {
    in_flight_.push_back(waiting_.front());
    now.push_back(waiting_.front());
    waiting_.pop_front();
  }
  return now;
}

RecycleLoopGuard::RecycleLoopGuard(Duration min_uptime, Duration initial, Duration max)
    : min_uptime_(min_uptime), initial_(initial), max_(max) {}

Duration RecycleLoopGuard::on_recycle(Duration uptime, bool may_loop, std::string_view policy) {
  bool loop = may_loop && uptime < min_uptime_ && !policy.empty() && policy == last_policy_;
  last_policy_ = policy;
  if (!loop) {
    loops_ = 0;
    return Duration::zero();
  }
  ++loops_;
  // Double without overflow: stop doubling once the cap is reached.
  Duration delay = initial_;
  for (unsigned i = 1; i < loops_ && delay < max_; ++i) delay *= 2;
  return std::min(delay, max_);
}

void RecycleLoopGuard::reset() {
  last_policy_.clear();
  loops_ = 0;
}

}  // namespace recycler::engine
