// The second step of loading a config: checking what was parsed against the
// machine it is checked on (HostLookup): users and groups, files, PATH, the
// NVML library, the memory a surge needs. The parse step reads the file
// only, and leaves a Site (parse_util.h) for each value looked at here, so
// that what is found is reported at that value's line and column and in the
// order a single pass over the file would have found it.
#pragma once

#include <vector>

#include "supervisor/config/compile.h"
#include "supervisor/config/host.h"
#include "supervisor/config/parse_util.h"

namespace recycler::config::detail {

// Resolves names to ids (users, groups), finds the preloaded allocator, and
// reports what this host cannot do; fills in parsed.config as it goes.
void check_host(Parsed& parsed, const HostLookup& host, Report& r);

// A policy that reads gpu or gpu_total needs NVML: said at its name, at check
// time, not when the first sample comes. Whether a policy reads them is known
// once compile() has built it, so this runs after compile().
void check_nvml(const Config& config, const std::vector<ProgramSpec>& specs, const HostLookup& host,
                Report& r);

}  // namespace recycler::config::detail
