// Checkpoint-and-restart with a real trainer (examples/trainer/trainer.py under
// Debian's python3) in a real cgroup: its leak would pass memory_max mid-run;
// the leak policy sees the slope, recycler asks for a checkpoint, restarts it
// with RECYCLER_RESUME=1, and the trainer finishes every epoch without an OOM
// kill, redoing at most one checkpoint interval of steps per restart.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <regex>
#include <sstream>

#include "tests/support/itest.h"

namespace recycler::testing {
namespace {

using ::testing::HasSubstr;

std::string seconds(Millis base) {
  return std::to_string(static_cast<double>(scaled(base).count()) / 1000.0) + "s";
}

TEST(Trainer, ALeakingTrainerIsCheckpointedRestartedAndFinishesWithoutOomKills) {
  RECYCLER_REQUIRE_CGROUPS();
  auto python = python_bin();
  if (!python) GTEST_SKIP() << "no Debian python3 (install python3, or set RECYCLER_PYTHON)";
  Sandbox sb;
  constexpr int kEpochs = 12, kSteps = 10, kCheckpointEvery = 5;
  const std::string progress = sb.tmp() + "/progress";
  const std::string step_time = std::to_string(0.1 * scaled(1000ms).count() / 1000.0);
  // 48 MiB kept per 1.3 s epoch (10 steps and 3 of validation): 12 epochs
  // would need ~650 MiB, well past memory_max, and 90% of it (the policy's
  // limit) comes after ~9 epochs. The policy must act around epoch 5.
  std::string cfg = sb.write("train.yaml", config_yaml(sb, R"(  train:
    command: [")" + *python + R"(", ")" + examples_dir() + R"(/trainer/trainer.py",
              "--epochs", ")" + std::to_string(kEpochs) + R"(", "--steps", ")" +
                                                               std::to_string(kSteps) + R"(",
              "--step-time", ")" + step_time + R"(", "--model-mib", "32", "--leak-mib", "48",
              "--validation-mib", "32", "--checkpoint", ")" + sb.tmp() +
                                                               R"(/ckpt.json",
              "--checkpoint-every", ")" + std::to_string(kCheckpointEvery) +
                                                               R"(",
              "--progress", ")" + progress + R"("]
    env: {PYTHONPATH: ")" + examples_dir() + R"(/../python"}
    limits: {memory_max: 512MiB}
    sample_interval: )" + seconds(200ms) + R"(
    min_uptime: 1s
    policies:
      - leak: {metric: anon, window: )" + seconds(4s) + R"(, warmup: )" +
                                                               seconds(1500ms) + R"(, horizon: )" +
                                                               seconds(5s) +
                                                               R"(, min_slope: 60MiB/min,
               limit: 90%, action: checkpoint}
    checkpoint: {signal: USR1, timeout: )" + seconds(10s) + R"(}
    stop: {timeout: 5s}
)"));
  Recycler r({"run", "-c", cfg}, sb);
  // The growth is logged once, when the policy first sees it, ahead of its decision.
  ASSERT_TRUE(r.wait_for("train[0] leak: growing: anon +", scaled(60s)));
  ASSERT_TRUE(r.wait_for("train[0] asked to checkpoint: SIGUSR1", scaled(60s)));
  ASSERT_TRUE(r.wait_for("train[0] checkpointed in", scaled(20s)));
  ASSERT_TRUE(r.wait_for("resumed from checkpoint", scaled(20s)));
  // The cgroup outlives the trainer only while recycler runs: read its
  // counter now (a resumed run may start at the last epoch); each later
  // generation's exit is checked for an OOM kill by recycler itself (below).
  EXPECT_EQ(oom_kills(sb, "train"), std::optional<uint64_t>(0));
  ASSERT_TRUE(
      r.wait_for("training done: epoch " + std::to_string(kEpochs) + "/" + std::to_string(kEpochs),
                 scaled(30s)));
  // The trainer exits 0 and is not restarted (on-failure): recycler is done.
  EXPECT_EQ(r.exit_code(scaled(20s)), 0);
  EXPECT_EQ(r.count("OOM"), 0u) << r.output();

  // Every decision is a leak checkpoint with its figures, and the
  // replacement knew it was one.
  std::regex decision(
      R"(train\[0\] recycle: anon \+[0-9.]+ [KMG]iB/min over [0-9.]+m?s, .* of .*, limit in .* < horizon .* \(leak policy\))");
  size_t decisions = 0;
  for (const std::string& line : r.lines())
    if (line.find("train[0] recycle:") != std::string::npos) {
      ++decisions;
      EXPECT_TRUE(std::regex_search(line, decision)) << line;
    }
  EXPECT_GE(decisions, 1u);
  EXPECT_GE(r.count("resumed from checkpoint"), decisions);
  EXPECT_EQ(r.count("starting from scratch"), 1u) << r.output();
  EXPECT_THAT(r.output(), HasSubstr("recycled for: anon +"));

  // Each restart redid at most one checkpoint interval of steps, and every
  // step was done at least once, up to the last.
  auto steps = read_progress(progress);
  ASSERT_FALSE(steps.empty());
  std::map<std::string, std::pair<int, int>> runs;  // generation -> first, last step
  std::vector<std::string> order;
  for (const auto& [generation, step] : steps) {
    auto [it, fresh] = runs.try_emplace(generation, step, step);
    if (fresh) order.push_back(generation);
    it->second.second = step;
  }
  ASSERT_GE(order.size(), 2u) << "no restart in the progress file";
  EXPECT_EQ(runs[order.front()].first, 1);
  EXPECT_EQ(runs[order.back()].second, kEpochs * kSteps);
  for (size_t i = 1; i < order.size(); ++i) {
    int done_before = runs[order[i - 1]].second;
    int resumed_at = runs[order[i]].first - 1;
    EXPECT_LE(resumed_at, done_before) << "generation " << order[i] << " skipped steps";
    EXPECT_LE(done_before - resumed_at, kCheckpointEvery)
        << "generation " << order[i] << " redid " << (done_before - resumed_at) << " steps";
  }
}

// A trainer that says it is alive (WATCHDOG=1, as sd_notify senders do) and
// then hangs, as in a stuck collective: the watchdog restarts it once the
// timeout has passed, and each start gets WATCHDOG_USEC and its own
// pid as WATCHDOG_PID, as systemd gives them.
TEST(Trainer, AHungTrainerIsRestartedByTheWatchdog) {
  RECYCLER_REQUIRE_CGROUPS();
  auto python = python_bin();
  if (!python) GTEST_SKIP() << "no Debian python3 (install python3, or set RECYCLER_PYTHON)";
  Sandbox sb;
  std::string script = sb.write("hang.py", R"(import os, socket, time
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
print("env usec=%s pid_ok=%s" % (os.environ.get("WATCHDOG_USEC"),
                                  os.environ.get("WATCHDOG_PID") == str(os.getpid())), flush=True)
for _ in range(3):
    s.sendto(b"WATCHDOG=1", os.environ["NOTIFY_SOCKET"])
    time.sleep(0.2)
print("hanging", flush=True)
time.sleep(3600)
)");
  std::string cfg = sb.write("c.yaml", config_yaml(sb, R"(  train:
    command: [")" + *python + R"(", ")" + script + R"("]
    sample_interval: 200ms
    watchdog: {timeout: 1s}
    stop: {timeout: 2s}
)"));
  Recycler r({"run", "-c", cfg}, sb);
  ASSERT_TRUE(r.wait_for("env usec=1000000 pid_ok=True", scaled(10s))) << r.output();
  ASSERT_TRUE(r.wait_for("hanging", scaled(5s))) << r.output();
  auto hung =
      r.wait_for("train[0] recycle: hung: no WATCHDOG=1 or RECYCLER_ITERATION for ", scaled(5s));
  ASSERT_TRUE(hung) << r.output();
  EXPECT_THAT(*hung, HasSubstr("(watchdog timeout 1s) (watchdog policy)"));
  ASSERT_TRUE(r.wait_for("generation 2", scaled(10s))) << r.output();
  ASSERT_TRUE(r.wait_for("env usec=1000000 pid_ok=True", scaled(10s))) << r.output();
  EXPECT_EQ(r.count("asked to checkpoint"), 0u) << r.output();
}

// diagnose: a trainer stuck in a lock (as a wedged data loader or a
// collective waits) is hung; before its restart, recycler sends the
// diagnose signal, on which the Python helper (imported, nothing else)
// dumps every thread's stack to the log, then runs gdb on it; gdb's
// backtrace is kept beside the timeline and named in the event.
TEST(Trainer, AHungTrainerIsDiagnosedWithItsStacksBeforeItsRestart) {
  RECYCLER_REQUIRE_CGROUPS();
  RECYCLER_HOST_ONLY();
  auto python = python_bin();
  if (!python) GTEST_SKIP() << "no Debian python3 (install python3, or set RECYCLER_PYTHON)";
  if (run_command({"gdb", "--version"}).code != 0)
    GTEST_SKIP() << "no gdb (scripts/install-deps --test installs it)";
  Sandbox sb;
  std::string script = sb.write("stuck.py", R"(import threading, time
import recycler_notify as rn

def stuck_in_a_lock(lock):
    lock.acquire()  # as a data loader or a collective waits, forever

lock = threading.Lock()
lock.acquire()
for _ in range(3):
    rn.watchdog()
    time.sleep(0.2)
print("stuck", flush=True)
stuck_in_a_lock(lock)
)");
  const std::string timelines = sb.tmp() + "/timelines";
  std::string cfg = sb.write("c.yaml", config_yaml(sb, R"(  train:
    command: [")" + *python + R"(", ")" + script + R"("]
    env: {PYTHONPATH: ")" + examples_dir() + R"(/../python"}
    sample_interval: 200ms
    watchdog: {timeout: 1s}
    diagnose:
      signal: USR2
      command: gdb -p "$RECYCLER_PID" -batch -ex 'thread apply all bt'; echo "policy=$RECYCLER_POLICY"
      timeout: 20s
    timeline: {dir: )" + timelines + R"(}
    stop: {timeout: 2s}
)"));
  Recycler r({"run", "-c", cfg}, sb);
  ASSERT_TRUE(r.wait_for("stuck", scaled(10s))) << r.output();
  ASSERT_TRUE(r.wait_for("train[0] recycle: hung: no WATCHDOG=1", scaled(5s))) << r.output();
  // faulthandler's dump, from the signal handler of the stuck process.
  ASSERT_TRUE(r.wait_for(", line 5 in stuck_in_a_lock", scaled(10s))) << r.output();
  auto diagnosed = r.wait_for(
      "train[0] diagnosed before its recycle (watchdog policy): SIGUSR2 to "
      "pid ",
      scaled(30s));
  ASSERT_TRUE(diagnosed) << r.output();
  const std::string file = timelines + "/train.0.diagnose.1.txt";
  EXPECT_THAT(*diagnosed, HasSubstr("exited with status 0 after"));
  EXPECT_THAT(*diagnosed, HasSubstr("; output in " + file));
  std::string kept = read_text(file);
  EXPECT_THAT(kept, HasSubstr("#0 ")) << kept;
  EXPECT_THAT(kept, HasSubstr("policy=watchdog")) << kept;
  // Then the restart it held.
  ASSERT_TRUE(r.wait_for("train[0] started: pid", scaled(10s))) << r.output();
  EXPECT_THAT(read_text(timelines + "/train.0.events.csv"), HasSubstr(",diagnosed,"));
}

// diagnose on a leak (any policy named in diagnose.policies): its command
// runs before the recycle, and one that outlives its timeout is killed with
// every process it started (a `sh -c` command's children were left running),
// then the recycle it held goes on.
TEST(Trainer, ADiagnosisPastItsTimeoutIsKilledWithItsChildrenAndTheRecycleGoesOn) {
  RECYCLER_REQUIRE_CGROUPS();
  Sandbox sb;
  const std::string pidfile = sb.tmp() + "/child.pid";
  std::string cfg = sb.write("c.yaml", config_yaml(sb, R"(  big:
    command: [")" + leaky_bin() + R"(", "--rate", "64MiB", "--step", "50"]
    sample_interval: 200ms
    policies:
      - memory: {limit: 64MiB}
    diagnose:
      command: sleep 1000 & echo $! > )" + pidfile + R"(; echo started; wait
      timeout: 1s
      policies: [memory]
)"));
  Recycler r({"run", "-c", cfg}, sb);
  auto diagnosed =
      r.wait_for("big[0] diagnosed before its recycle (memory policy): `", scaled(20s));
  ASSERT_TRUE(diagnosed) << r.output();
  EXPECT_THAT(*diagnosed, HasSubstr("killed by SIGKILL at its timeout after "));
  pid_t child = std::stoi(read_text(pidfile));
  EXPECT_TRUE(wait_gone(child, scaled(5s))) << "the command's child " << child << " outlived it";
  ASSERT_TRUE(r.wait_for("big[0] started: pid", scaled(10s))) << r.output();
  r.signal(SIGTERM);
  EXPECT_EQ(r.exit_code(scaled(10s)), 0);
}

}  // namespace
}  // namespace recycler::testing
