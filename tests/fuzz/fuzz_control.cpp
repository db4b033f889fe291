// A control request line, as any permitted client may send it (the server
// has already cut it at a newline and at kMaxRequestBytes): a request or an
// error, never a crash; what is accepted is within the protocol's bounds and
// reads back the same from the line the CLI would send for it.
#include <csignal>
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "supervisor/control/protocol.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace recycler::control;
  std::string_view line(reinterpret_cast<const char*>(data), size);
  auto r = parse_request(line);
  if (!r) {
    if (r.error().message.empty()) __builtin_trap();
    return 0;
  }
  if (r->targets.size() > kMaxTargets) __builtin_trap();
  if (r->command == Command::Signal && (r->signal <= 0 || r->signal >= NSIG)) __builtin_trap();
  if (r->follow && r->command != Command::Events) __builtin_trap();
  for (const Target& t : r->targets)
    if (t.program.empty() || t.program.find_first_of(":/\n") != std::string::npos) __builtin_trap();
  auto again = parse_request(request_line(*r));
  if (!again || again->command != r->command || again->signal != r->signal ||
      again->follow != r->follow || again->targets.size() != r->targets.size())
    __builtin_trap();
  for (size_t i = 0; i < r->targets.size(); ++i)
    if (again->targets[i].str() != r->targets[i].str()) __builtin_trap();
  return 0;
}
