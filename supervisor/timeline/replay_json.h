// What `recycler replay` prints: one JSON object per reported decision, on
// one line:
//
//   {"t": 997.0, "policy": "memory", "action": "restart", "reason": "anon 612 MiB > 600 MiB"}
//   {"t": 1200.5, "policy": "leak", "action": "checkpoint", "reason": "...", "predicted_s": 960.0}
//   {"t": 30.0, "policy": "memory", "action": "signal", "reason": "...", "pid": 1,
//    "signal": "TERM"}
//
// predicted_s only when the policy predicted the time left to its limit; pid
// and signal only for the signal action. Strings are escaped as the JSON log
// escapes them (util/escape.h).
#pragma once

#include <string>

#include "supervisor/timeline/replay.h"

namespace recycler::timeline {

std::string to_json(const Replayed& replayed);

}  // namespace recycler::timeline
