// What a stranger sends the metrics endpoint, as it arrives: every prefix of
// the input is looked at as the server would after each read. A verdict,
// never a crash; refusals carry one of the documented statuses; a head is
// never still incomplete past kMaxHead; once decided, more bytes do not
// change the verdict.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "supervisor/metrics/http.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace recycler::metrics::http;
  std::string_view all(reinterpret_cast<const char*>(data), size);
  // Reads of varying size: the first byte picks the step.
  size_t step = size > 0 ? 1 + static_cast<uint8_t>(all[0]) % 64 : 1;
  for (size_t n = 0;; n = std::min(size, n + step)) {
    Parsed p = parse_head(all.substr(0, n));
    if (p.verdict == Verdict::Refused) {
      if (p.status != 400 && p.status != 404 && p.status != 405 && p.status != 431 &&
          p.status != 505)
        __builtin_trap();
      if (error_response(p.status).empty()) __builtin_trap();
    }
    if (p.verdict == Verdict::Incomplete && n > kMaxHead) __builtin_trap();
    if (p.verdict != Verdict::Incomplete) {
      Parsed whole = parse_head(all);
      if (whole.verdict != p.verdict || whole.status != p.status || whole.path != p.path)
        __builtin_trap();
      break;
    }
    if (n == size) break;
  }
  return 0;
}
