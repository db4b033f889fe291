// escape_text() and utf8_sequence() live in policies/base (recycler_base),
// where the unit helpers that quote config values need them too.
#pragma once

#include "policies/base/escape.h"
