// The top-level `budget:` and a program's `budget:` (its preference and
// scope): values, defaults and errors at file:line:column.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "supervisor/cgroup/oomd_marks.h"
#include "tests/unit/config_test_util.h"

namespace recycler::config {
namespace {

using test::errors;
using test::parse;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

constexpr const char* kPrograms =
    "programs:\n  api:\n    command: [/bin/true]\n  pool:\n    command: [/bin/true]\n"
    "    policies:\n      - memory: {metric: uss, limit: 100MiB, scope: process}\n";

TEST(BudgetConfig, DefaultsAreTheWorkersSumByCurrentChoosingTheFastest) {
  auto loaded = parse(std::string("budget: {limit: 2GiB}\n") + kPrograms);
  ASSERT_TRUE(loaded.config);
  const BudgetConfig& b = *loaded.config->budget;
  EXPECT_EQ(b.scope, BudgetScope::Workers);
  EXPECT_EQ(b.metric, "current");
  EXPECT_EQ(b.limit->bytes, 2ull << 30);
  EXPECT_EQ(b.held, 0s);
  EXPECT_EQ(b.choose, BudgetChoose::Fastest);
  EXPECT_EQ(b.cooldown, 30s);
  EXPECT_FALSE(b.pressure);
  EXPECT_FALSE(b.trend);
  // Every program is sampled for it, whether or not it has policies.
  EXPECT_NE(loaded.config->programs[0].budget_needs, 0u);
  // A pre-fork program (a process-scope policy) gives up one process at a time.
  EXPECT_FALSE(loaded.config->programs[0].budget_processes());
  EXPECT_TRUE(loaded.config->programs[1].budget_processes());
}

TEST(BudgetConfig, EveryKeyIsRead) {
  auto loaded =
      parse(std::string("budget:\n  scope: host\n  metric: anon\n  limit: 90%\n  for: 30s\n"
                        "  pressure: {full_avg10: 15%, for: 1m}\n  horizon: 10m\n"
                        "  window: 5m\n  warmup: 1m\n  choose: newest\n"
                        "  growth_window: 2m\n  cooldown: 1m\n  interval: 2s\n") +
            kPrograms);
  ASSERT_TRUE(loaded.config);
  const BudgetConfig& b = *loaded.config->budget;
  EXPECT_EQ(b.scope, BudgetScope::Host);
  EXPECT_EQ(b.metric, "anon");
  EXPECT_EQ(*b.limit->percent, 90);
  EXPECT_EQ(*b.limit->resolve(1000), 900u);
  EXPECT_EQ(b.held, 30s);
  ASSERT_TRUE(b.pressure);
  EXPECT_TRUE(b.pressure->full);
  EXPECT_EQ(b.pressure->percent, 15);
  EXPECT_EQ(b.pressure->held, 60s);
  EXPECT_EQ(*b.horizon, 600s);
  EXPECT_TRUE(b.trend);  // the leak policy, built once
  EXPECT_EQ(b.choose, BudgetChoose::Newest);
  EXPECT_EQ(b.growth_window, 120s);
  EXPECT_EQ(b.cooldown, 60s);
  EXPECT_EQ(b.interval, 2s);
}

TEST(BudgetConfig, AProgramPrefersAvoidsOrIsOmittedAndChoosesItsScope) {
  auto loaded = parse(
      "budget: {limit: 1GiB}\nprograms:\n"
      "  a: {command: [/bin/true], budget: {prefer: true}}\n"
      "  b: {command: [/bin/true], budget: {avoid: true, scope: process}}\n"
      "  c: {command: [/bin/true], budget: {omit: true}}\n");
  ASSERT_TRUE(loaded.config);
  const auto& p = loaded.config->programs;
  EXPECT_EQ(p[0].budget.preference, BudgetPreference::Prefer);
  EXPECT_EQ(p[1].budget.preference, BudgetPreference::Avoid);
  EXPECT_TRUE(p[1].budget_processes());
  EXPECT_EQ(p[2].budget.preference, BudgetPreference::Omit);
  // The same preference, for systemd-oomd and oomd on the workers' cgroups.
  EXPECT_THAT(cgroup::oomd_marks(BudgetPreference::Avoid),
              ElementsAre(std::pair<std::string, std::string>{"user.oomd_avoid", "1"},
                          std::pair<std::string, std::string>{"trusted.oomd_avoid", "1"}));
  EXPECT_THAT(cgroup::oomd_marks(BudgetPreference::None), IsEmpty());
}

TEST(BudgetConfig, ErrorsNameFileLineColumnAndKey) {
  EXPECT_THAT(errors(std::string("budget: {for: 5s}\n") + kPrograms),
              ElementsAre(HasSubstr("test.yaml:1:9: error: budget: needs a limit, a pressure "
                                    "threshold or both")));
  EXPECT_THAT(errors(std::string("budget:\n") + kPrograms),
              ElementsAre(HasSubstr("error: budget: needs a limit")));
  EXPECT_THAT(errors(std::string("budget: {limit: 0}\n") + kPrograms),
              ElementsAre(HasSubstr("test.yaml:1:17: error: budget.limit must be greater than 0")));
  EXPECT_THAT(errors(std::string("budget: {limit: 120%}\n") + kPrograms),
              ElementsAre(HasSubstr("test.yaml:1:17: error: budget.limit: invalid percentage "
                                    "\"120%\"")));
  EXPECT_THAT(errors(std::string("budget: {scope: host, metric: uss, limit: 1GiB}\n") + kPrograms),
              ElementsAre(HasSubstr("test.yaml:1:31: error: budget.metric: uss is summed over "
                                    "the workers' processes: scope: workers only")));
  EXPECT_THAT(
      errors(std::string("budget: {horizon: 10m, pressure: {some_avg10: 10}}\n") + kPrograms),
      ElementsAre(HasSubstr("test.yaml:1:19: error: budget.horizon: a projection needs "
                            "a limit")));
  EXPECT_THAT(
      errors(std::string("budget: {pressure: {some_avg10: 10, full_avg10: 20}}\n") + kPrograms),
      ElementsAre(HasSubstr("error: budget.pressure.full_avg10: give some_avg10 or full_avg10")));
  EXPECT_THAT(errors(std::string("budget: {pressure: {for: 10s}}\n") + kPrograms),
              ElementsAre(HasSubstr("error: budget.pressure: needs some_avg10 or full_avg10")));
  EXPECT_THAT(errors(std::string("budget: {limit: 1GiB, choose: smallest}\n") + kPrograms),
              ElementsAre(HasSubstr("test.yaml:1:31: error: budget.choose: invalid value")));
  EXPECT_THAT(errors(std::string("budget: {limit: 1GiB, cooldwn: 5s}\n") + kPrograms),
              ElementsAre(HasSubstr("did you mean \"cooldown\"")));
  EXPECT_THAT(errors("budget: {limit: 1GiB}\nprograms:\n"
                     "  a: {command: [/bin/true], budget: {prefer: true, avoid: true}}\n"),
              ElementsAre(HasSubstr("test.yaml:3:59: error: programs.a.budget.avoid: "
                                    "programs.a.budget.prefer is set already")));
}

TEST(BudgetConfig, AProgramsBudgetWithoutTheTopLevelOneIsAnError) {
  EXPECT_THAT(errors("programs:\n  a: {command: [/bin/true], budget: {prefer: true}}\n"),
              ElementsAre(HasSubstr("test.yaml:2:37: error: programs.a.budget: there is no "
                                    "top-level budget: section for it to take part in")));
}

}  // namespace
}  // namespace recycler::config
