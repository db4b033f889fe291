// YAML -> validated Config. Everything is validated before anything starts:
// every problem found is reported (not just the first), each with the file,
// line and column of the offending node, and a config with any error yields no
// Config at all.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "policies/base/units.h"  // suggest()
#include "supervisor/config/config.h"
#include "supervisor/config/host.h"

namespace recycler::config {

struct Diagnostic {
  std::string file;
  int line = 0;    // 1-based; 0 when the problem has no position (e.g. unreadable file)
  int column = 0;  // 1-based
  std::string message;
  bool warning = false;

  // "FILE:LINE:COLUMN: error: MESSAGE" (or "warning:"), "FILE: error: MESSAGE" without a line.
  std::string str() const;
};

struct LoadResult {
  std::optional<Config> config;      // set only when there are no errors
  std::vector<Diagnostic> errors;    // in file order
  std::vector<Diagnostic> warnings;  // e.g. a command that is not on PATH
};

// A config file must be a regular file of at most this size: `check -c
// /dev/zero` or a FIFO is an error at once, not a hang or memory exhausted.
inline constexpr uint64_t kMaxConfigBytes = 16 << 20;

// Users, groups, PATH and files are looked up on this machine
// (HostLookup::real()) unless a host is given.
LoadResult load_file(const std::string& path);
LoadResult load_file(const std::string& path, const HostLookup& host);
LoadResult parse_string(std::string_view yaml, const std::string& file_name);
LoadResult parse_string(std::string_view yaml, const std::string& file_name,
                        const HostLookup& host);

// The keys the parser accepts, one table per map it reads: the reference
// (docs/configuration.md) is checked against them (tests/unit/docs_keys_test.cpp).
// A section is a dotted path, "*" standing for a program's name and "[]" for
// an entry of a list: "" (top level), "log", "programs.*", "programs.*.limits",
// "programs.*.restart.backoff", "programs.*.listen[]", "programs.*.rlimits.*".
// Policies' settings are policies::Registry::keys().
struct KeyTable {
  std::string_view section;
  std::span<const std::string_view> keys;
};
std::vector<KeyTable> key_tables();

// Error-free checks shared with the command line's wrap mode.
bool valid_program_name(std::string_view name);
// What is wrong with a cgroup_root (the file's key, `run --cgroup-root`,
// RECYCLER_CGROUP_ROOT); "" when nothing is.
std::string cgroup_root_problem(std::string_view root);

}  // namespace recycler::config
