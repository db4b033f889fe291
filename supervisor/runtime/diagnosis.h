// One diagnosis of one worker (config `diagnose:`), gathered before a recycle
// that one of the listed policies decided: `signal` to its main process (the
// Python helper dumps every thread's stack on it), then `command`, as the
// program's user, with RECYCLER_PID, RECYCLER_PROGRAM, RECYCLER_SLOT,
// RECYCLER_GENERATION, RECYCLER_POLICY and RECYCLER_DIAGNOSE_REASON in its
// environment. Its output is logged as the worker's is and kept (at most
// max_output bytes); it is killed at `timeout`. `done` runs from a later turn
// of the loop once the command has ended (at once without a command), and the
// Diagnosis may then be destroyed; destroyed before, it kills the command.
#pragma once

#include <sys/types.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "supervisor/config/config.h"
#include "supervisor/engine/recycle_controller.h"
#include "supervisor/process/process.h"
#include "supervisor/util/timers.h"

namespace recycler {

class Diagnosis {
 public:
  struct Outcome {
    std::string what;    // "SIGUSR2 to pid 812; `gdb ...` exited with status 0 after 1.2s"
    std::string output;  // the command's, at most max_output bytes
    bool truncated = false;
    Duration took{0};
  };

  // `name`: the worker's ("train[0]"); `generation`: its run's;
  // `signal_main`: sends a signal to its main process (Worker::signal,
  // through its pidfd), false when none runs.
  Diagnosis(Launcher& launcher, Timers& timers, const std::vector<std::string>& base_env,
            const config::ProgramConfig& program, const std::string& name, unsigned slot,
            unsigned generation, const engine::Diagnose& asked,
            const std::function<bool(int)>& signal_main, std::function<void(Outcome)> done);
  ~Diagnosis();
  Diagnosis(const Diagnosis&) = delete;
  Diagnosis& operator=(const Diagnosis&) = delete;

 private:
  void finish(const std::string& how);

  Timers& timers_;
  const config::DiagnoseConfig& config_;
  std::function<void(Outcome)> done_;
  TimePoint started_;
  Outcome outcome_;
  std::unique_ptr<Process> process_;
  bool exited_ = false;
  bool timed_out_ = false;
  std::unique_ptr<Timer> timeout_;
  std::unique_ptr<Timer> finishing_;
};

}  // namespace recycler
