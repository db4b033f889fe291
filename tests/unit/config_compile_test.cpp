// The compile step: policies built by their factories from the parsed
// specs, errors placed where the factories say.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "policies/base/units.h"
#include "policies/policy.h"
#include "supervisor/config/compile.h"
#include "supervisor/config/parse.h"
#include "supervisor/notify/output_match.h"
#include "tests/unit/config_test_util.h"

namespace recycler::config {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using namespace test;
using testing::Contains;
using testing::ElementsAre;
using testing::HasSubstr;
using testing::IsEmpty;
using units::parse_size;

// --- Policies ----------------------------------------------------------------------

class FakePolicy : public policies::Policy {
 public:
  explicit FakePolicy(uint64_t limit) : limit_(limit) {}
  std::string_view name() const override { return "fake"; }
  unsigned needs() const override { return policies::kNeedsCgroupMemory; }
  std::unique_ptr<policies::PolicyState> start(const policies::WorkerContext&) const override {
    return nullptr;
  }
  policies::Decision evaluate(const policies::Sample&, policies::PolicyState&) const override {
    return policies::Decision::none();
  }
  uint64_t limit() const { return limit_; }

 private:
  uint64_t limit_;
};

// "fake" wants {limit: SIZE}; "fake_null" fails without saying why;
// "fake_throw" reads its node the careless way and throws on a map.
void register_fake_policies() {
  static const bool registered = [] {
    auto& registry = policies::Registry::instance();
    registry.add("fake",
                 [](const YAML::Node& args,
                    policies::ErrorSink& errors) -> std::unique_ptr<policies::Policy> {
                   if (!args.IsMap() || !args["limit"]) {
                     errors.error(args.Mark(), "expected {limit: SIZE}");
                     return nullptr;
                   }
                   auto limit = parse_size(args["limit"].Scalar());
                   if (!limit) {
                     errors.error(args["limit"].Mark(), "limit: not a size");
                     return nullptr;
                   }
                   return std::make_unique<FakePolicy>(*limit);
                 });
    registry.add("fake_null", [](const YAML::Node&, policies::ErrorSink&) { return nullptr; });
    registry.add("fake_throw", [](const YAML::Node& args, policies::ErrorSink&) {
      (void)args.as<int>();
      return std::unique_ptr<policies::Policy>();
    });
    return true;
  }();
  (void)registered;
}

TEST(Policies, KnownPolicyIsBuiltFromItsArguments) {
  register_fake_policies();
  ProgramConfig p = program(R"(programs:
  api:
    command: [/bin/true]
    policies:
      - fake: {limit: 1GiB}
)");
  ASSERT_EQ(p.policies.size(), 1u);
  EXPECT_EQ(p.policies[0].name, "fake");
  EXPECT_EQ(p.policies[0].source, "{fake: {limit: 1GiB}}");
  auto* fake = dynamic_cast<const FakePolicy*>(p.policies[0].policy.get());
  ASSERT_NE(fake, nullptr);
  EXPECT_EQ(fake->limit(), 1ULL << 30);
}

TEST(Policies, FactoryErrorsAreReportedWhereTheFactorySaysWithThePath) {
  register_fake_policies();
  EXPECT_THAT(errors(R"(programs:
  api:
    command: [/bin/true]
    policies:
      - fake: {limit: lots}
)"),
              ElementsAre("test.yaml:5:23: error: programs.api.policies[0].fake: limit: not a "
                          "size"));
}

TEST(Policies, FactoryErrorWithoutPositionPointsAtThePolicyName) {
  register_fake_policies();
  EXPECT_THAT(errors(R"(programs:
  api:
    command: [/bin/true]
    policies:
      - fake:
)"),
              ElementsAre("test.yaml:5:9: error: programs.api.policies[0].fake: expected {limit: "
                          "SIZE}"));
}

TEST(Policies, FactoryReturningNothingIsAnError) {
  register_fake_policies();
  EXPECT_THAT(errors(R"(programs:
  api:
    command: [/bin/true]
    policies: [fake_null: {}]
)"),
              ElementsAre("test.yaml:4:16: error: programs.api.policies[0].fake_null: the policy "
                          "could not be created"));
}

TEST(Policies, FactoryThrowingIsAnErrorAtTheBadNode) {
  register_fake_policies();
  EXPECT_THAT(errors(R"(programs:
  api:
    command: [/bin/true]
    policies:
      - fake_throw: {x: 1}
)"),
              ElementsAre("test.yaml:5:21: error: programs.api.policies[0].fake_throw: bad "
                          "conversion"));
}

TEST(Policies, UnknownPolicySuggestsACloseName) {
  register_fake_policies();
  EXPECT_THAT(errors(R"(programs:
  api:
    command: [/bin/true]
    policies:
      - fakee: {limit: 1GiB}
)"),
              ElementsAre("test.yaml:5:9: error: programs.api.policies[0]: unknown policy "
                          "\"fakee\"; did you mean \"fake\"?"));
}

TEST(Policies, UnknownPolicyWithoutCloseNameListsTheAvailableOnes) {
  register_fake_policies();
  std::string available;
  for (const auto& name : policies::Registry::instance().names())
    available += (available.empty() ? "" : ", ") + name;
  EXPECT_THAT(errors(R"(programs:
  api:
    command: [/bin/true]
    policies:
      - something_else_entirely: {}
)"),
              ElementsAre("test.yaml:5:9: error: programs.api.policies[0]: unknown policy "
                          "\"something_else_entirely\" (available: " +
                          available + ")"));
}

TEST(Policies, ItemsMustBeSingleKeyMaps) {
  register_fake_policies();
  EXPECT_THAT(errors(R"(programs:
  api:
    command: [/bin/true]
    policies:
      - fake
      - {fake: {limit: 1GiB}, fake_null: {}}
)"),
              ElementsAre("test.yaml:5:9: error: programs.api.policies[0] must be a map with a "
                          "single key, the policy name",
                          "test.yaml:6:9: error: programs.api.policies[1] must be a map with a "
                          "single key, the policy name"));
}

TEST(Policies, PoliciesMustBeAList) {
  EXPECT_THAT(errors("programs: {a: {command: [/bin/true], policies: {fake: {}}}}"),
              ElementsAre("test.yaml:1:48: error: programs.a.policies must be a list"));
}

TEST(Policies, DuplicateKeysInArgumentsAreReportedOnce) {
  // The policy's own keys are checked by its factory (policies/args.h), nested
  // maps by the parser: either way, one error per duplicate.
  EXPECT_THAT(errors(R"(programs:
  api:
    command: [/bin/true]
    policies:
      - memory: {limit: 1GiB, limit: 2GiB}
)"),
              ElementsAre("test.yaml:5:31: error: programs.api.policies[0].memory: duplicate key "
                          "\"limit\" (first at line 5)"));
}

TEST(Policies, EqualityFollowsTheYamlSourceNotItsLayout) {
  register_fake_policies();
  ProgramConfig flow = program(R"(programs:
  api:
    command: [/bin/true]
    policies: [{fake: {limit: 1GiB, note: "x"}}]
)");
  ProgramConfig block = program(R"(programs:
  api:
    command: [/bin/true]
    policies:
      - fake:
          note: x
          limit: '1GiB'
)");
  ProgramConfig other = program(R"(programs:
  api:
    command: [/bin/true]
    policies:
      - fake: {limit: 2GiB, note: x}
)");
  ASSERT_EQ(flow.policies.size(), 1u);
  ASSERT_EQ(block.policies.size(), 1u);
  ASSERT_EQ(other.policies.size(), 1u);
  EXPECT_EQ(flow.policies[0].source, "{fake: {limit: 1GiB, note: x}}");
  EXPECT_EQ(flow.policies[0], block.policies[0]);
  EXPECT_EQ(flow, block) << "a reload would see no change";
  EXPECT_NE(flow.policies[0], other.policies[0]);
  EXPECT_NE(flow, other);
}

// --- compile() on its own -------------------------------------------------------------

// What compile() reports, as "LINE:COLUMN: MESSAGE".
class Recorded : public fields::ErrorSink {
 public:
  void error(const YAML::Mark& at, std::string message) override {
    lines.push_back(std::to_string(at.line + 1) + ":" + std::to_string(at.column + 1) + ": " +
                    message);
  }
  std::vector<std::string> lines;
};

TEST(Compile, BuildsEachPolicySpecWithItsSource) {
  register_fake_policies();
  YAML::Node args = YAML::Load("{limit: 2MiB}");
  ProgramSpec spec;
  spec.policies.push_back(PolicySpec{"fake", args, "programs.a.policies[0].fake", YAML::Mark(),
                                     "{fake: {limit: 2MiB}}"});
  ProgramConfig program;
  Recorded errors;
  compile(spec, program, errors);
  EXPECT_THAT(errors.lines, IsEmpty());
  ASSERT_EQ(program.policies.size(), 1u);
  EXPECT_EQ(program.policies[0].source, "{fake: {limit: 2MiB}}");
  auto* fake = dynamic_cast<const FakePolicy*>(program.policies[0].policy.get());
  ASSERT_NE(fake, nullptr);
  EXPECT_EQ(fake->limit(), 2ULL << 20);
}

TEST(Compile, AFactoryErrorCarriesThePathAndTheFactorysPosition) {
  register_fake_policies();
  YAML::Node args = YAML::Load("\n{limit: lots}");
  ProgramSpec spec;
  spec.policies.push_back(
      PolicySpec{"fake", args, "programs.a.policies[0].fake", YAML::Mark(), "{}"});
  ProgramConfig program;
  Recorded errors;
  compile(spec, program, errors);
  EXPECT_THAT(errors.lines, ElementsAre("2:9: programs.a.policies[0].fake: limit: not a size"));
  EXPECT_THAT(program.policies, IsEmpty());
}

TEST(Compile, TheRequestPatternIsCompiledOnceIntoTheConfig) {
  ProgramConfig p = program(R"(programs:
  api:
    command: [/bin/true]
    requests: {pattern: '"GET .* (?<pid>\d+)$'}
)");
  ASSERT_TRUE(p.requests);
  ASSERT_NE(p.requests->matcher, nullptr);
  EXPECT_TRUE(p.requests->matcher->has_pid_group());
  auto m = p.requests->matcher->match("\"GET / HTTP/1.1\" 200 pid 4242");
  EXPECT_TRUE(m.matched);
  EXPECT_EQ(m.pid, 4242);
  EXPECT_FALSE(p.requests->matcher->match("POST /").matched);
}

TEST(Compile, AReloadComparesThePatternNotItsCompiledForm) {
  const char* yaml = R"(programs:
  api:
    command: [/bin/true]
    requests: {pattern: 'GET'}
)";
  ProgramConfig a = program(yaml);
  ProgramConfig b = program(yaml);
  ASSERT_TRUE(a.requests && b.requests);
  EXPECT_NE(a.requests->matcher, b.requests->matcher) << "each load compiles its own";
  EXPECT_EQ(a, b);
  ProgramConfig c = program(R"(programs:
  api:
    command: [/bin/true]
    requests: {pattern: 'POST'}
)");
  EXPECT_NE(a, c);
}

}  // namespace
}  // namespace recycler::config

namespace recycler::config {
namespace {

// A leak policy decides nothing in its warm-up and the first third of its
// window; alone on host memory under memory_max, a fast leak meets the OOM
// killer first: said once, at the policy. A policy that watches memory from
// the first sample (the backstop), no memory_max, or device memory: silent.
TEST(Policies, ALeakPolicyWithoutABackstopIsWarnedThatItDecidesLate) {
  EXPECT_THAT(
      test::warnings(R"(programs:
  train:
    command: ["true"]
    limits: {memory_max: 512MiB}
    policies:
      - threads: {limit: 100}
      - leak: {metric: anon, window: 10m, warmup: 2m, limit: 90%}
)"),
      ElementsAre(
          "test.yaml:7:9: warning: programs.train.policies[1].leak: decides nothing "
          "for 5m45s after each start (its warmup 2m, then over a third of its "
          "window 10m), and no other policy watches memory meanwhile: a leak that "
          "fills limits.memory_max sooner is killed by the kernel first; a backstop such as "
          "`- memory: {limit: 95%}` restarts it first"));
  EXPECT_THAT(test::warnings(R"(programs:
  train:
    command: ["true"]
    limits: {memory_max: 512MiB}
    policies:
      - leak: {metric: anon, limit: 90%}
      - memory: {metric: anon, limit: 95%}
)"),
              ::testing::IsEmpty());
  EXPECT_THAT(test::warnings(R"(programs:
  train:
    command: ["true"]
    policies:
      - leak: {metric: anon, limit: 1GiB}
)"),
              ::testing::IsEmpty());
  EXPECT_THAT(test::warnings(R"(programs:
  train:
    command: ["true"]
    limits: {memory_max: 512MiB}
    policies:
      - leak: {metric: device, limit: 16GiB}
)"),
              ::testing::IsEmpty());
}

TEST(Watchdog, TheProgramKeyIsTheWatchdogPolicyAfterTheListedOnes) {
  ProgramConfig p = program(R"(programs:
  train:
    command: [/bin/true]
    policies:
      - max_lifetime: {after: 6h}
    watchdog: {timeout: 30s, progress: 10m}
)");
  ASSERT_EQ(p.policies.size(), 2u);
  EXPECT_EQ(p.policies[1].name, "watchdog");
  EXPECT_EQ(p.policies[1].source, "{watchdog: {progress: 10m, timeout: 30s}}");
  EXPECT_TRUE(p.policies[1].policy->watches_hangs());
  EXPECT_EQ(p.watchdog_timeout, std::chrono::seconds(30)) << "for WATCHDOG_USEC";
  EXPECT_FALSE(program(R"(programs:
  train:
    command: [/bin/true]
    watchdog: {progress: 10m}
)")
                   .watchdog_timeout);
}

TEST(Watchdog, ItsSettingsAreCheckedAtTheirOwnPlace) {
  EXPECT_THAT(errors(R"(programs:
  train:
    command: [/bin/true]
    watchdog: {timeout: 500ms}
)"),
              ElementsAre("test.yaml:4:25: error: programs.train.watchdog: timeout: 500ms is too "
                          "short; at least 1s"));
  EXPECT_THAT(errors(R"(programs:
  train:
    command: [/bin/true]
    watchdog:
)"),
              ElementsAre(HasSubstr("programs.train.watchdog must not be empty")));
}

TEST(Watchdog, InThePolicyListItIsRefusedWithWhereItGoes) {
  EXPECT_THAT(errors(R"(programs:
  train:
    command: [/bin/true]
    policies:
      - watchdog: {timeout: 30s}
)"),
              ElementsAre(HasSubstr("5:9: error: programs.train.policies[0]: watchdog is a setting "
                                    "of the program, beside policies:")));
}

}  // namespace
}  // namespace recycler::config
