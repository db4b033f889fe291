// The fast path for memory spikes against real cgroups (v1 here, v2 in the
// VM): a child process in a test cgroup allocates on command while a libuv
// loop waits for the kernel's notification.
#include <dirent.h>
#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <uv.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "supervisor/probe/memory_watch.h"
#include "supervisor/util/uv.h"
#include "tests/support/itest.h"
#include "tests/support/log_capture.h"

namespace recycler::testing {
namespace {

using probe::MemoryWatch;
using Clock = std::chrono::steady_clock;
using Ms = std::chrono::duration<double, std::milli>;

constexpr uint64_t kMiB = 1 << 20;
constexpr uint64_t kThreshold = 64 * kMiB;
// Below the threshold with room for what the kernel charges besides (page
// tables, per-CPU charge batches), and the step that then crosses it. Small
// steps over: v2 throttles a cgroup over memory.high, steeply.
constexpr int kBelowMiB = 60;
constexpr int kOverStepMiB = 5;

// One libuv loop per test. Every handle must be closed by the end.
class Loop {
 public:
  Loop() { uv_loop_init(&loop_); }
  ~Loop() {
    uv_run(&loop_, UV_RUN_NOWAIT);  // completes the closing of handles
    EXPECT_EQ(uv_loop_close(&loop_), 0) << "a handle was left open on the loop";
  }
  Loop(const Loop&) = delete;
  Loop& operator=(const Loop&) = delete;

  uv_loop_t* get() { return &loop_; }

  // Runs the loop until `done` holds or the (scaled) deadline passes.
  bool run_until(const std::function<bool()>& done, Millis timeout) {
    bool expired = false;
    auto* timer = new uv_timer_t;
    uv_timer_init(&loop_, timer);
    timer->data = &expired;
    uv::Handle<uv_timer_t> deadline(timer);
    uv_timer_start(
        timer,
        [](uv_timer_t* t) {
          if (t->data) *static_cast<bool*>(t->data) = true;
        },
        static_cast<uint64_t>(scaled(timeout).count()), 0);
    while (!done() && !expired) uv_run(&loop_, UV_RUN_ONCE);
    return done();
  }

  // Handles whatever is ready now, without waiting.
  void run_ready() { uv_run(&loop_, UV_RUN_NOWAIT); }

 private:
  uv_loop_t loop_;
};

// A cgroup of the test's own, with the O_PATH fd the supervisor would hold.
// The Sandbox removes whatever is left of it, processes included.
class TestCgroup {
 public:
  TestCgroup(const std::string& parent, const std::string& name) : path_(parent + "/" + name) {
    if (::mkdir(path_.c_str(), 0755) != 0)
      ADD_FAILURE() << "mkdir " << path_ << ": " << std::strerror(errno);
    dirfd_.reset(::open(path_.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
  }
  ~TestCgroup() { ::rmdir(path_.c_str()); }
  TestCgroup(const TestCgroup&) = delete;
  TestCgroup& operator=(const TestCgroup&) = delete;

  const std::string& path() const { return path_; }
  int dirfd() const { return dirfd_.get(); }

 private:
  std::string path_;
  UniqueFd dirfd_;
};

// A child process in a cgroup that allocates and touches memory when told,
// so that the test decides the cgroup's usage. Killed and reaped at the end.
class Hog {
 public:
  explicit Hog(const TestCgroup& cgroup) {
    // Touched here first, so charged to the test's cgroup, not the hog's.
    void* shared = ::mmap(nullptr, kStamps * sizeof(int64_t), PROT_READ | PROT_WRITE,
                          MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (shared != MAP_FAILED) {
      stamps_ = static_cast<int64_t*>(shared);
      std::fill_n(stamps_, kStamps, 0);
    }
    UniqueFd procs(::open((cgroup.path() + "/cgroup.procs").c_str(), O_WRONLY | O_CLOEXEC));
    int cmd[2], ack[2];
    if (!stamps_ || !procs || ::pipe2(cmd, O_CLOEXEC) != 0 || ::pipe2(ack, O_CLOEXEC) != 0) {
      ADD_FAILURE() << "cannot set up the hog: " << std::strerror(errno);
      return;
    }
    pid_t parent = ::getpid();
    pid_ = ::fork();
    if (pid_ == 0) {
      ::close(cmd[1]);
      ::close(ack[0]);
      serve(parent, procs.get(), cmd[0], ack[1], stamps_);
    }
    ::close(cmd[0]);
    ::close(ack[1]);
    cmd_.reset(cmd[1]);
    ack_.reset(ack[0]);
    if (pid_ < 0) ADD_FAILURE() << "fork: " << std::strerror(errno);
  }
  ~Hog() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);  // not reaped yet, so still ours
      ::waitpid(pid_, nullptr, 0);
    }
    if (stamps_) ::munmap(stamps_, kStamps * sizeof(int64_t));
  }
  Hog(const Hog&) = delete;
  Hog& operator=(const Hog&) = delete;

  // Asks for `mib` more MiB, or with 0 to release everything; does not wait.
  void send(int32_t mib) {
    if (::write(cmd_.get(), &mib, sizeof mib) != sizeof mib)
      ADD_FAILURE() << "cannot reach the hog: " << std::strerror(errno);
  }
  // Waits for the hog to have done what it was asked.
  bool acked(Millis timeout = 20s) {
    pollfd p{ack_.get(), POLLIN, 0};
    char byte;
    return ::poll(&p, 1, static_cast<int>(scaled(timeout).count())) == 1 &&
           ::read(ack_.get(), &byte, 1) == 1;
  }
  bool grow(int32_t mib) {
    send(mib);
    return acked();
  }
  bool release() { return grow(0); }

  // When the hog began touching page `i` of what it was last asked for.
  Clock::time_point began_page(size_t i) const {
    return Clock::time_point(Clock::duration(stamps_[std::min(i, kStamps - 1)]));
  }

 private:
  static constexpr size_t kStamps = 64 * kMiB / 4096;  // pages of 4 KiB, or fewer larger ones

  // Makes each page of `p` resident, so charged to the cgroup, noting when
  // it began each one. Not instrumented: AddressSanitizer's check of each
  // store reads the shadow of the page, and the kernel charges those shadow
  // pages too (7.5 MiB more for 60 MiB touched, seen on Linux 6.18), which
  // would put the usage over the threshold the test means to stay under.
  __attribute__((no_sanitize("address"))) static void touch(char* p, size_t size, size_t page,
                                                            int64_t* stamps) {
    for (size_t i = 0; i * page < size; ++i) {
      if (i < kStamps) stamps[i] = Clock::now().time_since_epoch().count();
      p[i * page] = 1;
    }
  }

  // The child: joins the cgroup, then serves requests until the pipe closes.
  [[noreturn]] static void serve(pid_t parent, int procs, int cmd, int ack, int64_t* stamps) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    ::prctl(PR_SET_THP_DISABLE, 1, 0, 0, 0);  // charged page by page, not 2 MiB at once
    if (::getppid() != parent || ::write(procs, "0", 1) != 1) ::_exit(3);
    ::close(procs);
    constexpr int kMaxRegions = 64;
    void* regions[kMaxRegions];
    size_t sizes[kMaxRegions];
    int held = 0;
    auto page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
    int32_t mib;
    while (::read(cmd, &mib, sizeof mib) == sizeof mib) {
      if (mib == 0) {
        for (; held > 0; --held) ::munmap(regions[held - 1], sizes[held - 1]);
      } else if (held < kMaxRegions) {
        size_t size = static_cast<size_t>(mib) * kMiB;
        void* p = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED) ::_exit(4);
        touch(static_cast<char*>(p), size, page, stamps);
        regions[held] = p;
        sizes[held++] = size;
      }
      if (::write(ack, "", 1) != 1) ::_exit(5);
    }
    ::_exit(0);
  }

  int64_t* stamps_ = nullptr;
  pid_t pid_ = -1;
  UniqueFd cmd_;
  UniqueFd ack_;
};

// Open fds of this process: all of them, and the two kinds the watches use.
struct FdCount {
  int total = 0, inotify = 0, eventfd = 0;
};
FdCount count_fds() {
  FdCount n;
  DIR* d = ::opendir("/proc/self/fd");
  if (!d) return n;
  while (dirent* e = ::readdir(d)) {
    if (e->d_name[0] == '.') continue;
    char target[256];
    ssize_t len = ::readlinkat(::dirfd(d), e->d_name, target, sizeof target - 1);
    if (len < 0) continue;
    std::string link(target, static_cast<size_t>(len));
    ++n.total;
    n.inotify += link == "anon_inode:inotify";
    n.eventfd += link == "anon_inode:[eventfd]";
  }
  ::closedir(d);
  return n;
}

class MemoryWatchTest : public ::testing::Test {
 protected:
  void SetUp() override {
    RECYCLER_REQUIRE_CGROUPS();
    sb_.emplace();
    base_ = sb_->root_dir("memory");
    // v2: a child of the delegated cgroup, with the memory controller
    // enabled for its parent's children and its own (the test cgroups).
    std::string parent = base_.substr(0, base_.rfind('/'));
    if (sb_->v2()) {
      ASSERT_TRUE(write_file(parent + "/cgroup.subtree_control", "+memory"));
    }
    ASSERT_EQ(::mkdir(base_.c_str(), 0755), 0) << base_ << ": " << std::strerror(errno);
    if (sb_->v2()) {
      ASSERT_TRUE(write_file(base_ + "/cgroup.subtree_control", "+memory"));
    }
  }

  bool v2() const { return sb_->v2(); }
  const std::string& base() const { return base_; }

  Result<std::unique_ptr<MemoryWatch>> watch(const TestCgroup& cg, std::function<void()> on_cross) {
    return MemoryWatch::create(loop_.get(), cg.dirfd(), v2(), kThreshold, std::move(on_cross));
  }

  // What the kernel charges the cgroup now, bytes.
  uint64_t usage(const TestCgroup& cg) const {
    std::string text = read_text(cg.path() + (v2() ? "/memory.current" : "/memory.usage_in_bytes"));
    return std::strtoull(text.c_str(), nullptr, 10);
  }

  // v2: how often the cgroup went over memory.high, counted by the kernel in
  // the charging task itself, before the hog answers.
  uint64_t high_events(const TestCgroup& cg) const {
    return find_keyed_value(read_text(cg.path() + "/memory.events"), "high").value_or(0);
  }

  std::optional<Sandbox> sb_;  // first: removes the cgroups after everything else is gone
  std::string base_;
  Loop loop_;
};

TEST_F(MemoryWatchTest, CrossingTheThresholdUpwardCallsBackWithinMilliseconds) {
  TestCgroup cg(base(), "cross");
  Hog hog(cg);
  int calls = 0;
  Clock::time_point called_at;
  auto w = watch(cg, [&] {
    if (calls++ == 0) called_at = Clock::now();
  });
  ASSERT_TRUE(w.ok()) << w.error().message;
  ASSERT_TRUE(hog.grow(kBelowMiB));
  loop_.run_ready();
  ASSERT_EQ(calls, 0);
  uint64_t before = usage(cg);
  ASSERT_LT(before, kThreshold);
  uint64_t below = kThreshold - before;

  Clock::time_point asked = Clock::now();
  hog.send(kOverStepMiB);
  ASSERT_TRUE(loop_.run_until([&] { return calls > 0; }, 5s)) << "no callback within 5 s";
  ASSERT_TRUE(hog.acked());
  // The kernel charges in batches of 64 pages, so the usage went over at
  // most 64 pages before the page that filled the gap: measured from there.
  size_t gap_pages = below / static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
  Clock::time_point crossed = hog.began_page(gap_pages > 64 ? gap_pages - 64 : 0);
  Ms latency = called_at - crossed;
  std::printf(
      "[ latency  ] cgroup %s: on_cross %.2f ms after the usage crossed the threshold (%.2f ms "
      "after the hog, %.2f MiB below it, was asked for %d MiB more)\n",
      v2() ? "v2" : "v1", latency.count(), Ms(called_at - asked).count(),
      static_cast<double>(below) / kMiB, kOverStepMiB);
  RecordProperty("latency_us", static_cast<int>(latency.count() * 1000));
  EXPECT_LT(latency, scaled(100ms)) << "the sampling tick (1 s) would have been as fast";
}

TEST_F(MemoryWatchTest, StayingUnderTheThresholdNeverCallsBack) {
  TestCgroup cg(base(), "under");
  Hog hog(cg);
  int calls = 0;
  auto w = watch(cg, [&] { ++calls; });
  ASSERT_TRUE(w.ok()) << w.error().message;
  ASSERT_TRUE(hog.grow(kBelowMiB / 2));
  ASSERT_TRUE(hog.grow(kBelowMiB / 2));
  ASSERT_TRUE(hog.release());
  ASSERT_TRUE(hog.grow(kBelowMiB));
  // v1 signals from the charging task, before the hog answers; v2 counts
  // there too, so a crossing would show in memory.events by now.
  if (v2()) {
    EXPECT_EQ(high_events(cg), 0u);
  }
  loop_.run_ready();
  EXPECT_EQ(calls, 0);
}

TEST_F(MemoryWatchTest, ABurstOfKernelEventsRunsTheCallbackOncePerLoopWakeUp) {
  TestCgroup cg(base(), "burst");
  Hog hog(cg);
  // A check handle runs once per loop iteration: it numbers the wake-ups.
  int wakeups = 0;
  auto* check = new uv_check_t;
  uv_check_init(loop_.get(), check);
  check->data = &wakeups;
  uv::Handle<uv_check_t> counter(check);
  uv_check_start(check, [](uv_check_t* h) {
    if (h->data) ++*static_cast<int*>(h->data);
  });
  std::vector<int> called_in;
  auto w = watch(cg, [&] { called_in.push_back(wakeups); });
  ASSERT_TRUE(w.ok()) << w.error().message;

  // The loop does not run meanwhile: up over the threshold, down, and up
  // again (v1 signals every crossing; v2 counts a "high" event for every
  // charge over memory.high).
  for (int round = 0; round < 2; ++round) {
    ASSERT_TRUE(hog.grow(kBelowMiB));
    ASSERT_TRUE(hog.grow(kOverStepMiB));
    ASSERT_TRUE(hog.release());
  }
  ASSERT_TRUE(hog.grow(kBelowMiB));
  ASSERT_TRUE(hog.grow(kOverStepMiB));
  if (v2()) {
    EXPECT_GT(high_events(cg), 1u);
  } else {  // the eventfd was signalled five times before the hog answered
    loop_.run_ready();
    EXPECT_EQ(called_in.size(), 1u);
  }
  ASSERT_TRUE(loop_.run_until([&] { return !called_in.empty(); }, 5s));
  loop_.run_ready();
  for (size_t i = 1; i < called_in.size(); ++i)
    EXPECT_NE(called_in[i], called_in[i - 1]) << "two calls in one wake-up";
}

TEST_F(MemoryWatchTest, OnV2MemoryHighBecomesTheThreshold) {
  if (!v2()) GTEST_SKIP() << "memory.high is cgroup v2's";
  TestCgroup cg(base(), "high");
  auto w = watch(cg, [] {});
  ASSERT_TRUE(w.ok()) << w.error().message;
  EXPECT_EQ((*w)->threshold(), kThreshold);
  EXPECT_EQ(read_text(cg.path() + "/memory.high"), std::to_string(kThreshold) + "\n");
}

TEST_F(MemoryWatchTest, OnV2ALowerMemoryHighIsLeftAlone) {
  if (!v2()) GTEST_SKIP() << "memory.high is cgroup v2's";
  TestCgroup cg(base(), "lower");
  ASSERT_TRUE(write_file(cg.path() + "/memory.high", std::to_string(8 * kMiB)));
  auto w = watch(cg, [] {});
  ASSERT_TRUE(w.ok()) << w.error().message;
  EXPECT_EQ(read_text(cg.path() + "/memory.high"), std::to_string(8 * kMiB) + "\n");
}

TEST_F(MemoryWatchTest, RemovingAWatchedCgroupIsQuiet) {
  LogCapture log;
  TestCgroup gone(base(), "gone");
  int gone_calls = 0;
  auto gone_watch = watch(gone, [&] { ++gone_calls; });
  ASSERT_TRUE(gone_watch.ok()) << gone_watch.error().message;
  TestCgroup other(base(), "other");
  Hog hog(other);
  int other_calls = 0;
  auto other_watch = watch(other, [&] { ++other_calls; });
  ASSERT_TRUE(other_watch.ok()) << other_watch.error().message;

  ASSERT_EQ(::rmdir(gone.path().c_str()), 0) << std::strerror(errno);
  if (!v2()) {  // v1 signals the eventfd once more when the cgroup goes (cgroup-v1/cgroups.rst)
    EXPECT_TRUE(loop_.run_until([&] { return gone_calls > 0; }, 5s));
  }
  // Then a crossing next door: on v2 it comes through the same inotify fd,
  // after whatever the removal queued there.
  ASSERT_TRUE(hog.grow(kBelowMiB));
  hog.send(kOverStepMiB);
  ASSERT_TRUE(loop_.run_until([&] { return other_calls > 0; }, 5s));
  loop_.run_ready();
  EXPECT_LE(gone_calls, 1);
  gone_watch->reset();
  EXPECT_TRUE(log.lines.empty()) << log.all();
}

TEST_F(MemoryWatchTest, FiftyWatchesOnOneLoopTakeOneInotifyFdOnV2AndAnEventfdEachOnV1) {
  constexpr int kWatches = 50;
  std::vector<std::unique_ptr<TestCgroup>> cgroups;
  for (int i = 0; i < kWatches; ++i) {
    // Appended, not "w" + to_string(i): GCC 12 -O2 warns falsely (-Wrestrict) there.
    std::string name = "w";
    name += std::to_string(i);
    cgroups.push_back(std::make_unique<TestCgroup>(base(), name));
  }
  FdCount before = count_fds();
  std::vector<int> calls(kWatches, 0);
  std::vector<std::unique_ptr<MemoryWatch>> watches;
  for (int i = 0; i < kWatches; ++i) {
    auto w =
        watch(*cgroups[static_cast<size_t>(i)], [&calls, i] { ++calls[static_cast<size_t>(i)]; });
    ASSERT_TRUE(w.ok()) << w.error().message;
    watches.push_back(std::move(*w));
  }
  FdCount after = count_fds();
  std::printf("[ fds      ] %d watches: %d more fds (%d inotify, %d eventfd)\n", kWatches,
              after.total - before.total, after.inotify - before.inotify,
              after.eventfd - before.eventfd);
  if (v2()) {
    EXPECT_EQ(after.inotify - before.inotify, 1);
    EXPECT_EQ(after.total - before.total, 1);
  } else {
    EXPECT_EQ(after.eventfd - before.eventfd, kWatches);
    EXPECT_EQ(after.total - before.total, kWatches);
  }

  {  // Each watch still hears its own cgroup, and only it.
    constexpr size_t kLoud = 37;
    Hog hog(*cgroups[kLoud]);
    ASSERT_TRUE(hog.grow(kBelowMiB));
    hog.send(kOverStepMiB);
    ASSERT_TRUE(loop_.run_until([&] { return calls[kLoud] > 0; }, 5s));
    loop_.run_ready();
    for (size_t i = 0; i < calls.size(); ++i) {
      if (i != kLoud) {
        EXPECT_EQ(calls[i], 0) << "watch " << i;
      }
    }
  }
  watches.clear();
  EXPECT_EQ(count_fds().total, before.total) << "every watch gave its fds back";
}

TEST_F(MemoryWatchTest, AWatchOutsideACgroupFailsWithTheReason) {
  UniqueFd dir(::open(sb_->tmp().c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
  FdCount before = count_fds();
  auto w = MemoryWatch::create(loop_.get(), dir.get(), v2(), kThreshold, [] {});
  ASSERT_FALSE(w.ok());
  EXPECT_THAT(w.error().message, ::testing::HasSubstr("memory."));
  EXPECT_EQ(count_fds().total, before.total) << "nothing left open";
}

}  // namespace
}  // namespace recycler::testing
