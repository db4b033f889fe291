// One program as the supervisor runs it: its config, its listen: sockets,
// its workers and the monitor that watches them, and what comes next while
// a reload replaces it. A plain struct shared by those that own programs
// (Supervisor creates, replaces and stops them: supervisor.h) and those that
// act on their workers (the operator's commands: control_actions.h).
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "supervisor/config/config.h"
#include "supervisor/process/listen.h"
#include "supervisor/runtime/monitor.h"
#include "supervisor/worker/worker.h"

namespace recycler {

struct Program {
  std::shared_ptr<const config::ProgramConfig> config;
  // Its listen: sockets, bound when its workers are first created and kept
  // (those with the same endpoint) when a reload replaces them.
  std::shared_ptr<const listen::Set> sockets;
  std::vector<std::unique_ptr<Worker>> workers;
  // Declared after the workers, so destroyed before them: it watches them.
  std::unique_ptr<ProgramMonitor> monitor;
  // Set while the program is being stopped for a reload: what comes next
  // (a new config, or nullptr when the program was removed).
  bool replacing = false;
  std::shared_ptr<const config::ProgramConfig> next;

  void start_workers() {
    for (auto& w : workers) w->start();
  }
};

// By name.
using Programs = std::map<std::string, Program>;

// Every worker's sampling, for the watchdogs (watchdog.h) and /healthz.
inline void sampling_progress(const Programs& programs, TimePoint now,
                              std::vector<Progress>& progress) {
  for (const auto& [name, program] : programs)
    if (program.monitor) program.monitor->sampling_progress(now, progress);
}

}  // namespace recycler
