// Connects one program's workers to its decision engine
// (engine/recycle_controller.h) and carries out what it decides.
//
//   every sample_interval, and at once when the kernel reports that a
//   worker's memory crossed a policy's limit (the fast path):
//     probes (+ the latest GPU snapshot, gpu/sampler.h) -> Sample
//       -> controller.prepare -> timeline (when configured)
//       -> controller.sampled -> commands
//   request reports (notify socket or output pattern) go to the controller at
//   once, so a limit of 50 means 50, not "50 plus whatever arrived before the
//   next tick" (under load the notify socket is read in batches, but never
//   while a limit is near: notify/read_pacer.h).
//
// The monitor holds no decision of its own: it samples (timers, probes, the
// kernel's memory watch), records timelines, resolves which process an
// output line names, and turns the controller's commands into Worker calls
// (recycle, checkpoint, signal_process), timers, timeline rows and log lines;
// what comes of them goes back to the controller as events.
#pragma once

#include <sys/types.h>
#include <uv.h>

#include <memory>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "policies/policy.h"
#include "supervisor/config/config.h"
#include "supervisor/engine/recycle_controller.h"
#include "supervisor/gpu/sampler.h"
#include "supervisor/metrics/text.h"
#include "supervisor/notify/message.h"
#include "supervisor/notify/output_match.h"
#include "supervisor/notify/router.h"
#include "supervisor/probe/memory_watch.h"
#include "supervisor/probe/probe.h"
#include "supervisor/runtime/diagnosis.h"
#include "supervisor/runtime/watchdog.h"
#include "supervisor/timeline/writer.h"
#include "supervisor/util/timers.h"
#include "supervisor/util/uv.h"
#include "supervisor/worker/gang.h"
#include "supervisor/worker/worker.h"

namespace recycler {

struct MonitorContext {
  uv_loop_t* loop;
  Timers& timers;
  const probe::ProcessReader& procs;
  std::mt19937_64& rng;
  // GPU figures (NVML), when the config asks for them; else null.
  gpu::Sampler* gpu = nullptr;
  // What a diagnose: command is started with (diagnosis.h); null: none is.
  Launcher* launcher = nullptr;
  const std::vector<std::string>* base_env = nullptr;
  // What `devices: {gpus: auto}` shares out (runtime/gpu_pool.h); null: nothing.
  const std::vector<std::string>* gpus_auto = nullptr;
  // The container's memory limit (ContainerWatch): what percentage limits
  // are of where a program sets no limits.memory_max.
  std::optional<uint64_t> container_memory_max = std::nullopt;
  // How long reading the probes takes, per sample (seconds; every program):
  // recycler_sample_duration_seconds on the metrics endpoint.
  metrics::Histogram sample_duration{metrics::kSampleDurationBuckets};
};

// Observes its program's workers (WorkerObserver) and receives their notify
// reports (notify::Receiver, from notify/router.h): nothing of theirs passes
// through the supervisor.
class ProgramMonitor final : public WorkerObserver, public notify::Receiver {
 public:
  ProgramMonitor(MonitorContext& ctx, std::shared_ptr<const config::ProgramConfig> program,
                 const std::vector<std::unique_ptr<Worker>>& workers);
  ~ProgramMonitor() override;
  ProgramMonitor(const ProgramMonitor&) = delete;
  ProgramMonitor& operator=(const ProgramMonitor&) = delete;

  // After every state change of one of this program's workers.
  void on_state_change(Worker& worker) override;

  // notify::Receiver: a report of one of its workers' processes, READY=1
  // included (the end of a surge's wait), then on_notify() and answer().
  std::optional<unsigned> live_generation(unsigned slot) const override;
  std::string worker_name(unsigned slot) const override;
  unsigned slot_count() const override { return static_cast<unsigned>(slots_.size()); }
  notify::Answer receive(const notify::Origin& origin, pid_t pid,
                         const notify::NotifyMessage& message, bool answer_wanted) override;
  uint64_t requests_counted() const override { return controller_.requests_counted(); }
  std::optional<uint64_t> requests_left() const override { return controller_.requests_left(); }
  // A notify datagram from `sender`, a process inside `worker`, of its
  // `generation` (Surge::generation_in): the current run's messages go to the
  // controller; the next generation's request counts wait for its run
  // (RecycleController::next_requests); the retiring one's count nowhere.
  void on_notify(Worker& worker, engine::Generation generation, pid_t sender,
                 const notify::NotifyMessage& message);
  // What to answer `sender` after on_notify() of its report of `requests`
  // (RecycleController::answer, or retiring_report; nothing to the next
  // generation until its run starts).
  notify::Answer answer(Worker& worker, engine::Generation generation, pid_t sender,
                        uint64_t requests);
  // A whole output line of `worker` (main process `pid`), when requests are
  // counted by pattern: a line of a surge's next generation (`pid` is its
  // main process) counts in that generation's run, one of the retiring
  // generation nowhere.
  void on_output(Worker& worker, pid_t pid, std::string_view line) override;

  // An operator's recycle of `slot` (the control socket): to the controller
  // as an event (RecycleController::recycle_asked). False when it is not
  // running or already recycling.
  bool recycle(unsigned slot, std::string reason);
  // The top-level budget chose `slot` (or its process `pid`): to the
  // controller (RecycleController::budget_recycle). False when there is
  // nothing to recycle there now.
  bool budget_recycle(unsigned slot, pid_t pid, std::string reason);
  // What status reads: the last samples, requests and outlooks.
  const engine::RecycleController& controller() const { return controller_; }
  // The container's memory limit, for percentages where the program sets no
  // memory_max (RecycleController::set_default_memory_max).
  // The kernel's fast path of each slot is armed again at the new threshold.
  void set_default_memory_max(std::optional<uint64_t> bytes);
  // Whether `slot` can take work now (GET /readyz, status's `ready`): it is
  // running, not draining before a recycle (drain.unready_for) nor being
  // stopped, and, once the program has been seen to send READY=1 (or it
  // surges, which waits for one), its current run has sent it. `why` says
  // what is missing ("starting", "draining before its recycle", ...).
  struct Readiness {
    bool ready = false;
    std::string why;
  };
  Readiness readiness(unsigned slot) const;
  // For the watchdog (watchdog.h): how long each worker being sampled has
  // gone since its last sampling tick, appended to `out`.
  void sampling_progress(TimePoint now, std::vector<Progress>& out) const;

  // After the kernel reports a crossing: a sample at once, then one every
  // kFollowUp, kFollowUps times (200 ms), then back to sample_interval.
  static constexpr Duration kFollowUp{5};
  static constexpr unsigned kFollowUps = 40;
  // Processes of one worker whose requests are counted one by one, at most.
  static constexpr size_t kMaxTrackedPids = engine::RecycleController::kMaxTrackedPids;

 private:
  struct Slot;

  void begin_run(Slot& slot);
  void arm_tick(Slot& slot, Duration delay);
  void on_kernel_event(Slot& slot);
  void sample(Slot& slot);
  // watchdog.timeout: a sample the moment a run has been silent that long.
  void watch_silence(Slot& slot);
  void arm_silence(Slot& slot);
  // Whether this program's samples carry GPU figures: a policy reads them,
  // or the config has `gpu:` and the program records a timeline.
  bool wants_gpu() const;
  // Where NVML's pids cannot be mapped (a pod) and the slot has whole GPUs of
  // its own (pinned_gpus), their used memory stands in for its figure.
  void add_gpu(Slot& slot, policies::Sample& s, const std::vector<pid_t>& pids);
  bool is_member(Slot& slot, pid_t pid);
  // Carries out the controller's commands (and those they lead to).
  void run_commands();
  void execute(engine::Command& command);
  // One command of the controller's, for `slot` (monitor_commands.cpp).
  void carry_out(Slot& slot, engine::Diagnose& c);
  void carry_out(Slot& slot, engine::RecycleWorker& c);
  void carry_out(Slot& slot, engine::AskCheckpoint& c);
  void carry_out(Slot& slot, engine::SignalProcess& c);
  void carry_out(Slot& slot, engine::ArmCheckpointTimer& c);
  void carry_out(Slot& slot, engine::CancelCheckpointTimer& c);
  void carry_out(Slot& slot, engine::Record& c);
  // config diagnose: (diagnosis.h); the slot's later commands wait for it.
  void diagnose(Slot& slot, const engine::Diagnose& asked);
  // drain.unready_for: true when a recycle of `slot` must wait, unready,
  // first (its timer is armed; the recycle goes into `held`).
  bool drain_first(Slot& slot);
  // Arms the slot's kernel memory watch (probe/memory_watch.h) at the
  // lowest fast threshold of its policies, if any.
  void watch_memory(Slot& slot);
  void diagnosed(Slot& slot, const engine::Diagnose& asked, Diagnosis::Outcome outcome);
  // The slot of `worker` (slots are by number): null for another's.
  Slot* find(const Worker& worker);

  MonitorContext& ctx_;
  std::shared_ptr<const config::ProgramConfig> program_;
  engine::RecycleController controller_;
  std::shared_ptr<const notify::OutputMatcher> matcher_;  // the config's (RequestsConfig)
  std::vector<std::unique_ptr<Slot>> slots_;              // by slot number
  // config gang: the controller's recycles and checkpoints of one slot are
  // carried out on every rank.
  std::unique_ptr<Gang> gang_;
  // One of its workers has sent READY=1: from then on each run is ready
  // only once it has.
  bool sends_ready_ = false;
  bool said_pinned_ = false;  // the GPUs' used memory stands in (add_gpu), said once
  // What callbacks held by workers reach this monitor through; gone with it.
  std::shared_ptr<ProgramMonitor*> self_ = std::make_shared<ProgramMonitor*>(this);
};

}  // namespace recycler
