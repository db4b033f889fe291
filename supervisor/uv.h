// libuv glue: owning wrappers for handles (closing is asynchronous, so the
// memory is freed in the close callback, after the owner is gone) and the
// libuv implementation of Timers.
#pragma once

#include <uv.h>

#include <functional>
#include <memory>
#include <utility>

#include "supervisor/timers.h"

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

class LoopTimers final : public Timers {
 public:
  explicit LoopTimers(uv_loop_t* loop) : loop_(loop) {}
  TimePoint now() const override { return SteadyClock::now(); }
  std::unique_ptr<Timer> after(Duration delay, std::function<void()> fire) override;

 private:
  uv_loop_t* loop_;
};

}  // namespace recycler::uv
