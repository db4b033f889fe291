// Starting one worker process: vfork and exec through Boost.Process, with an
// exec-setup hook that runs in the child between the two and, before the
// user's program runs a single instruction, puts the child into its cgroup,
// its own session, PR_SET_PDEATHSIG, rlimits, stdio, the listening sockets
// (fds 3.., LISTEN_PID), cwd and user/group.
// Every failure on the way (the hook's or execve's) comes back to the parent
// as an error with the reason; nothing is left behind (the child is reaped).
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

#include "supervisor/config/config.h"
#include "supervisor/util/fd.h"
#include "supervisor/util/result.h"

namespace recycler {

struct LaunchSpec {
  std::vector<std::string> argv;  // argv[0] is resolved against env's PATH
  std::vector<std::string> env;   // "NAME=value"
  std::string cwd;                // "" = inherit
  std::optional<uid_t> uid;
  std::optional<gid_t> gid;
  std::vector<config::Rlimit> rlimits;
  std::vector<UniqueFd>
      join_fds;        // cgroup files the child writes "0" to (v1 tasks, v2 cgroup.procs)
  int stdout_fd = -1;  // write ends the child gets as fd 1 and 2
  int stderr_fd = -1;
  // Sockets the child gets as fds 3, 4, ... (supervisor/process/listen.h); with any,
  // its environment also gets LISTEN_PID=<the child's pid>, which only the
  // child knows (env carries LISTEN_FDS and LISTEN_FDNAMES).
  std::vector<int> listen_fds;
  // WATCHDOG_PID=<the child's pid> in its environment, in place of any
  // (a program's watchdog: timeout; env carries WATCHDOG_USEC).
  bool watchdog_pid = false;
};

// Resolves `name` like execvp: as is when it contains '/', else along PATH
// from `env` (or a default PATH). The error says what was searched.
Result<std::string> resolve_executable(const std::string& name,
                                       const std::vector<std::string>& env);

// Starts the process; its pid once execve has succeeded. An exec that cannot
// succeed on retry (ENOENT, EACCES, ENOEXEC: a typo, a missing x bit, not a
// program) is a permanent Error whose code is that errno.
Result<pid_t> spawn_process(const LaunchSpec& spec);

// The status a shell gives a command that could not be run: 127 not found
// (ENOENT), 126 found but not runnable (anything else).
int exec_failure_status(const Error& e);

}  // namespace recycler
