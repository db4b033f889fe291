// ProcessTable::attach: a process recycler did not start, held through a
// pidfd. The pidfd turns readable once the process has exited; its parent
// (a pre-fork server's master) reaps it, not recycler.
#include <cerrno>
#include <utility>

#include "supervisor/process/process.h"
#include "supervisor/util/fd.h"
#include "supervisor/util/pidfd.h"
#include "supervisor/util/uv.h"

namespace recycler {
namespace {

class Attached final : public Process {
 public:
  Attached(pid_t pid, UniqueFd pidfd, std::function<void()> on_exit)
      : pid_(pid), pidfd_(std::move(pidfd)), on_exit_(std::move(on_exit)) {}

  Status watch(uv_loop_t* loop) {
    auto poll = uv::poll(loop, pidfd_.get(), this, UV_READABLE, [](uv_poll_t* h, int, int) {
      auto* self = static_cast<Attached*>(h->data);
      if (!self || self->exited_) return;
      self->exited_ = true;
      uv_poll_stop(h);
      // May destroy this Process: last.
      if (auto cb = std::exchange(self->on_exit_, nullptr)) cb();
    });
    if (!poll) return poll.error();
    poll_ = std::move(*poll);
    return Ok{};
  }

  pid_t pid() const override { return pid_; }
  bool signal(int sig) override { return !exited_ && pidfd_send_signal(pidfd_.get(), sig) == 0; }

 private:
  pid_t pid_;
  UniqueFd pidfd_;
  std::function<void()> on_exit_;
  bool exited_ = false;
  uv::Handle<uv_poll_t> poll_;
};

}  // namespace

Result<std::unique_ptr<Process>> ProcessTable::attach(pid_t pid, std::function<void()> on_exit) {
  UniqueFd pidfd(pidfd_open(pid));
  if (!pidfd) return errno_error("pidfd_open " + std::to_string(pid));
  auto p = std::make_unique<Attached>(pid, std::move(pidfd), std::move(on_exit));
  if (Status s = p->watch(loop_); !s) return s.error();
  return std::unique_ptr<Process>(std::move(p));
}

}  // namespace recycler
