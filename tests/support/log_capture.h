// Captures recycler's log lines for the duration of a test.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "supervisor/log/log.h"

namespace recycler::testing {

class LogCapture {
 public:
  explicit LogCapture(log::LogFormat format = log::LogFormat::Text) {
    log::init(log::Level::Trace, format,
              [this](std::string_view line) { lines.emplace_back(line); });
  }
  ~LogCapture() {
    log::init(log::Level::Info, log::LogFormat::Text, [](std::string_view) {});
  }
  LogCapture(const LogCapture&) = delete;
  LogCapture& operator=(const LogCapture&) = delete;

  // The lines containing `needle`.
  std::vector<std::string> matching(std::string_view needle) const {
    std::vector<std::string> out;
    for (const std::string& l : lines)
      if (l.find(needle) != std::string::npos) out.push_back(l);
    return out;
  }
  bool contains(std::string_view needle) const { return !matching(needle).empty(); }
  std::string all() const {
    std::string out;
    for (const std::string& l : lines) out += l + "\n";
    return out;
  }

  std::vector<std::string> lines;
};

}  // namespace recycler::testing
