// Text from files and workers, made safe to print: no control character (an
// ESC sequence, a CR that overwrites the line, a newline that forges one)
// and no invalid UTF-8 reaches a terminal or a log line.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace recycler {

// The length of the UTF-8 sequence at s[i], or 0 when it is malformed
// (overlong, a surrogate, past U+10FFFF, truncated).
size_t utf8_sequence(std::string_view s, size_t i);

// Printable as it is: valid UTF-8 and tabs stay, every control byte (DEL
// included) and every byte of invalid UTF-8 becomes \xNN.
std::string escape_text(std::string_view raw);

// For a JSON string: valid UTF-8 out, bad bytes become U+FFFD, quotes,
// backslashes and control characters escaped.
std::string json_escape(std::string_view raw);
// The same, appended to `out` (no string of its own: a worker's output line).
void json_escape_to(std::string& out, std::string_view raw);

}  // namespace recycler
