// `recycler replay --budget` (timeline/budget_replay.h): several workers'
// traces, side by side from t = 0, through the config's budget.
#include "supervisor/timeline/budget_replay.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "supervisor/config/parse.h"

namespace recycler::timeline {
namespace {

using namespace std::chrono_literals;
using ::testing::HasSubstr;

constexpr uint64_t MiB = 1ull << 20;

config::Config load(const std::string& budget) {
  std::string yaml = "budget: ";
  yaml += budget;
  yaml +=
      "\nprograms:\n  a: {command: [/bin/true], min_uptime: 0s}\n"
      "  b: {command: [/bin/true], min_uptime: 0s}\n";
  auto loaded = config::parse_string(yaml, "test.yaml");
  EXPECT_TRUE(loaded.config);
  return loaded.config ? *loaded.config : config::Config{};
}

// A worker at `start` MiB growing `rate` MiB a second, a row a second for `n` s.
WorkerTrace linear(const std::string& program, double start, double rate, int n) {
  WorkerTrace w{program, 0, {}};
  for (int t = 0; t < n; ++t) {
    policies::Sample s;
    s.t = policies::TimePoint{} + std::chrono::seconds(t);
    s.current = static_cast<uint64_t>((start + rate * t) * MiB);
    w.samples.push_back(s);
  }
  return w;
}

TEST(BudgetReplay, TheFastestOfSeveralRecordedWorkersIsChosenWhenTheirSumCrossesTheLimit) {
  config::Config cfg = load("{limit: 200MiB, for: 2s}");
  auto choices = replay_budget(cfg, {linear("a", 100, 0.5, 60), linear("b", 50, 2, 60)}, {});
  ASSERT_EQ(choices.size(), 1u) << "b, once recycled, is out of the sum: a alone stays under";
  EXPECT_EQ(choices[0].choice.program, "b");
  // 150 + 2.5 t > 200 from t = 21, held 2 s.
  EXPECT_NEAR(choices[0].t, 22, 1);
  EXPECT_GT(choices[0].used, 200 * MiB);
  EXPECT_THAT(to_json(choices[0]), HasSubstr(R"("program": "b", "slot": 0, "trigger": "usage")"));
}

TEST(BudgetReplay, UnderTheLimitNothingIsChosen) {
  config::Config cfg = load("{limit: 1GiB}");
  EXPECT_TRUE(replay_budget(cfg, {linear("a", 100, 1, 60), linear("b", 50, 1, 60)}, {}).empty());
}

TEST(BudgetReplay, ATimelinesFileNameSaysItsWorker) {
  EXPECT_EQ(trace_worker("/var/lib/x/api.2.csv"), (std::pair<std::string, unsigned>{"api", 2}));
  EXPECT_EQ(trace_worker("web.v2.0.csv"), (std::pair<std::string, unsigned>{"web.v2", 0}));
  EXPECT_FALSE(trace_worker("api.csv"));
  EXPECT_FALSE(trace_worker("api.2.events.csv"));
  EXPECT_FALSE(trace_worker("api.2.csv.1"));
}

}  // namespace
}  // namespace recycler::timeline
