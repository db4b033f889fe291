#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "policies/args.h"
#include "tests/support/policy_harness.h"

namespace recycler::policies {
namespace {

using namespace std::chrono_literals;
using recycler::testing::CapturingSink;
using ::testing::ElementsAre;
using ::testing::IsEmpty;

// The Args reader over one YAML text, with what it reported.
struct Reader {
  explicit Reader(const std::string& yaml)
      : node(yaml.empty() ? YAML::Node() : YAML::Load(yaml)),
        args(node, sink, {"limit", "for", "scope", "signal", "metric", "action", "min_slope"}) {}
  YAML::Node node;
  CapturingSink sink;
  Args args;
};

TEST(PolicyArgs, NullNodeIsAnEmptyMap) {
  Reader r("");
  EXPECT_TRUE(r.args.ok());
  EXPECT_FALSE(r.args.has("limit"));
  EXPECT_EQ(r.args.integer("limit", 1, 10), std::nullopt);
  EXPECT_THAT(r.sink.messages(), IsEmpty());
}

TEST(PolicyArgs, MissingRequiredKeyOnANullNodeHasANullMark) {
  Reader r("");
  EXPECT_FALSE(r.args.required("limit"));
  EXPECT_THAT(r.sink.messages(), ElementsAre("missing required key \"limit\""));
  EXPECT_TRUE(r.sink.reported[0].at.is_null()) << "the parser places it at the policy name";
  EXPECT_FALSE(r.args.ok());
}

TEST(PolicyArgs, MissingRequiredKeyIsReportedAtTheMap) {
  Reader r("\n  {for: 10s}");
  EXPECT_FALSE(r.args.required("limit"));
  EXPECT_THAT(r.sink.messages(), ElementsAre("missing required key \"limit\""));
  EXPECT_EQ(r.sink.reported[0].at.line, 1);
  EXPECT_EQ(r.sink.reported[0].at.column, 2);
}

TEST(PolicyArgs, RequiredKeyWithAnEmptyValueIsReportedAtTheKey) {
  Reader r("for: 1s\nlimit:\n");
  EXPECT_FALSE(r.args.required("limit"));
  EXPECT_THAT(r.sink.messages(), ElementsAre("limit must not be empty"));
  EXPECT_EQ(r.sink.reported[0].at.line, 1);
  EXPECT_EQ(r.sink.reported[0].at.column, 0);
}

TEST(PolicyArgs, EmptyValueMeansTheDefault) {
  Reader r("{for: ~, limit: 3}");
  EXPECT_FALSE(r.args.has("for"));
  EXPECT_EQ(r.args.duration("for"), std::nullopt);
  EXPECT_TRUE(r.args.required("limit"));
  EXPECT_TRUE(r.args.ok());
}

TEST(PolicyArgs, NonMapNodeIsReported) {
  Reader r("[1, 2]");
  EXPECT_THAT(r.sink.messages(), ElementsAre("must be a map of settings"));
  EXPECT_FALSE(r.args.ok());
}

TEST(PolicyArgs, ScalarNodeIsReported) {
  Reader r("600MiB");
  EXPECT_THAT(r.sink.messages(), ElementsAre("must be a map of settings"));
}

TEST(PolicyArgs, UnknownKeySuggestsTheClosestKnownOne) {
  Reader r("{limt: 1}");
  EXPECT_THAT(r.sink.messages(), ElementsAre("unknown key \"limt\"; did you mean \"limit\"?"));
  EXPECT_EQ(r.sink.reported[0].at.column, 1);
  EXPECT_FALSE(r.args.ok());
}

TEST(PolicyArgs, UnknownKeyFarFromAnyListsTheKnownOnes) {
  Reader r("{colour: red}");
  EXPECT_THAT(r.sink.messages(),
              ElementsAre("unknown key \"colour\"; expected limit, for, scope, signal, metric, "
                          "action or min_slope"));
}

TEST(PolicyArgs, DuplicateKeyIsReportedAtTheSecondWithTheFirstLine) {
  Reader r("limit: 1\nfor: 2s\nlimit: 2\n");
  EXPECT_THAT(r.sink.messages(), ElementsAre("duplicate key \"limit\" (first at line 1)"));
  EXPECT_EQ(r.sink.reported[0].at.line, 2);
  EXPECT_EQ(r.args.integer("limit", 0, 10), 1u) << "the first value counts";
}

TEST(PolicyArgs, NonStringKeyIsReported) {
  Reader r("{[a, b]: 1}");
  EXPECT_THAT(r.sink.messages(), ElementsAre("keys must be strings"));
}

TEST(PolicyArgs, IntegerWithinRangeIsRead) {
  Reader r("{limit: 200}");
  EXPECT_EQ(r.args.integer("limit", 1, 4096), 200u);
  EXPECT_TRUE(r.args.ok());
}

TEST(PolicyArgs, IntegerOutOfRangeIsReportedAtTheValue) {
  Reader r("{limit: 0}");
  EXPECT_EQ(r.args.integer("limit", 1, 4096), std::nullopt);
  EXPECT_THAT(r.sink.messages(),
              ElementsAre("limit: 0 is out of range; expected an integer from 1 to 4096"));
  EXPECT_EQ(r.sink.reported[0].at.column, 8);
}

TEST(PolicyArgs, NegativeAndOverflowingIntegersAreOutOfRange) {
  Reader r("{limit: -5, for: 99999999999999999999999}");
  EXPECT_EQ(r.args.integer("limit", 0, 10), std::nullopt);
  EXPECT_EQ(r.args.integer("for", 0, 10), std::nullopt);
  EXPECT_THAT(r.sink.messages(),
              ElementsAre("limit: -5 is out of range; expected an integer from 0 to 10",
                          "for: 99999999999999999999999 is out of range; expected an integer "
                          "from 0 to 10"));
}

TEST(PolicyArgs, NonIntegerTextIsAnInvalidValue) {
  Reader r("{limit: 1.5}");
  EXPECT_EQ(r.args.integer("limit", 1, 10), std::nullopt);
  EXPECT_THAT(r.sink.messages(),
              ElementsAre("limit: invalid value \"1.5\"; expected an integer from 1 to 10"));
}

TEST(PolicyArgs, NonScalarValueSaysWhatWasExpected) {
  Reader r("{limit: [1], for: {a: 1}}");
  EXPECT_EQ(r.args.integer("limit", 1, 10), std::nullopt);
  EXPECT_EQ(r.args.duration("for"), std::nullopt);
  EXPECT_THAT(r.sink.messages(), ElementsAre("limit must be an integer", "for must be a duration"));
}

TEST(PolicyArgs, SizeIsRead) {
  Reader r("{limit: 1.5GiB}");
  EXPECT_EQ(r.args.size("limit"), 1536ull << 20);
}

TEST(PolicyArgs, InvalidSizeCarriesTheParsersReason) {
  Reader r("{limit: 12XB}");
  EXPECT_EQ(r.args.size("limit"), std::nullopt);
  EXPECT_THAT(r.sink.messages(),
              ElementsAre("limit: invalid size \"12XB\": unknown unit \"XB\"; use B, K, M, G, T, "
                          "KiB, MiB, GiB or TiB"));
}

TEST(PolicyArgs, DurationIsRead) {
  Reader r("{for: 1m30s}");
  EXPECT_EQ(r.args.duration("for"), 90s);
}

TEST(PolicyArgs, DurationWithoutUnitIsReported) {
  Reader r("{for: 10}");
  EXPECT_EQ(r.args.duration("for"), std::nullopt);
  EXPECT_THAT(r.sink.messages(),
              ElementsAre("for: invalid duration \"10\": missing unit, e.g. \"10s\""));
}

TEST(PolicyArgs, SignalIsReadByNameOrNumber) {
  Reader r("{signal: usr1, limit: 9}");
  EXPECT_EQ(r.args.signal("signal"), SIGUSR1);
  EXPECT_EQ(r.args.signal("limit"), SIGKILL);
}

TEST(PolicyArgs, UnknownSignalIsReported) {
  Reader r("{signal: SIGFOO}");
  EXPECT_EQ(r.args.signal("signal"), std::nullopt);
  EXPECT_THAT(r.sink.messages(), ElementsAre("signal: invalid signal \"SIGFOO\": unknown signal"));
}

TEST(PolicyArgs, ChoiceReturnsTheNameGiven) {
  Reader r("{scope: process}");
  EXPECT_EQ(r.args.choice("scope", {"worker", "process"}), "process");
}

TEST(PolicyArgs, ChoiceOutsideTheNamesListsThem) {
  Reader r("{scope: proc}");
  EXPECT_EQ(r.args.choice("scope", {"worker", "process"}), std::nullopt);
  EXPECT_THAT(r.sink.messages(),
              ElementsAre("scope: invalid value \"proc\"; expected worker or process"));
}

TEST(PolicyArgs, LimitReadsASize) {
  Reader r("{limit: 600MiB}");
  auto limit = r.args.limit("limit");
  ASSERT_TRUE(limit);
  EXPECT_EQ(limit->bytes, 600ull << 20);
  EXPECT_FALSE(limit->percent);
  EXPECT_EQ(limit->resolve(std::nullopt), 600ull << 20) << "a size needs no memory_max";
}

TEST(PolicyArgs, LimitReadsAPercentageWithDecimals) {
  Reader r("{limit: 12.5%}");
  auto limit = r.args.limit("limit");
  ASSERT_TRUE(limit);
  EXPECT_EQ(limit->percent, 12.5);
  EXPECT_EQ(limit->resolve(800), 100u);
  EXPECT_EQ(limit->resolve(std::nullopt), std::nullopt);
}

TEST(PolicyArgs, PercentageResolvesAgainstMemoryMaxRoundingDown) {
  SizeLimit limit{0, 90.0};
  EXPECT_EQ(limit.resolve(512ull << 20), 483183820u);
  EXPECT_EQ(limit.origin(512ull << 20), " (90% of 512 MiB)");
  EXPECT_EQ(limit.origin(std::nullopt), "");
  EXPECT_EQ((SizeLimit{100, std::nullopt}).origin(512ull << 20), "")
      << "a size has no origin to explain";
}

TEST(PolicyArgs, HundredPercentIsTheWholeLimit) {
  Reader r("{limit: 100%}");
  auto limit = r.args.limit("limit");
  ASSERT_TRUE(limit);
  EXPECT_EQ(limit->resolve(1ull << 40), 1ull << 40);
}

TEST(PolicyArgs, PercentageOutOfRangeIsReported) {
  Reader r("{limit: 150%, for: 0%}");
  EXPECT_EQ(r.args.limit("limit"), std::nullopt);
  EXPECT_EQ(r.args.limit("for"), std::nullopt);
  EXPECT_THAT(
      r.sink.messages(),
      ElementsAre("limit: 150% is out of range; expected a percentage above 0 and at most 100",
                  "for: 0% is out of range; expected a percentage above 0 and at most 100"));
}

TEST(PolicyArgs, MalformedPercentageIsReported) {
  for (const char* text : {"x%", "%", "-5%", "1e2%", ".5%", "5.%"}) {
    Reader r(std::string("{limit: \"") + text + "\"}");
    EXPECT_EQ(r.args.limit("limit"), std::nullopt) << text;
    EXPECT_THAT(r.sink.messages(), ElementsAre("limit: invalid percentage \"" + std::string(text) +
                                               "\": expected a number, e.g. \"90%\""));
  }
}

TEST(PolicyArgs, ZeroSizeLimitIsReported) {
  Reader r("{limit: 0MiB}");
  EXPECT_EQ(r.args.limit("limit"), std::nullopt);
  EXPECT_THAT(r.sink.messages(), ElementsAre("limit must be greater than 0"));
}

TEST(PolicyArgs, InvalidSizeLimitCarriesTheParsersReason) {
  Reader r("{limit: 600MB}");
  EXPECT_EQ(r.args.limit("limit"), std::nullopt);
  EXPECT_THAT(r.sink.messages(),
              ElementsAre("limit: invalid size \"600MB\": decimal units are ambiguous; use "
                          "\"600MiB\" or a byte count"));
}

TEST(PolicyArgs, RatesAreASizePerSecondMinuteOrHour) {
  EXPECT_EQ(parse_rate("1MiB/min"), 1048576.0 / 60);
  EXPECT_EQ(parse_rate("1MiB/m"), 1048576.0 / 60);
  EXPECT_EQ(parse_rate("64KiB/s"), 65536.0);
  EXPECT_EQ(parse_rate("2GiB/h"), 2147483648.0 / 3600);
  EXPECT_EQ(parse_rate("1.5M/min"), 1572864.0 / 60);
  EXPECT_EQ(parse_rate("0B/s"), 0.0) << "zero is a rate; whether it may be is the key's business";
}

TEST(PolicyArgs, MalformedRatesSayWhy) {
  std::string why;
  EXPECT_EQ(parse_rate("1MiB", &why), std::nullopt);
  EXPECT_EQ(why, "expected a size per s, min or h, e.g. \"1MiB/min\"");
  EXPECT_EQ(parse_rate("1MiB/day", &why), std::nullopt);
  EXPECT_EQ(why, "unknown time unit \"day\"; use s, min or h");
  EXPECT_EQ(parse_rate("1MB/s", &why), std::nullopt);
  EXPECT_EQ(why, "decimal units are ambiguous; use \"1MiB\" or a byte count");
  EXPECT_EQ(parse_rate("/min", &why), std::nullopt);
  EXPECT_FALSE(why.empty());
}

TEST(PolicyArgs, RateIsReadInBytesPerSecond) {
  Reader r("{min_slope: 6MiB/min}");
  EXPECT_EQ(r.args.rate("min_slope"), 6.0 * 1048576 / 60);
  EXPECT_TRUE(r.args.ok());
}

TEST(PolicyArgs, BadRateIsReportedWithTheWholeText) {
  Reader r("{min_slope: 12XB/s}");
  EXPECT_EQ(r.args.rate("min_slope"), std::nullopt);
  EXPECT_THAT(r.sink.messages(),
              ElementsAre("min_slope: invalid rate \"12XB/s\": unknown unit \"XB\"; use B, K, M, "
                          "G, T, KiB, MiB, GiB or TiB"));
}

TEST(PolicyArgs, ZeroRateIsReported) {
  Reader r("{min_slope: 0MiB/min}");
  EXPECT_EQ(r.args.rate("min_slope"), std::nullopt);
  EXPECT_THAT(r.sink.messages(), ElementsAre("min_slope must be greater than 0"));
}

TEST(PolicyArgs, ErrorAtAKeyIsPlacedAtItsValue) {
  Reader r("limit: 1\nscope:   worker\n");
  r.args.error("scope", "scope: no");
  ASSERT_EQ(r.sink.reported.size(), 1u);
  EXPECT_EQ(r.sink.reported[0].at.line, 1);
  EXPECT_EQ(r.sink.reported[0].at.column, 9);
  EXPECT_FALSE(r.args.ok());
}

TEST(PolicyScope, DefaultsToWorkerScope) {
  Reader r("{limit: 1}");
  Scope scope = read_scope(r.args);
  EXPECT_FALSE(scope.process);
  EXPECT_TRUE(r.args.ok());
}

TEST(PolicyScope, ProcessScopeDefaultsToSigterm) {
  Reader r("{scope: process}");
  Scope scope = read_scope(r.args);
  EXPECT_TRUE(scope.process);
  EXPECT_EQ(scope.signal, SIGTERM);
}

TEST(PolicyScope, ProcessScopeTakesASignal) {
  Reader r("{scope: process, signal: HUP}");
  EXPECT_EQ(read_scope(r.args).signal, SIGHUP);
}

TEST(PolicyScope, SignalWithWorkerScopeIsAnError) {
  for (const char* yaml : {"{signal: HUP}", "{scope: worker, signal: HUP}"}) {
    Reader r(yaml);
    read_scope(r.args);
    EXPECT_THAT(r.sink.messages(), ElementsAre("signal: only applies with scope: process; "
                                               "scope: worker restarts the whole worker"))
        << yaml;
  }
}

TEST(PolicyScope, BadScopeIsReportedOnceNotAgainForItsSignal) {
  Reader r("{scope: pid, signal: HUP}");
  read_scope(r.args);
  EXPECT_THAT(r.sink.messages(),
              ElementsAre("scope: invalid value \"pid\"; expected worker or process"));
}

TEST(PolicyScope, ActionDefaultsToRestart) {
  Reader r("{limit: 1}");
  Scope scope = read_scope(r.args);
  read_action(r.args, scope);
  EXPECT_EQ(scope.action, Decision::Action::Restart);
  EXPECT_TRUE(r.args.ok());
}

TEST(PolicyScope, ActionCheckpointIsRead) {
  Reader r("{action: checkpoint}");
  Scope scope = read_scope(r.args);
  read_action(r.args, scope);
  EXPECT_EQ(scope.action, Decision::Action::Checkpoint);
}

TEST(PolicyScope, CheckpointWithProcessScopeIsAnError) {
  Reader r("{scope: process, action: checkpoint}");
  Scope scope = read_scope(r.args);
  read_action(r.args, scope);
  EXPECT_THAT(r.sink.messages(), ElementsAre("action: checkpoint applies to the whole worker; "
                                             "scope: process signals one process"));
}

TEST(PolicyScope, UnknownActionListsTheChoices) {
  Reader r("{action: pause}");
  Scope scope;
  read_action(r.args, scope);
  EXPECT_THAT(r.sink.messages(),
              ElementsAre("action: invalid value \"pause\"; expected restart or checkpoint"));
  EXPECT_EQ(scope.action, Decision::Action::Restart);
}

TEST(PolicyScope, WorkerScopeDecidesItsAction) {
  Scope scope;
  scope.action = Decision::Action::Checkpoint;
  Decision d = scope.decide("why", 42);
  EXPECT_EQ(d.action, Decision::Action::Checkpoint);
  EXPECT_EQ(d.pid, 0);
}

TEST(PolicyScope, WorkerScopeDecidesARestart) {
  Decision d = Scope{}.decide("why", 42);
  EXPECT_EQ(d.action, Decision::Action::Restart);
  EXPECT_EQ(d.reason, "why");
  EXPECT_EQ(d.pid, 0);
}

TEST(PolicyScope, ProcessScopeDecidesASignalToThePid) {
  Decision d = Scope{true, SIGQUIT}.decide("why", 42);
  EXPECT_EQ(d.action, Decision::Action::Signal);
  EXPECT_EQ(d.pid, 42);
  EXPECT_EQ(d.signal, SIGQUIT);
}

}  // namespace
}  // namespace recycler::policies
