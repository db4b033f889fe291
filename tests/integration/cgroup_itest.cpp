// Real processes in real cgroups (v1 here, v2 in the VM): placement before
// exec, limits and the memory settings beside them (swap, memory.low,
// memory.oom.group), OOM kills, fork bombs, stop escalation, stale cgroups,
// and nothing left behind.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <csignal>
#include <filesystem>

#include "tests/support/itest.h"

namespace recycler::testing {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

TEST(Cgroups, AWorkerRunsInItsOwnCgroupWithItsLimitsAndIsGoneAfterSigterm) {
  RECYCLER_REQUIRE_CGROUPS();
  Sandbox sb;
  std::string out = sb.tmp() + "/cgroup.txt";
  std::string cfg = sb.write("r.yaml", config_yaml(sb, R"(  app:
    command: ["sh", "-c", "cat /proc/self/cgroup > )" + out +
                                                           R"(; echo ready; exec sleep 1000"]
    limits: {memory_max: 64MiB, pids_max: 32}
    stop: {timeout: 5s}
)"));
  Recycler r({"run", "-c", cfg}, sb);
  auto started = r.wait_for("app[0] started: pid");
  ASSERT_TRUE(started);
  pid_t pid = started_pid(*started);
  ASSERT_TRUE(r.wait_for("app[0] out | ready"));

  std::string dir = sb.worker_dir("app", 0);
  std::string own = sb.worker_cgroup("app", 0);
  EXPECT_THAT(read_text(out), HasSubstr(sb.v2() ? "0::" + own + "\n" : ":memory:" + own + "\n"));
  EXPECT_EQ(read_text(dir + "/" + sb.memory_max_file()), "67108864\n");
  EXPECT_EQ(read_text(sb.worker_dir("app", 0, "pids") + "/pids.max"), "32\n");
  EXPECT_THAT(cgroup_pids(dir), ::testing::ElementsAre(pid));

  r.signal(SIGTERM);
  EXPECT_EQ(r.exit_code(5s), 0);
  EXPECT_FALSE(process_exists(pid));
  EXPECT_FALSE(fs::exists(dir)) << dir;
  EXPECT_FALSE(fs::exists(sb.root_dir())) << sb.root_dir();
}

TEST(Cgroups, TheMemoryLimitIsEnforcedAndTheOomKillIsNamed) {
  RECYCLER_REQUIRE_CGROUPS();
  Sandbox sb;
  std::string cfg = sb.write("r.yaml", config_yaml(sb, R"(  leak:
    command: [")" + leaky_bin() + R"(", "--rate", "64MiB", "--step", "50"]
    limits: {memory_max: 32MiB}
    restart: {mode: never}
)"));
  Recycler r({"run", "-c", cfg}, sb);
  EXPECT_TRUE(
      r.wait_for("leak[0] was OOM-killed by the kernel (cgroup memory limit 32 MiB) after", 20s));
  EXPECT_EQ(r.exit_code(), 1) << "the only program died: recycler exits, with failure";
  EXPECT_EQ(r.count("holding 48 MiB"), 0u) << "never got far past its limit";
}

TEST(Cgroups, PidsMaxContainsAForkBomb) {
  RECYCLER_REQUIRE_CGROUPS();
  Sandbox sb;
  std::string cfg = sb.write("r.yaml", config_yaml(sb, R"(  bomb:
    command: "echo bombing; b() { b | b & }; b; exec sleep 1000"
    limits: {pids_max: 16}
    stop: {timeout: 3s}
)"));
  Recycler r({"run", "-c", cfg}, sb);
  ASSERT_TRUE(r.wait_for("bomb[0] out | bombing"));
  ASSERT_TRUE(r.wait_for("bomb[0] err | ", 20s)) << "the shell reports its failed forks";
  std::string pids_dir = sb.worker_dir("bomb", 0, "pids");
  EXPECT_LE(std::stoul(read_text(pids_dir + "/pids.current")), 16u);
  EXPECT_GT(find_keyed_value(read_text(pids_dir + "/pids.events"), "max").value_or(0), 0u)
      << "the kernel refused forks at the limit";

  r.signal(SIGTERM);
  EXPECT_EQ(r.exit_code(10s), 0) << "the whole bomb is killed, however fast it forks";
  EXPECT_FALSE(fs::exists(pids_dir));
}

TEST(Cgroups, AProgramThatIgnoresSigtermAndForksGrandchildrenIsGoneWithinTheStopTimeout) {
  RECYCLER_REQUIRE_CGROUPS();
  Sandbox sb;
  std::string cfg = sb.write("r.yaml", config_yaml(sb, R"(  stubborn:
    command: "trap '' TERM; (sleep 1000 & sleep 1000 & echo forked; wait) & sleep 1000 & echo ready; wait"
    stop: {signal: TERM, timeout: 2s}
)"));
  Recycler r({"run", "-c", cfg}, sb);
  ASSERT_TRUE(r.wait_for_count("stubborn[0] out | ready", 1));
  ASSERT_TRUE(r.wait_for_count("stubborn[0] out | forked", 1));
  std::string dir = sb.worker_dir("stubborn", 0);
  std::vector<pid_t> pids = cgroup_pids(dir);
  EXPECT_GE(pids.size(), 5u) << "shell, subshell and three sleeps";

  auto t0 = std::chrono::steady_clock::now();
  r.signal(SIGTERM);
  EXPECT_EQ(r.exit_code(3s), 0);
  auto took = std::chrono::steady_clock::now() - t0;
  EXPECT_LT(took, scaled(3s)) << "stop.timeout + 1s";
  EXPECT_TRUE(r.wait_for("stubborn[0] still running 2s after SIGTERM; killing every process"));
  for (pid_t p : pids) EXPECT_FALSE(process_exists(p)) << "pid " << p;
  EXPECT_FALSE(fs::exists(dir));
}

TEST(Cgroups, AKilledRecyclersStaleCgroupsAreCleanedOnTheNextStart) {
  RECYCLER_REQUIRE_CGROUPS();
  Sandbox sb;
  // Absolute: a restarted recycler must find the same root from wherever it runs.
  sb.use_absolute_root();
  std::string cfg = sb.write("r.yaml", config_yaml(sb, R"(  app:
    command: "sleep 1000 & sleep 1000 & echo ready; wait"
)"));
  std::string dir = sb.worker_dir("app", 0);
  std::vector<pid_t> orphans;
  {
    Recycler first({"run", "-c", cfg}, sb);
    auto started = first.wait_for("app[0] started: pid");
    ASSERT_TRUE(started);
    ASSERT_TRUE(first.wait_for("app[0] out | ready"));
    orphans = cgroup_pids(dir);
    first.signal(SIGKILL);
    ASSERT_TRUE(first.wait_exit());
    // PR_SET_PDEATHSIG takes the main process with the recycler.
    EXPECT_TRUE(wait_gone(started_pid(*started)));
  }
  ASSERT_TRUE(fs::exists(dir));
  std::vector<pid_t> left;
  for (pid_t p : orphans)
    if (process_exists(p)) left.push_back(p);
  EXPECT_EQ(left.size(), 2u) << "the sleeps outlived the recycler and its main process";

  Recycler second({"run", "-c", cfg}, sb);
  auto found = second.wait_for("found 1 stale worker cgroup under");
  ASSERT_TRUE(found);
  EXPECT_THAT(*found, HasSubstr("app/0 (2 processes)"));
  for (pid_t p : left) EXPECT_FALSE(process_exists(p)) << "pid " << p;
  ASSERT_TRUE(second.wait_for("app[0] out | ready"));
  second.signal(SIGTERM);
  EXPECT_EQ(second.exit_code(), 0);
  EXPECT_FALSE(fs::exists(dir));
}

TEST(Cgroups, NothingIsLeftAfterACleanExit) {
  RECYCLER_REQUIRE_CGROUPS();
  Sandbox sb;
  std::string cfg = sb.write("r.yaml", config_yaml(sb, R"(  web:
    command: "echo up; exec sleep 1000"
    instances: 3
    limits: {memory_max: 64MiB, pids_max: 8, cpu: 0.5}
  batch:
    command: ["sleep", "1000"]
)"));
  Recycler r({"run", "-c", cfg}, sb);
  std::vector<pid_t> pids;
  for (int i = 0; i < 4; ++i) {
    auto line = r.wait_for(" started: pid");
    ASSERT_TRUE(line);
    pids.push_back(started_pid(*line));
  }
  for (unsigned slot = 0; slot < 3; ++slot) EXPECT_TRUE(fs::exists(sb.worker_dir("web", slot)));
  if (!sb.v2())
    EXPECT_EQ(read_text(sb.worker_dir("web", 0, "cpu") + "/cpu.cfs_quota_us"), "50000\n");
  else
    EXPECT_EQ(read_text(sb.worker_dir("web", 0) + "/cpu.max"), "50000 100000\n");
  r.signal(SIGINT);
  EXPECT_EQ(r.exit_code(), 0);
  for (pid_t p : pids) EXPECT_FALSE(process_exists(p)) << "pid " << p;
  for (const char* controller : {"memory", "pids", "cpu", "freezer"}) {
    if (sb.v2() && std::string(controller) != "memory") continue;
    EXPECT_FALSE(fs::exists(sb.root_dir(controller))) << sb.root_dir(controller);
  }
}

TEST(Cgroups, ASecondRecyclerOnTheSameRootIsRefusedAndTheFirstCarriesOn) {
  RECYCLER_REQUIRE_CGROUPS();
  Sandbox sb;
  sb.use_absolute_root();
  std::string cfg = sb.write("r.yaml", config_yaml(sb, R"(  app:
    command: ["sleep", "1000"]
)"));
  Recycler first({"run", "-c", cfg}, sb);
  auto started = first.wait_for("app[0] started: pid");
  ASSERT_TRUE(started);
  // Its own control socket, or that is what refuses it first ("another
  // recycler is running this config").
  std::string cfg2 =
      sb.write("r2.yaml", config_yaml(sb, R"(  app:
    command: ["sleep", "1000"]
)",
                                      "control: {socket: " + sb.tmp() + "/second.sock}\n"));
  Recycler second({"run", "-c", cfg2}, sb);
  EXPECT_EQ(second.exit_code(), 1);
  EXPECT_THAT(second.output(), HasSubstr("another recycler (pid " + std::to_string(first.pid()) +
                                         ") is already supervising workers under"));
  EXPECT_THAT(second.output(), HasSubstr("give this one a cgroup root of its own (--cgroup-root"));
  EXPECT_TRUE(process_exists(started_pid(*started)));
  first.signal(SIGTERM);
  EXPECT_EQ(first.exit_code(), 0);
}

// --- limits: memory_low, swap_max, oom_group (cgroup/memory_settings.h) ---

// The first line of a cgroup file, as a number.
uint64_t number_in(const std::string& path) {
  return std::strtoull(read_text(path).c_str(), nullptr, 10);
}

TEST(MemorySettings, OnV1SwapIsLimitedTogetherWithMemory) {
  RECYCLER_REQUIRE_CGROUPS();
  Sandbox sb;
  if (sb.v2()) GTEST_SKIP() << "cgroup v1 only: v2 limits swap alone (memory.swap.max)";
  std::string cfg = sb.write("r.yaml", config_yaml(sb, R"(  plain:
    command: ["sleep", "1000"]
    limits: {memory_max: 64MiB}
  swapping:
    command: ["sleep", "1000"]
    limits: {memory_max: 64MiB, swap_max: 32MiB}
  unlimited:
    command: ["sleep", "1000"]
    limits: {memory_max: 64MiB, swap_max: unlimited}
)"));
  Recycler r({"run", "-c", cfg}, sb);
  ASSERT_TRUE(r.wait_for_count(" started: pid", 3));
  const std::string memsw = "/memory.memsw.limit_in_bytes";
  if (!fs::exists(sb.worker_dir("plain", 0) + memsw))
    GTEST_SKIP() << "this kernel does not account swap (no " << memsw
                 << "): boot it with swapaccount=1";
  EXPECT_EQ(read_text(sb.worker_dir("plain", 0) + memsw), "67108864\n") << "no swap by default";
  EXPECT_EQ(read_text(sb.worker_dir("swapping", 0) + memsw), "100663296\n");
  EXPECT_GT(number_in(sb.worker_dir("unlimited", 0) + memsw), 1ull << 62) << "-1: unlimited";
  EXPECT_EQ(r.count("cannot set"), 0u) << r.output();
  r.signal(SIGTERM);
  EXPECT_EQ(r.exit_code(), 0);
}

TEST(MemorySettings, OnV1WhatCannotBeAppliedIsSaidAtStartAndByCheck) {
  RECYCLER_REQUIRE_CGROUPS();
  Sandbox sb;
  if (sb.v2()) GTEST_SKIP() << "cgroup v1 only: v2 has every one of these files";
  std::string cfg = sb.write("r.yaml", config_yaml(sb, R"(  app:
    command: ["sleep", "1000"]
    limits: {memory_low: 16MiB, oom_group: true, swap_max: 1GiB}
)"));
  const std::string low = "limits.memory_low: cgroup v1 has no memory.low; not applied";
  const std::string oom =
      "limits.oom_group: cgroup v1 has no memory.oom.group: an OOM kill takes "
      "the process the kernel picks, not the whole worker";
  const std::string swap =
      "limits.swap_max: cgroup v1 limits swap only together with memory "
      "(memory.memsw.limit_in_bytes), so only with limits.memory_max; not applied";
  Cli checked = cli({"check", "-c", cfg});
  EXPECT_EQ(checked.code, 0) << checked.err;
  EXPECT_THAT(checked.out, HasSubstr("; memory_low 16 MiB, swap_max 1 GiB, oom_group on; "));
  // "; not applied" once, in the parenthesis's own words.
  auto bare = [](std::string why) { return why.substr(0, why.rfind("; not applied")); };
  EXPECT_THAT(checked.out, HasSubstr("(not applied here: " + bare(low) + ") (not applied here: " +
                                     oom + ") (not applied here: " + bare(swap) + ")\n"));
  Recycler r({"run", "-c", cfg}, sb);
  EXPECT_TRUE(r.wait_for("app: " + low));
  EXPECT_TRUE(r.wait_for("app: " + oom));
  EXPECT_TRUE(r.wait_for("app: " + swap));
  ASSERT_TRUE(r.wait_for("app[0] started: pid"));
  EXPECT_EQ(r.count("cannot set"), 0u) << "said once, at the start, not for each cgroup";
  r.signal(SIGTERM);
  EXPECT_EQ(r.exit_code(), 0);
}

TEST(MemorySettings, OnV2AWorkerGetsOomGroupAndNoSwapByDefault) {
  RECYCLER_REQUIRE_CGROUPS();
  Sandbox sb;
  if (!sb.v2()) GTEST_SKIP() << "cgroup v2 only: v1 has no memory.oom.group";
  std::string cfg = sb.write("r.yaml", config_yaml(sb, R"(  app:
    command: ["sleep", "1000"]
)"));
  Recycler r({"run", "-c", cfg}, sb);
  ASSERT_TRUE(r.wait_for("app[0] started: pid"));
  std::string dir = sb.worker_dir("app", 0);
  EXPECT_EQ(read_text(dir + "/memory.oom.group"), "1\n");
  EXPECT_EQ(read_text(dir + "/memory.low"), "0\n");
  if (!fs::exists(dir + "/memory.swap.max"))
    GTEST_SKIP() << "this kernel does not account swap (no memory.swap.max)";
  EXPECT_EQ(read_text(dir + "/memory.swap.max"), "0\n");
  r.signal(SIGTERM);
  EXPECT_EQ(r.exit_code(), 0);
}

TEST(MemorySettings, OnV2TheConfiguredValuesAreWritten) {
  RECYCLER_REQUIRE_CGROUPS();
  Sandbox sb;
  if (!sb.v2()) GTEST_SKIP() << "cgroup v2 only: v1 has no memory.low or memory.oom.group";
  std::string cfg = sb.write("r.yaml", config_yaml(sb, R"(  app:
    command: ["sleep", "1000"]
    limits: {memory_max: 64MiB, memory_low: 16MiB, swap_max: 32MiB, oom_group: false}
  free:
    command: ["sleep", "1000"]
    limits: {swap_max: unlimited}
)"));
  Recycler r({"run", "-c", cfg}, sb);
  ASSERT_TRUE(r.wait_for_count(" started: pid", 2));
  std::string dir = sb.worker_dir("app", 0);
  EXPECT_EQ(read_text(dir + "/memory.oom.group"), "0\n");
  EXPECT_EQ(read_text(dir + "/memory.low"), "16777216\n");
  if (!fs::exists(dir + "/memory.swap.max"))
    GTEST_SKIP() << "this kernel does not account swap (no memory.swap.max)";
  EXPECT_EQ(read_text(dir + "/memory.swap.max"), "33554432\n");
  EXPECT_EQ(read_text(sb.worker_dir("free", 0) + "/memory.swap.max"), "max\n");
  r.signal(SIGTERM);
  EXPECT_EQ(r.exit_code(), 0);
}

// A worker whose child the kernel OOM-kills: with memory.oom.group the main
// process goes too (nothing is left half-running), recycler names the OOM
// kill and starts the worker again.
TEST(MemorySettings, OnV2AnOomKillTakesTheWholeWorkerWhichIsRestarted) {
  RECYCLER_REQUIRE_CGROUPS();
  Sandbox sb;
  if (!sb.v2()) GTEST_SKIP() << "cgroup v2 only: v1 has no memory.oom.group";
  std::string cfg = sb.write(
      "r.yaml", config_yaml(sb,
                            R"(  app:
    command: "echo up; )" + leaky_bin() +
                                R"( --rate 64MiB --step 50 & wait; echo survived; exec sleep 1000"
    limits: {memory_max: 32MiB}
    restart: {backoff: {initial: 100ms}}
)"));
  Recycler r({"run", "-c", cfg}, sb);
  EXPECT_TRUE(r.wait_for("app[0] was OOM-killed by the kernel (cgroup memory limit 32 MiB) after",
                         scaled(20s)));
  EXPECT_TRUE(r.wait_for_count("app[0] started: pid", 2, scaled(20s)));
  EXPECT_EQ(r.count("app[0] out | survived"), 0u) << r.output();
  r.signal(SIGTERM);
  EXPECT_EQ(r.exit_code(), 0);
}

// Without it the kernel kills the leaking child alone and its parent runs on.
TEST(MemorySettings, OnV2WithOomGroupOffAnOomKillTakesOneProcess) {
  RECYCLER_REQUIRE_CGROUPS();
  Sandbox sb;
  if (!sb.v2()) GTEST_SKIP() << "cgroup v2 only: v1 has no memory.oom.group";
  std::string cfg = sb.write(
      "r.yaml", config_yaml(sb,
                            R"(  app:
    command: "echo up; )" + leaky_bin() +
                                R"( --rate 64MiB --step 50 & wait; echo survived; exec sleep 1000"
    limits: {memory_max: 32MiB, oom_group: false}
)"));
  Recycler r({"run", "-c", cfg}, sb);
  EXPECT_TRUE(r.wait_for("app[0] out | survived", scaled(20s)));
  EXPECT_EQ(oom_kills(sb, "app"), 1u);
  EXPECT_EQ(r.count("app[0] was OOM-killed"), 0u) << r.output();
  r.signal(SIGTERM);
  EXPECT_EQ(r.exit_code(), 0);
}

}  // namespace
}  // namespace recycler::testing
