// How a main process's end is told and counted, without a worker: the
// wording of an OOM kill, what is a crash, and the event's fields.
#include "supervisor/worker/exit_report.h"

#include <gtest/gtest.h>

#include <csignal>
#include <variant>

#include "tests/support/fakes.h"

namespace recycler {
namespace {

using namespace std::chrono_literals;
using testing::FakeLauncher;

const log::Field* field(const ExitReport& report, std::string_view key) {
  for (const log::Field& f : report.fields)
    if (f.key == key) return &f;
  return nullptr;
}

class ExitReportTest : public ::testing::Test {
 protected:
  ExitReportTest() { program.name = "api"; }
  ExitReport describe(RunEnd end) {
    Slot slot(launcher, base_env, nofile, std::make_shared<config::ProgramConfig>(program), 1, "",
              nullptr);
    return describe_exit(slot, end);
  }

  config::ProgramConfig program;
  FakeLauncher launcher;
  std::vector<std::string> base_env;
  std::optional<config::Rlimit> nofile;
};

TEST_F(ExitReportTest, AnEndNobodyAskedForThatIsNotCleanIsACrash) {
  ExitReport report = describe({.pid = 42, .generation = 3, .status = ExitStatus{1}, .uptime = 3s});
  EXPECT_TRUE(report.crash);
  EXPECT_EQ(report.level, log::Level::Warn);
  EXPECT_EQ(report.event, "exit");
  EXPECT_EQ(report.message, "api[1] exited with status 1 after 3s");
  ASSERT_TRUE(field(report, "status"));
  EXPECT_EQ(std::get<int64_t>(field(report, "status")->value), 1);
  EXPECT_EQ(std::get<int64_t>(field(report, "pid")->value), 42);
  EXPECT_EQ(std::get<uint64_t>(field(report, "generation")->value), 3u);
  EXPECT_FALSE(field(report, "signal"));
}

TEST_F(ExitReportTest, ACleanExitOrAnEndAskedForIsNot) {
  ExitReport clean = describe({.status = ExitStatus{0}, .uptime = 1s});
  EXPECT_FALSE(clean.crash);
  EXPECT_EQ(clean.level, log::Level::Info);
  ExitReport asked = describe({.status = ExitStatus{0, SIGTERM, true}, .requested = true});
  EXPECT_FALSE(asked.crash);
  EXPECT_EQ(asked.level, log::Level::Info);
  EXPECT_EQ(std::get<std::string>(field(asked, "signal")->value), "SIGTERM");
}

TEST_F(ExitReportTest, AnOomKillNamesTheLimitAndWarnsEvenWhenAskedFor) {
  program.limits.memory_max = uint64_t{2} << 30;
  ExitReport report = describe(
      {.status = ExitStatus{0, SIGKILL, true}, .uptime = 3200ms, .oom = true, .requested = true});
  EXPECT_FALSE(report.crash);
  EXPECT_EQ(report.level, log::Level::Warn);
  EXPECT_EQ(report.event, "oom_kill");
  EXPECT_EQ(report.message,
            "api[1] was OOM-killed by the kernel (cgroup memory limit 2 GiB) after 3.2s");
  EXPECT_TRUE(std::get<bool>(field(report, "oom_kill")->value));
}

TEST_F(ExitReportTest, AnOomKillOfAnotherProcessIsAddedToTheExit) {
  ExitReport report = describe({.status = ExitStatus{0}, .oom = true});
  EXPECT_TRUE(report.crash) << "a clean exit after an OOM kill in its cgroup is not clean";
  EXPECT_EQ(report.message,
            "api[1] exited with status 0 after 0ms; the kernel OOM-killed a process in its "
            "cgroup (no memory limit on its cgroup: a parent cgroup's limit or the host's memory "
            "ran out)");
}

}  // namespace
}  // namespace recycler
