#include "supervisor/util/uv.h"

#include <string>

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

std::unique_ptr<Timer> LoopTimers::after(Duration delay, std::function<void()> fire) {
  return std::make_unique<UvTimer>(loop_, delay, std::move(fire));
}

}  // namespace recycler::uv
