// Shared by client.cpp and client_text.cpp only: the text the client makes
// of the supervisor's JSON answers (client_text.cpp).
#pragma once

#include <string>

#include "supervisor/control/protocol.h"

namespace recycler::control::detail {

// The lines under the status table, each ending in a newline; "" when the
// answer has nothing for them: each gang program's recycles (its ranks',
// together), the top-level budget (config budget:), and the container
// recycler runs in, when it has a memory limit.
std::string gang_lines(const Json& j);
std::string budget_line(const Json& j);
std::string container_line(const Json& j);

// An event's or output line's time as recycler's own log writes its lines,
// local time.
std::string log_time(const Json& e);
// An event as the log's text style writes it: time, level, message.
std::string event_text(const Json& e);

}  // namespace recycler::control::detail
