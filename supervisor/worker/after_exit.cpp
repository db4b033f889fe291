#include "supervisor/worker/after_exit.h"

#include "policies/base/units.h"
#include "supervisor/log/log.h"

namespace recycler {

AfterExit AfterExit::resolved(const std::optional<ExitStatus>& last,
                              const std::string& name) const {
  if (!last) return {};
  // Killed by the checkpoint signal itself: it had no handler for it, or it
  // was already on its way out (Python puts the default actions back while
  // it exits: a trainer that has just finished). recycler's own signal, not
  // a crash; its latest checkpoint is on disk whichever it was.
  bool by_signal = signal != 0 && last->signaled && last->signal == signal;
  if (by_signal)
    log::warn(
        "{}: killed by {}, the checkpoint signal: it has no handler for it, or was "
        "exiting as it came; restarting it with RECYCLER_RESUME=1 to resume from its "
        "latest checkpoint",
        name, units::signal_name(signal));
  if (!last->success() && !by_signal) return {};
  AfterExit after = *this;
  after.then = Then::Replace;
  after.delay = Duration{0};
  return after;
}

}  // namespace recycler
