// Fakes for the worker lifecycle's seams: a hand-driven clock with timers, a
// launcher whose processes exit when the test says so, and a cgroup whose
// processes and OOM counter the test controls.
#pragma once

#include <algorithm>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "supervisor/cgroup/cgroup.h"
#include "supervisor/process/process.h"
#include "supervisor/util/timers.h"

namespace recycler::testing {

class FakeTimers final : public Timers {
 public:
  TimePoint now() const override { return now_; }

  std::unique_ptr<Timer> after(Duration delay, std::function<void()> fire) override {
    auto entry = std::make_shared<Entry>(Entry{now_ + delay, seq_++, std::move(fire), true});
    entries_.push_back(entry);
    return std::make_unique<Handle>(entry);
  }

  // Moves time forward, firing due timers in order (each at its own deadline).
  void advance(Duration d) {
    TimePoint until = now_ + d;
    for (;;) {
      std::shared_ptr<Entry> next;
      for (auto& e : entries_)
        if (e->live && e->deadline <= until &&
            (!next || std::tie(e->deadline, e->seq) < std::tie(next->deadline, next->seq)))
          next = e;
      if (!next) break;
      now_ = std::max(now_, next->deadline);
      next->live = false;
      auto fire = std::move(next->fire);
      fire();
    }
    now_ = until;
    std::erase_if(entries_, [](auto& e) { return !e->live; });
  }

  // The delay of the one pending timer (tests of backoff read it).
  std::optional<Duration> pending_delay() const {
    std::optional<Duration> out;
    for (auto& e : entries_)
      if (e->live) {
        auto d = std::chrono::duration_cast<Duration>(e->deadline - now_);
        if (!out || d < *out) out = d;
      }
    return out;
  }
  size_t pending() const {
    return std::count_if(entries_.begin(), entries_.end(), [](auto& e) { return e->live; });
  }

 private:
  struct Entry {
    TimePoint deadline;
    uint64_t seq;
    std::function<void()> fire;
    bool live;
  };
  struct Handle final : Timer {
    explicit Handle(std::shared_ptr<Entry> e) : entry(std::move(e)) {}
    ~Handle() override { entry->live = false; }
    std::shared_ptr<Entry> entry;
  };

  TimePoint now_{std::chrono::hours(1)};
  uint64_t seq_ = 0;
  std::vector<std::shared_ptr<Entry>> entries_;
};

class FakeLauncher final : public Launcher {
 public:
  struct Launched {
    pid_t pid;
    LaunchSpec spec;
    std::vector<int> signals;  // what the worker sent, in order
    ExitCallback on_exit;
    bool exited = false;
  };

  // What a launch fails with when fail_next is set.
  Error fail_error{"fake: exec failed", 2};

  Result<std::unique_ptr<Process>> launch(LaunchSpec spec, OutputTag,
                                          ExitCallback on_exit) override {
    if (fail_next) {
      fail_next = false;
      return fail_error;
    }
    auto l =
        std::make_shared<Launched>(Launched{next_pid_++, std::move(spec), {}, std::move(on_exit)});
    launched.push_back(l);
    return std::unique_ptr<Process>(std::make_unique<FakeProcess>(l));
  }

  // A process the worker attached to (attach()): exists while the test says
  // so; `exit()` runs the worker's callback.
  struct Attached {
    pid_t pid;
    std::vector<int> signals;
    std::function<void()> on_exit;
    bool exited = false;
    void exit() {
      exited = true;
      if (auto cb = std::exchange(on_exit, nullptr)) cb();
    }
  };

  Result<std::unique_ptr<Process>> attach(pid_t pid, std::function<void()> on_exit) override {
    if (std::find(alive.begin(), alive.end(), pid) == alive.end())
      return Error{"fake: no such process", ESRCH};
    auto a = std::make_shared<Attached>(Attached{pid, {}, std::move(on_exit)});
    attached[pid] = a;
    return std::unique_ptr<Process>(std::make_unique<FakeAttached>(a));
  }

  Launched& last() { return *launched.back(); }
  // The process exits: the worker hears about it as from a reaped child.
  void exit_last(ExitStatus status) {
    Launched& l = last();
    l.exited = true;
    auto cb = std::move(l.on_exit);
    cb(status);
  }

  std::vector<std::shared_ptr<Launched>> launched;
  bool fail_next = false;
  std::vector<pid_t> alive;  // processes attach() finds
  std::map<pid_t, std::shared_ptr<Attached>> attached;

 private:
  class FakeProcess final : public Process {
   public:
    explicit FakeProcess(std::shared_ptr<Launched> l) : l_(std::move(l)) {}
    pid_t pid() const override { return l_->pid; }
    bool signal(int sig) override {
      if (l_->exited) return false;
      l_->signals.push_back(sig);
      return true;
    }

   private:
    std::shared_ptr<Launched> l_;
  };
  class FakeAttached final : public Process {
   public:
    explicit FakeAttached(std::shared_ptr<Attached> a) : a_(std::move(a)) {}
    pid_t pid() const override { return a_->pid; }
    bool signal(int sig) override {
      if (a_->exited) return false;
      a_->signals.push_back(sig);
      return true;
    }

   private:
    std::shared_ptr<Attached> a_;
  };

  pid_t next_pid_ = 1000;
};

// Shared state the test keeps after handing the cgroup to a Worker.
struct FakeCgroupState {
  std::vector<pid_t> pids;
  uint64_t oom_kills = 0;
  int kill_all_calls = 0;
  bool kill_empties = true;  // kill_all() leaves the cgroup empty
  bool removed = false;
  pid_t adopted = 0;
};

class FakeCgroup final : public cgroup::WorkerCgroup {
 public:
  explicit FakeCgroup(std::shared_ptr<FakeCgroupState> s) : s_(std::move(s)) {}
  std::string path() const override { return "/fake/cgroup"; }
  std::vector<UniqueFd> open_join_fds() override { return {}; }
  void adopt(pid_t pid) override { s_->adopted = pid; }
  std::vector<pid_t> pids() const override { return s_->pids; }
  bool populated() const override { return !s_->pids.empty(); }
  void kill_all() override {
    ++s_->kill_all_calls;
    if (s_->kill_empties) s_->pids.clear();
  }
  std::optional<uint64_t> oom_kills() const override { return s_->oom_kills; }
  bool enforcing() const override { return true; }
  std::optional<MemoryDir> memory_dir() const override { return std::nullopt; }
  Status remove() override {
    s_->removed = true;
    return Ok{};
  }

 private:
  std::shared_ptr<FakeCgroupState> s_;
};

}  // namespace recycler::testing
