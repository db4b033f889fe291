// `recycler replay` runs the runtime's own decision engine: a real run's
// timeline, replayed through the same config, reproduces the decisions the
// live run took, at the same sample, with the same reason. Two real runs:
// the demo's leaky worker (a memory limit) and a checkpointing trainer (the
// leak policy, action: checkpoint).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>

#include "supervisor/config/parse.h"
#include "supervisor/timeline/replay.h"
#include "supervisor/timeline/trace.h"
#include "tests/support/itest.h"

namespace recycler::testing {
namespace {

// One row of an events file: time,generation,t,event,pid,detail.
struct EventRow {
  unsigned generation = 0;
  double t = 0;
  std::string event;
  std::string detail;
};

std::vector<EventRow> read_events(const std::string& path) {
  std::vector<EventRow> out;
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);  // header
  while (std::getline(in, line)) {
    std::vector<std::string> cells;
    size_t at = 0;
    for (int i = 0; i < 5; ++i) {
      size_t comma = line.find(',', at);
      if (comma == std::string::npos) break;
      cells.push_back(line.substr(at, comma - at));
      at = comma + 1;
    }
    if (cells.size() < 5) continue;
    std::string detail = line.substr(at);
    if (detail.size() >= 2 && detail.front() == '"') {  // RFC 4180: quotes doubled
      std::string unquoted;
      for (size_t i = 1; i + 1 < detail.size(); ++i) {
        unquoted += detail[i];
        if (detail[i] == '"') ++i;
      }
      detail = unquoted;
    }
    out.push_back(
        {static_cast<unsigned>(std::stoul(cells[1])), std::stod(cells[2]), cells[3], detail});
  }
  return out;
}

// Replays the first run's samples (rotated to PROGRAM.0.csv.1 when the
// second began) through `program` of `config_file`, and checks that what
// recycler would do is what the live run did: the same decisions, each at
// the sample the live one was taken on (the event's t, a moment after that
// sample's), with the same reason.
void expect_replay_reproduces_first_run(const std::string& config_file, const std::string& program,
                                        const std::string& dir) {
  config::LoadResult loaded = config::load_file(config_file);
  ASSERT_TRUE(loaded.config) << config_file;
  const config::ProgramConfig* p = loaded.config->find(program);
  ASSERT_NE(p, nullptr);
  auto samples = timeline::read_trace_file(dir + "/" + program + ".0.csv.1");
  ASSERT_TRUE(samples.ok()) << samples.error().message;
  ASSERT_FALSE(samples->empty());

  std::vector<EventRow> live;
  for (const EventRow& e : read_events(dir + "/" + program + ".0.events.csv"))
    if (e.generation == 1 && e.event == "recycle") live.push_back(e);
  ASSERT_FALSE(live.empty()) << "the live run took no decision";

  timeline::ReplayRun replayed = timeline::replay_run(*p, *samples);
  ASSERT_EQ(replayed.acted.size(), live.size());
  for (size_t i = 0; i < live.size(); ++i) {
    const timeline::Replayed& r = replayed.acted[i];
    EXPECT_EQ(r.decision.reason + " (" + r.policy + " policy)", live[i].detail);
    // The sample it was decided on: the last one at or before the event.
    double on = 0;
    for (const policies::Sample& s : *samples)
      if (timeline::seconds(s.t) <= live[i].t + 0.0005) on = timeline::seconds(s.t);
    EXPECT_DOUBLE_EQ(r.t, on) << "live event at t " << live[i].t;
    // In the same turn of the loop; a slow machine (the v2 VM emulates its
    // CPU) may still take a while over the recycle's own work in between.
    EXPECT_LT(live[i].t - r.t, scaled(250ms).count() / 1000.0)
        << "the event follows its sample at once";
  }
}

TEST(ReplayFidelity, TheDemosLeakyWorkerIsRecycledAtTheSameSampleInReplay) {
  RECYCLER_REQUIRE_CGROUPS();
  Sandbox sb;
  std::string dir = sb.tmp() + "/timelines";
  std::string cfg = sb.write("demo.yaml", config_yaml(sb, R"(  leaky:
    command: [")" + leaky_bin() + R"(", "--rate", "64MiB", "--max", "1GiB"]
    limits: {memory_max: 256MiB, pids_max: 16}
    sample_interval: 200ms
    policies:
      - memory: {metric: anon, limit: 75%}
    stop: {signal: TERM, timeout: 5s}
    timeline: {dir: )" + dir + R"(}
)"));
  Recycler r({"run", "-c", cfg}, sb);
  ASSERT_TRUE(r.wait_for("leaky[0] recycle: anon", scaled(30s)));
  ASSERT_TRUE(r.wait_for("leaky[0] started: pid", scaled(30s)));  // generation 2
  r.signal(SIGTERM);
  EXPECT_EQ(r.exit_code(scaled(10s)), 0);
  expect_replay_reproduces_first_run(cfg, "leaky", dir);
}

TEST(ReplayFidelity, ACheckpointingTrainersDecisionIsTheSameInReplay) {
  RECYCLER_REQUIRE_CGROUPS();
  auto python = python_bin();
  if (!python) GTEST_SKIP() << "no Debian python3 (install python3, or set RECYCLER_PYTHON)";
  Sandbox sb;
  std::string dir = sb.tmp() + "/timelines";
  // 48 MiB kept per 1.3 s epoch toward a 512 MiB memory_max: the leak policy
  // asks for a checkpoint after a few epochs (trainer_itest.cpp has the
  // figures).
  std::string cfg = sb.write("train.yaml", config_yaml(sb, R"(  train:
    command: [")" + *python + R"(", ")" + examples_dir() + R"(/trainer/trainer.py",
              "--epochs", "12", "--steps", "10", "--step-time", "0.1", "--model-mib", "32",
              "--leak-mib", "48", "--validation-mib", "32",
              "--checkpoint", ")" + sb.tmp() + R"(/ckpt.json", "--checkpoint-every", "5"]
    env: {PYTHONPATH: ")" + examples_dir() + R"(/../python"}
    limits: {memory_max: 512MiB}
    sample_interval: 200ms
    min_uptime: 1s
    policies:
      - leak: {metric: anon, window: 4s, warmup: 1500ms, horizon: 5s, min_slope: 60MiB/min,
               limit: 90%, action: checkpoint}
    checkpoint: {signal: USR1, timeout: 10s}
    stop: {timeout: 5s}
    timeline: {dir: )" + dir + R"(}
)"));
  Recycler r({"run", "-c", cfg}, sb);
  ASSERT_TRUE(r.wait_for("train[0] asked to checkpoint: SIGUSR1", scaled(60s)));
  ASSERT_TRUE(r.wait_for("train[0] checkpointed in", scaled(20s)));
  ASSERT_TRUE(r.wait_for("train[0] started: pid", scaled(20s)));  // generation 2
  r.signal(SIGTERM);
  EXPECT_EQ(r.exit_code(scaled(10s)), 0);
  expect_replay_reproduces_first_run(cfg, "train", dir);
}

}  // namespace
}  // namespace recycler::testing
