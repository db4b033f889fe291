// Watches the workers of one program and recycles them in time.
//
//   every sample_interval, and at once when the kernel reports that a
//   worker's memory crossed a policy's limit (the fast path):
//     probes -> Sample -> timeline (when configured) -> each policy -> Decision
//   request reports (notify socket or output pattern) re-evaluate the
//   policies that count requests, so a limit of 50 means 50, not "50 plus
//   whatever arrived before the next tick".
//
// Decisions go through the program's RecycleQueue (at most
// max_concurrent_recycles at a time, the rest wait their turn) and each
// slot's RecycleLoopGuard (a replacement tripping the same memory policy
// within min_uptime backs off instead of looping). Whole-worker recycles go
// through Worker::recycle (the graceful stop and the normal start), after a
// checkpoint where the policy's action asks for one (the program's checkpoint
// signal, then RECYCLER_CHECKPOINTED=1 or a clean exit, or the timeout); a
// process-scope decision signals one process inside the worker, and its place
// in the queue is freed when that process has exited (pidfd).
#pragma once

#include <sys/types.h>
#include <uv.h>

#include <map>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "policies/policy.h"
#include "policies/recycle_gate.h"
#include "supervisor/config/config.h"
#include "supervisor/notify/message.h"
#include "supervisor/notify/output_match.h"
#include "supervisor/probe/memory_watch.h"
#include "supervisor/probe/probe.h"
#include "supervisor/timers.h"
#include "supervisor/uv.h"
#include "supervisor/worker.h"

namespace recycler {

struct MonitorContext {
  uv_loop_t* loop;
  Timers& timers;
  const probe::ProcessReader& procs;
  std::mt19937_64& rng;
};

class ProgramMonitor {
 public:
  ProgramMonitor(MonitorContext& ctx, std::shared_ptr<const config::ProgramConfig> program,
                 const std::vector<std::unique_ptr<Worker>>& workers);
  ~ProgramMonitor();
  ProgramMonitor(const ProgramMonitor&) = delete;
  ProgramMonitor& operator=(const ProgramMonitor&) = delete;

  // Called after every state change of one of this program's workers.
  void on_state_change(Worker& worker);
  // A notify datagram from `sender`, a process inside `worker`.
  void on_notify(Worker& worker, pid_t sender, const notify::NotifyMessage& message);
  // A whole output line of `worker` (main process `pid`), when requests are
  // counted by pattern.
  void on_output(Worker& worker, pid_t pid, std::string_view line);

  // After the kernel reports a crossing: a sample at once, then one every
  // kFollowUp, kFollowUps times (200 ms), then back to sample_interval.
  static constexpr Duration kFollowUp{5};
  static constexpr unsigned kFollowUps = 40;
  // Processes of one worker whose requests are counted one by one, at most.
  static constexpr size_t kMaxTrackedPids = 4096;

 private:
  struct Run;
  struct Slot;
  struct Signalled;

  // Sampled at all: there are policies, or a timeline to record.
  bool active() const { return !policies_.empty() || program_->timeline.has_value(); }
  // One row in the slot's timeline events file, when it has one.
  void record(Slot& slot, std::string_view event, pid_t pid, std::string_view detail);
  void begin_run(Slot& slot);
  void end_run(Slot& slot);
  void arm_tick(Slot& slot, Duration delay);
  void on_kernel_event(Slot& slot);
  void sample(Slot& slot);
  void evaluate(Slot& slot, policies::Sample& sample, unsigned only_needing);
  void report_outlook(Slot& slot, size_t policy);
  // `pid`: the process that served them, when known to be the worker's.
  void count_requests(Slot& slot, std::optional<pid_t> pid, uint64_t n);
  bool is_member(Slot& slot, pid_t pid);
  void decide(Slot& slot, size_t policy, policies::Decision decision);
  void carry_out(Slot& slot, size_t policy, const policies::Decision& decision);
  void restart(Slot& slot, size_t policy, RecycleCause cause);
  void begin_checkpoint(Slot& slot, size_t policy, const policies::Decision& decision);
  void end_checkpoint(Slot& slot, std::string_view why, bool resume);
  void on_checkpoint_timeout(Slot& slot);
  void finished(policies::RecycleKey key);
  void forget_process(policies::RecycleKey key);
  void admit(const std::vector<policies::RecycleKey>& keys);
  void watch_exit(Slot& slot, pid_t pid, UniqueFd pidfd);
  Slot* find(const Worker& worker);

  MonitorContext& ctx_;
  std::shared_ptr<const config::ProgramConfig> program_;
  std::vector<const policies::Policy*> policies_;
  unsigned needs_ = 0;
  std::shared_ptr<const notify::OutputMatcher> matcher_;  // the config's (RequestsConfig)
  policies::RecycleQueue queue_;
  std::vector<std::unique_ptr<Slot>> slots_;  // by slot number
  // Queued decisions, by key, waiting for a place in the queue.
  struct Waiting {
    size_t policy;
    policies::Decision decision;
    unsigned generation;
  };
  std::map<std::pair<unsigned, pid_t>, Waiting> waiting_;
  std::map<pid_t, std::unique_ptr<Signalled>> signalled_;  // process-scope recycles in flight
};

}  // namespace recycler
