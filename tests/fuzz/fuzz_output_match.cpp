// Request counting from worker output: the first line is a requests.pattern
// (from a config), every other line is what a worker printed. A pattern
// either compiles or says why; matching any line ends (PCRE2's limits) and
// yields a valid pid or none.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "supervisor/notify/output_match.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using recycler::notify::OutputMatcher;
  std::string_view input(reinterpret_cast<const char*>(data), size);
  size_t nl = input.find('\n');
  if (nl == std::string_view::npos || nl > 256) return 0;
  std::string why;
  auto matcher = OutputMatcher::compile(std::string(input.substr(0, nl)), &why);
  if (!matcher) {
    if (why.empty()) __builtin_trap();
    return 0;
  }
  input.remove_prefix(nl + 1);
  while (!input.empty()) {
    size_t end = input.find('\n');
    OutputMatcher::Match m = matcher->match(input.substr(0, end));
    if (m.pid && (!m.matched || *m.pid <= 0)) __builtin_trap();
    if (end == std::string_view::npos) break;
    input.remove_prefix(end + 1);
  }
  return 0;
}
