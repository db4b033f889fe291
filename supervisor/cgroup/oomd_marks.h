// The marks systemd-oomd and oomd read on a cgroup to choose their victim,
// written on a worker's cgroup from its program's place in the budget
// (config programs.*.budget), so that a killer acting before recycler does
// picks the worker recycler would have picked:
//   prefer  trusted.oomd_prefer and user.oomd_prefer (oomd ranks it first)
//   avoid   user.oomd_avoid (systemd-oomd's ManagedOOMPreference=avoid,
//           honoured on a cgroup owned by root) and trusted.oomd_avoid (oomd)
//   omit    user.oomd_omit (systemd-oomd never picks it) and trusted.oomd_avoid
// cgroup v2 takes trusted.* and, from Linux 5.7, user.* attributes; v1 only
// when the hierarchy is mounted with the xattr option.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "supervisor/cgroup/cgroup.h"
#include "supervisor/config/config.h"

namespace recycler::cgroup {

// The attributes (name, value "1") for `preference`; none for None.
std::vector<std::pair<std::string, std::string>> oomd_marks(config::BudgetPreference preference);

// Writes them on the worker's memory cgroup (through its directory fd).
// Empty on success (or nothing to write), else why not, one line.
std::string mark_for_oomd(const WorkerCgroup& cgroup, config::BudgetPreference preference);

}  // namespace recycler::cgroup
