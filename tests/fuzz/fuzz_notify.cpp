// A datagram on the notify socket, as any worker may send it: parsed into a
// bounded message, never a crash.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "supervisor/notify/message.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace recycler::notify;
  NotifyMessage m = parse_message(std::string_view(reinterpret_cast<const char*>(data), size));
  if (m.problems.size() > kMaxProblems + 1) __builtin_trap();
  if (m.status && m.status->size() > kMaxStatusBytes) __builtin_trap();
  if (m.requests && *m.requests > kMaxRequestsPerMessage) __builtin_trap();
  if (m.iteration && *m.iteration > kMaxIteration) __builtin_trap();
  if (m.mainpid && *m.mainpid <= 0) __builtin_trap();
  return 0;
}
