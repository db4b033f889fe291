#include "supervisor/log/writer.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

namespace recycler::log {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// At most one "lines dropped" line this often.
constexpr std::chrono::seconds kReportEvery{10};
// A line written while detached waits at most this long for the reader.
constexpr milliseconds kDetachedWait{100};
// At most this much per write(): a pipe takes 64 KiB, a socket a little more.
constexpr size_t kMaxWrite = 1 << 20;

}  // namespace

LogWriter::LogWriter(int fd) : fd_(fd), write_fd_(fd) {}

LogWriter::~LogWriter() {
  if (restore_flags_) ::fcntl(fd_, F_SETFL, saved_flags_);
}

void LogWriter::attach(uv_loop_t* loop) {
  if (attached_) return;
  struct stat st {};
  if (::fstat(fd_, &st) != 0) return;
  if (S_ISSOCK(st.st_mode)) {
    mode_ = Mode::Socket;
  } else if (S_ISFIFO(st.st_mode) || ::isatty(fd_)) {
    std::string self = fmt::format("/proc/self/fd/{}", fd_);
    own_.reset(::open(self.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY));
    if (own_) {
      write_fd_ = own_.get();
    } else {
      // No /proc (or a FIFO without a reader right now): make the shared
      // description non-blocking for as long as recycler runs.
      saved_flags_ = ::fcntl(fd_, F_GETFL);
      if (saved_flags_ >= 0 && ::fcntl(fd_, F_SETFL, saved_flags_ | O_NONBLOCK) == 0)
        restore_flags_ = true;
    }
    mode_ = Mode::NonBlocking;
  }  // else a regular file or /dev/null: a write() there does not wait for a reader
  auto* prepare = new uv_prepare_t;
  uv_prepare_init(loop, prepare);
  prepare->data = this;
  prepare_ = uv::Handle<uv_prepare_t>(prepare);
  if (mode_ != Mode::Blocking) {
    // Polling starts when a write would block (want_writable).
    if (auto poll = uv::poll(loop, write_fd_, this)) poll_ = std::move(*poll);
  }
  attached_ = true;
  flush();
}

void LogWriter::detach(milliseconds timeout) {
  if (!attached_) return;
  prepare_.reset();
  poll_.reset();
  polling_ = false;
  attached_ = false;
  flush_waiting(timeout);
  if (restore_flags_) {
    ::fcntl(fd_, F_SETFL, saved_flags_);
    restore_flags_ = false;
    mode_ = Mode::Blocking;
  }
}

void LogWriter::write(Kind kind, std::string_view line) {
  if (!attached_) {
    if (mode_ == Mode::Blocking) {
      for (size_t done = 0; done < line.size();) {
        ssize_t n = ::write(fd_, line.data() + done, line.size() - done);
        if (n > 0) {
          done += static_cast<size_t>(n);
        } else if (n < 0 && errno == EAGAIN) {  // someone else made it non-blocking
          pollfd p{fd_, POLLOUT, 0};
          ::poll(&p, 1, -1);
        } else if (!(n < 0 && errno == EINTR)) {
          break;
        }
      }
      return;
    }
    buf_.append(line);
    flush_waiting(kDetachedWait);
    return;
  }
  size_t pending = buf_.size() - head_;
  if (pending + line.size() > (kind == Kind::Own ? kOwnLimit : kOutputLimit)) {
    ++(kind == Kind::Own ? dropped_own_ : dropped_output_);
    return;
  }
  if (head_ > 0 && head_ >= buf_.size() / 2) {  // keep the buffer from creeping
    buf_.erase(0, head_);
    head_ = 0;
  }
  buf_.append(line);
  if (polling_) return;  // the reader is slow: it is written once the fd is writable
  if (kind == Kind::Own || pending + line.size() >= kFlushAt)
    flush();
  else
    schedule_flush();
}

ssize_t LogWriter::write_some(const char* data, size_t size) {
  for (;;) {
    ssize_t n = mode_ == Mode::Socket ? ::send(write_fd_, data, size, MSG_DONTWAIT | MSG_NOSIGNAL)
                                      : ::write(write_fd_, data, size);
    if (n >= 0) return n;
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return 0;
    return -1;
  }
}

void LogWriter::flush() {
  while (head_ < buf_.size()) {
    ssize_t n = write_some(buf_.data() + head_, std::min(buf_.size() - head_, kMaxWrite));
    if (n > 0) {
      head_ += static_cast<size_t>(n);
      continue;
    }
    if (n == 0) {  // the reader is slow: once the fd is writable, or next turn
      if (poll_)
        want_writable(true);
      else
        schedule_flush();
      return;
    }
    break;  // the reader is gone (EPIPE) or the fd broken: nowhere to write it
  }
  buf_.clear();
  head_ = 0;
  want_writable(false);
  report_drops();
}

void LogWriter::flush_waiting(milliseconds timeout) {
  auto deadline = Clock::now() + timeout;
  while (head_ < buf_.size()) {
    ssize_t n = write_some(buf_.data() + head_, std::min(buf_.size() - head_, kMaxWrite));
    if (n > 0) {
      head_ += static_cast<size_t>(n);
      continue;
    }
    auto left = std::chrono::duration_cast<milliseconds>(deadline - Clock::now());
    if (n < 0 || left.count() <= 0) break;
    pollfd p{write_fd_, POLLOUT, 0};
    ::poll(&p, 1, static_cast<int>(left.count()));
  }
  buf_.clear();
  head_ = 0;
}

void LogWriter::schedule_flush() {
  if (!prepare_ || uv_is_active(reinterpret_cast<uv_handle_t*>(prepare_.get()))) return;
  // Right before the loop waits for events: one write() for the turn's output.
  uv_prepare_start(prepare_.get(), [](uv_prepare_t* h) {
    auto* self = static_cast<LogWriter*>(h->data);
    uv_prepare_stop(h);
    if (self && !self->polling_) self->flush();
  });
}

void LogWriter::want_writable(bool on) {
  if (!poll_ || on == polling_) return;
  polling_ = on;
  if (!on) {
    uv_poll_stop(poll_.get());
    return;
  }
  uv_poll_start(poll_.get(), UV_WRITABLE, [](uv_poll_t* h, int status, int) {
    auto* self = static_cast<LogWriter*>(h->data);
    if (!self) return;
    if (status < 0) {  // the fd broke: what waits cannot be written
      self->buf_.clear();
      self->head_ = 0;
      self->want_writable(false);
      return;
    }
    self->flush();
    // The reader is back: say what was dropped while it was away (after
    // what was kept, which it reads first).
    self->report_drops();
  });
}

void LogWriter::report_drops() {
  if (reporting_ || !report_) return;
  uint64_t output = dropped_output_ - reported_output_;
  uint64_t own = dropped_own_ - reported_own_;
  if (output == 0 && own == 0) return;
  // A reader that keeps falling behind and catching up gets one line per
  // kReportEvery, with everything dropped since the last.
  auto now = Clock::now();
  if (reported_at_ && now - *reported_at_ < kReportEvery) return;
  reported_at_ = now;
  reported_output_ = dropped_output_;
  reported_own_ = dropped_own_;
  std::string text = fmt::format(
      "log: {} line{} of worker output dropped while stderr's reader was not keeping up", output,
      output == 1 ? "" : "s");
  if (own > 0)
    text += fmt::format(" (and {} of recycler's own, past {} MiB waiting)", own, kOwnLimit >> 20);
  reporting_ = true;
  report_(text);
  reporting_ = false;
}

}  // namespace recycler::log
