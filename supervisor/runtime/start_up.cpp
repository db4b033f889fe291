#include "supervisor/runtime/start_up.h"

#include <utility>

namespace recycler {
namespace {

// Start-up work done in one turn of the loop, at most (about: one program's
// cgroups or start may take longer); signals wait no longer than that.
constexpr Duration kStartUpSlice{20};

}  // namespace

StartUp::StartUp(uv_loop_t* loop, Timers& timers,
                 const std::vector<config::ProgramConfig>& programs, Steps steps)
    : loop_(loop), timers_(timers), programs_(programs), steps_(std::move(steps)) {}

void StartUp::slice() {
  if (steps_.cancelled()) {  // SIGTERM or SIGINT: what has started is stopping
    finish(Outcome::Cancelled);
    return;
  }
  TimePoint until = timers_.now() + kStartUpSlice;
  if (creating_ && !create_until(until)) {
    finish(Outcome::Failed);
    return;
  }
  if (!creating_) start_until(until);
  if (!creating_ && next_ == programs_.size()) {
    finish(Outcome::Started);
    return;
  }
  next_slice_after_a_turn();
}

bool StartUp::create_until(TimePoint until) {
  // Every cgroup is created before anything starts: a failure starts nothing.
  for (; next_ < programs_.size(); ++next_) {
    if (timers_.now() >= until) return true;
    if (!steps_.create(programs_[next_])) return false;
  }
  creating_ = false;
  next_ = 0;
  return true;
}

void StartUp::start_until(TimePoint until) {
  for (; next_ < programs_.size(); ++next_) {  // in file order
    if (timers_.now() >= until) return;
    steps_.start(programs_[next_]);
  }
}

// An idle handle, not a zero timer: libuv (before 1.45) runs a timer started
// from a timer callback in the same pass, so a chain of them never polls.
void StartUp::next_slice_after_a_turn() {
  if (idle_) return;
  auto* idle = new uv_idle_t;
  uv_idle_init(loop_, idle);
  idle->data = this;
  idle_ = uv::Handle<uv_idle_t>(idle);
  uv_idle_start(idle, [](uv_idle_t* h) {
    if (auto* self = static_cast<StartUp*>(h->data)) self->slice();
  });
}

void StartUp::finish(Outcome outcome) {
  idle_.reset();
  // From a local: `finished` may destroy this StartUp.
  auto finished = std::move(steps_.finished);
  finished(outcome, reload_);
}

}  // namespace recycler
