// libuv glue: owning wrappers for handles (closing is asynchronous, so the
// memory is freed in the close callback, after the owner is gone) and the
// libuv implementation of Timers.
#pragma once

#include <uv.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <utility>
#include <vector>

#include "supervisor/util/result.h"
#include "supervisor/util/timers.h"

namespace recycler::uv {

// Owns a uv handle of type H that has been initialised on a loop. Callbacks
// reach their owner through handle->data, cleared before closing.
template <typename H>
class Handle {
 public:
  Handle() = default;
  explicit Handle(H* initialised) : h_(initialised) {}
  Handle(Handle&& o) noexcept : h_(std::exchange(o.h_, nullptr)) {}
  Handle& operator=(Handle&& o) noexcept {
    reset();
    h_ = std::exchange(o.h_, nullptr);
    return *this;
  }
  ~Handle() { reset(); }

  H* get() const { return h_; }
  explicit operator bool() const { return h_ != nullptr; }
  void reset() {
    if (!h_) return;
    auto* base = reinterpret_cast<uv_handle_t*>(h_);
    base->data = nullptr;
    uv_close(base, [](uv_handle_t* h) { delete reinterpret_cast<H*>(h); });
    h_ = nullptr;
  }

 private:
  H* h_ = nullptr;
};

// Watches `fd` with a uv_poll_t on `loop`: the one way to set up a uv_poll
// here (memory watches, notify sockets, the log writer, child pidfds).
//   - `owner` goes into the handle's data: the callback finds its object
//     through h->data, and must return at once when that is null (Handle
//     clears it before closing, and a callback may still be queued).
//   - `events` (UV_READABLE, UV_WRITABLE, ...) and `cb`: polling starts at
//     once with them; events 0 (and cb nullptr) only initialises the handle,
//     for the owner to uv_poll_start/uv_poll_stop on it later (on demand).
//   - The returned Handle owns the uv_poll_t: resetting or destroying it stops
//     polling and closes it; it never closes `fd`, which must stay open while
//     the handle lives (declare the Handle after the fd's owner, so that it
//     is destroyed first).
//   - An error when libuv cannot watch the fd (uv_poll_init fails: e.g. a
//     regular file, or an fd epoll refuses): "uv_poll_init: <libuv's
//     message>", with the errno as its code; nothing is left to clean up.
// Typical use, in a class that owns the fd:
//   auto poll = uv::poll(loop, fd_.get(), this, UV_READABLE, [](uv_poll_t* h, int status, int) {
//     if (auto* self = static_cast<Self*>(h->data)) self->on_readable(status);
//   });
//   if (!poll) return poll.error();
//   poll_ = std::move(*poll);
Result<Handle<uv_poll_t>> poll(uv_loop_t* loop, int fd, void* owner, int events = 0,
                               uv_poll_cb cb = nullptr);

// Handlers for a set of signals on one loop, each handle's data `owner` (as
// poll() does): the handler finds its owner there, and must return at once
// when it is null (a closed handle). clear() closes them all.
class Signals {
 public:
  void catch_all(uv_loop_t* loop, std::vector<int> signums, void* owner, uv_signal_cb handler);
  // Whether `signum` is one of them.
  bool caught(int signum) const;
  void clear() { handles_.clear(); }

 private:
  std::vector<int> signums_;
  std::vector<Handle<uv_signal_t>> handles_;
};

// A node of a circular, intrusive list that leaves its list when destroyed:
// how aligned timers sit in the batch they are due with, so that cancelling
// one (destroying its handle) costs no search and no allocation.
class ListNode {
 public:
  ListNode() = default;
  ListNode(const ListNode&) = delete;
  ListNode& operator=(const ListNode&) = delete;
  virtual ~ListNode() { unlink(); }

  bool alone() const { return next_ == this; }
  ListNode* next() const { return next_; }
  void unlink() {
    prev_->next_ = next_;
    next_->prev_ = prev_;
    prev_ = next_ = this;
  }
  // Links `node` in just before this one (at the end, when this is a head).
  void push_before(ListNode& node) {
    node.prev_ = prev_;
    node.next_ = this;
    prev_->next_ = &node;
    prev_ = &node;
  }
  // Told when a node leaving its list left this one alone (a list's head).
  virtual void emptied() {}
  // Moves every other node of `head`'s list into this (empty) one's.
  void take_all(ListNode& head) {
    if (head.alone()) return;
    next_ = head.next_;
    prev_ = head.prev_;
    next_->prev_ = this;
    prev_->next_ = this;
    head.prev_ = head.next_ = &head;
  }

 private:
  ListNode* prev_ = this;
  ListNode* next_ = this;
};

class LoopTimers final : public Timers {
 public:
  explicit LoopTimers(uv_loop_t* loop) : loop_(loop) {}
  TimePoint now() const override { return SteadyClock::now(); }
  std::unique_ptr<Timer> after(Duration delay, std::function<void()> fire) override;
  // Timers aligned to the same instant of the loop's clock (every worker's
  // sampling tick of one sample_interval) share one libuv timer and fire in
  // the order they were set: per tick, one small allocation instead of a
  // uv_timer_t to open, start, stop and close.
  std::unique_ptr<Timer> aligned(Duration delay, Duration grain,
                                 std::function<void()> fire) override;

 protected:
  // The loop's own time, which its timers are due by: timers aligned on it
  // are due at the same instant, so fire in the same pass.
  int64_t clock_ms() const override { return static_cast<int64_t>(uv_now(loop_)); }

 private:
  // The timers due at one instant: the list's head and the libuv timer. A
  // batch goes when it fires or when its last timer is cancelled, so no
  // libuv timer outlives the handles it serves.
  struct Head final : ListNode {
    LoopTimers* owner = nullptr;
    int64_t due = 0;
    void emptied() override { owner->batches_.erase(due); }
  };
  struct Batch {
    Head timers;
    std::unique_ptr<Timer> timer;
  };
  void fire_batch(int64_t due);

  uv_loop_t* loop_;
  std::map<int64_t, Batch> batches_;  // by due time, in the loop's milliseconds
};

}  // namespace recycler::uv
