#include "supervisor/uv.h"

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

}  // namespace

std::unique_ptr<Timer> LoopTimers::after(Duration delay, std::function<void()> fire) {
  return std::make_unique<UvTimer>(loop_, delay, std::move(fire));
}

}  // namespace recycler::uv
