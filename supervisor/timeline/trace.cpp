#include "supervisor/timeline/trace.h"

#include <array>
#include <charconv>
#include <cmath>
#include <cstring>
#include <ctime>
#include <fstream>
#include <optional>
#include <sstream>

#include "policies/base/units.h"
#include "policies/metric.h"
#include "supervisor/util/fd.h"

namespace recycler::timeline {
namespace {

using policies::Metric;
using policies::ProcessSample;

enum class Column {
  T,
  Current,
  Anon,
  File,
  Rss,
  Pss,
  Uss,
  Device,
  Requests,
  Threads,
  Gpu,
  GpuTotal,
  Iteration
};
constexpr std::array<std::string_view, 13> kColumnNames = {
    "t",      "current",  "anon",    "file", "rss",       "pss",      "uss",
    "device", "requests", "threads", "gpu",  "gpu_total", "iteration"};
// Well past any worker's life, and far from overflowing the clock's nanoseconds.
constexpr double kMaxSeconds = 1e9;

template <typename T>
void append_number(std::string& out, T value) {
  char buf[24];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, value);
  out.append(buf, end);
}

template <typename T>
void append_cell(std::string& out, const std::optional<T>& value) {
  out += ',';
  if (value) append_number(out, *value);
}

// 12345 ms -> "12.345"
void append_millis(std::string& out, int64_t ms) {
  append_number(out, ms / 1000);
  out += '.';
  char frac[3] = {static_cast<char>('0' + ms % 1000 / 100), static_cast<char>('0' + ms % 100 / 10),
                  static_cast<char>('0' + ms % 10)};
  out.append(frac, sizeof frac);
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  if (s.size() >= 2 && s.front() == '"' && s.back() == '"') s = s.substr(1, s.size() - 2);
  return s;
}

std::vector<std::string_view> split(std::string_view line) {
  std::vector<std::string_view> cells;
  for (;;) {
    size_t comma = line.find(',');
    cells.push_back(trim(line.substr(0, comma)));
    if (comma == std::string_view::npos) return cells;
    line.remove_prefix(comma + 1);
  }
}

std::string known_columns() {
  std::string out;
  for (std::string_view name : kColumnNames) out += (out.empty() ? "" : ", ") + std::string(name);
  return out;
}

// One cell's figure into the row's sample, or into its one process for a
// process's figure (a trace has one process, pid 1); true for the latter.
bool put_cell(Column c, uint64_t v, Sample& s, ProcessSample& p) {
  switch (c) {
    case Column::T:
      break;
    case Column::Current:
      s.current = v;
      break;
    case Column::Anon:
      s.anon = v;
      break;
    case Column::File:
      s.file = v;
      break;
    case Column::Device:
      s.device = v;
      break;
    case Column::Rss:
      p.rss = v;
      break;
    case Column::Pss:
      p.pss = v;
      break;
    case Column::Uss:
      p.uss = v;
      break;
    case Column::Requests:
      s.requests = p.requests = v;
      break;
    case Column::Threads:
      s.threads = p.threads = static_cast<uint32_t>(v);
      break;
    case Column::Gpu:
      s.gpu = p.gpu = v;
      break;
    case Column::GpuTotal:
      s.gpu_total = v;
      break;
    case Column::Iteration:
      s.iteration = v;
      break;
  }
  return c == Column::Rss || c == Column::Pss || c == Column::Uss || c == Column::Requests ||
         c == Column::Threads || c == Column::Gpu;
}

class Reader {
 public:
  explicit Reader(const std::string& name) : name_(name) {}

  Error error(int line, std::string message) const {
    return Error{name_ + ":" + std::to_string(line) + ": " + message};
  }
  Error error(int line, Column column, std::string message) const {
    return error(
        line, "column " + std::string(kColumnNames[static_cast<size_t>(column)]) + ": " + message);
  }

  std::optional<Error> header(int line, std::string_view text) {
    for (std::string_view cell : split(text)) {
      if (cell.empty())
        return error(
            line, "column " + std::to_string(columns_.size() + 1) + " of the header has no name");
      std::optional<Column> found;
      for (size_t i = 0; i < kColumnNames.size(); ++i)
        if (cell == kColumnNames[i]) found = static_cast<Column>(i);
      if (!found) {
        std::vector<std::string> names(kColumnNames.begin(), kColumnNames.end());
        std::string hint = units::suggest(cell, names);
        return error(line, "column " + std::string(cell) + ": unknown column" +
                               (hint.empty() ? "" : " (did you mean " + hint + "?)") +
                               "; known columns: " + known_columns());
      }
      for (Column c : columns_)
        if (c == *found) return error(line, *found, "appears twice in the header");
      columns_.push_back(*found);
    }
    for (Column c : columns_)
      if (c == Column::T) return std::nullopt;
    return error(line, "no t column (seconds since the worker started) in the header");
  }

  bool has_header() const { return !columns_.empty(); }

  std::optional<Error> row(int line, std::string_view text, std::vector<Sample>& out) {
    std::vector<std::string_view> cells = split(text);
    if (cells.size() != columns_.size())
      return error(line, std::to_string(cells.size()) + " cells, but the header has " +
                             std::to_string(columns_.size()));
    Sample s;
    ProcessSample p;
    p.pid = 1;
    bool process = false;
    for (size_t i = 0; i < cells.size(); ++i) {
      Column c = columns_[i];
      std::string_view cell = cells[i];
      if (c == Column::T) {
        if (auto e = time(line, cell, s)) return e;
        continue;
      }
      if (cell.empty()) continue;
      uint64_t v = 0;
      if (auto e = number(line, c, cell, v)) return e;
      if (put_cell(c, v, s, p)) process = true;
    }
    if (process) s.processes.push_back(p);
    out.push_back(std::move(s));
    return std::nullopt;
  }

 private:
  // A whole number, or a decimal one rounded down (spreadsheets and data
  // frames write "1048576.0").
  std::optional<Error> number(int line, Column c, std::string_view cell, uint64_t& v) const {
    const char* last = cell.data() + cell.size();
    auto [end, ec] = std::from_chars(cell.data(), last, v);
    if (ec != std::errc() || end != last) {
      double d = 0;
      auto [dend, dec] = std::from_chars(cell.data(), last, d);
      bool bytes = c != Column::Requests && c != Column::Threads && c != Column::Iteration;
      if (dec != std::errc() || dend != last || !std::isfinite(d))
        return error(line, c, units::quote(cell) + " is not a number" + (bytes ? " of bytes" : ""));
      if (d < 0) return error(line, c, std::string(cell) + " is negative");
      if (d >= 0x1p64) return error(line, c, std::string(cell) + " is out of range");
      v = static_cast<uint64_t>(d);
    }
    if (c == Column::Threads && v > UINT32_MAX)
      return error(line, c, std::string(cell) + " is out of range");
    return std::nullopt;
  }

  std::optional<Error> time(int line, std::string_view cell, Sample& s) {
    if (cell.empty()) return error(line, Column::T, "empty; every row needs its time");
    double t = 0;
    auto [end, ec] = std::from_chars(cell.data(), cell.data() + cell.size(), t);
    if (ec != std::errc() || end != cell.data() + cell.size() || !std::isfinite(t))
      return error(line, Column::T, units::quote(cell) + " is not a number of seconds");
    if (t < 0) return error(line, Column::T, std::string(cell) + " is negative");
    if (t > kMaxSeconds) return error(line, Column::T, std::string(cell) + " is out of range");
    if (last_ && t < *last_)
      return error(line, Column::T,
                   std::string(cell) + " is before the previous row's " + last_text_);
    last_ = t;
    last_text_ = cell;
    s.t = TimePoint{} + std::chrono::round<TimePoint::duration>(std::chrono::duration<double>(t));
    return std::nullopt;
  }

  const std::string& name_;
  std::vector<Column> columns_;
  std::optional<double> last_;
  std::string last_text_;
};

}  // namespace

void append_row(std::string& out, const Sample& sample, TimePoint started) {
  // A sample taken as the worker starts may carry a time a hair before it.
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(sample.t - started).count();
  append_millis(out, ms < 0 ? 0 : ms);
  append_cell(out, sample.current);
  append_cell(out, sample.anon);
  append_cell(out, sample.file);
  append_cell(out, value(sample, Metric::Rss));
  append_cell(out, value(sample, Metric::Pss));
  append_cell(out, value(sample, Metric::Uss));
  append_cell(out, sample.device);
  append_cell(out, sample.requests);
  append_cell(out, sample.threads);
  append_cell(out, sample.gpu);
  append_cell(out, sample.gpu_total);
  append_cell(out, sample.iteration);
}

std::string format_row(const Sample& sample, TimePoint started) {
  std::string out;
  append_row(out, sample, started);
  return out;
}

std::string format_utc(WallClock::time_point time) {
  auto ms = std::chrono::floor<std::chrono::milliseconds>(time.time_since_epoch()).count();
  std::time_t secs = static_cast<std::time_t>(ms / 1000);
  std::tm tm{};
  ::gmtime_r(&secs, &tm);
  char buf[32];
  size_t n = std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%S", &tm);
  std::string out(buf, n);
  out += '.';
  out += static_cast<char>('0' + ms % 1000 / 100);
  out += static_cast<char>('0' + ms % 100 / 10);
  out += static_cast<char>('0' + ms % 10);
  out += 'Z';
  return out;
}

void append_csv_field(std::string& out, std::string_view field) {
  if (field.find_first_of(",\"\r\n") == std::string_view::npos) {
    out += field;
    return;
  }
  out += '"';
  for (char c : field) {
    if (c == '"') out += '"';
    out += c;
  }
  out += '"';
}

void append_event_row(std::string& out, WallClock::time_point time, unsigned generation,
                      std::chrono::milliseconds since_start, std::string_view event, pid_t pid,
                      std::string_view detail) {
  out += format_utc(time);
  out += ',';
  append_number(out, generation);
  out += ',';
  append_millis(out, since_start.count() < 0 ? 0 : since_start.count());
  out += ',';
  append_csv_field(out, event);
  out += ',';
  if (pid > 0) append_number(out, pid);
  out += ',';
  append_csv_field(out, detail);
}

Result<std::vector<Sample>> read_trace(std::istream& in, const std::string& name) {
  Reader reader(name);
  std::vector<Sample> out;
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    std::string_view text = line;
    if (n == 1 && text.starts_with("\xEF\xBB\xBF")) text.remove_prefix(3);
    if (!text.empty() && text.back() == '\r') text.remove_suffix(1);
    if (text.find_first_not_of(" \t") == std::string_view::npos) continue;
    std::optional<Error> e =
        reader.has_header() ? reader.row(n, text, out) : reader.header(n, text);
    if (e) return *e;
  }
  if (in.bad()) return errno_error("reading " + name);  // a directory, an I/O error
  if (!reader.has_header())
    return Error{name + ": empty: no header line (" + std::string(kSamplesHeader) + ")"};
  return out;
}

Result<std::vector<Sample>> read_trace_file(const std::string& path) {
  Result<std::string> text = read_regular_file(path, kMaxTraceBytes);
  if (!text) return text.error();
  std::istringstream in(std::move(*text));
  return read_trace(in, path);
}

double seconds(TimePoint t) {
  return std::chrono::duration<double>(t.time_since_epoch()).count();
}

}  // namespace recycler::timeline
