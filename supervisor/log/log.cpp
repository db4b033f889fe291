#include "supervisor/log/log.h"

#include <spdlog/details/null_mutex.h>
#include <spdlog/sinks/base_sink.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <cstdlib>
#include <memory>

#include "supervisor/log/writer.h"
#include "supervisor/util/escape.h"

namespace recycler::log {
namespace {

struct State {
  Level level = Level::Info;
  LogFormat format = LogFormat::Text;
  Capture capture;                         // instead of stderr, when set
  std::shared_ptr<spdlog::logger> own;     // the recycler's lines
  std::shared_ptr<spdlog::logger> output;  // worker output: never filtered by level
  std::unique_ptr<LogWriter> writer;       // stderr, never blocking once attached
};

State& state() {
  static State s;
  return s;
}

spdlog::level::level_enum to_spdlog(Level l) {
  switch (l) {
    case Level::Trace:
      return spdlog::level::trace;
    case Level::Debug:
      return spdlog::level::debug;
    case Level::Info:
      return spdlog::level::info;
    case Level::Warn:
      return spdlog::level::warn;
    case Level::Error:
      return spdlog::level::err;
  }
  return spdlog::level::info;
}

// Hands each formatted line to a Capture. One per logger: spdlog keeps the
// pattern in the sink.
class CaptureSink final : public spdlog::sinks::base_sink<spdlog::details::null_mutex> {
 public:
  explicit CaptureSink(Capture capture) : capture_(std::move(capture)) {}

 protected:
  void sink_it_(const spdlog::details::log_msg& msg) override {
    spdlog::memory_buf_t formatted;
    formatter_->format(msg, formatted);
    std::string_view line(formatted.data(), formatted.size());
    while (!line.empty() && (line.back() == '\n' || line.back() == '\r')) line.remove_suffix(1);
    capture_(line);
  }
  void flush_() override {}

 private:
  Capture capture_;
};

LogWriter& writer() {
  State& s = state();
  if (!s.writer) {
    s.writer = std::make_unique<LogWriter>(STDERR_FILENO);
    s.writer->on_dropped([](std::string_view text) { message(Level::Warn, text); });
  }
  return *s.writer;
}

// Hands each formatted line to the LogWriter, with the level's colour on a
// terminal (as spdlog's colour sinks do).
class StderrSink final : public spdlog::sinks::base_sink<spdlog::details::null_mutex> {
 public:
  StderrSink(LogWriter::Kind kind, bool color) : kind_(kind), color_(color) {}

 protected:
  void sink_it_(const spdlog::details::log_msg& msg) override {
    spdlog::memory_buf_t formatted;
    formatter_->format(msg, formatted);
    std::string_view text(formatted.data(), formatted.size());
    if (!color_ || msg.color_range_end <= msg.color_range_start) {
      writer().write(kind_, text);
      return;
    }
    std::string line;
    line.reserve(text.size() + 16);
    line.append(text.substr(0, msg.color_range_start));
    line.append(color_of(msg.level));
    line.append(text.substr(msg.color_range_start, msg.color_range_end - msg.color_range_start));
    line.append("\033[m");
    line.append(text.substr(msg.color_range_end));
    writer().write(kind_, line);
  }
  void flush_() override {}

 private:
  static const char* color_of(spdlog::level::level_enum level) {
    switch (level) {
      case spdlog::level::trace:
        return "\033[37m";
      case spdlog::level::debug:
        return "\033[36m";
      case spdlog::level::info:
        return "\033[32m";
      case spdlog::level::warn:
        return "\033[33m\033[1m";
      default:
        return "\033[31m\033[1m";
    }
  }

  LogWriter::Kind kind_;
  bool color_;
};

bool color_terminal() {
  const char* term = std::getenv("TERM");
  return ::isatty(STDERR_FILENO) && term && *term && std::string_view(term) != "dumb";
}

std::shared_ptr<spdlog::logger> make_logger(const char* name, LogWriter::Kind kind, bool color,
                                            const Capture& capture) {
  spdlog::sink_ptr sink;
  if (capture)
    sink = std::make_shared<CaptureSink>(capture);
  else
    sink = std::make_shared<StderrSink>(kind, color && color_terminal());
  auto logger = std::make_shared<spdlog::logger>(name, std::move(sink));
  return logger;
}

void append_json_value(std::string& out, const Field::Value& v) {
  std::visit(
      [&](const auto& x) {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, std::string>) {
          out += '"';
          out += json_escape(x);
          out += '"';
        } else if constexpr (std::is_same_v<T, bool>) {
          out += x ? "true" : "false";
        } else if constexpr (std::is_same_v<T, double>) {
          out += fmt::format("{:.6g}", x);
        } else {
          out += fmt::to_string(x);
        }
      },
      v);
}

}  // namespace

std::string json_escape(std::string_view raw) {
  return recycler::json_escape(raw);
}

std::string text_escape(std::string_view raw) {
  return escape_text(raw);
}

void init(Level level, LogFormat format, Capture capture) {
  State& s = state();
  bool rebuild = !s.own || s.format != format || capture;
  s.level = level;
  s.format = format;
  if (capture) s.capture = std::move(capture);
  if (rebuild) {
    bool color = format == LogFormat::Text && !s.capture;
    s.own = make_logger("recycler", LogWriter::Kind::Own, color, s.capture);
    s.output = make_logger("output", LogWriter::Kind::Output, false, s.capture);
    if (format == LogFormat::Json) {
      // Our own formatting escapes messages and fields; spdlog adds time and level.
      s.own->set_pattern(R"({"time":"%Y-%m-%dT%H:%M:%S.%e%z","level":"%l",%v})");
      s.output->set_pattern(R"({"time":"%Y-%m-%dT%H:%M:%S.%e%z",%v})");
    } else {
      s.own->set_pattern("%Y-%m-%d %H:%M:%S.%e %^%-7l%$ %v");
      s.output->set_pattern("%Y-%m-%d %H:%M:%S.%e %v");
    }
    s.output->set_level(spdlog::level::trace);
  }
  s.own->set_level(to_spdlog(level));
}

void attach(uv_loop_t* loop) {
  writer().attach(loop);
}

void detach(std::chrono::milliseconds timeout) {
  writer().detach(timeout);
}

LogWriter::Stats writer_stats() {
  return writer().stats();
}

Level level() {
  return state().level;
}

bool enabled(Level l) {
  State& s = state();
  if (!s.own) init(Level::Info, LogFormat::Text);
  return l >= s.level;
}

namespace {
EventObserver& event_observer() {
  static EventObserver observer;
  return observer;
}
}  // namespace

void observe_events(EventObserver observer) {
  event_observer() = std::move(observer);
}

void event(Level l, std::string_view name, std::string_view msg, const Fields& fields) {
  if (!name.empty() && event_observer()) event_observer()(l, name, msg, fields);
  if (!enabled(l)) return;
  State& s = state();
  if (s.format == LogFormat::Text) {
    // Messages carry text from files and workers (a STATUS=, a config key):
    // no control character reaches the terminal, no line is forged.
    s.own->log(to_spdlog(l), "{}", text_escape(msg));
    return;
  }
  std::string body = "\"msg\":\"" + json_escape(msg) + '"';
  if (!name.empty()) body += ",\"event\":\"" + json_escape(name) + '"';
  for (const Field& f : fields) {
    body += ",\"" + json_escape(f.key) + "\":";
    append_json_value(body, f.value);
  }
  s.own->log(to_spdlog(l), "{}", body);
}

void message(Level l, std::string_view msg) {
  event(l, {}, msg);
}

namespace {
OutputObserver& output_observer() {
  static OutputObserver observer;
  return observer;
}
}  // namespace

void observe_output(OutputObserver observer) {
  output_observer() = std::move(observer);
}

void output(std::string_view program, unsigned slot, pid_t pid, Stream stream,
            std::string_view line, bool partial) {
  if (output_observer()) output_observer()(program, slot, pid, stream, line, partial);
  State& s = state();
  if (!s.own) init(Level::Info, LogFormat::Text);
  const char* stream_name = stream == Stream::Stdout ? "stdout" : "stderr";
  if (s.format == LogFormat::Text) {
    s.output->info("{}[{}] {} | {}{}", program, slot, stream == Stream::Stdout ? "out" : "err",
                   text_escape(line), partial ? " ..." : "");
  } else {
    s.output->info(R"("program":"{}","slot":{},"pid":{},"stream":"{}","msg":"{}"{})",
                   json_escape(program), slot, pid, stream_name, json_escape(line),
                   partial ? R"(,"partial":true)" : "");
  }
}

}  // namespace recycler::log
