// A whole config file, as `recycler check` and a reload read it: parsing and
// validation must answer any bytes with a config or with diagnostics, never
// crash, hang or print raw control characters.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "supervisor/config/parse.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view yaml(reinterpret_cast<const char*>(data), size);
  recycler::config::LoadResult r = recycler::config::parse_string(yaml, "fuzz.yaml");
  if (r.config.has_value() == !r.errors.empty()) __builtin_trap();  // one or the other
  for (const auto& d : r.errors)
    for (char c : d.str())
      if (static_cast<unsigned char>(c) < 0x20 && c != '\t') __builtin_trap();
  return 0;
}
