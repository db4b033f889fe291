// Checkpoint-and-restart with real processes in real cgroups, each way it can
// end: the worker exits cleanly after saving (RECYCLER_RESUME=1 next), the
// signal kills it (the same), it never confirms (on_timeout: restart; on_timeout: wait until memory
// nears memory_max), or a restart policy overtakes it. Plus the timeline files a program with
// `timeline:` leaves behind. The workers are /bin/sh around leaky, so these run in the v2 VM too
// (busybox sh there).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "tests/support/itest.h"

namespace recycler::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

// A shell worker that says how it was started, then (with `usr1` as its
// USR1 trap: '' ignores it, 'exit 0' ends cleanly, '-' leaves the default
// action, death) leaks with leaky.
std::string worker(const std::string& usr1, const std::string& leaky_args) {
  return R"(command: ["/bin/sh", "-c", "trap ')" + usr1 +
         R"(' USR1; echo \"started resume=${RECYCLER_RESUME:-0} reason=${RECYCLER_RECYCLE_REASON:-none}\"; )" +
         leaky_bin() + " " + leaky_args + R"( & wait; wait"])";
}

// A config file with one program, `ck`: worker(usr1, leaky_args), then `settings`.
std::string ck_config(const Sandbox& sb, const std::string& usr1, const std::string& leaky_args,
                      const std::string& settings) {
  return sb.write("c.yaml", config_yaml(sb, "  ck:\n    " + worker(usr1, leaky_args) + settings));
}

TEST(Checkpoint, ACleanExitAfterTheSignalRestartsTheWorkerToResume) {
  RECYCLER_REQUIRE_CGROUPS();
  Sandbox sb;
  std::string cfg = ck_config(sb, "exit 0", "--rate 50MiB --max 1GiB", R"(
    limits: {memory_max: 512MiB}
    policies:
      - memory: {limit: 96MiB, action: checkpoint}
    checkpoint: {signal: USR1, timeout: 60s}
)");
  Recycler r({"run", "-c", cfg}, sb);
  ASSERT_TRUE(r.wait_for("started resume=0 reason=none", scaled(10s)));
  ASSERT_TRUE(r.wait_for("ck[0] recycle: anon", scaled(20s)));
  ASSERT_TRUE(r.wait_for("ck[0] asked to checkpoint: SIGUSR1", scaled(5s)));
  auto resumed = r.wait_for("started resume=1 reason=anon", scaled(20s));
  ASSERT_TRUE(resumed);
  EXPECT_THAT(*resumed, HasSubstr("(memory policy)"));
  EXPECT_EQ(r.count("has not confirmed"), 0u) << r.output();
}

// A worker the checkpoint signal kills (no handler; or, as a Python trainer
// that had just finished, the signal came as it exited): recycler's own
// signal ended it, so it is restarted at once to resume, not as a crash.
TEST(Checkpoint, AWorkerKilledByTheCheckpointSignalIsRestartedAtOnceToResume) {
  RECYCLER_REQUIRE_CGROUPS();
  Sandbox sb;
  std::string cfg = ck_config(sb, "-", "--rate 50MiB --max 160MiB", R"(
    limits: {memory_max: 512MiB}
    policies:
      - memory: {limit: 96MiB, action: checkpoint}
    checkpoint: {signal: USR1, timeout: 60s}
    restart: {mode: on-failure}
)");
  Recycler r({"run", "-c", cfg}, sb);
  ASSERT_TRUE(r.wait_for("started resume=0 reason=none", scaled(10s)));
  ASSERT_TRUE(r.wait_for("ck[0] asked to checkpoint: SIGUSR1", scaled(20s)));
  ASSERT_TRUE(r.wait_for("ck[0] killed by SIGUSR1 after", scaled(5s))) << r.output();
  ASSERT_TRUE(
      r.wait_for("ck[0]: killed by SIGUSR1, the checkpoint signal: it has no handler", scaled(5s)))
      << r.output();
  ASSERT_TRUE(r.wait_for("started resume=1 reason=anon", scaled(10s))) << r.output();
  EXPECT_EQ(r.count("restarting in"), 0u) << "not a crash: no backoff\n" << r.output();
}

TEST(Checkpoint, AWorkerThatNeverConfirmsIsRestartedAfterTheTimeoutWithoutResume) {
  RECYCLER_REQUIRE_CGROUPS();
  Sandbox sb;
  std::string cfg = ck_config(sb, "", "--rate 50MiB --max 160MiB", R"(
    limits: {memory_max: 512MiB}
    policies:
      - memory: {limit: 96MiB, action: checkpoint}
    checkpoint: {timeout: 1s}
    stop: {timeout: 5s}
)");
  Recycler r({"run", "-c", cfg}, sb);
  ASSERT_TRUE(r.wait_for("ck[0] asked to checkpoint", scaled(20s)));
  ASSERT_TRUE(r.wait_for(
      "ck[0] has not confirmed its checkpoint after 1s; restarting it without one", scaled(10s)));
  ASSERT_TRUE(r.wait_for("started resume=0 reason=anon", scaled(20s)));
}

TEST(Checkpoint, OnTimeoutWaitWaitsUntilMemoryNearsMemoryMax) {
  RECYCLER_REQUIRE_CGROUPS();
  Sandbox sb;
  // `for:` keeps the kernel fast path (and v2's memory.high throttle) out:
  // the leak must be free to climb towards memory_max.
  std::string cfg = ck_config(sb, "", "--rate 50MiB --max 1GiB", R"(
    limits: {memory_max: 256MiB}
    sample_interval: 100ms
    policies:
      - memory: {limit: 64MiB, for: 100ms, action: checkpoint}
    checkpoint: {timeout: 500ms, on_timeout: wait}
)");
  Recycler r({"run", "-c", cfg}, sb);
  ASSERT_TRUE(
      r.wait_for("ck[0] has not confirmed its checkpoint after 500ms; waiting on", scaled(20s)));
  auto given_up =
      r.wait_for("memory_max and has not confirmed its checkpoint; restarting it", scaled(20s));
  ASSERT_TRUE(given_up);
  // 95% of 256 MiB is 243.2 MiB
  EXPECT_THAT(*given_up, HasSubstr("ck[0] is at 2")) << *given_up;
  ASSERT_TRUE(r.wait_for("started resume=0", scaled(20s)));
  EXPECT_EQ(r.count("OOM"), 0u) << r.output();
}

TEST(Checkpoint, ARestartPolicyOvertakesACheckpointUnderWay) {
  RECYCLER_REQUIRE_CGROUPS();
  Sandbox sb;
  std::string cfg = ck_config(sb, "", "--rate 50MiB --max 1GiB", R"(
    limits: {memory_max: 512MiB}
    sample_interval: 100ms
    policies:
      - memory: {limit: 64MiB, for: 100ms, action: checkpoint}
      - memory: {limit: 160MiB, for: 100ms}
    checkpoint: {timeout: 60s}
)");
  Recycler r({"run", "-c", cfg}, sb);
  ASSERT_TRUE(r.wait_for("ck[0] asked to checkpoint", scaled(20s)));
  ASSERT_TRUE(r.wait_for("while it checkpoints; restarting it now", scaled(20s)));
  ASSERT_TRUE(r.wait_for("started resume=0 reason=anon", scaled(20s)));
}

// A shell worker that says how it started, with `traps` set, then sleeps
// until it is killed (each trap that does not exit returns it to its wait).
std::string sleeper(const std::string& traps) {
  return R"(command: ["/bin/sh", "-c", ")" + traps +
         R"(; echo \"started resume=${RECYCLER_RESUME:-0} reason=${RECYCLER_RECYCLE_REASON:-none}\"; sleep 1000 & while :; do wait; done"])";
}

// recycler's SIGTERM (systemd's stop, a pod's deletion) asks each program
// that checkpoints for one before it stops it; the others stop as ever; an
// exit meanwhile is not restarted. A USR2 (or USR1) with no preempt:
// section is logged and ignored: it used to end recycler and strand its workers.
TEST(Checkpoint, SigtermAsksEveryProgramThatCheckpointsForOneBeforeItStops) {
  RECYCLER_REQUIRE_CGROUPS();
  Sandbox sb;
  std::string cfg = sb.write(
      "c.yaml", config_yaml(sb, "  ck:\n    " + sleeper("trap 'echo saving; exit 0' USR1") +
                                    R"(
    checkpoint: {timeout: 30s}
    restart: {mode: always}
  plain:
    command: ["sleep", "1000"]
)"));
  Recycler r({"run", "-c", cfg}, sb);
  ASSERT_TRUE(r.wait_for_count("] started: pid", 2, scaled(10s)));
  ASSERT_TRUE(r.wait_for_count("started resume=0 reason=none", 1, scaled(10s)));
  r.signal(SIGUSR2);
  ASSERT_TRUE(r.wait_for("SIGUSR2: ignored (the config has no preempt: section"));
  EXPECT_FALSE(r.wait_exit(0ms).has_value()) << r.output();
  r.signal(SIGTERM);
  ASSERT_TRUE(r.wait_for("ck[0] stopping: asked to checkpoint first (SIGUSR1 to pid"));
  ASSERT_TRUE(r.wait_for("saving"));
  EXPECT_EQ(r.exit_code(scaled(10s)), 0) << r.output();
  EXPECT_EQ(r.count("plain[0] stopping: SIGTERM to pid"), 1u) << r.output();
  EXPECT_EQ(r.count("ck[0] started: pid"), 1u) << "its exit while it stops is not restarted\n"
                                               << r.output();
  EXPECT_EQ(r.count("has not confirmed"), 0u) << r.output();
}

// An operator's restart and recycle of a program with a bare checkpoint:
// section: each asks for a checkpoint first, and the next start resumes.
TEST(Checkpoint, AnOperatorsRestartOrRecycleCheckpointsAndTheNextStartResumes) {
  RECYCLER_REQUIRE_CGROUPS();
  Sandbox sb;
  std::string cfg = sb.write(
      "c.yaml", config_yaml(sb, "  ck:\n    " + sleeper("trap 'echo saving; exit 0' USR1") +
                                    "\n    checkpoint:\n"));
  const std::string socket = sb.tmp() + "/control.sock";
  Recycler r({"run", "-c", cfg}, sb);
  ASSERT_TRUE(r.wait_for("started resume=0 reason=none", scaled(10s)));
  Cli restart = cli({"restart", "--socket", socket, "ck"});
  EXPECT_EQ(restart.code, 0) << restart.out << restart.err;
  ASSERT_TRUE(r.wait_for("ck[0] stopping: asked to checkpoint first (SIGUSR1 to pid"));
  ASSERT_TRUE(r.wait_for("started resume=1 reason=it checkpointed as it was stopped", scaled(10s)))
      << r.output();
  Cli recycle = cli({"recycle", "--socket", socket, "ck"});
  EXPECT_EQ(recycle.code, 0) << recycle.out << recycle.err;
  ASSERT_TRUE(r.wait_for("ck[0] asked to checkpoint: SIGUSR1"));
  ASSERT_TRUE(r.wait_for("started resume=1 reason=asked by recycler recycle", scaled(10s)))
      << r.output();
}

// preempt: the scheduler's signal (Slurm's --signal=B:USR1@T) checkpoints
// what checkpoints, stops everything, and recycler exits with exit_code by
// the deadline, whatever its workers do: this one neither confirms its
// checkpoint nor stops on SIGTERM.
TEST(Preempt, EverythingIsStoppedByTheDeadlineAndRecyclerExitsWithItsCode) {
  RECYCLER_REQUIRE_CGROUPS();
  Sandbox sb;
  std::string cfg = sb.write(
      "c.yaml",
      config_yaml(
          sb, "  ck:\n    " + sleeper("trap 'echo got usr1' USR1; trap 'echo got term' TERM") + R"(
    checkpoint: {timeout: 60s}
    stop: {timeout: 30s}
  plain:
    command: ["sleep", "1000"]
)",
          "preempt: {signal: USR1, deadline: 3s, exit_code: 75}\n"));
  Recycler r({"run", "-c", cfg}, sb);
  ASSERT_TRUE(r.wait_for_count("] started: pid", 2, scaled(10s)));
  ASSERT_TRUE(r.wait_for_count("started resume=0 reason=none", 1, scaled(10s)));
  auto signalled = std::chrono::steady_clock::now();
  r.signal(SIGUSR1);
  auto line = r.wait_for("SIGUSR1: preempted; ");
  ASSERT_TRUE(line) << r.output();
  // stop.timeout leaves it less than half the deadline: it gets the half.
  EXPECT_THAT(*line, HasSubstr("checkpointing ck within 1.5s; stopping every program within 3s, "
                               "then exit 75"));
  ASSERT_TRUE(r.wait_for("got usr1"));
  ASSERT_TRUE(
      r.wait_for("ck[0] has not confirmed its checkpoint after 1.5s; stopping it "
                 "without one",
                 scaled(5s)));
  ASSERT_TRUE(r.wait_for("got term"));
  ASSERT_TRUE(r.wait_for("preempt: 3s passed; killing every worker still running", scaled(5s)));
  EXPECT_EQ(r.exit_code(scaled(10s)), 75) << r.output();
  auto took = std::chrono::steady_clock::now() - signalled;
  EXPECT_GE(took, 3s);
  EXPECT_LT(took, 3s + scaled(2s)) << "the deadline holds";
  EXPECT_EQ(r.count("started: pid"), 2u) << "nothing restarts while preempted\n" << r.output();
}

// Lines of a file.
std::vector<std::string> file_lines(const std::string& path) {
  std::vector<std::string> out;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

TEST(Timeline, EachRunsSamplesAndEventsAreRecordedToCsv) {
  RECYCLER_REQUIRE_CGROUPS();
  Sandbox sb;
  std::string dir = sb.tmp() + "/timelines";
  std::string cfg = ck_config(sb, "exit 0", "--rate 50MiB --max 1GiB", R"(
    limits: {memory_max: 512MiB}
    sample_interval: 100ms
    policies:
      - memory: {limit: 96MiB, action: checkpoint}
    timeline: {dir: )" + dir + R"(}
)");
  Recycler r({"run", "-c", cfg}, sb);
  ASSERT_TRUE(r.wait_for("started resume=1", scaled(30s)));
  r.signal(SIGTERM);
  EXPECT_EQ(r.exit_code(scaled(10s)), 0);

  // The first run's samples were rotated to .1 when the second run began.
  auto first = file_lines(dir + "/ck.0.csv.1");
  ASSERT_GE(first.size(), 3u) << "header and at least two samples";
  EXPECT_EQ(first[0],
            "t,current,anon,file,rss,pss,uss,device,requests,threads,gpu,gpu_total,iteration");
  // t from 0, the cgroup's figures filled in, the leak visible in anon.
  EXPECT_THAT(first[1], ::testing::MatchesRegex("0\\.[0-9]{3},[0-9]+,[0-9]+,[0-9]+,.*"));
  auto anon = [](const std::string& row) {
    size_t a = row.find(',', row.find(',') + 1);
    return std::stoull(row.substr(a + 1, row.find(',', a + 1) - a - 1));
  };
  EXPECT_GT(anon(first.back()), anon(first[1]));
  EXPECT_GE(anon(first.back()), 96ull << 20) << "recorded up to the crossing";
  auto second = file_lines(dir + "/ck.0.csv");
  ASSERT_GE(second.size(), 1u);
  EXPECT_EQ(second[0], first[0]);

  auto events = file_lines(dir + "/ck.0.events.csv");
  ASSERT_GE(events.size(), 6u);
  EXPECT_EQ(events[0], "time,generation,t,event,pid,detail");
  std::vector<std::string> kinds;
  for (size_t i = 1; i < events.size(); ++i) {
    std::string row = events[i];
    // time,generation,t,event,...
    size_t c1 = row.find(','), c2 = row.find(',', c1 + 1), c3 = row.find(',', c2 + 1);
    kinds.push_back(row.substr(c3 + 1, row.find(',', c3 + 1) - c3 - 1));
  }
  EXPECT_THAT(kinds, ::testing::IsSupersetOf({"start", "recycle", "checkpoint", "exit"}));
  EXPECT_THAT(events[1], ::testing::ContainsRegex(",1,[0-9]+\\.[0-9]{3},start,[0-9]+,"));
  for (const std::string& row : events) {
    if (row.find(",recycle,") != std::string::npos) {
      EXPECT_THAT(row, HasSubstr("(memory policy)"));
    }
  }
}

}  // namespace
}  // namespace recycler::testing
