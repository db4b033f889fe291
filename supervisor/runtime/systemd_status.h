// What recycler tells systemd (Type=notify) about itself, the watchdog aside
// (watchdog.h): READY=1 with a first STATUS= line once every program has
// started; the STATUS= line again whenever it changes (checked once a
// second, under systemd only); STOPPING=1 when it begins to stop, after
// which no STATUS= follows. Out of Supervisor, which hands it the line to
// send (summary_line of its status) and how to send it.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "supervisor/util/timers.h"

namespace recycler {

class SystemdStatus {
 public:
  using LineFn = std::function<std::string()>;
  using NotifyFn = std::function<void(const std::string& state)>;
  // `timers` outlives this.
  SystemdStatus(Timers& timers, LineFn line, NotifyFn notify);

  // Every program has started: READY=1 and STATUS=; then the checks.
  void ready();
  // STOPPING=1, and no more checks.
  void stopping();
  // No more checks (before the loop closes).
  void stop() { timer_.reset(); }

 private:
  void check_in_a_second();

  Timers& timers_;
  LineFn line_;
  NotifyFn notify_;
  std::unique_ptr<Timer> timer_;
  std::string sent_;  // the last STATUS= line
};

}  // namespace recycler
