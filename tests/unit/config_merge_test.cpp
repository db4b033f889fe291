// YAML merge keys (<<: *defaults) and top-level x-* anchors, as read by the
// field reader (policies/base/fields.h) for every section and policy; and
// tabs in indentation, named as such.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>

#include "tests/unit/config_test_util.h"

namespace recycler::config::test {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

TEST(MergeKeys, AnXAnchorMergedIntoProgramsWithExplicitKeysWinning) {
  LoadResult r = parse(R"(x-defaults: &defaults
  instances: 2
  threads: 3
  stop: {timeout: 7s}
programs:
  api:
    threads: 4
    <<: *defaults
    command: [/bin/true]
  batch:
    <<: *defaults
    command: [/bin/true]
)");
  ASSERT_THAT(lines(r.errors), IsEmpty());
  const ProgramConfig& api = r.config->programs[0];
  EXPECT_EQ(api.instances, 2u);
  EXPECT_EQ(api.threads, 4u) << "an explicit key wins, before or after <<";
  EXPECT_EQ(api.stop.timeout, Duration(7s));
  const ProgramConfig& batch = r.config->programs[1];
  EXPECT_EQ(batch.instances, 2u);
  EXPECT_EQ(batch.threads, 3u);
}

TEST(MergeKeys, AListOfMapsTheEarlierWinning) {
  ProgramConfig p = program(R"(x-a: &a {instances: 2, threads: 2}
x-b: &b {instances: 5, threads: 5, min_uptime: 9s}
programs:
  api:
    <<: [*a, *b]
    command: [/bin/true]
)");
  EXPECT_EQ(p.instances, 2u);
  EXPECT_EQ(p.threads, 2u);
  EXPECT_EQ(p.min_uptime, Duration(9s));
}

TEST(MergeKeys, MergedMapsMayMergeThemselves) {
  ProgramConfig p = program(R"(x-base: &base {instances: 3, threads: 1}
x-web: &web
  <<: *base
  threads: 8
programs:
  api:
    <<: *web
    command: [/bin/true]
)");
  EXPECT_EQ(p.instances, 3u);
  EXPECT_EQ(p.threads, 8u);
}

TEST(MergeKeys, InPolicySettingsAndNestedSections) {
  ProgramConfig p = program(R"(x-memory: &memory {metric: anon, limit: 70%}
x-backoff: &backoff {initial: 2s, max: 30s}
programs:
  api:
    command: [/bin/true]
    limits: {memory_max: 1GiB}
    restart: {backoff: {<<: *backoff, max: 1m}}
    policies:
      - memory: {<<: *memory, limit: 80%}
)");
  EXPECT_EQ(p.restart.backoff.initial, Duration(2s));
  EXPECT_EQ(p.restart.backoff.max, Duration(1min));
  ASSERT_EQ(p.policies.size(), 1u);
  EXPECT_EQ(p.policies[0].name, "memory");
}

TEST(MergeKeys, ErrorsInAMergedMapPointAtTheAnchoredMap) {
  EXPECT_THAT(errors(R"(x-defaults: &defaults
  instances: 0
  thraeds: 2
programs:
  api:
    <<: *defaults
    command: [/bin/true]
)"),
              ElementsAre("test.yaml:2:14: error: programs.api.instances: 0 is out of range; "
                          "expected an integer from 1 to 1024",
                          "test.yaml:3:3: error: unknown key \"thraeds\" in programs.api; did "
                          "you mean \"threads\"?"));
}

TEST(MergeKeys, WhatIsNotAMergeIsSaid) {
  EXPECT_THAT(errors(R"(programs:
  api:
    <<: 5
    command: [/bin/true]
  web:
    "<<": {instances: 2}
    command: [/bin/true]
  db:
    <<: {instances: 2}
    <<: {threads: 2}
    command: [/bin/true]
)"),
              ElementsAre("test.yaml:3:9: error: merge key \"<<\" in programs.api must be given "
                          "a map or a list of maps (e.g. <<: *defaults)",
                          "test.yaml:6:5: error: unknown key \"<<\" in programs.web",
                          "test.yaml:10:5: error: duplicate merge key \"<<\" in programs.db "
                          "(first at line 9); merge several maps with <<: [*a, *b]"));
}

TEST(MergeKeys, XKeysAreAllowedAtTheTopLevelOnly) {
  EXPECT_THAT(errors(R"(x-anything: {whatever: [1, 2]}
programs:
  api:
    x-note: hello
    command: [/bin/true]
)"),
              ElementsAre("test.yaml:4:5: error: unknown key \"x-note\" in programs.api"));
}

TEST(MergeKeys, AnAliasBombIsRefusedQuickly) {
  // Each level merges the previous one twice: 2^30 entries if expanded.
  std::string yaml = "x-0: &a0 {instances: 1}\n";
  for (int i = 1; i <= 30; ++i)
    yaml += "x-" + std::to_string(i) + ": &a" + std::to_string(i) + " {<<: [*a" +
            std::to_string(i - 1) + ", *a" + std::to_string(i - 1) + "]}\n";
  yaml += "programs:\n  api:\n    <<: *a30\n    command: [/bin/true]\n";
  auto t0 = std::chrono::steady_clock::now();
  std::vector<std::string> e = errors(yaml);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(2));
  ASSERT_FALSE(e.empty());
  EXPECT_THAT(e[0], ::testing::HasSubstr("merges nested deeper than 8"));
}

TEST(Tabs, ATabInTheIndentationIsNamed) {
  EXPECT_THAT(errors("programs:\n  api:\n\tcommand: [/bin/true]\n"),
              ElementsAre("test.yaml:3:1: error: invalid YAML: a tab in the indentation; YAML "
                          "indents with spaces only"));
  EXPECT_THAT(errors("programs:\n  api:\n    command: [/bin/true]\n  \tinstances: 2\n"),
              ElementsAre("test.yaml:4:3: error: invalid YAML: a tab in the indentation; YAML "
                          "indents with spaces only"));
  // A tab after a key is separation, not indentation.
  EXPECT_THAT(errors("programs:\n  api:\n    command:\t[/bin/true]\n"), IsEmpty());
}

}  // namespace
}  // namespace recycler::config::test
