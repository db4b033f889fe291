// Whether recycler is done once its programs have stopped by themselves
// (config `exit: {when}`, wrap mode): looked at after every state change,
// deferred so that one look covers a burst of them.
//   any_failed  a slot failed for good: stop every program, exit 1
//   all_exited  (the default; wrap mode) every slot has stopped and none
//               will restart: exit with the programs' own verdict
//   never       say so once, and stay
// An operator's `recycler stop` (held slots) and a program being replaced
// by a reload are not an end.
#pragma once

#include <functional>

#include "supervisor/config/config.h"
#include "supervisor/runtime/control_actions.h"
#include "supervisor/runtime/program.h"
#include "supervisor/util/deferred_queue.h"

namespace recycler {

class FinishCheck {
 public:
  struct Hooks {
    // Stopping already: nothing to decide.
    std::function<bool()> stopping;
    // Starting up: the look waits until every program has started (start-up
    // asks for one then).
    std::function<bool()> starting;
    // Stop every program, then exit with this code.
    std::function<void(int code)> finish;
  };
  // `config` is read at each look, so a reload's `exit:` applies.
  FinishCheck(const Programs& programs, const config::Config& config, bool wrap_mode,
              const OperatorCommands& commands, DeferredQueue& deferred, Hooks hooks)
      : programs_(programs),
        config_(config),
        wrap_mode_(wrap_mode),
        commands_(commands),
        deferred_(deferred),
        hooks_(std::move(hooks)) {}

  // A look, soon (once per turn of the loop however often it is asked).
  void schedule();
  // The look itself.
  void check();

 private:
  const Programs& programs_;
  const config::Config& config_;
  bool wrap_mode_;
  const OperatorCommands& commands_;
  DeferredQueue& deferred_;
  Hooks hooks_;
  bool pending_ = false;
  bool said_all_exited_ = false;  // exit.when: never, once every slot has stopped
};

}  // namespace recycler
