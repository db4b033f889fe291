// The recycler's log: its own lines, structured events and captured worker
// output, as text or one JSON object per line (log.format), all on stderr.
//
//   log::info("api[0] started");
//   log::event(Level::Warn, "oom_kill", "api[0] was OOM-killed ...",
//              {{"program", "api"}, {"slot", 0}});
//   log::output("api", 0, pid, Stream::Stderr, line, /*partial=*/false);
//
// Messages are plain text; both formats escape them (control characters,
// invalid UTF-8), and worker output alike, so nothing a worker or a file says
// can break a line or reach the terminal raw. Lines go to stderr through a
// LogWriter (writer.h): once attached to the loop, a slow reader never
// blocks recycler; worker output is dropped first (and counted) when it
// falls behind.
#pragma once

#include <fmt/format.h>
#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "supervisor/config/config.h"
#include "supervisor/log/fields.h"
#include "supervisor/log/writer.h"

namespace recycler::log {

using config::LogFormat;
using Level = config::LogLevel;

enum class Stream { Stdout, Stderr };

// Receives every formatted line (without the newline) instead of stderr.
using Capture = std::function<void(std::string_view line)>;

// (Re)configures level and format; safe to call again on reload. Lines go to
// stderr, or to `capture` once one is given (tests read the log that way).
void init(Level level, LogFormat format, Capture capture = {});
Level level();
bool enabled(Level level);

// From now on, writing to stderr never blocks the loop (see writer.h).
void attach(uv_loop_t* loop);
// Writes what is pending (waiting at most `timeout` for the reader); before
// the loop closes.
void detach(std::chrono::milliseconds timeout = std::chrono::seconds(2));
LogWriter::Stats writer_stats();

void event(Level level, std::string_view name, std::string_view message, const Fields& fields = {});
// Sees every named event (whatever the level; plain messages are no events)
// before it is logged: the supervisor's counters and the control socket's
// event ring. One at a time; an empty one removes it.
using EventObserver = std::function<void(Level level, std::string_view name,
                                         std::string_view message, const Fields& fields)>;
void observe_events(EventObserver observer);
void message(Level level, std::string_view message);

template <typename... Args>
void trace(fmt::format_string<Args...> f, Args&&... args) {
  if (enabled(Level::Trace)) message(Level::Trace, fmt::format(f, std::forward<Args>(args)...));
}
template <typename... Args>
void debug(fmt::format_string<Args...> f, Args&&... args) {
  if (enabled(Level::Debug)) message(Level::Debug, fmt::format(f, std::forward<Args>(args)...));
}
template <typename... Args>
void info(fmt::format_string<Args...> f, Args&&... args) {
  if (enabled(Level::Info)) message(Level::Info, fmt::format(f, std::forward<Args>(args)...));
}
template <typename... Args>
void warn(fmt::format_string<Args...> f, Args&&... args) {
  if (enabled(Level::Warn)) message(Level::Warn, fmt::format(f, std::forward<Args>(args)...));
}
template <typename... Args>
void error(fmt::format_string<Args...> f, Args&&... args) {
  if (enabled(Level::Error)) message(Level::Error, fmt::format(f, std::forward<Args>(args)...));
}

// Sees each worker output line as output() logs it (`recycler logs`).
using OutputObserver = std::function<void(std::string_view program, unsigned slot, pid_t pid,
                                          Stream stream, std::string_view line, bool partial)>;
void observe_output(OutputObserver observer);

// One line (or, with partial, one piece of an over-long line) a worker wrote.
void output(std::string_view program, unsigned slot, pid_t pid, Stream stream,
            std::string_view line, bool partial);

// Escaping, exposed for tests.
std::string json_escape(std::string_view raw);  // valid UTF-8 out; bad bytes become U+FFFD
std::string text_escape(std::string_view raw);  // printable; control/bad bytes become \xNN

// Splits a byte stream into lines. Lines longer than max_line are delivered in
// pieces of max_line bytes (partial = true for all but the last, which is never
// empty); a trailing '\r' is dropped; at EOF, finish() delivers an
// unterminated last line.
class LineSplitter {
 public:
  explicit LineSplitter(size_t max_line = 16 * 1024) : max_line_(max_line) {}

  template <typename Sink>
  void feed(std::string_view data, Sink&& sink) {
    while (!data.empty()) {
      size_t nl = data.find('\n');
      std::string_view chunk = data.substr(0, nl);
      append(chunk, sink);
      if (nl == std::string_view::npos) return;
      emit(sink, false);
      data.remove_prefix(nl + 1);
    }
  }
  template <typename Sink>
  void finish(Sink&& sink) {
    if (!buf_.empty()) emit(sink, false);
  }

 private:
  template <typename Sink>
  void append(std::string_view chunk, Sink& sink) {
    while (buf_.size() + chunk.size() > max_line_) {
      size_t take = max_line_ - buf_.size();
      buf_.append(chunk.substr(0, take));
      chunk.remove_prefix(take);
      sink(std::string_view(buf_), true);
      buf_.clear();
    }
    buf_.append(chunk);
  }
  template <typename Sink>
  void emit(Sink& sink, bool partial) {
    std::string_view line(buf_);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    sink(line, partial);
    buf_.clear();
  }

  size_t max_line_;
  std::string buf_;
};

}  // namespace recycler::log
