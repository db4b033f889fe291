// A timeline CSV, as `recycler replay` reads one: samples or an error naming
// the file and line, never a crash; t never decreases in what it returns.
#include <cstddef>
#include <cstdint>
#include <sstream>
#include <string>

#include "supervisor/timeline/trace.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::istringstream in(std::string(reinterpret_cast<const char*>(data), size));
  auto samples = recycler::timeline::read_trace(in, "fuzz.csv");
  if (!samples) {
    if (samples.error().message.rfind("fuzz.csv", 0) != 0) __builtin_trap();
    return 0;
  }
  for (size_t i = 1; i < samples->size(); ++i)
    if ((*samples)[i].t < (*samples)[i - 1].t) __builtin_trap();
  return 0;
}
