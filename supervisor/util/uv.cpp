#include "supervisor/util/uv.h"

#include <algorithm>
#include <string>
#include <utility>

namespace recycler::uv {
namespace {

class UvTimer final : public Timer {
 public:
  UvTimer(uv_loop_t* loop, Duration delay, std::function<void()> fire) : fire_(std::move(fire)) {
    auto* t = new uv_timer_t;
    uv_timer_init(loop, t);
    t->data = this;
    handle_ = Handle<uv_timer_t>(t);
    auto ms = delay.count() < 0 ? 0 : static_cast<uint64_t>(delay.count());
    uv_timer_start(
        t,
        [](uv_timer_t* h) {
          auto* self = static_cast<UvTimer*>(h->data);
          if (!self) return;
          // The callback may destroy this Timer: run it from a local.
          auto callback = std::move(self->fire_);
          callback();
        },
        ms, 0);
  }

 private:
  std::function<void()> fire_;
  Handle<uv_timer_t> handle_;
};

// One timer of a batch (LoopTimers::aligned): in its batch's list until it
// fires or its handle is destroyed.
class BatchedTimer final : public Timer, public ListNode {
 public:
  explicit BatchedTimer(std::function<void()> fire) : fire_(std::move(fire)) {}
  // Cancelled: out of its batch, which goes too when nothing else is in it.
  ~BatchedTimer() override {
    ListNode* rest = next();
    unlink();
    if (rest != this && rest->alone()) rest->emptied();
  }
  // Takes it out of its list, then runs its callback, which may destroy it.
  void fire() {
    unlink();
    auto callback = std::move(fire_);
    callback();
  }

 private:
  std::function<void()> fire_;
};

}  // namespace

Result<Handle<uv_poll_t>> poll(uv_loop_t* loop, int fd, void* owner, int events, uv_poll_cb cb) {
  auto* p = new uv_poll_t;
  if (int err = uv_poll_init(loop, p, fd); err != 0) {
    delete p;  // never initialised: nothing for libuv to close
    return Error{std::string("uv_poll_init: ") + uv_strerror(err), -err};
  }
  p->data = owner;
  Handle<uv_poll_t> handle(p);
  if (events != 0 && cb) {
    if (int err = uv_poll_start(p, events, cb); err != 0)
      return Error{std::string("uv_poll_start: ") + uv_strerror(err), -err};
  }
  return handle;
}

void Signals::catch_all(uv_loop_t* loop, std::vector<int> signums, void* owner,
                        uv_signal_cb handler) {
  signums_ = std::move(signums);
  for (int signum : signums_) {
    auto* h = new uv_signal_t;
    uv_signal_init(loop, h);
    h->data = owner;
    handles_.emplace_back(h);
    uv_signal_start(h, handler, signum);
  }
}

bool Signals::caught(int signum) const {
  return std::find(signums_.begin(), signums_.end(), signum) != signums_.end();
}

std::unique_ptr<Timer> LoopTimers::after(Duration delay, std::function<void()> fire) {
  return std::make_unique<UvTimer>(loop_, delay, std::move(fire));
}

std::unique_ptr<Timer> LoopTimers::aligned(Duration delay, Duration grain,
                                           std::function<void()> fire) {
  if (grain <= Duration{0} || delay < grain) return after(delay, std::move(fire));
  int64_t now_ms = clock_ms();
  Duration wait = align(delay, grain, now_ms);
  int64_t due = now_ms + wait.count();
  Batch& batch = batches_[due];
  if (!batch.timer) {
    batch.timers.owner = this;
    batch.timers.due = due;
    batch.timer = after(wait, [this, due] { fire_batch(due); });
  }
  auto timer = std::make_unique<BatchedTimer>(std::move(fire));
  batch.timers.push_before(*timer);
  return timer;
}

void LoopTimers::fire_batch(int64_t due) {
  auto it = batches_.find(due);
  if (it == batches_.end()) return;
  // The batch goes first: a callback may set timers (of later instants) and
  // destroy any handle, its own or one still waiting here (that one unlinks).
  ListNode waiting;
  waiting.take_all(it->second.timers);
  batches_.erase(it);
  while (!waiting.alone()) static_cast<BatchedTimer*>(waiting.next())->fire();
}

}  // namespace recycler::uv
