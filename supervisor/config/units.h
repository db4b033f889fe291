// Moved to policies/base/units.h, namespace recycler::units. Only
// supervisor/timeline/replay_json.cpp still includes this header, for
// config::signal_name: it is being moved elsewhere, and the same rename
// (units::) will be applied there; then this header goes.
#pragma once

#include "policies/base/units.h"

namespace recycler::config {

using units::format_duration;
using units::format_size;
using units::parse_duration;
using units::parse_signal;
using units::parse_size;
using units::quote;
using units::signal_name;
using units::suggest;

}  // namespace recycler::config
