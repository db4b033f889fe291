// Wrap mode's flags (supervisor/config/wrap.h): each builds what the same
// YAML in a file builds, through the same parser and compile step, and what
// is wrong names the flag.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <csignal>
#include <filesystem>

#include "supervisor/config/wrap.h"
#include "tests/unit/config_test_util.h"

namespace recycler::config {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

WrapFlags flags(std::vector<std::string> command = {"/bin/app", "--serve"}) {
  WrapFlags f;
  f.command = std::move(command);
  f.name = "app";
  return f;
}

ProgramConfig built(const WrapFlags& f) {
  WrapResult r = config_from_flags(f, HostLookup::real());
  EXPECT_THAT(r.errors, IsEmpty());
  if (!r.config || r.config->programs.size() != 1) {
    ADD_FAILURE() << "no program";
    return {};
  }
  return r.config->programs[0];
}

std::vector<std::string> errors(const WrapFlags& f) {
  WrapResult r = config_from_flags(f, HostLookup::real());
  EXPECT_FALSE(r.config.has_value());
  return r.errors;
}

std::vector<std::string> sources(const ProgramConfig& p) {
  std::vector<std::string> out;
  for (const PolicyConfig& policy : p.policies) out.push_back(policy.source);
  return out;
}

TEST(WrapFlags, TheCommandAndItsBasicsAsBefore) {
  WrapFlags f = flags({"/bin/app", "--serve", "it's \"quoted\"\n", "*not-an-alias"});
  f.memory_max = "512MiB";
  f.threads = 4;
  f.restart = "always";
  ProgramConfig p = built(f);
  EXPECT_EQ(p.name, "app");
  EXPECT_THAT(p.command, ElementsAre("/bin/app", "--serve", "it's \"quoted\"\n", "*not-an-alias"));
  EXPECT_EQ(p.limits.memory_max, 512ull << 20);
  EXPECT_EQ(p.threads, 4u);
  EXPECT_EQ(p.restart.mode, RestartMode::Always);
  EXPECT_THAT(p.policies, IsEmpty());
}

// The same policies as the YAML, to the canonical source each is compared by on reload.
TEST(WrapFlags, EachPolicyFlagIsItsYaml) {
  WrapFlags f = flags();
  f.memory_max = "1GiB";
  f.recycle_at = "80%";
  f.max_requests = "1000+100";
  f.max_lifetime = "6h+30m";
  ProgramConfig from_flags = built(f);
  ProgramConfig from_file = test::program(R"(programs:
  app:
    command: [/bin/app, --serve]
    limits: {memory_max: 1GiB}
    policies:
      - memory: {limit: 80%}
      - max_requests: {limit: 1000, jitter: 100}
      - max_lifetime: {after: 6h, jitter: 30m}
)");
  EXPECT_EQ(sources(from_flags), sources(from_file));
  EXPECT_EQ(from_flags.policies.size(), 3u);
}

TEST(WrapFlags, LeakScalesItsMinimumSlopeToTheMemoryLimit) {
  WrapFlags f = flags();
  f.memory_max = "1GiB";
  f.leak = true;
  ProgramConfig p = built(f);
  ASSERT_EQ(p.policies.size(), 2u) << "the leak policy and its backstop";
  EXPECT_EQ(p.policies[0].name, "leak");
  EXPECT_THAT(p.policies[0].source, HasSubstr("90%"));
  EXPECT_THAT(p.policies[0].source, HasSubstr("1048576B/min"));  // 1 MiB/min at 1 GiB
  f.memory_max = "256MiB";
  EXPECT_THAT(built(f).policies[0].source, HasSubstr("262144B/min"));
}

TEST(WrapFlags, CheckpointSetsTheSignalAndTheActionOfMemoryAndLeak) {
  WrapFlags f = flags();
  f.memory_max = "1GiB";
  f.recycle_at = "700MiB";
  f.leak = true;
  f.max_lifetime = "1h";
  f.checkpoint = "SIGUSR2";
  ProgramConfig p = built(f);
  EXPECT_EQ(p.checkpoint.signal, SIGUSR2);
  ASSERT_EQ(p.policies.size(), 4u);
  EXPECT_THAT(p.policies[0].source, HasSubstr("checkpoint"));
  EXPECT_THAT(p.policies[1].source, HasSubstr("checkpoint"));
  EXPECT_EQ(p.policies[2].source, "{memory: {limit: 95%}}") << "the backstop restarts";
  EXPECT_THAT(p.policies[3].source, ::testing::Not(HasSubstr("checkpoint")));
}

// A 20 MB/s leaker under --memory-max 512MiB --leak was OOM-killed at 26 s:
// the leak policy decides nothing during its 2 min warm-up. And a trainer
// that ignores its checkpoint signal met the OOM killer 2.7 s after it. A
// memory policy at 95% of --memory-max restarts either first.
TEST(WrapFlags, LeakAndCheckpointGetABackstopAt95PercentWhereNothingRestartsSooner) {
  auto backstops = [](const WrapFlags& f) {
    int n = 0;
    for (const PolicyConfig& p : built(f).policies) n += p.source == "{memory: {limit: 95%}}";
    return n;
  };
  WrapFlags f = flags();
  f.memory_max = "512MiB";
  f.leak = true;
  EXPECT_EQ(backstops(f), 1);
  f.recycle_at = "80%";
  EXPECT_EQ(backstops(f), 0) << "--recycle-at restarts it at 80% already";
  f.checkpoint = "USR1";
  EXPECT_EQ(backstops(f), 1) << "--recycle-at asks for a checkpoint now";
  f.recycle_at = "500MiB";
  EXPECT_EQ(backstops(f), 0) << "above 95% of 512 MiB: nothing to restart sooner";
  f.recycle_at = "400MiB";
  EXPECT_EQ(backstops(f), 1);
}

TEST(WrapFlags, CheckpointTimeoutSetsTheTimeoutAndNeedsCheckpoint) {
  WrapFlags f = flags();
  f.memory_max = "1GiB";
  f.leak = true;
  f.checkpoint = "USR1";
  f.checkpoint_timeout = "30s";
  EXPECT_EQ(built(f).checkpoint.timeout, std::chrono::seconds(30));
  f.checkpoint_timeout = "soon";
  EXPECT_THAT(errors(f), ElementsAre(HasSubstr("--checkpoint-timeout soon: ")));
  WrapFlags alone = flags();
  alone.checkpoint_timeout = "30s";
  EXPECT_THAT(errors(alone),
              ElementsAre("--checkpoint-timeout 30s: needs --checkpoint (the signal that asks "
                          "for the checkpoint)"));
}

TEST(WrapFlags, TimelineIsRelativeToTheCurrentDirectory) {
  WrapFlags f = flags();
  f.timeline = "traces";
  ProgramConfig p = built(f);
  ASSERT_TRUE(p.timeline);
  EXPECT_EQ(p.timeline->dir, (std::filesystem::current_path() / "traces").string());
}

TEST(WrapFlags, ErrorsNameTheFlagAndItsValue) {
  WrapFlags f = flags();
  f.recycle_at = "5XB";
  f.max_requests = "10+x";
  f.max_lifetime = "0s";
  f.checkpoint = "SIGFOO";
  f.timeline = "";
  EXPECT_THAT(errors(f),
              ElementsAre(HasSubstr("--checkpoint SIGFOO: invalid signal \"SIGFOO\""),
                          HasSubstr("--recycle-at 5XB: limit: invalid size \"5XB\""),
                          "--max-requests 10+x: jitter: invalid value \"x\"; expected an integer "
                          "from 0 to 1000000000000",
                          "--max-lifetime 0s: after must be greater than 0"));
}

TEST(WrapFlags, WhatAFlagNeedsIsSaid) {
  WrapFlags f = flags();
  f.recycle_at = "75%";
  f.leak = true;
  EXPECT_THAT(errors(f), ElementsAre(HasSubstr("--recycle-at 75%: a percentage needs --memory-max"),
                                     HasSubstr("--leak: needs --memory-max")));
  WrapFlags c = flags();
  c.checkpoint = "USR1";
  c.max_requests = "5";
  EXPECT_THAT(errors(c), ElementsAre(HasSubstr("--checkpoint USR1: needs --recycle-at or --leak")));
}

TEST(WrapFlags, EveryLineOfTheYamlIsOneFlagsOrNone) {
  WrapFlags f = flags();
  f.memory_max = "1GiB";
  f.recycle_at = "80%";
  WrapYaml y = wrap_yaml(f);
  size_t newlines = static_cast<size_t>(std::count(y.text.begin(), y.text.end(), '\n'));
  EXPECT_EQ(newlines, y.flag_of_line.size());
  EXPECT_THAT(y.flag_of_line, ::testing::Contains("--recycle-at 80%"));
  EXPECT_THAT(y.flag_of_line, ::testing::Contains("--memory-max 1GiB"));
}

}  // namespace
}  // namespace recycler::config
