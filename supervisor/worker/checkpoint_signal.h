// Where a worker's checkpoint signal goes (checkpoint.signal_to): its main
// process (a trainer), the main process's children (the ranks under
// torchrun's elastic agent, which dies of USR1 and forwards only TERM, INT,
// HUP and QUIT), or every process of the worker. The choice is pure
// (checkpoint_targets); sending goes through pidfds, each taken while the
// process is a member of the worker's cgroup.
#pragma once

#include <sys/types.h>

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "supervisor/cgroup/cgroup.h"
#include "supervisor/config/config.h"
#include "supervisor/process/process.h"

namespace recycler {

// The processes of `members` (the worker's, the main process `main` among
// them or not) that `to` names, in the order given; `parent_of` says a
// process's parent (nullopt: gone). Main alone for SignalTo::Main.
std::vector<pid_t> checkpoint_targets(config::SignalTo to, pid_t main,
                                      const std::vector<pid_t>& members,
                                      const std::function<std::optional<pid_t>(pid_t)>& parent_of);

// Whom `to` names, for logs: "pid 42", "the children of pid 42", "every
// process of the worker".
std::string checkpoint_target(config::SignalTo to, pid_t main);

// Sends `signal` to the processes `to` names: to `main` through its own
// handle, to the others through a pidfd each, taken while the process is in
// `cgroup`. How many were signalled; 0 with errno set when none was (ESRCH:
// the main process has no child, for SignalTo::Children). Parents are read
// under `proc`.
unsigned send_checkpoint_signal(config::SignalTo to, int signal, Process& main,
                                const cgroup::WorkerCgroup& cgroup, const std::string& proc);

}  // namespace recycler
