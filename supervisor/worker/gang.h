// config `gang:`: the program's instances are the ranks of one job (a
// torch.distributed job's, MPI's): one rank cannot leave while the others
// wait for it in a collective, so they stop and start together, as
// torchrun's agent restarts all its workers on any failure.
//
// A recycle of one rank (a policy's decision, an operator's `recycle`, a
// hang) is a recycle of every running rank:
//   1. each is asked to checkpoint (Worker::Checkpoints::recycle_in_gang; the program
//      checkpoints: a checkpoint: section, or a policy with action:
//      checkpoint), except the rank whose own decision said restart (a hang,
//      action: restart): it cannot;
//   2. once every asked rank has confirmed (RECYCLER_CHECKPOINTED=1) or
//      exited, or checkpoint.timeout has passed, each gets its stop signal;
//   3. once every one has drained, they all start again, each resuming
//      (RECYCLER_RESUME=1) from the checkpoint it confirmed.
// A rank that crashes by itself while the others run takes them with it (no
// checkpoint: a peer is gone, the collectives cannot complete); it restarts
// after its own backoff.
//
// Logged as one recycle (events gang_recycle, then gang_restarted with how
// long it took from the decision to every rank running again) and counted
// once (recycles()). Pure: Workers, Timers, the log.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "supervisor/util/timers.h"
#include "supervisor/worker/worker.h"

namespace recycler {

class Gang {
 public:
  // The program's workers, by slot; they outlive the gang.
  Gang(Timers& timers, std::vector<Worker*> workers);
  ~Gang();
  Gang(const Gang&) = delete;
  Gang& operator=(const Gang&) = delete;

  // A decision to recycle `slot`: every running rank goes. `checkpoint`: the
  // decision asked for a checkpoint (action: checkpoint, an operator's
  // recycle of a program that checkpoints); otherwise `slot` itself stops at
  // once. False when `slot` is not running and no recycle of the gang is under
  // way; true, and nothing more, while one is.
  // `delay`: a recycle loop's (RecycleLoopGuard): the ranks start again that
  // long after the last of them has drained.
  bool recycle(unsigned slot, RecycleCause cause, bool checkpoint, Duration delay = Duration{0});
  // After every state change of one of its workers.
  void on_state_change(Worker& worker);

  bool busy() const { return phase_ != Phase::Idle; }
  // Recycles of the gang (each counts once, whatever the ranks).
  uint64_t recycles() const { return recycles_; }

 private:
  enum class Phase { Idle, Checkpointing, Stopping, Starting };
  struct Member {
    unsigned slot = 0;
    bool asked = false;  // to checkpoint
    bool confirmed = false;
  };

  // `checkpoint`: whether `trigger` is asked to; `others_checkpoint`: the
  // other ranks (when the program checkpoints).
  void begin(unsigned trigger, RecycleCause cause, bool checkpoint, bool others_checkpoint);
  void confirmed(unsigned slot);
  // Checkpointing: once no asked rank still works on its checkpoint, the
  // stop signals go out.
  void maybe_release_stops();
  void release_stops();
  // Stopping: once every rank has drained (or was stopped for good), they start.
  void maybe_release_starts();
  void release_starts();
  void maybe_done();
  void crashed(Worker& worker);
  Worker& worker(unsigned slot) const { return *workers_[slot]; }

  Timers& timers_;
  std::vector<Worker*> workers_;
  std::vector<uint64_t> crashes_seen_;  // per slot: its record's crashes, last seen
  Phase phase_ = Phase::Idle;
  std::vector<Member> members_;
  std::unique_ptr<Timer> deadline_;  // checkpoint.timeout, then the start's delay
  Duration delay_{0};
  TimePoint since_{};
  std::string trigger_name_;
  uint64_t recycles_ = 0;
  // Set while its own calls into workers run: their state changes come back
  // through on_state_change and must not start another step meanwhile.
  bool acting_ = false;
  // What the hooks the workers hold reach this gang through; null once it is gone.
  std::shared_ptr<Gang*> self_ = std::make_shared<Gang*>(this);
};

}  // namespace recycler
