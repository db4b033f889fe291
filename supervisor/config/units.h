// Moved to policies/base/units.h, namespace recycler::units. These names keep
// the old spellings compiling until every caller says units:: (then this
// header goes).
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
