// A surge (recycle.mode: surge): the next generation of a slot starts beside
// the running one, in the slot's other cgroup (its variant), with the same
// listening sockets; once it is ready (READY=1 from it or from a child of
// it, or recycle.ready_after) it becomes the slot's main process, a new
// run, and the old generation stops gracefully beside it ("retiring"). A
// next generation that exits or is not ready within recycle.ready_timeout
// is stopped and the old one serves on; the surge is tried again after the
// restart backoff, and after restart.crash_loop failures the slot is
// recycled by restart instead. Never three generations at once.
//
// The worker (worker.h) owns one and talks to it through SurgeHost: what a
// surge needs of the slot's main generation, and nothing more.
#pragma once

#include <sys/types.h>

#include <functional>
#include <memory>
#include <optional>
#include <random>
#include <string>

#include "supervisor/cgroup/cgroup.h"
#include "supervisor/config/config.h"
#include "supervisor/engine/vocabulary.h"
#include "supervisor/process/process.h"
#include "supervisor/util/timers.h"
#include "supervisor/worker/drain.h"
#include "supervisor/worker/environment.h"
#include "supervisor/worker/restart_backoff.h"

namespace recycler {

// Makes the slot's cgroup number `variant` (0 or 1): a surge runs the next
// generation in the variant the current one does not use.
using CgroupFactory =
    std::function<Result<std::unique_ptr<cgroup::WorkerCgroup>>(unsigned variant)>;

// One generation of a slot: its main process, the cgroup it runs in (one
// of the slot's two variants), and what it started with.
struct GenerationRun {
  std::unique_ptr<Process> process;
  std::unique_ptr<cgroup::WorkerCgroup> cgroup;
  unsigned variant = 0;
  unsigned generation = 0;
  TimePoint started{};
  std::optional<uint64_t> oom_kills_at_start;  // its cgroup's count when it started

  // The kernel OOM-killed a process of its cgroup since it started.
  bool oom_killed() const {
    std::optional<uint64_t> now = cgroup->oom_kills();
    return now && oom_kills_at_start && *now > *oom_kills_at_start;
  }
};

// A generation of a slot beside its main one: the next one of a surge, or
// the one a surge replaced while it stops.
struct SideGeneration : GenerationRun {
  std::unique_ptr<Timer> timer;  // ready/timeout, stop escalation, then the drain poll
  bool stopping = false;         // the stop signal went out
};

class SurgeHost {
 public:
  // The slot's main generation, as a surge sees it.
  struct Main {
    bool running = false;            // WorkerState::Running
    bool stopping_for_good = false;  // stop() or kill() was asked
    unsigned generation = 0;
    unsigned variant = 0;  // of its cgroup
    pid_t pid = 0;         // 0: none
  };
  virtual Main main_generation() const = 0;
  // Starts `generation` of the slot in `cgroup`, a replacement with `cause`
  // (none: a start).
  virtual Result<std::unique_ptr<Process>> launch(unsigned generation,
                                                  const std::optional<RecycleCause>& cause,
                                                  cgroup::WorkerCgroup& cgroup) = 0;
  // `next` becomes the main generation, a run that followed a recycle with
  // `cause`; the main generation it replaces comes back, to retire. Then,
  // once the old one has been asked to stop, begin_run(): the new run's
  // state change.
  virtual std::unique_ptr<SideGeneration> take_over(std::unique_ptr<SideGeneration> next,
                                                    const RecycleCause& cause) = 0;
  virtual void begin_run() = 0;
  // The surge gave up: the slot is recycled by restart, with `cause`.
  virtual void recycle_by_restart(RecycleCause cause) = 0;
  // A stop was waiting for the generations beside the main one: both are gone.
  virtual void sides_gone() = 0;

 protected:
  ~SurgeHost() = default;
};

class Surge {
 public:
  // `name`, `slot` and `program` are the worker's (they outlive this);
  // `make_cgroup` null: the program cannot surge (recycled by restart).
  Surge(SurgeHost& host, Timers& timers, std::mt19937_64& rng, const config::ProgramConfig& program,
        const std::string& name, unsigned slot, CgroupFactory make_cgroup);
  ~Surge();  // kills what runs beside the main generation and removes its cgroups
  Surge(const Surge&) = delete;
  Surge& operator=(const Surge&) = delete;

  // recycle.mode surge, and a way to make the other cgroup.
  bool enabled() const;
  // A surge with `cause`, after `delay` (or once the last one's old
  // generation has gone); nothing when one is asked or under way already.
  void request(Duration delay, RecycleCause cause);
  // Asked (and not yet ready, given up or ended).
  bool asked() const { return cause_.has_value(); }
  // Asked or under way: a stop or the main process's exit must end it.
  bool active() const { return cause_ || next_; }
  // A generation runs or drains beside the main one.
  bool busy() const { return next_ || retiring_; }
  // Ends it: the next generation goes at once (with `all`, a kill, whatever
  // is left of the retiring one too); nothing more is asked.
  void kill(bool all);
  // A stop is over once both sides have drained: host.sides_gone() then.
  void finish_when_gone() { finish_when_gone_ = true; }

  // READY=1 from `pid`: the end of the wait when it belongs to the next generation.
  void notified_ready(pid_t pid);
  // The exit of the main process of `generation`: true when it was one of
  // the generations beside the main one (handled here).
  bool exited(unsigned generation, ExitStatus status);

  std::optional<pid_t> next_pid() const;
  std::optional<pid_t> retiring_pid() const;
  unsigned next_generation() const { return next_ ? next_->generation : 0; }
  engine::Generation generation_in(unsigned variant) const;

  // How long a drain waits for a cgroup to empty after SIGKILL, at most, and how often it looks.
  static constexpr Duration kDrainTimeout = kCgroupDrainTimeout;
  static constexpr Duration kDrainPoll = kCgroupDrainPoll;

 private:
  void begin();
  void start_next(std::unique_ptr<SideGeneration> side, const SurgeHost::Main& main);
  void ready(const std::string& how);
  void failed(const std::string& why);
  void retry();
  void give_up();
  void stop_side(SideGeneration& side);
  void side_exited(std::unique_ptr<SideGeneration>& side, const char* which, ExitStatus status);
  void drain_side(std::unique_ptr<SideGeneration>* side, TimePoint deadline);
  void remove_side(std::unique_ptr<SideGeneration>* side);

  SurgeHost& host_;
  Timers& timers_;
  std::mt19937_64& rng_;
  const config::ProgramConfig& program_;
  const std::string& name_;
  unsigned slot_;
  CgroupFactory make_cgroup_;
  std::optional<RecycleCause> cause_;  // while a surge is asked or under way
  std::unique_ptr<SideGeneration> next_;
  std::unique_ptr<SideGeneration> retiring_;
  std::unique_ptr<Timer> timer_;  // the delay before a surge (or its retry)
  bool finish_when_gone_ = false;
  RestartBackoff backoff_;
  CrashLoopDetector failures_;
};

}  // namespace recycler
