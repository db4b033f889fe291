// The memory settings of a worker cgroup that a kernel may lack (files.h:
// memory.low, memory.oom.group, the swap limit): what `limits:` writes into
// them, and what of it this host cannot apply. libcgroup never gets them, so
// that a missing file fails no cgroup's creation: the manager writes them
// once the cgroup exists, through its directory fd, after libcgroup has
// written memory.limit_in_bytes (v1's memory + swap limit may not be below
// it), and says once which could not be written. What detection can already
// tell (v1 has no memory.low, no swap accounting on this kernel) is said
// when a program starts and by `recycler check`, from unapplied_settings().
#pragma once

#include <string>
#include <vector>

#include "supervisor/cgroup/cgroup.h"
#include "supervisor/cgroup/files.h"
#include "supervisor/config/config.h"

namespace recycler::cgroup {

// One file to write, in order.
struct MemorySetting {
  const char* file;   // files.h's name
  std::string value;  // what is written
  const char* key;    // the config key it comes from: "limits.swap_max"
  // Whether failing to write it loses something the config asks for (a
  // default included): then it is worth a warning. Writing memory.low's "0"
  // or swap's "max" where the file is missing loses nothing.
  bool matters;
  // What the workers get when it is not applied, for the warning.
  const char* otherwise;
};

// What `limits` writes into the optional files of `files`' hierarchy:
// memory.low (v2: the size, else "0"), memory.oom.group (v2: "1" unless
// oom_group is false), and the swap limit: v2 memory.swap.max (swap_max,
// default "0", or "max"); v1 memory.memsw.limit_in_bytes = memory_max +
// swap_max ("-1" for unlimited), only with memory_max.
std::vector<MemorySetting> memory_settings(const config::Limits& limits, const Files& files);

// What of `limits` this host cannot apply (`layout`: the hierarchy's tables
// and Layout::absent_files), one line each, e.g. "limits.memory_low: cgroup
// v1 has no memory.low; not applied". A default the hierarchy has no file
// for at all (oom_group on v1) is not mentioned; one the kernel lacks the
// file for (swap accounting turned off) is. Empty without enforcement or
// without a memory controller (said elsewhere).
std::vector<std::string> unapplied_settings(const config::Limits& limits, const Layout& layout);

}  // namespace recycler::cgroup
