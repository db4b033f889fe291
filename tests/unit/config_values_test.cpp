// The values of the config sections: unknown keys, sizes, durations,
// signals, ranges, choices, env, rlimits, recycling, checkpoint, timeline.
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
#include "supervisor/config/parse.h"
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
using units::suggest;

// --- Unknown keys ----------------------------------------------------------------

struct UnknownKeyCase {
  const char* yaml;
  const char* error;
};

class UnknownKey : public testing::TestWithParam<UnknownKeyCase> {};

TEST_P(UnknownKey, IsAnErrorAtTheKeyWithASuggestion) {
  LoadResult result = parse(GetParam().yaml);
  EXPECT_THAT(lines(result.errors), Contains(GetParam().error));
  EXPECT_FALSE(result.config);
}

INSTANTIATE_TEST_SUITE_P(
    EveryLevel, UnknownKey,
    testing::Values(
        UnknownKeyCase{"progams: {}\n",
                       "test.yaml:1:1: error: unknown key \"progams\" at the top level; did you "
                       "mean \"programs\"?"},
        UnknownKeyCase{"log: {levle: info}\nprograms: {a: {command: [/bin/true]}}\n",
                       "test.yaml:1:7: error: unknown key \"levle\" in log; did you mean "
                       "\"level\"?"},
        UnknownKeyCase{"programs:\n  api:\n    comand: [/bin/true]\n",
                       "test.yaml:3:5: error: unknown key \"comand\" in programs.api; did you "
                       "mean \"command\"?"},
        UnknownKeyCase{"programs:\n  api:\n    command: [/bin/true]\n    intances: 2\n",
                       "test.yaml:4:5: error: unknown key \"intances\" in programs.api; did you "
                       "mean \"instances\"?"},
        UnknownKeyCase{"programs:\n  api:\n    command: [/bin/true]\n    restrat: {}\n",
                       "test.yaml:4:5: error: unknown key \"restrat\" in programs.api; did you "
                       "mean \"restart\"?"},
        UnknownKeyCase{"programs:\n  api:\n    command: [/bin/true]\n"
                       "    limits: {memory_mx: 1GiB}\n",
                       "test.yaml:4:14: error: unknown key \"memory_mx\" in programs.api.limits; "
                       "did you mean \"memory_max\"?"},
        UnknownKeyCase{"programs:\n  api:\n    command: [/bin/true]\n"
                       "    limits: {memroy_max: 1GiB}\n",
                       "test.yaml:4:14: error: unknown key \"memroy_max\" in programs.api.limits; "
                       "did you mean \"memory_max\"?"},
        UnknownKeyCase{"programs:\n  api:\n    command: [/bin/true]\n    stop: {timout: 1s}\n",
                       "test.yaml:4:12: error: unknown key \"timout\" in programs.api.stop; did "
                       "you mean \"timeout\"?"},
        UnknownKeyCase{"programs:\n  api:\n    command: [/bin/true]\n"
                       "    restart: {mod: always}\n",
                       "test.yaml:4:15: error: unknown key \"mod\" in programs.api.restart; did "
                       "you mean \"mode\"?"},
        UnknownKeyCase{"programs:\n  api:\n    command: [/bin/true]\n"
                       "    restart: {backoff: {intial: 1s}}\n",
                       "test.yaml:4:25: error: unknown key \"intial\" in "
                       "programs.api.restart.backoff; did you mean \"initial\"?"},
        UnknownKeyCase{"programs:\n  api:\n    command: [/bin/true]\n"
                       "    restart: {crash_loop: {withn: 1s}}\n",
                       "test.yaml:4:28: error: unknown key \"withn\" in "
                       "programs.api.restart.crash_loop; did you mean \"within\"?"},
        UnknownKeyCase{"programs:\n  api:\n    command: [/bin/true]\n    rlimits: {nofiles: 1}\n",
                       "test.yaml:4:15: error: unknown key \"nofiles\" in programs.api.rlimits; "
                       "did you mean \"nofile\"?"},
        UnknownKeyCase{"programs:\n  api:\n    command: [/bin/true]\n"
                       "    rlimits: {nofile: {sotf: 1, hard: 2}}\n",
                       "test.yaml:4:24: error: unknown key \"sotf\" in "
                       "programs.api.rlimits.nofile; did you mean \"soft\"?"}));

TEST(UnknownKeys, WithoutACloseMatchHaveNoSuggestion) {
  EXPECT_THAT(errors(R"(programs:
  api:
    command: [/bin/true]
    zzz: 1
)"),
              ElementsAre("test.yaml:4:5: error: unknown key \"zzz\" in programs.api"));
}

TEST(UnknownKeys, DifferentCaseSuggestsTheRightSpelling) {
  EXPECT_THAT(errors(R"(programs:
  api:
    command: [/bin/true]
    limits: {Memory_Max: 1GiB}
)"),
              ElementsAre("test.yaml:4:14: error: unknown key \"Memory_Max\" in "
                          "programs.api.limits; did you mean \"memory_max\"?"));
}

TEST(Suggest, FindsLikelyTypos) {
  std::vector<std::string> keys = {"command", "instances",  "restart",
                                   "limits",  "memory_max", "memory_high"};
  EXPECT_EQ(suggest("memory_mx", keys), "memory_max");
  EXPECT_EQ(suggest("memroy_max", keys), "memory_max");
  EXPECT_EQ(suggest("comand", keys), "command");
  EXPECT_EQ(suggest("intances", keys), "instances");
  EXPECT_EQ(suggest("restrat", keys), "restart");
  EXPECT_EQ(suggest("Memory_Max", keys), "memory_max");
}

TEST(Suggest, RejectsDistantWords) {
  std::vector<std::string> keys = {"cwd", "env", "user", "command"};
  EXPECT_EQ(suggest("zzz", keys), "");
  EXPECT_EQ(suggest("threads", keys), "");
  EXPECT_EQ(suggest("x", {}), "");
}

// --- Values ----------------------------------------------------------------------

TEST(Values, InvalidSizeIsReportedAtTheValue) {
  EXPECT_THAT(errors(R"(programs:
  api:
    command: [/bin/true]
    limits:
      memory_max: 2GB
)"),
              ElementsAre("test.yaml:5:19: error: programs.api.limits.memory_max: invalid size "
                          "\"2GB\": decimal units are ambiguous; use \"2GiB\" or a byte count"));
}

TEST(Values, DurationWithoutUnitIsRejected) {
  EXPECT_THAT(errors(R"(programs:
  api:
    command: [/bin/true]
    stop: {timeout: 30}
)"),
              ElementsAre("test.yaml:4:21: error: programs.api.stop.timeout: invalid duration "
                          "\"30\": missing unit, e.g. \"30s\""));
}

TEST(Values, ZeroStopTimeoutIsAllowed) {
  EXPECT_EQ(program(R"(programs:
  api:
    command: [/bin/true]
    stop: {timeout: 0s}
)")
                .stop.timeout,
            0ms);
}

TEST(Values, StopSignalAcceptsNamesAndNumbers) {
  EXPECT_EQ(program("programs: {a: {command: [/bin/true], stop: {signal: SIGQUIT}}}").stop.signal,
            SIGQUIT);
  EXPECT_EQ(program("programs: {a: {command: [/bin/true], stop: {signal: 10}}}").stop.signal, 10);
}

TEST(Values, UnknownSignalIsRejected) {
  EXPECT_THAT(errors(R"(programs:
  api:
    command: [/bin/true]
    stop: {signal: TERMINATE}
)"),
              ElementsAre("test.yaml:4:20: error: programs.api.stop.signal: invalid signal "
                          "\"TERMINATE\": unknown signal"));
}

TEST(Values, InvalidRestartModeListsTheChoices) {
  EXPECT_THAT(errors(R"(programs:
  api:
    command: [/bin/true]
    restart:
      mode: sometimes
)"),
              ElementsAre("test.yaml:5:13: error: programs.api.restart.mode: invalid value "
                          "\"sometimes\"; expected always, on-failure or never"));
}

TEST(Values, RestartModesMapToTheEnum) {
  EXPECT_EQ(program("programs: {a: {command: [/bin/true], restart: {mode: never}}}").restart.mode,
            RestartMode::Never);
  EXPECT_EQ(
      program("programs: {a: {command: [/bin/true], restart: {mode: on-failure}}}").restart.mode,
      RestartMode::OnFailure);
}

TEST(Values, InvalidLogLevelListsTheChoices) {
  EXPECT_THAT(errors(R"(log: {level: verbose, format: xml}
programs: {a: {command: [/bin/true]}}
)"),
              ElementsAre("test.yaml:1:14: error: log.level: invalid value \"verbose\"; expected "
                          "trace, debug, info, warn or error",
                          "test.yaml:1:31: error: log.format: invalid value \"xml\"; expected "
                          "text or json"));
}

struct IntegerCase {
  const char* value;
  const char* message;
};

class Instances : public testing::TestWithParam<IntegerCase> {};

TEST_P(Instances, RejectsWithTheRange) {
  std::string yaml = "programs:\n  api:\n    command: [/bin/true]\n    instances: " +
                     std::string(GetParam().value) + "\n";
  EXPECT_THAT(errors(yaml),
              ElementsAre(std::string("test.yaml:4:16: error: ") + GetParam().message));
}

INSTANTIATE_TEST_SUITE_P(
    NotAnIntegerInRange, Instances,
    testing::Values(
        IntegerCase{"1.5",
                    "programs.api.instances: invalid value \"1.5\"; expected an integer from 1 to "
                    "1024"},
        IntegerCase{"true",
                    "programs.api.instances: invalid value \"true\"; expected an integer from 1 "
                    "to 1024"},
        IntegerCase{"1e3",
                    "programs.api.instances: invalid value \"1e3\"; expected an integer from 1 "
                    "to 1024"},
        IntegerCase{"-1",
                    "programs.api.instances: -1 is out of range; expected an integer from 1 to "
                    "1024"},
        IntegerCase{"0",
                    "programs.api.instances: 0 is out of range; expected an integer from 1 to "
                    "1024"},
        IntegerCase{"1025",
                    "programs.api.instances: 1025 is out of range; expected an integer from 1 to "
                    "1024"},
        IntegerCase{"99999999999999999999",
                    "programs.api.instances: 99999999999999999999 is out of range; expected an "
                    "integer from 1 to 1024"},
        IntegerCase{"[1]", "programs.api.instances must be an integer"}));

TEST(Values, ThreadsRangeIsOneTo4096) {
  EXPECT_EQ(program("programs: {a: {command: [/bin/true], threads: 4096}}").threads, 4096u);
  EXPECT_THAT(errors("programs: {a: {command: [/bin/true], threads: 4097}}"),
              ElementsAre("test.yaml:1:47: error: programs.a.threads: 4097 is out of range; "
                          "expected an integer from 1 to 4096"));
}

TEST(Values, CpuAcceptsFractionsUpTo1024) {
  EXPECT_EQ(program("programs: {a: {command: [/bin/true], limits: {cpu: 0.25}}}").limits.cpu, 0.25);
  EXPECT_EQ(program("programs: {a: {command: [/bin/true], limits: {cpu: 1024}}}").limits.cpu,
            1024.0);
}

TEST(Values, CpuRejectsZeroTooManyAndNonNumbers) {
  EXPECT_THAT(errors(R"(programs:
  api:
    command: [/bin/true]
    limits: {cpu: 0}
  web:
    command: [/bin/true]
    limits: {cpu: 1025}
  db:
    command: [/bin/true]
    limits: {cpu: .nan}
)"),
              ElementsAre("test.yaml:4:19: error: programs.api.limits.cpu: 0 is out of range; "
                          "expected a number of CPUs above 0 and at most 1024",
                          "test.yaml:7:19: error: programs.web.limits.cpu: 1025 is out of range; "
                          "expected a number of CPUs above 0 and at most 1024",
                          "test.yaml:10:19: error: programs.db.limits.cpu: invalid value "
                          "\".nan\"; expected a number of CPUs above 0 and at most 1024"));
}

TEST(Values, MemoryHighAboveMemoryMaxIsAnErrorAtMemoryHigh) {
  EXPECT_THAT(errors(R"(programs:
  api:
    command: [/bin/true]
    limits:
      memory_high: 3GiB
      memory_max: 2GiB
)"),
              ElementsAre("test.yaml:5:20: error: programs.api.limits.memory_high (3 GiB) is "
                          "above memory_max (2 GiB)"));
}

TEST(Values, ZeroMemoryLimitIsRejected) {
  EXPECT_THAT(errors("programs: {a: {command: [/bin/true], limits: {memory_max: 0}}}"),
              ElementsAre("test.yaml:1:59: error: programs.a.limits.memory_max (0 B) is too "
                          "small: no program starts in less than 1 MiB"));
}

TEST(Values, BackoffMaxBelowInitialIsAnErrorAtMax) {
  EXPECT_THAT(errors(R"(programs:
  api:
    command: [/bin/true]
    restart:
      backoff: {initial: 5s, max: 1s}
)"),
              ElementsAre("test.yaml:5:35: error: programs.api.restart.backoff.max must not be "
                          "below backoff.initial (1s < 5s)"));
}

TEST(Values, BackoffInitialAboveTheDefaultMaxIsAnErrorAtInitial) {
  EXPECT_THAT(errors(R"(programs:
  api:
    command: [/bin/true]
    restart:
      backoff: {initial: 2m}
)"),
              ElementsAre("test.yaml:5:26: error: programs.api.restart.backoff.initial must not "
                          "be above backoff.max (1m < 2m)"));
}

TEST(Values, CrashLoopNeedsAtLeastOneExitAndAWindow) {
  EXPECT_THAT(errors(R"(programs:
  api:
    command: [/bin/true]
    restart:
      crash_loop: {max: 0, within: 0s}
)"),
              ElementsAre("test.yaml:5:25: error: programs.api.restart.crash_loop.max: 0 is out "
                          "of range; expected an integer from 1 to 1000000",
                          "test.yaml:5:36: error: programs.api.restart.crash_loop.within must be "
                          "greater than 0"));
}

// --- Environment ----------------------------------------------------------------

TEST(Env, ScalarValuesAreKeptAsWritten) {
  EXPECT_EQ(
      program(R"(programs:
  api:
    command: [/bin/true]
    env: {A: 1, B: true, C: "", _D9: x y}
)")
          .env,
      (std::map<std::string, std::string>{{"A", "1"}, {"B", "true"}, {"C", ""}, {"_D9", "x y"}}));
}

TEST(Env, RejectsBadNamesAndNonStringValues) {
  EXPECT_THAT(errors(R"(programs:
  api:
    command: [/bin/true]
    env:
      9LIVES: x
      LIST: [a, b]
      MAP: {a: b}
      EMPTY:
      BAD-NAME: x
)"),
              ElementsAre("test.yaml:5:7: error: invalid variable name \"9LIVES\" in "
                          "programs.api.env; use letters, digits and _, not starting with a digit",
                          "test.yaml:6:13: error: programs.api.env.LIST must be a string",
                          "test.yaml:7:12: error: programs.api.env.MAP must be a string",
                          "test.yaml:8:7: error: programs.api.env.EMPTY must be a string; write "
                          "\"\" for an empty value",
                          "test.yaml:9:7: error: invalid variable name \"BAD-NAME\" in "
                          "programs.api.env; use letters, digits and _, not starting with a "
                          "digit"));
}

// --- Rlimits --------------------------------------------------------------------

TEST(Rlimits, AcceptCountsSizesUnlimitedAndSoftHardPairs) {
  EXPECT_THAT(program(R"(programs:
  api:
    command: [/bin/true]
    rlimits:
      nofile: {soft: 1024, hard: 65536}
      nproc: unlimited
      stack: 8MiB
      memlock: {soft: 64KiB, hard: unlimited}
      as: 4GiB
      fsize: 0
      core: 0
)")
                  .rlimits,
              ElementsAre(Rlimit{RLIMIT_NOFILE, 1024, 65536},
                          Rlimit{RLIMIT_NPROC, RLIM_INFINITY, RLIM_INFINITY},
                          Rlimit{RLIMIT_STACK, 8 << 20, 8 << 20},
                          Rlimit{RLIMIT_MEMLOCK, 64 << 10, RLIM_INFINITY},
                          Rlimit{RLIMIT_AS, 4ULL << 30, 4ULL << 30}, Rlimit{RLIMIT_FSIZE, 0, 0},
                          Rlimit{RLIMIT_CORE, 0, 0}));
}

TEST(Rlimits, SoftAboveHardIsAnErrorAtSoft) {
  EXPECT_THAT(errors(R"(programs:
  api:
    command: [/bin/true]
    rlimits:
      nofile: {soft: 4096, hard: 1024}
)"),
              ElementsAre("test.yaml:5:22: error: programs.api.rlimits.nofile: soft limit "
                          "\"4096\" is above hard limit \"1024\""));
}

TEST(Rlimits, SoftAndHardAreBothRequired) {
  EXPECT_THAT(errors(R"(programs:
  api:
    command: [/bin/true]
    rlimits:
      nofile: {soft: 4096}
)"),
              ElementsAre("test.yaml:5:7: error: programs.api.rlimits.nofile.hard is required"));
}

TEST(Rlimits, RejectBadCountsAndSizes) {
  EXPECT_THAT(errors(R"(programs:
  api:
    command: [/bin/true]
    rlimits:
      nofile: 1.5
      nproc:
      core: 1GB
)"),
              ElementsAre("test.yaml:5:15: error: programs.api.rlimits.nofile: invalid value "
                          "\"1.5\"; expected a whole number or \"unlimited\"",
                          "test.yaml:6:7: error: programs.api.rlimits.nproc must not be empty",
                          "test.yaml:7:13: error: programs.api.rlimits.core: invalid size \"1GB\": "
                          "decimal units are ambiguous; use \"1GiB\" or a byte count"));
}

// --- to_string -------------------------------------------------------------------------

TEST(ToString, SpellsEnumsAsTheConfigDoes) {
  EXPECT_STREQ(to_string(RestartMode::Always), "always");
  EXPECT_STREQ(to_string(RestartMode::OnFailure), "on-failure");
  EXPECT_STREQ(to_string(RestartMode::Never), "never");
  EXPECT_STREQ(to_string(LogFormat::Text), "text");
  EXPECT_STREQ(to_string(LogFormat::Json), "json");
  EXPECT_STREQ(to_string(LogLevel::Trace), "trace");
  EXPECT_STREQ(to_string(LogLevel::Debug), "debug");
  EXPECT_STREQ(to_string(LogLevel::Info), "info");
  EXPECT_STREQ(to_string(LogLevel::Warn), "warn");
  EXPECT_STREQ(to_string(LogLevel::Error), "error");
}

TEST(Recycling, DefaultsSampleEverySecondOneRecycleAtATime) {
  ProgramConfig p = program(R"(programs:
  api:
    command: [/bin/true]
)");
  EXPECT_EQ(p.sample_interval, 1s);
  EXPECT_EQ(p.max_concurrent_recycles, 1u);
  EXPECT_EQ(p.max_concurrent_process_recycles, 0u) << "no cap";
  EXPECT_EQ(p.min_uptime, 5s);
  EXPECT_FALSE(p.requests);
}

TEST(Recycling, ProgramKeysAreRead) {
  ProgramConfig p = program(R"(programs:
  api:
    command: [/bin/true]
    sample_interval: 250ms
    max_concurrent_recycles: 2
    max_concurrent_process_recycles: 1
    min_uptime: 30s
    requests: {pattern: '"(GET|POST) '}
)");
  EXPECT_EQ(p.sample_interval, 250ms);
  EXPECT_EQ(p.max_concurrent_recycles, 2u);
  EXPECT_EQ(p.max_concurrent_process_recycles, 1u);
  EXPECT_EQ(p.min_uptime, 30s);
  ASSERT_TRUE(p.requests);
  EXPECT_EQ(p.requests->pattern, "\"(GET|POST) ");
}

TEST(Recycling, BadValuesAreErrorsWithTheirPosition) {
  EXPECT_THAT(
      errors(R"(programs:
  api:
    command: [/bin/true]
    sample_interval: 1ms
    max_concurrent_recycles: 0
    requests: {pattern: '(GET'}
    max_concurrent_process_recycles: -1
)"),
      ElementsAre("test.yaml:4:22: error: programs.api.sample_interval: 1ms is too short; "
                  "at least 10ms",
                  "test.yaml:5:30: error: programs.api.max_concurrent_recycles: 0 is out of "
                  "range; expected an integer from 1 to 1024",
                  "test.yaml:6:25: error: programs.api.requests.pattern: invalid pattern "
                  "\"(GET\": missing closing parenthesis at offset 4",
                  "test.yaml:7:38: error: programs.api.max_concurrent_process_recycles: -1 is "
                  "out of range; expected an integer from 0 to 65536"));
}

TEST(Recycling, APercentageLimitNeedsMemoryMax) {
  EXPECT_THAT(errors(R"(programs:
  api:
    command: [/bin/true]
    policies:
      - memory: {limit: 90%}
)"),
              ElementsAre("test.yaml:5:9: error: programs.api.policies[0].memory: a percentage "
                          "limit needs limits.memory_max, which is not set (nor has the "
                          "container recycler runs in a memory limit for it to be of)"));
  EXPECT_THAT(errors(R"(programs:
  api:
    command: [/bin/true]
    limits: {memory_max: 1GiB}
    policies:
      - memory: {limit: 90%}
)"),
              ::testing::IsEmpty());
}

TEST(Checkpoint, DefaultsAreUsr1FiveMinutesThenRestart) {
  ProgramConfig p = program(R"(programs:
  train:
    command: [/bin/true]
)");
  EXPECT_EQ(p.checkpoint.signal, SIGUSR1);
  EXPECT_EQ(p.checkpoint.timeout, 5min);
  EXPECT_EQ(p.checkpoint.on_timeout, config::CheckpointTimeout::Restart);
  EXPECT_FALSE(p.timeline);
}

TEST(Checkpoint, KeysAreRead) {
  ProgramConfig p = program(R"(programs:
  train:
    command: [/bin/true]
    checkpoint: {signal: USR2, timeout: 90s, on_timeout: wait}
)");
  EXPECT_EQ(p.checkpoint.signal, SIGUSR2);
  EXPECT_EQ(p.checkpoint.timeout, 90s);
  EXPECT_EQ(p.checkpoint.on_timeout, config::CheckpointTimeout::Wait);
}

// Who is asked to checkpoint before a stop or an operator's recycle: a
// program with a checkpoint: section (bare or not), or with a policy whose
// action is checkpoint; not one with neither.
TEST(Checkpoint, ASectionOrACheckpointingPolicyMakesAProgramCheckpoint) {
  EXPECT_FALSE(program("programs: {t: {command: [/bin/true]}}\n").checkpoints());
  EXPECT_TRUE(program("programs: {t: {command: [/bin/true], checkpoint: {}}}\n").checkpoints());
  EXPECT_TRUE(
      program("programs:\n  t:\n    command: [/bin/true]\n    checkpoint:\n").checkpoints());
  EXPECT_TRUE(program(R"(programs:
  t:
    command: [/bin/true]
    limits: {memory_max: 1GiB}
    policies:
      - memory: {limit: 90%, action: checkpoint}
)")
                  .checkpoints());
  EXPECT_FALSE(program(R"(programs:
  t:
    command: [/bin/true]
    policies:
      - max_lifetime: {after: 1h}
)")
                   .checkpoints());
}

TEST(Diagnose, KeysAreReadAndDefaultToHangsAndLeaks) {
  ProgramConfig p = program(R"(programs:
  train:
    command: [/bin/true]
    diagnose:
      signal: USR2
      command: gdb -p "$RECYCLER_PID" -batch -ex 'thread apply all bt'
)");
  ASSERT_TRUE(p.diagnose);
  EXPECT_EQ(p.diagnose->signal, SIGUSR2);
  EXPECT_THAT(
      p.diagnose->command,
      ElementsAre("/bin/sh", "-c", "gdb -p \"$RECYCLER_PID\" -batch -ex 'thread apply all bt'"));
  EXPECT_EQ(p.diagnose->timeout, 30s);
  EXPECT_EQ(p.diagnose->max_output, 1u << 20);
  EXPECT_THAT(p.diagnose->policies, ElementsAre("watchdog", "leak"));
  ProgramConfig q = program(R"(programs:
  train:
    command: [/bin/true]
    diagnose: {command: [py-spy, dump], timeout: 5s, max_output: 64KiB, policies: [memory]}
)");
  EXPECT_FALSE(q.diagnose->signal);
  EXPECT_THAT(q.diagnose->command, ElementsAre("py-spy", "dump"));
  EXPECT_EQ(q.diagnose->timeout, 5s);
  EXPECT_EQ(q.diagnose->max_output, 64u << 10);
  EXPECT_THAT(q.diagnose->policies, ElementsAre("memory"));
}

TEST(Diagnose, BadValuesAreErrorsWithTheirPosition) {
  EXPECT_THAT(errors(R"(programs:
  train:
    command: [/bin/true]
    diagnose: {signal: KILL, command: [py-spy, dump]}
)"),
              ElementsAre(HasSubstr("programs.train.diagnose.signal: SIGKILL would end or freeze "
                                    "the worker")));
  EXPECT_THAT(errors(R"(programs:
  train:
    command: [/bin/true]
    diagnose: {timeout: 5s}
)"),
              ElementsAre("test.yaml:4:15: error: programs.train.diagnose needs a signal, a "
                          "command, or both"));
  EXPECT_THAT(errors(R"(programs:
  train:
    command: [/bin/true]
    diagnose: {signal: USR2, policies: [leek], max_output: 10GiB, timeout: 0s}
)"),
              ElementsAre("test.yaml:4:41: error: programs.train.diagnose.policies[0]: unknown "
                          "policy \"leek\"; did you mean \"leak\"?",
                          "test.yaml:4:60: error: programs.train.diagnose.max_output: 10 GiB is "
                          "out of range (1KiB to 64MiB)",
                          "test.yaml:4:76: error: programs.train.diagnose.timeout must be greater "
                          "than 0"));
}

TEST(Checkpoint, BadValuesAreErrorsWithTheirPosition) {
  EXPECT_THAT(errors(R"(programs:
  train:
    command: [/bin/true]
    checkpoint: {signal: USR3, timeout: 0s, on_timeout: kill, singal: TERM}
)"),
              ElementsAre(HasSubstr("test.yaml:4:"), HasSubstr("test.yaml:4:"),
                          HasSubstr("test.yaml:4:"), HasSubstr("test.yaml:4:")));
  auto e = errors(R"(programs:
  train:
    command: [/bin/true]
    checkpoint: {on_timeout: kill}
)");
  EXPECT_THAT(e, ElementsAre("test.yaml:4:30: error: programs.train.checkpoint.on_timeout: "
                             "invalid value \"kill\"; expected restart or wait"));
}

TEST(Timeline, DirIsResolvedAgainstTheConfigFileAndDefaultsApply) {
  ProgramConfig p = program(R"(programs:
  train:
    command: [/bin/true]
    timeline: {dir: timelines}
)");
  ASSERT_TRUE(p.timeline);
  EXPECT_EQ(p.timeline->dir, std::filesystem::absolute("timelines").lexically_normal().string());
  EXPECT_EQ(p.timeline->max_size, 16u << 20);
  EXPECT_EQ(p.timeline->keep, 5u);
  p = program(R"(programs:
  train:
    command: [/bin/true]
    timeline: {dir: /var/lib/recycler/timelines, max_size: 1MiB, keep: 0}
)");
  ASSERT_TRUE(p.timeline);
  EXPECT_EQ(p.timeline->dir, "/var/lib/recycler/timelines");
  EXPECT_EQ(p.timeline->max_size, 1u << 20);
  EXPECT_EQ(p.timeline->keep, 0u);
}

TEST(Timeline, BadValuesAreErrorsWithTheirPosition) {
  EXPECT_THAT(errors(R"(programs:
  train:
    command: [/bin/true]
    timeline: {max_size: 1KiB}
)"),
              ElementsAre("test.yaml:4:15: error: programs.train.timeline.dir is required"));
  EXPECT_THAT(errors(R"(programs:
  train:
    command: [/bin/true]
    timeline: {dir: /tmp/t, max_size: 1KiB, keep: -1}
)"),
              ElementsAre("test.yaml:4:39: error: programs.train.timeline.max_size: 1 KiB is too "
                          "small; at least 64 KiB",
                          HasSubstr("test.yaml:4:51: error: programs.train.timeline.keep")));
}

}  // namespace
}  // namespace recycler::config
