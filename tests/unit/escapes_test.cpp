// EscapeTracker against a fake /proc tree and a fake cgroup layer: which
// processes below recycler have left their worker, and whose they were.
#include "supervisor/process/escapes.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <filesystem>
#include <fstream>
#include <map>

#include "tests/support/log_capture.h"

namespace recycler {
namespace {

namespace fs = std::filesystem;
using cgroup::WorkerId;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using testing::LogCapture;
using ::testing::SizeIs;

constexpr pid_t kRecycler = 100;

class FakeManager final : public cgroup::Manager {
 public:
  const cgroup::Layout& layout() const override { return layout_; }
  bool enforcing() const override { return true; }
  Result<std::unique_ptr<cgroup::WorkerCgroup>> create(const std::string&, unsigned,
                                                       const config::Limits&, unsigned) override {
    return Error{"not here"};
  }
  void remove_program(const std::string&) override {}
  void close() override {}
  std::optional<WorkerId> owner_of(pid_t pid) const override {
    auto it = owners.find(pid);
    if (it == owners.end()) return std::nullopt;
    return it->second;
  }

  std::map<pid_t, WorkerId> owners;  // the processes inside a worker

 private:
  cgroup::Layout layout_;
};

class Escapes : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/recycler-escapes-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    proc_ = tmpl;
    process(kRecycler, 1, 1, "recycler");
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(proc_, ec);
  }
  // A process in the fake /proc: its parent and session (and kernel flags).
  void process(pid_t pid, pid_t ppid, pid_t session, const std::string& comm, uint64_t start = 1000,
               unsigned flags = 0) {
    fs::create_directories(proc_ + "/" + std::to_string(pid));
    std::ofstream(proc_ + "/" + std::to_string(pid) + "/stat")
        << pid << " (" << comm << ") S " << ppid << " " << session << " " << session << " 0 -1 "
        << flags << " 0 0 0 0 0 0 0 0 20 0 1 0 " << start << " 0 0\n";
    std::ofstream(proc_ + "/" + std::to_string(pid) + "/comm") << comm << "\n";
  }
  void gone(pid_t pid) { fs::remove_all(proc_ + "/" + std::to_string(pid)); }

  LogCapture log;
  std::string proc_;
  FakeManager cgroups;
};

TEST_F(Escapes, ProcessesInsideTheirWorkersAreNoEscapees) {
  process(200, kRecycler, 200, "gunicorn");
  process(201, 200, 200, "gunicorn");
  cgroups.owners = {{200, {"web", 0}}, {201, {"web", 0}}};
  EscapeTracker t(proc_, kRecycler, cgroups);
  t.scan();
  EXPECT_EQ(t.escapees(), 0u);
  EXPECT_THAT(log.matching("left"), IsEmpty());
}

TEST_F(Escapes, AChildOutsideIsAttributedToItsNearestAncestorInAWorkerAndReportedOnce) {
  process(200, kRecycler, 200, "sh");
  process(300, 200, 300, "miner");  // setsid, then left the cgroup
  cgroups.owners = {{200, {"web", 1}}};
  EscapeTracker t(proc_, kRecycler, cgroups);
  t.scan();
  t.scan();
  EXPECT_EQ(t.escapees(), 1u);
  ASSERT_THAT(log.matching("has left its cgroup"), SizeIs(1)) << "once";
  EXPECT_THAT(log.matching("has left its cgroup")[0],
              HasSubstr("web[1]: pid 300 (miner) has left its cgroup"));
}

TEST_F(Escapes, AnOrphanIsAttributedToTheWorkerItWasLastSeenIn) {
  process(200, kRecycler, 200, "sh");
  process(300, 200, 300, "daemon");
  cgroups.owners = {{200, {"web", 0}}, {300, {"web", 0}}};
  EscapeTracker t(proc_, kRecycler, cgroups);
  t.scan();
  // Its parent dies, it comes back to recycler (the subreaper), and it leaves.
  gone(200);
  process(300, kRecycler, 300, "daemon");
  cgroups.owners.clear();
  t.scan();
  EXPECT_THAT(log.all(), HasSubstr("web[0]: pid 300 (daemon) has left its cgroup"));
}

TEST_F(Escapes, AnOrphanNeverSeenIsAttributedByTheSessionOfTheRunThatStartedIt) {
  EscapeTracker t(proc_, kRecycler, cgroups);
  t.started({"train", 0}, 200);  // its main process, long gone
  process(300, kRecycler, 200, "leftover");
  t.scan();
  EXPECT_THAT(log.all(), HasSubstr("train[0]: pid 300 (leftover) has left its cgroup"));
}

TEST_F(Escapes, WhatCannotBeAttributedIsStillReported) {
  process(300, kRecycler, 300, "stray");
  EscapeTracker t(proc_, kRecycler, cgroups);
  t.scan();
  EXPECT_THAT(log.all(),
              HasSubstr("pid 300 (stray), started by a worker, is in no worker's cgroup; it will "
                        "be killed when recycler stops"));
}

TEST_F(Escapes, AnExitingProcessHasLeftItsCgroupButNotEscaped) {
  // The kernel takes an exiting process out of its cgroup before it is a
  // zombie: a worker stopping at the moment of a scan is no escapee.
  process(200, kRecycler, 200, "worker", 1000, 0x4);  // PF_EXITING
  EscapeTracker t(proc_, kRecycler, cgroups);
  t.started({"web", 0}, 200);
  t.scan();
  EXPECT_EQ(t.escapees(), 0u);
  EXPECT_THAT(log.matching("left"), IsEmpty());
}

TEST_F(Escapes, ProcessesOutsideRecyclersTreeAreNotItsBusiness) {
  process(1, 0, 1, "init");
  process(400, 1, 400, "sshd");
  process(401, 400, 401, "bash");
  EscapeTracker t(proc_, kRecycler, cgroups);
  t.scan();
  EXPECT_EQ(t.escapees(), 0u);
}

TEST_F(Escapes, AnEscapeeThatIsGoneIsForgottenAndAReusedPidIsNew) {
  process(200, kRecycler, 200, "sh");
  process(300, 200, 300, "miner", 1000);
  cgroups.owners = {{200, {"web", 0}}};
  EscapeTracker t(proc_, kRecycler, cgroups);
  t.scan();
  gone(300);
  t.scan();
  EXPECT_EQ(t.escapees(), 0u);
  process(300, 200, 300, "other", 2000);  // the pid again, another process
  t.scan();
  EXPECT_THAT(log.matching("has left its cgroup"), SizeIs(2));
}

TEST_F(Escapes, KillsAWorkersEscapeesButNeverAProcessThatReusedTheirPid) {
  pid_t child = ::fork();
  if (child == 0) {
    ::pause();
    ::_exit(0);
  }
  ASSERT_GT(child, 0);
  process(200, kRecycler, 200, "sh");
  process(child, 200, child, "miner", 1000);
  cgroups.owners = {{200, {"web", 0}}};
  EscapeTracker t(proc_, kRecycler, cgroups);
  t.scan();
  ASSERT_EQ(t.escapees(), 1u);
  // The pid now belongs to a process that started later: spared.
  process(child, 200, child, "miner", 2000);
  EXPECT_EQ(t.kill({"web", 0}), 0u);
  EXPECT_EQ(::waitpid(child, nullptr, WNOHANG), 0) << "still running";
  // Found again as itself, it is killed with its worker.
  t.scan();
  EXPECT_EQ(t.kill({"web", 1}), 0u) << "not another worker's";
  EXPECT_EQ(t.kill({"web", 0}), 1u);
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
  EXPECT_THAT(log.all(), HasSubstr("web[0]: killed pid " + std::to_string(child) + " (miner)"));
}

}  // namespace
}  // namespace recycler
