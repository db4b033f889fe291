// What a slot does once its running main process has exited and its cgroup
// has drained, as systemd's service_enter_* would: one state, set by
// whoever asks (a recycle, a checkpoint, a stop), read once by the drain.
#pragma once

#include <optional>
#include <string>

#include "policies/base/enums.h"
#include "supervisor/process/process.h"
#include "supervisor/util/timers.h"
#include "supervisor/worker/environment.h"

namespace recycler {

struct AfterExit {
  enum class Then {
    Restart,  // it ended on its own: restart.mode decides, after the backoff
    Replace,  // recycled: a fresh start after `delay`, with `cause`
    Resume,   // asked to checkpoint: a clean exit, or death by `signal`, ends the
              // recycle (a start at once, with `cause`); any other end is Restart's
    Stop,     // stopped for good (stop(), kill()): overrides the others
  };
  Then then = Then::Restart;
  Duration delay{0};
  std::optional<RecycleCause> cause;
  int signal = 0;  // Resume: the checkpoint signal (0: a clean exit alone ends it)
  // A recycle was asked of this run: the engine counts its end as one, a
  // stop meanwhile notwithstanding.
  bool recycled = false;

  bool stopping_for_good() const { return then == Then::Stop; }
  // Its end was asked for (a stop, a recycle, a checkpoint): not a crash.
  bool requested() const { return then != Then::Restart || recycled; }
  void enter_replace(Duration after, RecycleCause why) {
    then = Then::Replace;
    delay = after;
    cause = std::move(why);
    recycled = true;
  }
  void enter_resume(RecycleCause why, int checkpoint_signal) {
    then = Then::Resume;
    cause = std::move(why);
    signal = checkpoint_signal;
  }
  void enter_stop() {
    then = Then::Stop;
    cause.reset();
  }
  // Resume, decided by how the run ended (`last`): its clean exit, or its
  // death by the checkpoint signal itself, ends the recycle (Replace, at
  // once); anything else is a crash (Restart). `name`: the worker's, for logs.
  AfterExit resolved(const std::optional<ExitStatus>& last, const std::string& name) const;
};

inline constexpr EnumName<AfterExit::Then> kAfterExitNames[] = {
    {AfterExit::Then::Restart, "restart"},
    {AfterExit::Then::Replace, "replace"},
    {AfterExit::Then::Resume, "resume"},
    {AfterExit::Then::Stop, "stop"}};

}  // namespace recycler
