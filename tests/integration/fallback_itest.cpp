// Without permission to create cgroups recycler still runs its workers,
// tracks them by session from /proc, says once that limits are not enforced,
// and still leaves nothing behind.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <csignal>
#include <filesystem>
#include <regex>

#include "tests/support/itest.h"

namespace recycler::testing {
namespace {

using ::testing::HasSubstr;

TEST(Fallback, WithoutCgroupPermissionWorkersRunUnenforcedAndStopCompletely) {
  if (::geteuid() != 0)
    GTEST_SKIP() << "needs root to run recycler as the unprivileged user nobody";
  Sandbox sb;
  std::string cfg = sb.write("r.yaml", R"(programs:
  app:
    command: "sleep 1000 & echo ready pid=$$; exec sleep 1001"
    limits: {memory_max: 64MiB}
    stop: {timeout: 2s}
)");
  Recycler r({"run", "-c", cfg}, as_nobody(sb));
  auto warning = r.wait_for("limits are NOT enforced");
  ASSERT_TRUE(warning);
  EXPECT_THAT(*warning, HasSubstr("no permission"));
  EXPECT_TRUE(r.wait_for("app: limits not enforced: memory_max 64 MiB"));
  auto started = r.wait_for("app[0] started: pid");
  ASSERT_TRUE(started);
  pid_t main_pid = started_pid(*started);
  std::smatch m;
  ASSERT_TRUE(r.wait_for(std::regex("ready pid=([0-9]+)"), &m));
  EXPECT_EQ(std::stoi(m[1]), main_pid);
  EXPECT_EQ(r.count("NOT enforced"), 1u) << "said once";

  // The background sleep shares the worker's session: stopping finds it.
  std::vector<pid_t> session;
  for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
    std::string name = entry.path().filename();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    if (::getsid(std::stoi(name)) == main_pid) session.push_back(std::stoi(name));
  }
  EXPECT_EQ(session.size(), 2u);
  r.signal(SIGTERM);
  EXPECT_EQ(r.exit_code(), 0);
  for (pid_t p : session) EXPECT_FALSE(process_exists(p)) << "pid " << p;
}

TEST(Fallback, WithoutCgroupsPoliciesStillRecycleFromTheProcessTree) {
  if (::geteuid() != 0)
    GTEST_SKIP() << "needs root to run recycler as the unprivileged user nobody";
  Sandbox sb;
  // No cgroup: anon is summed from /proc/PID/status of the worker's session,
  // sampled every 100 ms (no kernel fast path without a cgroup).
  std::string cfg = sb.write("r.yaml", R"(programs:
  leak:
    command: [")" + leaky_bin() + R"(", "--rate", "100MiB", "--step", "20", "--max", "256MiB"]
    sample_interval: 100ms
    policies:
      - memory: {metric: anon, limit: 64MiB}
    stop: {timeout: 2s}
)");
  Recycler r({"run", "-c", cfg}, as_nobody(sb));
  std::smatch m;
  ASSERT_TRUE(
      r.wait_for(std::regex(R"(leak\[0\] recycle: anon ([0-9.]+) MiB > 64 MiB)"), &m, scaled(20s)));
  EXPECT_LT(std::stod(m[1].str()), 96.0) << "within a few samples of the limit";
  ASSERT_TRUE(r.wait_for("leak[0] started: pid", scaled(10s)));  // the replacement
  r.signal(SIGTERM);
  EXPECT_EQ(r.exit_code(), 0);
}

TEST(Fallback, CheckShowsTheLimitsAsNotEnforced) {
  if (::geteuid() != 0)
    GTEST_SKIP() << "needs root to run recycler as the unprivileged user nobody";
  Sandbox sb;
  std::string cfg = sb.write("r.yaml", R"(programs:
  app:
    command: ["sleep", "1"]
    limits: {memory_max: 64MiB}
)");
  Recycler r({"check", "-c", cfg}, as_nobody(sb));
  EXPECT_EQ(r.exit_code(), 0);
  EXPECT_THAT(r.output(),
              HasSubstr("app: sleep 1; 1 instance; memory_max 64 MiB; restart on-failure "
                        "(limits NOT enforced here)"));
  EXPECT_THAT(r.output(), HasSubstr("limits NOT enforced when run from here: no permission"));
}

}  // namespace
}  // namespace recycler::testing
