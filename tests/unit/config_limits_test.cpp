// The memory settings of `limits:` beside the limits themselves: memory_low,
// swap_max and oom_group read, their defaults, and every bad value reported
// at its position (what they write: cgroup_memory_settings_test).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/unit/config_test_util.h"

namespace recycler::config::test {
namespace {

using ::testing::ElementsAre;

TEST(MemorySettings, EveryKeyIsRead) {
  ProgramConfig p = program(R"(programs:
  api:
    command: [/bin/true]
    limits: {memory_max: 2GiB, memory_low: 512MiB, swap_max: 1GiB, oom_group: false}
)");
  EXPECT_EQ(p.limits.memory_low, 512u << 20);
  EXPECT_EQ(p.limits.swap_max, 1u << 30);
  EXPECT_EQ(p.limits.swap_limit(), 1u << 30);
  EXPECT_EQ(p.limits.oom_group, false);
  EXPECT_FALSE(p.limits.groups_oom());
}

TEST(MemorySettings, TheDefaultsAreNoSwapAndTheWholeWorkerOnOom) {
  ProgramConfig p = program("programs: {api: {command: [/bin/true]}}");
  EXPECT_FALSE(p.limits.any()) << "defaults are not limits the config writes";
  EXPECT_EQ(p.limits.swap_limit(), 0u);
  EXPECT_TRUE(p.limits.groups_oom());
  EXPECT_FALSE(p.limits.memory_low);
}

TEST(MemorySettings, SwapMayBeUnlimitedOrZeroAndNeedsNoMemoryMaxToBeRead) {
  EXPECT_EQ(program("programs: {a: {command: [/bin/true], limits: {swap_max: unlimited}}}")
                .limits.swap_limit(),
            Limits::kUnlimitedSwap);
  ProgramConfig zero = program("programs: {a: {command: [/bin/true], limits: {swap_max: 0}}}");
  EXPECT_EQ(zero.limits.swap_max, 0u);
  EXPECT_TRUE(zero.limits.any()) << "written, so check and the start say where it does nothing";
}

TEST(MemorySettings, EachBadValueIsAnErrorAtItsPosition) {
  EXPECT_THAT(errors(R"(programs:
  a:
    command: [/bin/true]
    limits: {swap_max: 512, oom_group: yes, memory_low: lots}
  b:
    command: [/bin/true]
    limits: {swap_max: max, oom_group: 1}
)"),
              ElementsAre("test.yaml:4:24: error: programs.a.limits.swap_max: invalid size "
                          "\"512\": missing unit, e.g. \"512MiB\" (\"512B\" for bytes)",
                          "test.yaml:4:40: error: programs.a.limits.oom_group: invalid value "
                          "\"yes\"; expected true or false",
                          "test.yaml:4:57: error: programs.a.limits.memory_low: invalid size "
                          "\"lots\": expected a number, e.g. \"512MiB\"",
                          "test.yaml:7:24: error: programs.b.limits.swap_max: invalid value "
                          "\"max\"; write \"unlimited\" for no limit, or a size",
                          "test.yaml:7:40: error: programs.b.limits.oom_group: invalid value "
                          "\"1\"; expected true or false"));
}

TEST(MemorySettings, MemoryLowAboveMemoryHighOrMemoryMaxIsAnErrorAtMemoryLow) {
  EXPECT_THAT(errors(R"(programs:
  a:
    command: [/bin/true]
    limits: {memory_max: 2GiB, memory_high: 1GiB, memory_low: 1.5GiB}
  b:
    command: [/bin/true]
    limits:
      memory_low: 3GiB
      memory_max: 2GiB
)"),
              ElementsAre("test.yaml:4:63: error: programs.a.limits.memory_low (1.5 GiB) is "
                          "above memory_high (1 GiB)",
                          "test.yaml:8:19: error: programs.b.limits.memory_low (3 GiB) is above "
                          "memory_max (2 GiB)"));
}

TEST(MemorySettings, MemoryLowUpToTheLimitsIsFine) {
  ProgramConfig p = program(
      "programs: {a: {command: [/bin/true], limits: {memory_max: 1GiB, memory_low: 1GiB}}}");
  EXPECT_EQ(p.limits.memory_low, 1u << 30);
}

}  // namespace
}  // namespace recycler::config::test
