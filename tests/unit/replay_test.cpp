// The replay loop: a trace through a program's policies, with the trace's own
// time, reporting when a policy starts firing; and the JSON lines it prints.
#include "supervisor/timeline/replay.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <csignal>
#include <sstream>

#include "supervisor/config/parse.h"
#include "supervisor/timeline/replay_json.h"
#include "supervisor/timeline/trace.h"

namespace recycler::timeline {
namespace {

using namespace std::chrono_literals;
using policies::Decision;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr uint64_t kMiB = 1 << 20;

// The one program of a config whose `programs.app` is `app_yaml`.
config::ProgramConfig program(const std::string& app_yaml) {
  config::LoadResult loaded =
      config::parse_string("programs:\n  app:\n    command: [\"true\"]\n" + app_yaml, "r.yaml");
  for (const auto& e : loaded.errors) ADD_FAILURE() << e.str();
  return loaded.config ? loaded.config->programs.front() : config::ProgramConfig{};
}

std::vector<policies::Sample> trace(const std::string& csv) {
  std::istringstream in(csv);
  auto r = read_trace(in, "trace.csv");
  EXPECT_TRUE(r.ok()) << r.error().message;
  return r.ok() ? *r : std::vector<policies::Sample>{};
}

// An anon trace, one row a second, in MiB.
std::vector<policies::Sample> anon_mib(std::initializer_list<uint64_t> values) {
  std::string csv = "t,anon\n";
  int t = 0;
  for (uint64_t v : values) csv += std::to_string(t++) + "," + std::to_string(v * kMiB) + "\n";
  return trace(csv);
}

std::vector<double> times(const std::vector<Replayed>& decisions) {
  std::vector<double> out;
  for (const Replayed& r : decisions) out.push_back(r.t);
  return out;
}

TEST(Replay, AMemoryPolicyOverItsLimitIsReportedOnceAtTheCrossing) {
  auto app = program("    policies:\n      - memory: {limit: 600MiB}\n");
  auto decisions = replay(app, anon_mib({100, 500, 700, 800, 900, 1000}));
  ASSERT_EQ(decisions.size(), 1u);
  EXPECT_EQ(decisions[0].t, 2.0);
  EXPECT_EQ(decisions[0].policy, "memory");
  EXPECT_EQ(decisions[0].decision.action, Decision::Action::Restart);
  EXPECT_EQ(decisions[0].decision.reason, "anon 700 MiB > 600 MiB");
}

TEST(Replay, APolicyIsReportedAgainAfterItWentQuietAndFiredAnew) {
  auto app = program("    policies:\n      - memory: {limit: 600MiB}\n");
  auto decisions = replay(app, anon_mib({700, 800, 500, 400, 900, 950, 100, 601}));
  EXPECT_THAT(times(decisions), ElementsAre(0.0, 4.0, 7.0));
}

TEST(Replay, TheHoldOfAForIsCountedInTraceTime) {
  auto app = program("    policies:\n      - memory: {limit: 600MiB, for: 2s}\n");
  auto decisions = replay(app, anon_mib({100, 700, 700, 700, 700}));
  EXPECT_THAT(times(decisions), ElementsAre(3.0));
}

TEST(Replay, StopAtFirstReportsOnlyTheFirstDecision) {
  auto app =
      program("    policies:\n      - memory: {limit: 600MiB}\n      - memory: {limit: 300MiB}\n");
  auto samples = anon_mib({100, 400, 700, 100, 700});
  EXPECT_THAT(times(replay(app, samples)), ElementsAre(1.0, 2.0, 4.0, 4.0));
  auto first = replay(app, samples, {.seed = 0, .stop_at_first = true});
  ASSERT_EQ(first.size(), 1u);
  EXPECT_EQ(first[0].t, 1.0);
  EXPECT_THAT(first[0].decision.reason, HasSubstr("> 300 MiB"));
}

TEST(Replay, DecisionsOfOneSampleComeInTheConfigsPolicyOrder) {
  auto app =
      program("    policies:\n      - memory: {limit: 600MiB}\n      - memory: {limit: 300MiB}\n");
  auto decisions = replay(app, anon_mib({700}));
  ASSERT_EQ(decisions.size(), 2u);
  EXPECT_THAT(decisions[0].decision.reason, HasSubstr("> 600 MiB"));
  EXPECT_THAT(decisions[1].decision.reason, HasSubstr("> 300 MiB"));
}

TEST(Replay, AProcessScopePolicySeesTheTracesSyntheticProcess) {
  auto app =
      program("    policies:\n      - memory: {metric: uss, limit: 100MiB, scope: process}\n");
  auto decisions = replay(app, trace("t,uss\n0,1000\n10," + std::to_string(200 * kMiB) + "\n"));
  ASSERT_EQ(decisions.size(), 1u);
  EXPECT_EQ(decisions[0].t, 10.0);
  EXPECT_EQ(decisions[0].decision.action, Decision::Action::Signal);
  EXPECT_EQ(decisions[0].decision.pid, 1);
}

TEST(Replay, FiringAtAnotherPidIsReportedAsANewDecision) {
  auto app =
      program("    policies:\n      - memory: {metric: rss, limit: 100MiB, scope: process}\n");
  std::vector<policies::Sample> samples;
  for (pid_t pid : {10, 10, 11}) {
    policies::Sample s;
    s.t = policies::TimePoint{} + std::chrono::seconds(samples.size());
    policies::ProcessSample p;
    p.pid = pid;
    p.rss = 200 * kMiB;
    s.processes.push_back(p);
    samples.push_back(s);
  }
  auto decisions = replay(app, samples);
  ASSERT_EQ(decisions.size(), 2u);
  EXPECT_EQ(decisions[0].decision.pid, 10);
  EXPECT_EQ(decisions[1].decision.pid, 11);
  EXPECT_EQ(decisions[1].t, 2.0);
}

TEST(Replay, APercentageLimitIsOfTheProgramsMemoryMax) {
  auto app = program(
      "    limits: {memory_max: 1GiB}\n"
      "    policies:\n      - memory: {metric: current, limit: 50%}\n");
  auto decisions = replay(app, trace("t,current\n0,536870912\n1,536870913\n"));
  ASSERT_EQ(decisions.size(), 1u);
  EXPECT_EQ(decisions[0].t, 1.0);
  EXPECT_THAT(decisions[0].decision.reason, HasSubstr("(50% of 1 GiB)"));
}

TEST(Replay, PoliciesStartWithTheWorkerAtTimeZero) {
  auto app = program("    policies:\n      - max_lifetime: {after: 1h}\n");
  auto decisions = replay(app, trace("t\n0\n1800\n3599.9\n3600\n7200\n"));
  EXPECT_THAT(times(decisions), ElementsAre(3600.0)) << "and keeps firing without a report";
}

TEST(Replay, TheSeedDrawsThePoliciesJitter) {
  auto app = program("    policies:\n      - max_lifetime: {after: 1h, jitter: 30m}\n");
  std::string csv = "t\n";
  for (int t = 0; t <= 7200; t += 10) csv += std::to_string(t) + "\n";
  auto samples = trace(csv);
  auto once = times(replay(app, samples, {.seed = 1}));
  ASSERT_EQ(once.size(), 1u);
  EXPECT_EQ(times(replay(app, samples, {.seed = 1})), once) << "deterministic given its seed";
  EXPECT_NE(times(replay(app, samples, {.seed = 2})), once);
}

TEST(ReplayJson, HasTimePolicyActionAndReason) {
  Replayed r{997, "memory", {}};
  r.decision.action = Decision::Action::Restart;
  r.decision.reason = "anon 612 MiB > 600 MiB";
  EXPECT_EQ(
      to_json(r),
      R"({"t": 997.0, "policy": "memory", "action": "restart", "reason": "anon 612 MiB > 600 MiB"})");
}

TEST(ReplayJson, AddsPredictedSecondsWhenTheDecisionHasThem) {
  Replayed r{1200.25, "leak", {}};
  r.decision.action = Decision::Action::Checkpoint;
  r.decision.reason = "leak";
  r.decision.predicted_s = 960.0;
  EXPECT_EQ(to_json(r),
            R"({"t": 1200.25, "policy": "leak", "action": "checkpoint", "reason": "leak", )"
            R"("predicted_s": 960.0})");
}

TEST(ReplayJson, AddsPidAndSignalNameForASignalAction) {
  Replayed r{30.5, "memory", {}};
  r.decision.action = Decision::Action::Signal;
  r.decision.reason = "uss";
  r.decision.pid = 1;
  EXPECT_THAT(to_json(r),
              HasSubstr(R"("action": "signal", "reason": "uss", "pid": 1, "signal": "TERM"})"))
      << "signal 0 means SIGTERM";
  r.decision.signal = SIGUSR1;
  EXPECT_THAT(to_json(r), HasSubstr(R"("signal": "USR1"})"));
}

TEST(ReplayJson, EscapesTheReason) {
  Replayed r{1, "memory", {}};
  r.decision.action = Decision::Action::Restart;
  r.decision.reason = "say \"hi\"\\\n\x01";
  EXPECT_THAT(to_json(r), HasSubstr(R"("reason": "say \"hi\"\\\n\u0001")"));
}

TEST(ReplayJson, RoundsTimeToTheMillisecond) {
  Replayed r{0.0004, "memory", {}};
  r.decision.action = Decision::Action::Restart;
  EXPECT_THAT(to_json(r), HasSubstr(R"({"t": 0.0, )"));
  r.t = 12.3456;
  EXPECT_THAT(to_json(r), HasSubstr(R"({"t": 12.346, )"));
}

}  // namespace
}  // namespace recycler::timeline
