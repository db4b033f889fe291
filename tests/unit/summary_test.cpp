// What `recycler check` prints of a program (supervisor/config/summary.h).
#include "supervisor/config/summary.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/unit/config_test_util.h"

namespace recycler {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

// check printed ['python3', '-c', "print('hi')"] as python3 -c 'print('hi')',
// which a shell reads as something else.
TEST(Summary, TheCommandIsQuotedAsAShellReadsItBack) {
  config::ProgramConfig p = config::test::program(R"yaml(programs:
  app:
    command: [/usr/bin/python3, -c, "print('hi')", "a b", "$HOME", "x;y", --flag=1, ""]
)yaml");
  EXPECT_THAT(describe_program(p),
              StartsWith("app: /usr/bin/python3 -c 'print('\\''hi'\\'')' 'a b' '$HOME' 'x;y' "
                         "--flag=1 ''; "));
}

TEST(Summary, AShellCommandIsShownAsWritten) {
  config::ProgramConfig p = config::test::program(R"(programs:
  app:
    command: "echo 'hi' | tr a-z A-Z"
)");
  EXPECT_THAT(describe_program(p), StartsWith("app: echo 'hi' | tr a-z A-Z; "));
}

TEST(Summary, TheMemorySettingsWrittenAreShownAndTheirDefaultsAreNot) {
  config::ProgramConfig p = config::test::program(R"(programs:
  app:
    command: [/bin/true]
    limits: {memory_max: 1GiB, memory_low: 256MiB, swap_max: unlimited, oom_group: false}
)");
  EXPECT_EQ(describe_limits(p.limits),
            "memory_max 1 GiB, memory_low 256 MiB, swap_max unlimited, oom_group off");
  EXPECT_EQ(unenforceable_limits(p.limits, {"memory"}),
            "memory_max 1 GiB, memory_low 256 MiB, swap_max unlimited, oom_group off");
  EXPECT_EQ(describe_limits(config::test::program("programs: {a: {command: [/bin/true]}}").limits),
            "no limits");
}

TEST(Summary, EachSlotsGpusAreShown) {
  config::ProgramConfig p = config::test::program(R"(programs:
  train:
    command: [/bin/true]
    instances: 3
    devices: {gpus: [0, 1], xla_preallocate: false, xla_mem_fraction: .5,
              pytorch_alloc_conf: "expandable_segments:True"}
)");
  EXPECT_THAT(describe_program(p),
              HasSubstr("; devices gpus 0,1, 1 per slot (train[0] 0; train[1] 1; train[2] 0), "
                        "pytorch_alloc_conf expandable_segments:True, xla_preallocate false, "
                        "xla_mem_fraction 0.5; "));
}

}  // namespace
}  // namespace recycler
