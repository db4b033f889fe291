// How the end of a slot's main process is told and counted. An OOM kill
// (the kernel killed a process of its cgroup during the run) is named as
// such, with the memory limit that applied; an end nobody asked for that was
// not clean is a crash, which the restart record counts. Pure: the worker
// passes the facts and writes the event, and the wording is tested alone.
#pragma once

#include <sys/types.h>

#include <string>
#include <string_view>

#include "supervisor/log/fields.h"
#include "supervisor/log/log.h"
#include "supervisor/process/process.h"
#include "supervisor/util/timers.h"
#include "supervisor/worker/slot.h"

namespace recycler {

// How one run's main process ended, as the worker saw it.
struct RunEnd {
  pid_t pid = 0;  // 0: unknown
  unsigned generation = 0;
  ExitStatus status;
  Duration uptime{0};
  bool oom = false;        // its cgroup's OOM kill count rose during the run
  bool requested = false;  // a stop, a recycle or a checkpoint asked for it (AfterExit)
};

// The event the worker logs for it, and whether it was a crash.
struct ExitReport {
  bool crash = false;
  log::Level level = log::Level::Info;
  std::string_view event;  // "exit" or "oom_kill"
  std::string message;
  log::Fields fields;
};

ExitReport describe_exit(const Slot& slot, const RunEnd& end);

}  // namespace recycler
