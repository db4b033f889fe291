// Seed 004 with a real PyTorch trainer (examples/pytorch/train.py, Debian's
// python3-torch, CPU) in real cgroups: its validation keeps every batch's loss
// tensor with its graph. The leak policy checkpoints it (torch.save) and
// restarts it before memory_max, and it resumes where it saved; the same
// trainer with the seed's fix runs beside it under the same policy without a
// recycle; SIGTERM to recycler mid-epoch leaves a checkpoint the next start
// resumes from. Host only: the v2 VM has no torch.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <regex>
#include <sstream>

#include "tests/support/itest.h"

namespace recycler::testing {
namespace {

using ::testing::HasSubstr;

std::optional<std::string> torch_python() {
  auto python = python_bin();
  if (!python) return std::nullopt;
  if (run_command({*python, "-c", "import torch"}, 60s).code != 0) return std::nullopt;
  return python;
}

#define REQUIRE_TORCH(python)                                                             \
  RECYCLER_REQUIRE_CGROUPS();                                                             \
  RECYCLER_HOST_ONLY();                                                                   \
  auto python = torch_python();                                                           \
  if (!python)                                                                            \
  GTEST_SKIP() << "no Debian python3-torch (scripts/install-deps --test installs it, or " \
                  "set RECYCLER_PYTHON)"

// One program running train.py, small and fast (~1.3 s an epoch, ~12 MiB of
// leaked graphs an epoch), with the leak policy of a trainer whose limit is
// memory_max. Its window holds three epochs even when a loaded machine makes
// them twice as long (with 4s, the policy lost the trend at 2.6 s an epoch
// and the leaking trainer finished unrecycled).
std::string trainer(const std::string& name, const std::string& python, const Sandbox& sb,
                    int epochs, const std::string& extra_args = "",
                    const std::string& stop_timeout = "5s") {
  const std::string dir = examples_dir() + "/pytorch";
  return "  " + name + R"(:
    command: [")" +
         python + R"(", train.py, --epochs, ")" + std::to_string(epochs) +
         R"(", --batch, "128", --hidden, "512", --steps, "10", --val-batches, "20",
              --checkpoint, ")" +
         sb.tmp() + "/" + name + R"(.pt", --progress, ")" + sb.tmp() + "/" + name + ".progress\"" +
         extra_args + R"(]
    cwd: )" +
         dir + R"(
    env: {PYTHONPATH: )" +
         dir + R"(/../../python}
    threads: 1
    limits: {memory_max: 320MiB}
    sample_interval: 200ms
    min_uptime: 1s
    policies:
      - leak: {metric: anon, window: 8s, warmup: 2s, horizon: 5s, min_slope: 60MiB/min,
               limit: 90%, action: checkpoint}
    checkpoint: {signal: USR1, timeout: 10s}
    stop: {timeout: )" +
         stop_timeout + R"(}
)";
}

TEST(PyTorch, TheLeakingTrainerIsCheckpointedAndResumedAndTheFixedOneIsLeftAlone) {
  REQUIRE_TORCH(python);
  Sandbox sb;
  constexpr int kEpochs = 12, kSteps = 10;
  std::string cfg =
      sb.write("c.yaml", config_yaml(sb, trainer("leaky", *python, sb, kEpochs) +
                                             trainer("fixed", *python, sb, kEpochs, ", --fixed")));
  Recycler r({"run", "-c", cfg}, sb);
  ASSERT_TRUE(r.wait_for("leaky[0] asked to checkpoint: SIGUSR1", scaled(90s))) << r.output();
  auto saved = r.wait_for("checkpoint saved (asked by recycler)", scaled(20s));
  ASSERT_TRUE(saved) << r.output();
  ASSERT_TRUE(r.wait_for("leaky[0] checkpointed in", scaled(20s)));
  auto resumed = r.wait_for("resumed from checkpoint: global step", scaled(30s));
  ASSERT_TRUE(resumed) << r.output();
  EXPECT_THAT(*resumed, HasSubstr("recycled for: anon +"));
  EXPECT_EQ(global_step(*resumed), global_step(*saved)) << "not a step lost";
  EXPECT_EQ(oom_kills(sb, "leaky"), std::optional<uint64_t>(0));
  EXPECT_EQ(oom_kills(sb, "fixed"), std::optional<uint64_t>(0));
  // Both finish: recycler exits once they have (restart: on-failure).
  EXPECT_EQ(r.exit_code(scaled(120s)), 0) << r.output();
  EXPECT_EQ(
      r.count("training done: epoch " + std::to_string(kEpochs) + "/" + std::to_string(kEpochs)),
      2u)
      << r.output();
  EXPECT_EQ(r.count("OOM"), 0u) << r.output();
  EXPECT_EQ(r.count("fixed[0] recycle"), 0u) << "the sawtooth is no leak\n" << r.output();
  EXPECT_EQ(r.count("fixed[0] asked to checkpoint"), 0u) << r.output();

  // Every step of the leaking one done once at least, none redone: each
  // run resumed where the one before saved on request.
  auto steps = read_progress(sb.tmp() + "/leaky.progress");
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
  for (size_t i = 1; i < order.size(); ++i)
    EXPECT_EQ(runs[order[i]].first - 1, runs[order[i - 1]].second)
        << "generation " << order[i] << " did not start at the step after the last";
}

// SIGTERM to recycler (systemd's stop) mid-epoch: the trainer is asked to
// checkpoint first, saves, and stops; the next recycler's trainer resumes
// from that checkpoint.
TEST(PyTorch, SigtermMidEpochLeavesACheckpointTheNextStartResumesFrom) {
  REQUIRE_TORCH(python);
  Sandbox sb;
  std::string cfg = sb.write("c.yaml", config_yaml(sb, trainer("train", *python, sb, 3)));
  std::string saved;
  {
    Recycler r({"run", "-c", cfg}, sb);
    ASSERT_TRUE(r.wait_for("epoch 1/3 done", scaled(60s))) << r.output();
    r.signal(SIGTERM);
    ASSERT_TRUE(r.wait_for("train[0] stopping: asked to checkpoint first (SIGUSR1"));
    auto line = r.wait_for("checkpoint saved (asked by recycler)", scaled(20s));
    ASSERT_TRUE(line) << r.output();
    saved = *line;
    ASSERT_TRUE(r.wait_for("train[0] checkpointed before its stop"));
    EXPECT_EQ(r.exit_code(scaled(20s)), 0) << r.output();
  }
  Recycler again({"run", "-c", cfg}, sb);
  auto resumed = again.wait_for("resumed from checkpoint: global step", scaled(60s));
  ASSERT_TRUE(resumed) << again.output();
  EXPECT_EQ(global_step(*resumed), global_step(saved));
  EXPECT_THAT(*resumed, HasSubstr("a checkpoint of an earlier run"));
  EXPECT_EQ(again.exit_code(scaled(60s)), 0) << again.output();
  EXPECT_EQ(again.count("training done: epoch 3/3"), 1u);
}

// A trainer wedged in its data loader's lock: each step says it is alive
// (RECYCLER_ITERATION), so the watchdog sees the silence within its timeout
// and one sample; the stacks are in the log (diagnose's signal, the Python
// helper's faulthandler), and the restart resumes from its last periodic
// checkpoint, redoing the steps since.
TEST(PyTorch, AWedgedTrainerIsFoundDiagnosedAndResumesFromItsCheckpoint) {
  REQUIRE_TORCH(python);
  Sandbox sb;
  // stop.timeout 1s: a main thread stuck in a lock never runs Python's
  // SIGTERM handler; SIGKILL ends it.
  std::string program = trainer("train", *python, sb, 3,
                                ", --hang-at-step, \"23\", "
                                "--checkpoint-every, \"5\"",
                                "1s");
  program += R"(    watchdog: {timeout: 2s}
    diagnose: {signal: USR2}
)";
  std::string cfg = sb.write("c.yaml", config_yaml(sb, program));
  Recycler r({"run", "-c", cfg}, sb);
  ASSERT_TRUE(r.wait_for("waiting for batch 23 (it will never come)", scaled(60s))) << r.output();
  std::smatch m;
  ASSERT_TRUE(r.wait_for(std::regex(R"(train\[0\] recycle: hung: no WATCHDOG=1 or )"
                                    R"(RECYCLER_ITERATION for ([0-9.]+)s \(watchdog timeout 2s\))"),
                         &m, scaled(10s)))
      << r.output();
  double silent_s = std::stod(m[1]);
  EXPECT_GE(silent_s, 2.0);
  EXPECT_LT(silent_s, 2.0 + 0.2 + 0.1) << "within the timeout and one sample interval";
  ASSERT_TRUE(r.wait_for(" in next_batch", scaled(10s))) << "its stack\n" << r.output();
  EXPECT_EQ(r.count("train[0] diagnosed before its recycle (watchdog policy): SIGUSR2"), 1u);
  auto resumed = r.wait_for("resumed from checkpoint: global step", scaled(60s));
  ASSERT_TRUE(resumed) << r.output();
  EXPECT_EQ(global_step(*resumed), 20) << "its last periodic checkpoint before step 23";
  EXPECT_EQ(r.exit_code(scaled(60s)), 0) << r.output();
  EXPECT_EQ(r.count("training done: epoch 3/3"), 1u) << r.output();
  std::cout << "figures: hang found " << silent_s << " s after the last step began (timeout 2s, "
            << "sample_interval 200ms)\n";
}

// ddp_train.py's per-rank progress ("RANK GENERATION STEP TIME"): for each rank,
// the last step of generation 1 and the first of generation 2.
struct RankSteps {
  std::map<int, int> last_of_first, first_of_second;
};
RankSteps rank_steps(const std::string& path) {
  RankSteps out;
  std::ifstream in(path);
  int rank = 0, step = 0;
  std::string generation, line;
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    if (!(fields >> rank >> generation >> step)) continue;
    if (generation == "1") out.last_of_first[rank] = std::max(out.last_of_first[rank], step);
    if (generation == "2" && !out.first_of_second.count(rank)) out.first_of_second[rank] = step;
  }
  return out;
}

// The N of "... at step N" in a rank's line; -1 when it has none.
int at_step(const std::string& line) {
  std::smatch m;
  static const std::regex re(R"(at step ([0-9]+))");
  return std::regex_search(line, m, re) ? std::stoi(m[1]) : -1;
}

std::string ddp_args(const Sandbox& sb, const std::string& name, const std::string& python) {
  return "\"" + python + "\", ddp_train.py, --steps, \"100000\", --step-time, \"0.01\", " +
         "--leak-rank, \"1\", --leak-mib, \"1\", --leak-runs, \"1\", --checkpoint, \"" + sb.tmp() +
         "/" + name + ".pt\", --progress, \"" + sb.tmp() + "/" + name + ".progress\"";
}

// Two ranks of one torch.distributed job (DDP over gloo), one slot each, as a
// gang: rank 1's leak trips its memory policy; both ranks checkpoint (rank 0
// saves), both stop, both start again with RECYCLER_RESUME=1, rejoin the
// process group and go on from the step saved: none lost, none redone, no
// rank left waiting in a collective.
TEST(PyTorch, GangRanksAreCheckpointedStoppedAndRestartedTogether) {
  REQUIRE_TORCH(python);
  Sandbox sb;
  const std::string dir = examples_dir() + "/pytorch";
  std::string program = "  ddp:\n    command: [" + ddp_args(sb, "ddp", *python) + "]\n" +
                        "    cwd: " + dir + "\n    env: {PYTHONPATH: " + dir + R"(/../../python}
    instances: 2
    gang: {master: "127.0.0.1:)" +
                        std::to_string(free_port()) + R"("}
    threads: 1
    limits: {memory_max: 1GiB}
    sample_interval: 200ms
    policies:
      - memory: {metric: anon, limit: 260MiB, action: checkpoint}
    checkpoint: {signal: USR1, timeout: 20s}
    stop: {timeout: 5s}
)";
  std::string cfg = sb.write("c.yaml", config_yaml(sb, program));
  Recycler r({"run", "-c", cfg}, sb);
  ASSERT_TRUE(r.wait_for("ddp gang recycle: ddp[1]: anon", scaled(90s))) << r.output();
  auto saved = r.wait_for("rank 0: checkpoint saved at step", scaled(20s));
  ASSERT_TRUE(saved) << r.output();
  int step = at_step(*saved);
  ASSERT_GT(step, 0);
  ASSERT_TRUE(r.wait_for("ddp gang restarted: 2 of 2 ranks running", scaled(30s))) << r.output();
  // Each rank's line, in whichever order they come.
  ASSERT_TRUE(r.wait_for_count("resumed from checkpoint at step", 2, scaled(60s))) << r.output();
  for (const std::string& line : r.lines()) {
    if (line.find(": resumed from checkpoint at step") != std::string::npos) {
      EXPECT_EQ(at_step(line), step) << line;
    }
  }
  // Both train again: a step of generation 2 from each rank.
  ASSERT_TRUE(
      eventually([&] { return rank_steps(sb.tmp() + "/ddp.progress").first_of_second.size() == 2; },
                 scaled(60s)))
      << r.output();
  Cli status = cli({"status", "-c", cfg});
  EXPECT_THAT(status.out, HasSubstr("ddp: gang of 2 ranks, 1 recycle together; last: ddp[1]: anon"))
      << status.out << status.err;
  EXPECT_EQ(r.count("exited with status 0 after"), 2u) << "both stopped as asked\n" << r.output();
  r.signal(SIGTERM);
  EXPECT_EQ(r.exit_code(scaled(30s)), 0) << r.output();
  RankSteps steps = rank_steps(sb.tmp() + "/ddp.progress");
  for (int rank : {0, 1}) {
    EXPECT_EQ(steps.last_of_first[rank], step)
        << "rank " << rank << ": no step after the checkpoint";
    EXPECT_EQ(steps.first_of_second[rank], step + 1) << "rank " << rank << ": none lost or redone";
  }
  EXPECT_EQ(r.count("ddp[0] checkpointed for its gang's recycle"), 1u) << r.output();
  EXPECT_EQ(r.count("ddp[1] checkpointed for its gang's recycle"), 1u) << r.output();
  EXPECT_EQ(r.count("RuntimeError"), 0u) << "no rank failed in a collective\n" << r.output();
}

// A stuck collective: rank 1 wedges (a lock nobody releases) and rank 0 waits
// for it in its next all-reduce. Both go silent; the watchdog finds the hang
// within its timeout, and the gang restarts both (the hung rank cannot
// checkpoint; the other, stuck in gloo, fails or is stopped): they resume
// from rank 0's last periodic checkpoint, together, and train again.
TEST(PyTorch, AStuckCollectiveRestartsTheWholeGang) {
  REQUIRE_TORCH(python);
  Sandbox sb;
  const std::string dir = examples_dir() + "/pytorch";
  std::string args = ddp_args(sb, "hang", *python);
  args = args.substr(0, args.find(", --leak-rank")) + args.substr(args.find(", --checkpoint,"));
  std::string program = "  hang:\n    command: [" + args +
                        ", --hang-rank, \"1\", --hang-at-step, \"60\", --checkpoint-every, "
                        "\"25\"]\n    cwd: " +
                        dir + "\n    env: {PYTHONPATH: " + dir + R"(/../../python}
    instances: 2
    gang: {master: "127.0.0.1:)" +
                        std::to_string(free_port()) + R"("}
    threads: 1
    sample_interval: 200ms
    watchdog: {timeout: 2s}
    checkpoint: {signal: USR1, timeout: 3s}
    stop: {timeout: 2s}
)";
  std::string cfg = sb.write("c.yaml", config_yaml(sb, program));
  Recycler r({"run", "-c", cfg}, sb);
  ASSERT_TRUE(r.wait_for("rank 1: waiting for batch 60", scaled(60s))) << r.output();
  std::smatch m;
  ASSERT_TRUE(r.wait_for(std::regex(R"(hang gang recycle: hang\[[01]\]: hung: no WATCHDOG=1)"), &m,
                         scaled(10s)))
      << r.output();
  ASSERT_TRUE(r.wait_for("hang gang restarted: 2 of 2 ranks running", scaled(20s))) << r.output();
  ASSERT_TRUE(r.wait_for_count("resumed from checkpoint at step", 2, scaled(60s))) << r.output();
  for (const std::string& line : r.lines()) {
    if (line.find(": resumed from checkpoint at step") != std::string::npos) {
      EXPECT_EQ(at_step(line), 50) << "rank 0's last periodic save before step 60: " << line;
    }
  }
  ASSERT_TRUE(eventually(
      [&] { return rank_steps(sb.tmp() + "/hang.progress").first_of_second.size() == 2; },
      scaled(60s)))
      << r.output();
  EXPECT_EQ(r.count("gang recycle:"), 1u) << "one recycle for both silent ranks\n" << r.output();
  r.signal(SIGTERM);
  EXPECT_EQ(r.exit_code(scaled(30s)), 0) << r.output();
}

// The same job launched by torchrun in one slot: the checkpoint signal goes to
// the agent's children (checkpoint.signal_to), the agent gets the stop
// signal and stops its ranks, and the next start resumes both.
TEST(PyTorch, TorchrunsRanksCheckpointThroughSignalToChildren) {
  REQUIRE_TORCH(python);
  Sandbox sb;
  const std::string dir = examples_dir() + "/pytorch";
  std::string args = ddp_args(sb, "tr", *python);
  args = args.substr(args.find("ddp_train.py"));  // torchrun runs it with its own python
  std::string program = R"(  tr:
    command: [/usr/bin/torchrun, --standalone, --nproc_per_node, "2", --redirects, "1",
              --tee, "1", --log_dir, ")" +
                        sb.tmp() + "/logs\", " + args + "]\n" + "    cwd: " + dir +
                        "\n    env: {PYTHONPATH: " + dir + R"(/../../python}
    threads: 1
    limits: {memory_max: 2GiB}
    sample_interval: 200ms
    policies:
      - memory: {metric: anon, limit: 520MiB, action: checkpoint}
    checkpoint: {signal: USR1, signal_to: children, timeout: 20s}
    stop: {timeout: 10s}
)";
  if (!std::filesystem::exists("/usr/bin/torchrun")) GTEST_SKIP() << "no /usr/bin/torchrun";
  std::string cfg = sb.write("c.yaml", config_yaml(sb, program));
  Recycler r({"run", "-c", cfg}, sb);
  std::smatch m;
  ASSERT_TRUE(r.wait_for(std::regex(R"(tr\[0\] asked to checkpoint: SIGUSR1 to the children of )"
                                    R"(pid ([0-9]+))"),
                         &m, scaled(120s)))
      << r.output();
  ASSERT_TRUE(r.wait_for("tr[0] checkpointed in", scaled(20s))) << r.output();
  // The ranks' lines come through the agent's tee, in its own time.
  ASSERT_TRUE(r.wait_for_count("resumed from checkpoint at step", 2, scaled(90s))) << r.output();
  std::map<int, int> resumed_at;
  for (const std::string& line : r.lines())
    for (int rank : {0, 1})
      if (line.find("rank " + std::to_string(rank) + ": resumed from checkpoint") !=
          std::string::npos)
        resumed_at[rank] = at_step(line);
  EXPECT_GT(resumed_at[0], 0);
  EXPECT_EQ(resumed_at[0], resumed_at[1]) << "one checkpoint for both ranks";
  ASSERT_TRUE(
      eventually([&] { return rank_steps(sb.tmp() + "/tr.progress").first_of_second.size() == 2; },
                 scaled(60s)))
      << r.output();
  EXPECT_EQ(r.count("tr[0] started:"), 2u) << "the agent, restarted once";
  r.signal(SIGTERM);
  EXPECT_EQ(r.exit_code(scaled(30s)), 0) << r.output();
  RankSteps steps = rank_steps(sb.tmp() + "/tr.progress");
  for (int rank : {0, 1}) {
    EXPECT_EQ(steps.last_of_first[rank], resumed_at[0]) << "rank " << rank;
    EXPECT_EQ(steps.first_of_second[rank], resumed_at[0] + 1) << "rank " << rank;
  }
}

}  // namespace
}  // namespace recycler::testing
