// Start-up in slices from the loop, so that a SIGTERM during the start of a
// thousand programs is seen at once: about 20 ms of work, then a turn of the
// loop (signals, exits, output), then the next slice. First every program's
// cgroups and workers are created (a failure starts nothing), then the
// programs start in file order. Out of Supervisor, which hands it the two
// steps and hears how it ended; what a SIGTERM or a SIGHUP meanwhile means
// is the supervisor's (supervisor.h).
#pragma once

#include <uv.h>

#include <functional>
#include <vector>

#include "supervisor/config/config.h"
#include "supervisor/util/timers.h"
#include "supervisor/util/uv.h"

namespace recycler {

class StartUp {
 public:
  enum class Outcome {
    Started,    // every program has started
    Failed,     // a program's creation failed: nothing has started
    Cancelled,  // recycler is stopping: what has started is stopping
  };
  struct Steps {
    // Creates the program's cgroups and workers; false: start nothing.
    std::function<bool(const config::ProgramConfig&)> create;
    // Starts the program's workers (every program has been created).
    std::function<void(const config::ProgramConfig&)> start;
    // Before each slice: true stops here (Outcome::Cancelled).
    std::function<bool()> cancelled;
    // Called once, last; it may destroy this StartUp. `reload`: a reload
    // was asked for meanwhile (reload_when_started).
    std::function<void(Outcome, bool reload)> finished;
  };
  // `loop`, `timers` and `programs` outlive the start-up.
  StartUp(uv_loop_t* loop, Timers& timers, const std::vector<config::ProgramConfig>& programs,
          Steps steps);

  // The first slice, now; the others from the loop.
  void begin() { slice(); }
  // A SIGHUP waits until every program has started: `finished` is told.
  void reload_when_started() { reload_ = true; }

 private:
  void slice();
  // One slice's creations, until `until` or the last; false when one failed.
  bool create_until(TimePoint until);
  // One slice's starts, until `until` or the last.
  void start_until(TimePoint until);
  void next_slice_after_a_turn();
  void finish(Outcome outcome);

  uv_loop_t* loop_;
  Timers& timers_;
  const std::vector<config::ProgramConfig>& programs_;
  Steps steps_;
  bool creating_ = true;        // creating cgroups; then starting programs
  size_t next_ = 0;             // the next of programs_
  bool reload_ = false;         // a SIGHUP came meanwhile
  uv::Handle<uv_idle_t> idle_;  // runs the next slice
};

}  // namespace recycler
