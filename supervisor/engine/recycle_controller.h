// The decision engine of one program: every decision recycler takes about its
// workers, with no event loop and no I/O, so that the runtime (monitor.h) and
// `recycler replay` (timeline/replay.h) run the very same procedure.
//
//   events in                          commands out (take())
//   run_started / run_ended            RecycleWorker  (Worker::recycle)
//   sampled (after prepare)            AskCheckpoint  (Worker::checkpoint)
//                                      Diagnose       (before either, config diagnose:)
//   requests, notified                 SignalProcess  (Worker::signal_process)
//   checkpoint_sent / _failed          ArmCheckpointTimer, CancelCheckpointTimer
//   recycle_refused                    Record         (a timeline event row)
//   process_signalled / _exited        Log            (a log line or event)
//   checkpoint_timer_fired
//
// It owns:
//   - the policies' state per run, and the outlook transitions it logs;
//   - the precedence between decisions of one sample: every policy sees every
//     sample (their `for:` clocks must run), then the first whole-worker
//     decision wins over process-scope ones; while a checkpoint is under way
//     only a restart changes anything, and it overtakes the checkpoint;
//   - the program's RecycleQueues (at most max_concurrent_recycles whole
//     workers and max_concurrent_process_recycles processes under way, the
//     rest wait in turn) and each slot's RecycleLoopGuard;
//   - the checkpoint protocol: ask, then restart with RECYCLER_RESUME=1 once
//     it is confirmed (RECYCLER_CHECKPOINTED=1) or the worker exits cleanly
//     (Worker), or without it after checkpoint.timeout (on_timeout: restart),
//     or, with on_timeout: wait, once memory nears memory_max;
//   - what a process that reports its requests hears back (answer()): the
//     limit drawn for it, then, at it, that its report was acted on;
//   - the warning that a request-counting policy (max_requests) is blind:
//     once per program, when a run has used kUnseenRequestsCpu of CPU time
//     and the program has never counted a request (event "requests_unseen").
//
// Commands are carried out by the caller after the event returns, in order;
// what comes of them (a refused recycle, a process already gone) comes back
// as an event. Time comes from the injected clock.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <variant>
#include <vector>

#include "policies/base/time.h"
#include "policies/policy.h"
#include "supervisor/config/config.h"
#include "supervisor/engine/recycle_gate.h"
#include "supervisor/engine/vocabulary.h"
#include "supervisor/log/fields.h"
#include "supervisor/notify/message.h"

namespace recycler::engine {

using policies::Decision;
using policies::TimePoint;
using recycler::Duration;

// Stop the worker gracefully and start its replacement after `delay`.
struct RecycleWorker {
  unsigned slot = 0;
  Duration delay{0};
  std::string reason;  // RECYCLER_RECYCLE_REASON
  bool resume = false;
};
// Send the checkpoint signal to the main process; answer with
// checkpoint_sent() or checkpoint_failed().
struct AskCheckpoint {
  unsigned slot = 0;
  int signal = 0;
  std::string reason;  // of the restart that follows
};
// Signal one process of the worker (it must be in its cgroup), SIGKILL after
// stop.timeout; answer with process_signalled(), then process_exited().
struct SignalProcess {
  unsigned slot = 0;
  pid_t pid = 0;
  int signal = 0;
};
struct ArmCheckpointTimer {
  unsigned slot = 0;
  Duration delay{0};
};
struct CancelCheckpointTimer {
  unsigned slot = 0;
};
// One row of the slot's timeline events file.
struct Record {
  unsigned slot = 0;
  std::string event;
  pid_t pid = 0;
  std::string detail;
};
// A log line: an event when `event` is set, else a plain message.
struct Log {
  config::LogLevel level = config::LogLevel::Info;
  std::string event;
  std::string message;
  log::Fields fields;
};
// Gather evidence of why (config `diagnose:`) before the recycle or
// checkpoint that follows it: the caller holds the slot's later commands
// until the diagnosis is over.
struct Diagnose {
  unsigned slot = 0;
  pid_t pid = 0;  // the main process
  std::string policy;
  std::string reason;
};
using Command = std::variant<RecycleWorker, AskCheckpoint, SignalProcess, ArmCheckpointTimer,
                             CancelCheckpointTimer, Record, Log, Diagnose>;

// How a run ended, as far as decisions go.
enum class RunEnd {
  Exited,    // the main process exited (on its own, or as asked)
  Stopping,  // asked to stop or to recycle; or waiting to start again
  Finished,  // stopped for good, or failed: nothing of the slot is under way
};

class RecycleController {
 public:
  using Clock = std::function<TimePoint()>;
  // What the caller sees of each policy's decision on every evaluation,
  // whether or not it is carried out (replay reports them).
  using Observer = std::function<void(unsigned slot, size_t policy, const Decision&)>;
  // A decision carried out: logged and recorded as a recycle.
  using Acted = std::function<void(unsigned slot, size_t policy, const Decision&)>;

  RecycleController(std::shared_ptr<const config::ProgramConfig> program, unsigned slots,
                    Clock clock);

  // Sampled at all: there are policies, a timeline to record, or a budget
  // that reads the program's figures.
  bool active() const {
    return !policies_.empty() || program_->timeline.has_value() || program_->budget_needs != 0;
  }
  // The Needs bits of the probes, per sample: the policies', and the CPU time
  // while a request-counting policy has counted nothing and not warned yet.
  unsigned needs() const {
    return needs_ | (watching_unseen_requests() ? policies::kNeedsCpu : 0u);
  }
  const std::vector<const policies::Policy*>& policies() const { return policies_; }
  // A run is watched (started, not ended, no recycle asked).
  bool running(unsigned slot) const;
  void observe(Observer observer) { observer_ = std::move(observer); }
  void on_acted(Acted acted) { acted_ = std::move(acted); }

  // --- events ---
  // A new run of `slot` runs (its main process started at `started`); a
  // whole-worker recycle of the slot under way is done.
  // `pid`: its main process; `seed`: of the policies' jitter for this run.
  void run_started(unsigned slot, unsigned generation, TimePoint started, pid_t pid, uint64_t seed);
  // `recycled`: the exit was asked for by a recycle (a crash or a stop starts
  // the loop guard over); `exit`: how it ended, for the timeline.
  void run_ended(unsigned slot, RunEnd how, bool recycled = false, const std::string& exit = "");
  // Fills in what the controller counts (requests, device bytes, the
  // iteration) and forgets
  // the counts of processes not in `listed` (the worker's pids, sorted, when
  // the probe read them), before the sample is recorded and then passed to
  // sampled().
  void prepare(unsigned slot, policies::Sample& sample, const std::vector<pid_t>* listed);
  void sampled(unsigned slot, policies::Sample sample);
  // `n` requests served by `pid` (nullopt: by the worker, not a known process).
  void requests(unsigned slot, std::optional<pid_t> pid, uint64_t n);
  // A report of `n` requests from `pid`, a process of the slot's next
  // generation (`generation`) while a surge waits for it to be ready: its run
  // has not started, and the run being replaced must not count them. Held
  // apart, they are counted in that generation's run from its start
  // (run_started), so that its whole-worker count and each process's count
  // toward its own limit include what it served before the switch. The
  // process hears no limit until then (answer() has no run for it).
  void next_requests(unsigned slot, unsigned generation, pid_t pid, uint64_t n);
  // A report from `pid`, a process of the generation a surge replaced, while
  // it stops: its run is over, so it counts nowhere. The answer, once a
  // process: RECYCLER_REQUESTS_SEEN with the report's count, so that one
  // waiting at a limit it heard from its own run goes on with its stop.
  notify::Answer retiring_report(unsigned slot, pid_t pid, uint64_t n);
  // A notify datagram from `sender`, a process of the worker. A new
  // RECYCLER_ITERATION evaluates the policies that read it at once (between
  // iterations), on the last sample with the device bytes the datagram gave.
  void notified(unsigned slot, pid_t sender, const notify::NotifyMessage& message);
  void checkpoint_sent(unsigned slot, pid_t pid);
  void checkpoint_failed(unsigned slot, pid_t pid, const std::string& why);
  void checkpoint_timer_fired(unsigned slot);
  // The worker was not running when a RecycleWorker came.
  void recycle_refused(unsigned slot);
  void process_signalled(unsigned slot, pid_t pid, Signalled result);
  // The signalled process has left service (closed the listening sockets it
  // shared with its master; Worker::signal_process): its place in the queue
  // goes to the next recycle. A Python worker does so within a request of
  // the signal, then may take 50-120 ms more to exit; holding the queue that
  // long let the next process at its limit serve hundreds of requests more.
  void process_left(unsigned slot, pid_t pid);
  // It exited (left service then, if not before): logged with the requests
  // it served in all.
  void process_exited(unsigned slot, pid_t pid);
  // What to answer `pid` after its report of requests (notify/message.h's
  // Answer), once the report's commands have been carried out: its request
  // limit when it has not heard it yet (or it changed), and, to the first
  // report that reaches that limit, the count seen, which says that recycler
  // has acted on it. At most these two a process (each answer waits in the
  // process's queue, charged to recycler's socket, until it reads it). Empty
  // when no policy draws a limit for the process. A process told its limit
  // may hold back every count below it, which requests_left() reckons with.
  notify::Answer answer(unsigned slot, pid_t pid);
  // An operator asked to recycle the worker (the control socket): decided as
  // a policy's whole-worker decision is, through the same queue, loop guard
  // and checkpoint (asked first when one of the program's policies would ask
  // for one). Counted and logged as policy "control". False when the slot
  // has no run to recycle (not running, or a recycle already under way).
  bool recycle_asked(unsigned slot, std::string reason);
  // The policy name decisions of recycle_asked() carry.
  static constexpr const char* kOperatorPolicy = "control";
  // The top-level budget (engine/budget.h) chose this worker, or with `pid`
  // one of its processes (its program's budget scope: process): decided as a
  // policy's decision is, through the same queue, loop guard and checkpoint,
  // as policy "budget". False when there is nothing to recycle (the slot is
  // not running, or already recycling; the process is not the worker's).
  bool budget_recycle(unsigned slot, pid_t pid, std::string reason);
  // What a percentage limit is of where the program sets no
  // limits.memory_max: the memory limit of the cgroup recycler runs in (its
  // container), as last read. Live runs take a new one at once: the
  // policies whose limit is such a percentage start afresh on it (a `for:`
  // hold begins again).
  void set_default_memory_max(std::optional<uint64_t> bytes);
  // The program's limits.memory_max, else that default.
  std::optional<uint64_t> memory_max() const {
    return program_->limits.memory_max ? program_->limits.memory_max : default_memory_max_;
  }
  static constexpr const char* kBudgetPolicy = "budget";
  // The run's start, for the budget's candidates; nullopt without a run.
  std::optional<TimePoint> run_started_at(unsigned slot) const;

  // What status shows of a run: its last sample (with the counts
  // prepare() filled in), nullptr when the slot has none; the requests
  // served so far; each predicting policy's outlook (policy index, outlook),
  // valid until the next event.
  const policies::Sample* last_sample(unsigned slot) const;
  // What the slot's current run last said with STATUS= (sd_notify), as
  // `systemctl status` shows it; "" when it said nothing.
  const std::string& status_text(unsigned slot) const;
  std::optional<uint64_t> requests_served(unsigned slot) const;
  // The request limit drawn for `pid` (the lowest of the policies that draw
  // one per process), as answer() tells it; nullopt when none does.
  std::optional<uint64_t> process_request_limit(unsigned slot, pid_t pid) const;
  // Every request counted for the program since it started (all workers, all
  // generations), and the fewest requests any running worker or process may
  // still serve before a policy acts on it (nullopt when no policy counts
  // them): what lets the notify socket rest between reads (notify/read_pacer.h).
  uint64_t requests_counted() const { return requests_counted_; }
  std::optional<uint64_t> requests_left() const;
  std::vector<std::pair<size_t, const policies::Outlook*>> outlooks(unsigned slot) const;

  // The worker's processes, for the pids its output names: known() answers
  // from the last list, `fresh` while no pid missing from it was looked up
  // since the last sample.
  bool known_member(unsigned slot, pid_t pid) const;
  bool members_fresh(unsigned slot) const;
  void set_members(unsigned slot, const std::vector<pid_t>& pids);
  // Warned once per run about a pid that is not the worker's.
  bool warn_stranger_once(unsigned slot);

  // The commands of the events so far, in order; empties the list.
  std::vector<Command> take() { return std::exchange(out_, {}); }

  // With on_timeout: wait, a worker this close to memory_max is restarted
  // without its checkpoint: one more step could be the OOM kill.
  static constexpr double kOverdueMemoryFraction = 0.95;
  // Processes of one worker whose requests are counted one by one, at most.
  static constexpr size_t kMaxTrackedPids = 4096;
  // A run of a program with a request-counting policy that has used this
  // much CPU time (from its first sample) while the program has never counted
  // a request, not even a RECYCLER_REQUESTS=0 report, serves traffic nobody
  // counts: its policy can never fire. Warned once per program (a reload
  // builds a new controller, which may warn again). Two seconds: more than
  // any start-up (imports, JIT warm-up) costs, little for a server at work.
  static constexpr std::chrono::microseconds kUnseenRequestsCpu = std::chrono::seconds(2);

 private:
  struct Checkpointing {
    size_t policy = 0;
    std::string reason;
    TimePoint since;
    bool overdue = false;  // past checkpoint.timeout with on_timeout: wait
  };
  struct Run {
    unsigned generation = 0;
    pid_t pid = 0;  // the main process
    policies::WorkerContext context;
    std::vector<std::unique_ptr<policies::PolicyState>> states;
    std::vector<bool> growing;  // per policy: it had an outlook after the last sample
    bool recycling = false;     // a RecycleWorker was given
    uint64_t requests = 0;
    std::unordered_map<pid_t, uint64_t> pid_requests;
    // What each process was told (answer()), forgotten with its count.
    struct Told {
      uint64_t limit = 0;
      bool seen = false;  // its report at the limit was answered
    };
    std::unordered_map<pid_t, Told> told;
    std::unordered_set<pid_t> members;
    bool members_fresh = false;
    bool warned_stranger = false;
    std::optional<uint64_t> device;
    std::optional<uint64_t> iteration;  // the last RECYCLER_ITERATION
    std::optional<TimePoint> alive;     // the last WATCHDOG=1 or RECYCLER_ITERATION
    std::string status;                 // the last STATUS=, at most kMaxStatusBytes
    policies::Sample last;
    // Sample::cpu_usec of its first sample (lowered should the sum of its
    // processes drop): its CPU time since is what kUnseenRequestsCpu counts.
    std::optional<uint64_t> cpu_base;
    bool ready = false;
    std::optional<Checkpointing> checkpoint;
    // An AskCheckpoint is out, not answered yet: the policy and the reason.
    std::optional<std::pair<size_t, std::string>> asking;
  };
  struct Slot {
    std::optional<Run> run;
    RecycleLoopGuard guard;
    // next_requests() of generation `next_generation`, until its run starts.
    unsigned next_generation = 0;
    uint64_t next_total = 0;
    std::unordered_map<pid_t, uint64_t> next_pid_requests;
    // Processes of the retiring generation answered by retiring_report().
    std::unordered_set<pid_t> retiring_answered;
    // A run of the slot confirmed a checkpoint: a hung run's replacement
    // resumes from it (Policy::watches_hangs).
    bool checkpoint_on_disk = false;
  };
  // A process-scope recycle under way, until its process exits.
  struct InFlight {
    unsigned slot = 0;
    size_t policy = 0;
    Decision decision;
    bool sent = false;
    bool left = false;    // process_left: no longer holds its place in the queue
    bool waited = false;  // the decision waited its turn: the count moved on since
    // Once sent: the run it was signalled in, and its count then (what it
    // served in all, should that run end before the process does: a surge).
    unsigned generation = 0;
    uint64_t requests = 0;
  };
  struct Waiting {
    size_t policy;
    Decision decision;
    unsigned generation;
  };

  std::string name(unsigned slot) const;
  // The policy behind a decision: an index of policies_, kOperator or kBudget.
  static constexpr size_t kOperator = static_cast<size_t>(-1);
  static constexpr size_t kBudget = static_cast<size_t>(-2);
  std::string_view policy_name(size_t policy) const;
  // Built in place: moving a whole Command through a temporary makes GCC 12
  // at -O2 warn that AskCheckpoint::signal "may be used uninitialized".
  template <typename C>
  void emit(C&& c) {
    out_.emplace_back(std::in_place_type<std::decay_t<C>>, std::forward<C>(c));
  }
  void log(config::LogLevel level, std::string message);
  void event(config::LogLevel level, std::string event, std::string message, log::Fields fields);
  void record(unsigned slot, std::string event, pid_t pid, std::string detail);
  void end_run(unsigned slot);
  void evaluate(unsigned slot, policies::Sample& sample, unsigned only_needing);
  bool watching_unseen_requests() const {
    return request_policy_ && !requests_seen_ && !warned_unseen_requests_;
  }
  void check_unseen_requests(unsigned slot);
  void new_iteration(unsigned slot, uint64_t iteration);
  void report_outlook(unsigned slot, size_t policy);
  void decide(unsigned slot, size_t policy, Decision decision);
  void carry_out(unsigned slot, size_t policy, const Decision& decision, bool waited = false);
  void announce(unsigned slot, size_t policy, const Decision& decision, pid_t target,
                bool waited = false);
  void restart(unsigned slot, size_t policy, std::string reason, bool resume);
  void end_checkpoint(unsigned slot, std::string_view why, bool resume);
  void forget_process(RecycleKey key);
  // Forgets the counts of the processes `gone(pid)` picks, and what they were told.
  template <typename Gone>
  static void forget_counts(Run& run, Gone gone) {
    std::erase_if(run.pid_requests, [&](const auto& e) { return gone(e.first); });
    std::erase_if(run.told, [&](const auto& e) { return gone(e.first); });
  }
  void finished(RecycleKey key);
  void admit(const std::vector<RecycleKey>& keys);
  std::string cause_text(size_t policy, const Decision& decision) const;

  std::shared_ptr<const config::ProgramConfig> program_;
  Clock now_;
  std::vector<const policies::Policy*> policies_;
  std::optional<uint64_t> default_memory_max_;
  unsigned needs_ = 0;
  // The program's request-counting policy (an index of policies_), if any;
  // whether the program ever counted a request; whether a run warned it had not.
  std::optional<size_t> request_policy_;
  bool requests_seen_ = false;
  uint64_t requests_counted_ = 0;
  bool warned_unseen_requests_ = false;
  // Whole-worker recycles (max_concurrent_recycles) and process-scope ones
  // (max_concurrent_process_recycles), each under its own cap.
  RecycleQueue queue_;
  RecycleQueue process_queue_;
  RecycleQueue& queue_of(RecycleKey key) { return key.pid ? process_queue_ : queue_; }
  std::vector<Slot> slots_;
  std::map<std::pair<unsigned, pid_t>, Waiting> waiting_;
  std::map<pid_t, InFlight> signalled_;
  Observer observer_;
  Acted acted_;
  std::vector<Command> out_;
};

}  // namespace recycler::engine
