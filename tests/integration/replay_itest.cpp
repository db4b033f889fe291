// `recycler replay`, the real binary: its help, its errors (exit 2) and its
// JSON lines. Nothing is supervised, so nothing needs cgroups or root.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/support/itest.h"

namespace recycler::testing {
namespace {

using ::testing::HasSubstr;

const std::string kFixtures = RECYCLER_FIXTURES_DIR "/timeline";
const std::string kCorpus = kFixtures + "/corpus/corpus.yaml";

TEST(Replay, HelpDocumentsTheTraceFormatTheOutputAndTheExitStatus) {
  Recycler r({"replay", "--help"}, Recycler::Options{});
  EXPECT_TRUE(r.wait_for(
      "t,current,anon,file,rss,pss,uss,device,requests,threads,gpu,gpu_total,iteration"));
  EXPECT_TRUE(r.wait_for("timeline: {dir: DIR}"));
  EXPECT_TRUE(r.wait_for(R"({"t": 997.0, "policy": "memory", "action": "restart")"));
  EXPECT_TRUE(r.wait_for("Exit status: 0 when the trace was replayed"));
  EXPECT_EQ(r.exit_code(), 0);
}

TEST(Replay, PrintsOneJsonLinePerDecisionAndExitsZero) {
  Recycler r({"replay", "-c", kCorpus, "--program", "host", kFixtures + "/corpus/ramp.csv"},
             Recycler::Options{});
  EXPECT_TRUE(r.wait_for(
      R"({"t": 31.0, "policy": "memory", "action": "restart", "reason": "anon 310 MiB > 300 MiB"})"));
  EXPECT_TRUE(r.wait_for("replayed 66 samples"));
  EXPECT_EQ(r.exit_code(), 0);
  EXPECT_EQ(r.count(R"({"t": )"), 1u) << r.output();
}

TEST(Replay, ATraceWhereNothingFiresExitsZeroToo) {
  Recycler r({"replay", "-c", kCorpus, "--program", "host", kFixtures + "/corpus/flat.csv"},
             Recycler::Options{});
  EXPECT_TRUE(r.wait_for("0 decisions"));
  EXPECT_EQ(r.exit_code(), 0);
  EXPECT_EQ(r.count("{"), 0u) << r.output();
}

// "0 decisions" from a policy on rss over a trace of cgroup figures only is
// no verdict on the policy.
TEST(Replay, APolicyOnAColumnTheTraceNeverFilledIsNamed) {
  Sandbox sb;
  std::string cfg = sb.write("r.yaml", R"(programs:
  app:
    command: ["true"]
    policies:
      - memory: {metric: rss, limit: 300MiB}
)");
  std::string trace = sb.write("t.csv", "t,anon,rss\n0,100,\n1,200,\n");
  Recycler r({"replay", "-c", cfg, trace}, Recycler::Options{});
  EXPECT_TRUE(r.wait_for("0 decisions"));
  EXPECT_TRUE(
      r.wait_for("recycler: note: the memory policy reads rss, a column no row of this "
                 "trace fills: it could not decide anything here"));
  EXPECT_EQ(r.exit_code(), 0);
  Recycler filled({"replay", "-c", kCorpus, "--program", "host", kFixtures + "/corpus/flat.csv"},
                  Recycler::Options{});
  EXPECT_EQ(filled.exit_code(), 0);
  EXPECT_EQ(filled.count("note:"), 0u) << filled.output();
}

// A leak policy decides nothing before its warm-up and a third of its
// window: a shorter trace's "0 decisions" says so.
TEST(Replay, ATraceThatEndsBeforeAPolicyMayDecideIsNamed) {
  Sandbox sb;
  std::string cfg = sb.write("r.yaml", R"(programs:
  app:
    command: ["true"]
    policies:
      - leak: {metric: anon, window: 10m, warmup: 2m, horizon: 15m, limit: 1GiB}
)");
  std::string rows = "t,anon\n";
  for (int t = 0; t <= 120; t += 10)
    rows += std::to_string(t) + "," + std::to_string(t << 20) + "\n";
  Recycler r({"replay", "-c", cfg, sb.write("t.csv", rows)}, Recycler::Options{});
  EXPECT_TRUE(r.wait_for("0 decisions"));
  EXPECT_TRUE(
      r.wait_for("recycler: note: the leak policy decides nothing before 5m45s after a "
                 "start (its warmup 2m, then over a third of its window 10m); this trace "
                 "ends at 120 s: it could not decide anything here"));
  EXPECT_EQ(r.exit_code(), 0);
}

TEST(Replay, ABadTraceIsReportedAsFileLineColumnWithExitStatus2) {
  Recycler r({"replay", "-c", kCorpus, "--program", "host", kFixtures + "/bad.csv"},
             Recycler::Options{});
  auto line = r.wait_for("bad.csv:3: column anon:");
  ASSERT_TRUE(line);
  EXPECT_THAT(*line, HasSubstr("\"12x\" is not a number of bytes"));
  EXPECT_EQ(r.exit_code(), 2);
}

TEST(Replay, AnUnknownProgramIsAnErrorListingThePrograms) {
  Recycler r({"replay", "-c", kCorpus, "--program", "hots", kFixtures + "/corpus/ramp.csv"},
             Recycler::Options{});
  auto line = r.wait_for("no program \"hots\"");
  ASSERT_TRUE(line);
  EXPECT_THAT(*line, HasSubstr("its programs: host, host_baseline"));
  EXPECT_EQ(r.exit_code(), 2);
}

TEST(Replay, WithoutProgramAConfigOfSeveralProgramsIsAnError) {
  Recycler r({"replay", "-c", kCorpus, kFixtures + "/corpus/ramp.csv"}, Recycler::Options{});
  EXPECT_TRUE(r.wait_for("which program? give --program NAME"));
  EXPECT_EQ(r.exit_code(), 2);
}

TEST(Replay, AnInvalidConfigPrintsItsDiagnosticsWithExitStatus2) {
  Recycler r({"replay", "-c", kFixtures + "/bad.yaml", kFixtures + "/corpus/ramp.csv"},
             Recycler::Options{});
  EXPECT_TRUE(r.wait_for("bad.yaml:5:"));
  EXPECT_EQ(r.exit_code(), 2);
}

}  // namespace
}  // namespace recycler::testing
