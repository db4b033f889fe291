// A started worker process as the lifecycle logic sees it, and the Launcher
// that starts one. The libuv implementation (ProcessTable) watches exits
// through a pidfd (SIGCHLD + waitpid as the fallback) and forwards the
// process's stdout and stderr, line by line, to the log: a bounded amount per
// turn of the loop, so a worker that floods its output slows only itself.
// Once the main process has exited and its Process is destroyed, what is left
// in the pipes is read up to a bound, then the pipes are closed: something
// the worker left behind that keeps writing gets EPIPE, never the loop.
#pragma once

#include <sys/types.h>
#include <uv.h>

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>

#include "supervisor/process/spawn.h"
#include "supervisor/util/result.h"

namespace recycler {

struct ExitStatus {
  int code = 0;    // exit status when !signaled
  int signal = 0;  // terminating signal when signaled
  bool signaled = false;
  bool core_dumped = false;

  static ExitStatus from_wait(int wstatus);
  bool success() const { return !signaled && code == 0; }
  // "exited with status 1", "killed by SIGKILL", "killed by SIGSEGV (core dumped)"
  std::string describe() const;
  // What a shell would report: the status, or 128 + signal.
  int shell_code() const { return signaled ? 128 + signal : code; }
};

class Process {
 public:
  virtual ~Process() = default;
  virtual pid_t pid() const = 0;
  // Sends `sig` unless the process has been reaped already (then false and
  // nothing is sent): a pid is never signalled after it was reaped.
  virtual bool signal(int sig) = 0;
  // The same to its whole process group, where recycler started it (each
  // child is a session leader: its children stay in its group unless they
  // leave it), so that a `sh -c` command's children go with it.
  virtual bool signal_group(int sig) { return signal(sig); }
};

// Identifies a worker's output lines.
struct OutputTag {
  std::string program;
  unsigned slot = 0;
  // Sees every whole line (not the pieces of an over-long one) after it is
  // logged: request counting by pattern. Optional.
  std::function<void(pid_t pid, std::string_view line)> observe;
};

class Launcher {
 public:
  using ExitCallback = std::function<void(ExitStatus)>;
  virtual ~Launcher() = default;
  // Starts the process. `on_exit` runs from the loop once it has been reaped;
  // the Process may be destroyed from within that callback's aftermath but not
  // before the callback returns.
  virtual Result<std::unique_ptr<Process>> launch(LaunchSpec spec, OutputTag tag,
                                                  ExitCallback on_exit) = 0;
  // A handle on a process recycler did not start (a child of a pre-fork
  // server's master), through a pidfd: signal() can never reach a later
  // process that reuses its pid, and `on_exit` runs from the loop once it has
  // exited (its status is its parent's to reap). An error when it is gone.
  virtual Result<std::unique_ptr<Process>> attach(pid_t pid, std::function<void()> on_exit) = 0;
};

// The real Launcher. One per loop; it also reaps children it does not know
// (orphans, when recycler runs as PID 1 of a container).
class ProcessTable final : public Launcher {
 public:
  explicit ProcessTable(uv_loop_t* loop);
  ~ProcessTable() override;

  Result<std::unique_ptr<Process>> launch(LaunchSpec spec, OutputTag tag,
                                          ExitCallback on_exit) override;
  // attach.cpp
  Result<std::unique_ptr<Process>> attach(pid_t pid, std::function<void()> on_exit) override;
  // SIGCHLD: reap every child that has exited, dispatching to its Process.
  void reap_children();

 private:
  class Child;
  friend class Child;

  uv_loop_t* loop_;
  std::map<pid_t, Child*> children_;  // unreaped children we started
};

}  // namespace recycler
