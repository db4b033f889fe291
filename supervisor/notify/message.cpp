#include "supervisor/notify/message.h"

#include <charconv>
#include <limits>

namespace recycler::notify {
namespace {

// A value as it may appear in a problem description: short, printable.
std::string quote(std::string_view s) {
  constexpr std::size_t kMax = 40;
  std::string out = "\"";
  for (std::size_t i = 0; i < s.size() && i < kMax; ++i) {
    auto c = static_cast<unsigned char>(s[i]);
    if (c >= 0x20 && c < 0x7f && c != '"' && c != '\\') {
      out += static_cast<char>(c);
    } else {
      constexpr char kHex[] = "0123456789abcdef";
      out += "\\x";
      out += kHex[c >> 4];
      out += kHex[c & 0xf];
    }
  }
  if (s.size() > kMax) out += "...";
  return out + "\"";
}

// Cuts to at most `max` bytes without splitting a UTF-8 sequence.
std::string cut_utf8(std::string_view s, std::size_t max) {
  if (s.size() <= max) return std::string(s);
  // Back over continuation bytes (10xxxxxx), at most the 3 one character has.
  std::size_t n = max;
  while (n > 0 && n + 3 > max && (static_cast<unsigned char>(s[n]) & 0xc0) == 0x80) --n;
  return std::string(s.substr(0, n));
}

class Parser {
 public:
  void line(std::string_view text) {
    if (text.empty()) return;
    if (text.find('\0') != std::string_view::npos)
      return problem("line with a NUL byte: " + quote(text));
    std::size_t eq = text.find('=');
    if (eq == std::string_view::npos) return problem("line without '=': " + quote(text));
    if (eq == 0) return problem("line with an empty key: " + quote(text));
    assign(text.substr(0, eq), text.substr(eq + 1));
  }

  NotifyMessage finish() {
    if (dropped_ > 0)
      m_.problems.push_back(std::to_string(dropped_) + " more problem" + (dropped_ > 1 ? "s" : ""));
    return std::move(m_);
  }

 private:
  void assign(std::string_view key, std::string_view value) {
    if (key == "READY") return flag(key, value, m_.ready);
    if (key == "STOPPING") return flag(key, value, m_.stopping);
    if (key == "WATCHDOG") return flag(key, value, m_.watchdog);
    if (key == "RECYCLER_CHECKPOINTED") return flag(key, value, m_.checkpointed);
    if (key == "STATUS") {
      m_.status = cut_utf8(value, kMaxStatusBytes);
    } else if (key == "MAINPID") {
      auto v = number(key, value);
      if (!v) return;
      if (*v == 0 || *v > static_cast<uint64_t>(std::numeric_limits<pid_t>::max()))
        return problem(std::string(key) + ": " + quote(value) + " is not a valid pid");
      m_.mainpid = static_cast<pid_t>(*v);
    } else if (key == "RECYCLER_REQUESTS") {
      auto v = number(key, value);
      if (!v) return;
      if (*v > kMaxRequestsPerMessage)
        return problem(std::string(key) + ": " + std::to_string(*v) + " is over the limit of " +
                       std::to_string(kMaxRequestsPerMessage));
      m_.requests = *v;
    } else if (key == "RECYCLER_DEVICE_BYTES") {
      if (auto v = number(key, value)) m_.device_bytes = *v;
    } else if (key == "RECYCLER_ITERATION") {
      auto v = number(key, value);
      if (!v) return;
      if (*v > kMaxIteration)
        return problem(std::string(key) + ": " + std::to_string(*v) + " is over the limit of " +
                       std::to_string(kMaxIteration));
      m_.iteration = *v;
    } else if (key.starts_with("RECYCLER_") && !m_.unknown_key) {
      m_.unknown_key = quote(key);
    }
  }

  void flag(std::string_view key, std::string_view value, bool& out) {
    if (value == "1") {
      out = true;
      return;
    }
    problem(std::string(key) + ": expected 1, got " + quote(value));
  }

  // Digits only: no sign, no blanks, no "\r", no "0x".
  std::optional<uint64_t> number(std::string_view key, std::string_view value) {
    bool digits = !value.empty();
    for (char c : value) digits = digits && c >= '0' && c <= '9';
    if (!digits) {
      problem(std::string(key) + ": " + quote(value) + " is not a number");
      return std::nullopt;
    }
    uint64_t v = 0;
    if (std::from_chars(value.data(), value.data() + value.size(), v).ec != std::errc()) {
      problem(std::string(key) + ": " + quote(value) + " is out of range");
      return std::nullopt;
    }
    return v;
  }

  void problem(std::string what) {
    // A datagram of thousands of bad lines must not become thousands of log lines.
    if (m_.problems.size() < kMaxProblems)
      m_.problems.push_back(std::move(what));
    else
      ++dropped_;
  }

  NotifyMessage m_;
  std::size_t dropped_ = 0;
};

}  // namespace

NotifyMessage parse_message(std::string_view datagram) {
  Parser p;
  std::size_t pos = 0;
  while (pos < datagram.size()) {
    std::size_t eol = datagram.find('\n', pos);
    if (eol == std::string_view::npos) eol = datagram.size();
    p.line(datagram.substr(pos, eol - pos));
    pos = eol + 1;
  }
  return p.finish();
}

std::string format_answer(const Answer& answer) {
  std::string out;
  if (answer.request_limit)
    out += "RECYCLER_REQUEST_LIMIT=" + std::to_string(*answer.request_limit);
  if (answer.requests_seen) {
    if (!out.empty()) out += '\n';
    out += "RECYCLER_REQUESTS_SEEN=" + std::to_string(*answer.requests_seen);
  }
  return out;
}

}  // namespace recycler::notify
