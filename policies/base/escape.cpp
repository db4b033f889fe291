#include "policies/base/escape.h"

#include <fmt/format.h>

#include <cstdint>

namespace recycler {
namespace {

std::string hex(unsigned char c) {
  constexpr char kDigits[] = "0123456789abcdef";
  return {'\\', 'x', kDigits[c >> 4], kDigits[c & 0xf]};
}

}  // namespace

size_t utf8_sequence(std::string_view s, size_t i) {
  auto byte = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  unsigned char c = byte(i);
  size_t len;
  uint32_t cp;
  if (c < 0x80) return 1;
  if ((c & 0xE0) == 0xC0)
    len = 2, cp = c & 0x1F;
  else if ((c & 0xF0) == 0xE0)
    len = 3, cp = c & 0x0F;
  else if ((c & 0xF8) == 0xF0)
    len = 4, cp = c & 0x07;
  else
    return 0;
  if (i + len > s.size()) return 0;
  for (size_t k = 1; k < len; ++k) {
    if ((byte(i + k) & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (byte(i + k) & 0x3F);
  }
  static constexpr uint32_t kMin[] = {0, 0, 0x80, 0x800, 0x10000};
  if (cp < kMin[len] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
  return len;
}

std::string escape_text(std::string_view raw) {
  std::string out;
  out.reserve(raw.size());
  for (size_t i = 0; i < raw.size();) {
    auto c = static_cast<unsigned char>(raw[i]);
    size_t len = utf8_sequence(raw, i);
    if (len > 1) {
      out.append(raw.substr(i, len));
      i += len;
      continue;
    }
    if (len == 1 && (c >= 0x20 || c == '\t') && c != 0x7F)
      out += static_cast<char>(c);
    else
      out += hex(c);
    ++i;
  }
  return out;
}

std::string json_escape(std::string_view raw) {
  std::string out;
  out.reserve(raw.size() + 8);
  json_escape_to(out, raw);
  return out;
}

void json_escape_to(std::string& out, std::string_view raw) {
  for (size_t i = 0; i < raw.size();) {
    // Printable ASCII that needs no escape, appended a run at a time.
    size_t run = i;
    while (run < raw.size()) {
      auto b = static_cast<unsigned char>(raw[run]);
      if (b < 0x20 || b >= 0x7F || b == '"' || b == '\\') break;
      ++run;
    }
    if (run > i) {
      out.append(raw.substr(i, run - i));
      i = run;
      continue;
    }
    auto c = static_cast<unsigned char>(raw[i]);
    size_t len = utf8_sequence(raw, i);
    if (len == 0) {
      out += "\\ufffd";
      ++i;
      continue;
    }
    if (len > 1) {
      out.append(raw.substr(i, len));
      i += len;
      continue;
    }
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (c < 0x20 || c == 0x7F)
          out += fmt::format("\\u{:04x}", c);
        else
          out += static_cast<char>(c);
    }
    ++i;
  }
}

}  // namespace recycler
