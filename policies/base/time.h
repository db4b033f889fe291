// The one Duration of the code base: config values, policy windows, timers.
#pragma once

#include <chrono>

namespace recycler {

using Duration = std::chrono::milliseconds;

}  // namespace recycler
