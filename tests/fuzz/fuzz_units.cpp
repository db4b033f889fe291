// Sizes, durations, signals and rates as the config and the policies read
// them: any text is a value or an error, and what format_duration prints
// parses back to the same duration.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "policies/args.h"
#include "policies/base/units.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace recycler;
  std::string_view text(reinterpret_cast<const char*>(data), size);
  std::string why;
  if (auto bytes = units::parse_size(text, &why)) {
    std::string shown = units::format_size(*bytes);  // "1.5 GiB"
    std::erase(shown, ' ');
    if (!units::parse_size(shown)) __builtin_trap();  // what it prints reads back as a size
  } else if (why.empty()) {
    __builtin_trap();  // an error says why
  }
  why.clear();
  if (auto d = units::parse_duration(text, &why)) {
    if (d->count() >= 0 && units::parse_duration(units::format_duration(*d)) != d)
      __builtin_trap();  // exact to the millisecond
  } else if (why.empty()) {
    __builtin_trap();
  }
  if (auto sig = units::parse_signal(text)) {
    if (units::parse_signal(units::signal_name(*sig)) != sig) __builtin_trap();
  }
  if (auto rate = policies::parse_rate(text)) {
    if (!(*rate >= 0)) __builtin_trap();  // not negative, not NaN
  }
  return 0;
}
