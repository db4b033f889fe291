// Where the log's formatted lines go (stderr), written so that supervision
// never waits for whoever reads them: a paused `less`, a full pipe, a stopped
// terminal or a busy journald.
//
// Before attach() (and for `check`, `replay`) each line is written at once,
// as any command-line tool does. Once attached to the loop, lines go to a
// bounded buffer and are written without blocking: recycler's own lines at
// once, worker output once per turn of the loop (one write() for many lines);
// when the reader does not keep up, the rest waits for the fd to become
// writable again. When the buffer holds kOutputLimit bytes, worker output
// lines are dropped (and counted); recycler's own lines (its decisions) still
// go in, up to kOwnLimit. When the reader is back, one line says how many
// were dropped (at most one such line every 10 s).
//
// Not blocking must not change the terminal or pipe for other processes that
// share it (the shell that started recycler): a pipe, FIFO or terminal is
// reopened through /proc/self/fd/N as a file description of recycler's own
// and made non-blocking there; a socket (journald's stdout stream) is
// written with MSG_DONTWAIT; a regular file or /dev/null never blocks.
#pragma once

#include <uv.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "supervisor/util/fd.h"
#include "supervisor/util/uv.h"

namespace recycler::log {

class LogWriter {
 public:
  enum class Kind { Own, Output };

  // Writes to `fd` (not owned; recycler's stderr).
  explicit LogWriter(int fd);
  ~LogWriter();
  LogWriter(const LogWriter&) = delete;
  LogWriter& operator=(const LogWriter&) = delete;

  // One formatted line, its newline included.
  void write(Kind kind, std::string_view line);

  // From now on, never block (see above): call before the loop runs.
  void attach(uv_loop_t* loop);
  // Writes what is pending, waiting at most `timeout` for a slow reader
  // (what is left then is lost), and goes back to writing each line at once
  // (waiting at most 100 ms for each). Before the loop closes.
  void detach(std::chrono::milliseconds timeout);

  struct Stats {
    uint64_t dropped_output = 0;  // worker output lines dropped, in all
    uint64_t dropped_own = 0;     // recycler's own lines dropped (only past kOwnLimit)
    size_t pending = 0;           // bytes waiting for the reader
  };
  Stats stats() const { return {dropped_output_, dropped_own_, buf_.size() - head_}; }

  static constexpr size_t kOutputLimit = 1 << 20;
  static constexpr size_t kOwnLimit = 16 << 20;
  // Worker output waiting past this is written at once rather than at the
  // end of the turn.
  static constexpr size_t kFlushAt = 64 << 10;

  // Called with the "N lines dropped" text when the reader is back (the log
  // turns it into a warning line, which comes back through write()).
  void on_dropped(void (*report)(std::string_view text)) { report_ = report; }

 private:
  enum class Mode { Blocking, Socket, NonBlocking };
  // One write without waiting: bytes written, 0 when it would block, -1 when
  // the reader is gone or the fd broken (pending output is then dropped).
  ssize_t write_some(const char* data, size_t size);
  void flush();
  void flush_waiting(std::chrono::milliseconds timeout);
  void want_writable(bool on);
  void schedule_flush();
  void report_drops();

  int fd_;        // recycler's stderr
  UniqueFd own_;  // its reopened, non-blocking description, when there is one
  int write_fd_;  // what is written to: own_ or fd_
  Mode mode_ = Mode::Blocking;
  bool attached_ = false;
  bool restore_flags_ = false;  // O_NONBLOCK was set on the shared fd: undo at detach
  int saved_flags_ = 0;
  std::string buf_;
  size_t head_ = 0;  // buf_[head_..] is pending
  uint64_t dropped_output_ = 0;
  uint64_t dropped_own_ = 0;
  uint64_t reported_output_ = 0;
  uint64_t reported_own_ = 0;
  bool reporting_ = false;
  std::optional<std::chrono::steady_clock::time_point> reported_at_;
  void (*report_)(std::string_view) = nullptr;
  uv::Handle<uv_prepare_t> prepare_;
  uv::Handle<uv_poll_t> poll_;
  bool polling_ = false;
};

}  // namespace recycler::log
