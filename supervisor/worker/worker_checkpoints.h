// How a worker checkpoints before it stops, or before it recycles as one rank
// of a gang (worker/gang.h): the checkpoint signal (checkpoint.signal_to),
// the wait for RECYCLER_CHECKPOINTED=1 within a window, then the stop signal;
// and what its next start resumes from. Apart from Worker's lifecycle
// (worker.cpp), which it drives through the same transitions
// (send_stop_signal, spawn) as every stop and start.
#pragma once

#include <optional>
#include <string>
#include <utility>

#include "supervisor/worker/worker.h"

namespace recycler {

class Worker::Checkpoints {
 public:
  explicit Checkpoints(Worker& worker) : w_(worker) {}
  Checkpoints(const Checkpoints&) = delete;
  Checkpoints& operator=(const Checkpoints&) = delete;

  // The next start resumes (RECYCLER_RESUME=1, RECYCLER_RECYCLE_REASON
  // `reason`) from a checkpoint an earlier life left: a Slurm job's run
  // after a requeue. Not a recycle.
  void resume_at_next_start(std::string reason) {
    resume_cause_ = RecycleCause{std::move(reason), true};
  }

  // --- before a recycle ---
  // Asks the running main process to checkpoint: `signal` to it (through its
  // pidfd) and expect_clean_exit(cause). Its death by `signal` itself (no
  // handler for it, or it was exiting as it came) ends the recycle like a
  // clean exit, with a warning. 0, or the errno of the failure.
  int ask(int signal, RecycleCause cause);
  // While a worker checkpoints on request, its own clean exit (status 0) is
  // the end of that recycle, not the end of the program: the replacement
  // starts at once, with `cause`. Cleared by the next start.
  void expect_clean_exit(RecycleCause cause);

  // --- one rank of a gang ---
  // Recycles the running worker as one rank of a gang: when
  // `checkpoint_within` is more than zero and the program checkpoints, the
  // checkpoint signal first (checkpoint.signal_to; not again if one is out
  // already), the stop signal once the gang releases it or the window
  // passes; then, drained, it waits in backoff for release_start(); its start
  // counts as a recycle with `cause` and resumes (RECYCLER_RESUME=1) when it
  // confirmed or the cause says so. A stop meanwhile ends it as any stop
  // does. False when it is not running.
  bool recycle_in_gang(RecycleCause cause, Duration checkpoint_within, GangHooks hooks);
  // The gang's release: the stop signal now (after its checkpoint), and the
  // start once drained. Each does nothing unless the worker waits for it.
  void release_stop();
  void release_start();
  // Drained after a gang's recycle, waiting for release_start().
  bool parked() const { return gang_ && gang_->parked; }

  // --- the worker's side ---
  // A stop's checkpoint (Worker::stop): false when there is none to ask for.
  bool before_stop(std::optional<Duration> within);
  // RECYCLER_CHECKPOINTED=1 from the worker: a stop (or a gang) waiting for
  // it goes on.
  void confirmed();
  // The main process exited while asked to checkpoint as it stopped: after
  // a confirmed checkpoint, or by itself with status 0, that is one.
  void exited_during_stop(bool success);
  // Its checkpoint for its gang is saved: the stop signal waits for the gang.
  bool confirmed_for_gang() const { return gang_ && gang_->confirmed; }
  // Drained after a gang's recycle: waits for release_start(). False when
  // the worker is no rank of a gang's recycle.
  bool park();
  // A stop, or a start, ends the gang's recycle for this rank.
  void leave_gang() { gang_.reset(); }
  // A start's cause, when it has none of its own: what it resumes from (a
  // stop's checkpoint, or resume_at_next_start), once.
  void resume_unless_caused(std::optional<RecycleCause>& cause) {
    if (!cause) cause = std::move(resume_cause_);
    resume_cause_.reset();
  }
  // The checkpoint signal to the processes checkpoint.signal_to names;
  // false (errno set) when none got it.
  bool send(int signal);

 private:
  // The checkpoint is asked: the stop-checkpoint phase, then the stop signal
  // once `window` has passed, unless a confirmation (or the gang's
  // release_stop) brings it sooner. Only a gang's confirmed rank waits
  // without a warning.
  void await(Duration window);
  // After a stop's or a gang's checkpoint: the stop signal of what follows
  // (a stop for good, or a recycle).
  void then_stop();

  // A gang's recycle under way (recycle_in_gang), until its start.
  struct GangRecycle {
    GangHooks hooks;
    bool confirmed = false;  // its checkpoint: the stop signal waits for release_stop()
    bool parked = false;     // drained: the start waits for release_start()
  };

  Worker& w_;
  // A stop's checkpoint was confirmed (or resume_at_next_start): the next
  // start resumes from it.
  std::optional<RecycleCause> resume_cause_;
  std::optional<GangRecycle> gang_;
};

}  // namespace recycler
