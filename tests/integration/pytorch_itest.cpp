// Seed 004 with a real PyTorch trainer (examples/pytorch/train.py, Debian's
// python3-torch, CPU) in real cgroups: its validation keeps every batch's loss
// tensor with its graph. The leak policy checkpoints it (torch.save) and
// restarts it before memory_max, and it resumes where it saved; the same
// trainer with the seed's fix runs beside it under the same policy without a
// recycle; SIGTERM to recycler mid-epoch leaves a checkpoint the next start
// resumes from. Host only: the v2 VM has no torch.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>
#include <iostream>
#include <map>
#include <regex>

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
// memory_max.
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
      - leak: {metric: anon, window: 4s, warmup: 2s, horizon: 5s, min_slope: 60MiB/min,
               limit: 90%, action: checkpoint}
    checkpoint: {signal: USR1, timeout: 10s}
    stop: {timeout: )" +
         stop_timeout + R"(}
)";
}

TEST(PyTorch, TheLeakingTrainerIsCheckpointedAndResumedAndTheFixedOneIsLeftAlone) {
  REQUIRE_TORCH(python);
  Sandbox sb;
  constexpr int kEpochs = 10, kSteps = 10;
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
  EXPECT_EQ(r.count("training done: epoch 10/10"), 2u) << r.output();
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

}  // namespace
}  // namespace recycler::testing
