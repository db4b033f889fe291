// What a preemption (config `preempt:`) asks of the runtime besides the stop
// itself (each program's checkpoint window is config::preempt_checkpoint_window):
// with then: requeue, handing the job back to Slurm; and, in the job's next
// run, telling the programs that checkpoint to resume.
//
// Why recycler requeues rather than its job script: a batch script that runs
// `exec recycler run ...` makes recycler the process sbatch --signal=B:SIG@T
// signals (bash would hold a trap until its child exits), and nothing of the
// script runs after it; Slurm's own answer to a checkpointed job is
// `scontrol requeue $SLURM_JOB_ID` from within the job (submitit and
// Lightning's SLURMEnvironment(auto_requeue) do the same).
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "supervisor/config/config.h"
#include "supervisor/runtime/program.h"
#include "supervisor/util/timers.h"

namespace recycler {

// `scontrol requeue JOBID`, JOBID from SLURM_JOB_ID in recycler's own
// environment (digits only), found through recycler's PATH; waits for it at
// most `timeout`, then kills it. "" on success, else why not (logged by the
// caller): not in a Slurm job, not found, its exit status, the timeout.
std::string requeue_slurm_job(const std::optional<std::string>& job_id, Duration timeout);

// SLURM_JOB_ID from recycler's own environment; nullopt when unset or empty.
std::optional<std::string> slurm_job_id();

// SLURM_RESTART_COUNT from recycler's own environment when it is a number
// above 0: this run of the job follows a requeue, and the programs that
// checkpoint start with RECYCLER_RESUME=1 (their checkpoint is from the
// last run); nullopt otherwise.
std::optional<unsigned> slurm_restart_count();

// How long requeue_slurm_job() waits for scontrol.
inline constexpr Duration kRequeueTimeout = std::chrono::seconds(10);

// A preemption under way: its announcement, its deadline, and the requeue
// once every worker has stopped. The stop itself is the supervisor's.
class Preemption {
 public:
  explicit Preemption(Timers& timers) : timers_(timers) {}

  bool active() const { return active_; }
  // Says what will happen (the `preempt` event: which programs checkpoint
  // within what, the deadline, then what) and arms the deadline: when it
  // passes, a warning and `at_deadline` (the scheduler's SIGKILL comes then:
  // whatever still runs goes first).
  void begin(const config::PreemptConfig& preempt, const Programs& programs,
             std::function<void()> at_deadline);
  // Every worker has stopped: the deadline no longer matters.
  void disarm() { deadline_.reset(); }
  // After the loop, with then: requeue: `scontrol requeue` of this Slurm job
  // (logged either way). Its next run starts recycler again, whose trainers
  // resume from their checkpoints.
  void requeue_if_asked() const;

 private:
  Timers& timers_;
  bool active_ = false;
  bool requeue_ = false;
  std::unique_ptr<Timer> deadline_;
};

}  // namespace recycler
