#include <gmock/gmock.h>
#include <grp.h>
#include <gtest/gtest.h>
#include <pwd.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "policies/policy.h"
#include "supervisor/config/parse.h"
#include "supervisor/config/units.h"

namespace recycler::config {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using testing::Contains;
using testing::ElementsAre;
using testing::HasSubstr;
using testing::IsEmpty;

// Every YAML snippet below starts on line 1 right after R"( so that the
// positions in the expected messages can be read off the snippet.
LoadResult parse(std::string_view yaml) {
  return parse_string(yaml, "test.yaml");
}

std::vector<std::string> lines(const std::vector<Diagnostic>& diagnostics) {
  std::vector<std::string> out;
  for (const auto& d : diagnostics) out.push_back(d.str());
  return out;
}

std::vector<std::string> errors(std::string_view yaml) {
  return lines(parse(yaml).errors);
}
std::vector<std::string> warnings(std::string_view yaml) {
  return lines(parse(yaml).warnings);
}

// The single program of a config that must load without errors.
ProgramConfig program(std::string_view yaml) {
  LoadResult result = parse(yaml);
  EXPECT_THAT(lines(result.errors), IsEmpty());
  if (!result.config || result.config->programs.size() != 1) {
    ADD_FAILURE() << "expected exactly one program";
    return {};
  }
  return result.config->programs[0];
}

std::string current_user() {
  return getpwuid(geteuid())->pw_name;
}
std::string current_group() {
  return getgrgid(getegid())->gr_name;
}

// A directory under the system temp dir, removed with everything in it.
class TempDir {
 public:
  TempDir() {
    std::string pattern = (fs::temp_directory_path() / "recycler-config-XXXXXX").string();
    path_ = mkdtemp(pattern.data());
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  const fs::path& path() const { return path_; }
  fs::path write(const std::string& name, const std::string& text) const {
    fs::path file = path_ / name;
    fs::create_directories(file.parent_path());
    std::ofstream(file) << text;
    return file;
  }

 private:
  fs::path path_;
};

// --- The full example --------------------------------------------------------

std::string full_example() {
  return R"(log: {level: debug, format: json}
cgroup_root: services/recycler
programs:
  api:
    command: ["gunicorn", "app:app"]
    env: {PYTHONUNBUFFERED: "1"}
    cwd: /tmp
    user: )" +
         current_user() +
         R"(
    group: )" +
         current_group() +
         R"(
    instances: 3
    threads: 2
    limits: {memory_max: 2GiB, memory_high: 1.6GiB, pids_max: 256, cpu: 1.5}
    rlimits: {nofile: 65536, core: 0}
    stop: {signal: INT, timeout: 30s}
    restart:
      mode: always
      backoff: {initial: 2s, max: 90s, reset_after: 5m}
      crash_loop: {max: 7, within: 2m}
    policies: []
)";
}

TEST(FullExample, TopLevelSettings) {
  LoadResult result = parse(full_example());
  ASSERT_THAT(lines(result.errors), IsEmpty());
  ASSERT_TRUE(result.config);
  EXPECT_EQ(result.config->path, "test.yaml");
  EXPECT_EQ(result.config->log.level, LogLevel::Debug);
  EXPECT_EQ(result.config->log.format, LogFormat::Json);
  EXPECT_EQ(result.config->cgroup_root, "services/recycler");
  ASSERT_EQ(result.config->programs.size(), 1u);
}

TEST(FullExample, ProgramFields) {
  ProgramConfig p = program(full_example());
  EXPECT_EQ(p.name, "api");
  EXPECT_THAT(p.command, ElementsAre("gunicorn", "app:app"));
  EXPECT_FALSE(p.shell);
  EXPECT_EQ(p.env, (std::map<std::string, std::string>{{"PYTHONUNBUFFERED", "1"}}));
  EXPECT_EQ(p.cwd, "/tmp");
  EXPECT_EQ(p.user, current_user());
  EXPECT_EQ(p.group, current_group());
  EXPECT_EQ(p.uid, geteuid());
  EXPECT_EQ(p.gid, getegid());
  EXPECT_EQ(p.instances, 3u);
  EXPECT_EQ(p.threads, 2u);
  EXPECT_TRUE(p.policies.empty());
}

TEST(FullExample, Limits) {
  Limits limits = program(full_example()).limits;
  EXPECT_EQ(limits.memory_max, 2ULL << 30);
  EXPECT_EQ(limits.memory_high, 1717986918u);  // 1.6 GiB, rounded down
  EXPECT_EQ(limits.pids_max, 256u);
  EXPECT_EQ(limits.cpu, 1.5);
}

TEST(FullExample, RlimitsInFileOrder) {
  EXPECT_THAT(program(full_example()).rlimits,
              ElementsAre(Rlimit{RLIMIT_NOFILE, 65536, 65536}, Rlimit{RLIMIT_CORE, 0, 0}));
}

TEST(FullExample, StopAndRestart) {
  ProgramConfig p = program(full_example());
  EXPECT_EQ(p.stop.signal, SIGINT);
  EXPECT_EQ(p.stop.timeout, 30s);
  EXPECT_EQ(p.restart.mode, RestartMode::Always);
  EXPECT_EQ(p.restart.backoff.initial, 2s);
  EXPECT_EQ(p.restart.backoff.max, 90s);
  EXPECT_EQ(p.restart.backoff.reset_after, 5min);
  EXPECT_EQ(p.restart.crash_loop.max, 7u);
  EXPECT_EQ(p.restart.crash_loop.within, 2min);
}

TEST(FullExample, WarnsThatGunicornIsNotOnPath) {
  EXPECT_THAT(warnings(full_example()),
              ElementsAre("test.yaml:5:15: warning: programs.api.command: \"gunicorn\" was not "
                          "found on PATH"));
}

// --- Commands ----------------------------------------------------------------

TEST(Command, AStringRunsUnderBinSh) {
  ProgramConfig p = program(R"(programs:
  api:
    command: exec gunicorn app:app --workers 4
)");
  EXPECT_THAT(p.command, ElementsAre("/bin/sh", "-c", "exec gunicorn app:app --workers 4"));
  EXPECT_TRUE(p.shell);
}

TEST(Command, AShellStringIsNotCheckedAgainstPath) {
  EXPECT_THAT(warnings(R"(programs:
  api:
    command: no-such-command-anywhere --flag
)"),
              IsEmpty());
}

TEST(Command, ArgumentsMayBeEmptyStrings) {
  EXPECT_THAT(program(R"(programs:
  api:
    command: [/bin/echo, ""]
)")
                  .command,
              ElementsAre("/bin/echo", ""));
}

// --- Defaults ------------------------------------------------------------------

TEST(Defaults, AbsentKeysTakeTheStructDefaults) {
  LoadResult result = parse(R"(programs:
  api:
    command: [/bin/true]
)");
  ASSERT_TRUE(result.config);
  ProgramConfig expected;
  expected.name = "api";
  expected.command = {"/bin/true"};
  EXPECT_EQ(result.config->programs.at(0), expected);
  EXPECT_FALSE(result.config->programs.at(0).threads);
  EXPECT_FALSE(result.config->programs.at(0).uid);
  EXPECT_EQ(result.config->log, LogConfig{});
  EXPECT_EQ(result.config->cgroup_root, kDefaultCgroupRoot);
}

TEST(Defaults, NullValuesTakeTheStructDefaults) {
  LoadResult result = parse(R"(log:
cgroup_root: ~
programs:
  api:
    command: [/bin/true]
    env:
    cwd:
    user: ~
    instances:
    threads:
    limits:
    rlimits: ~
    stop: {signal: ~, timeout: }
    restart: {mode: , backoff: ~, crash_loop: {max: ~}}
    policies:
)");
  ASSERT_THAT(lines(result.errors), IsEmpty());
  ProgramConfig expected;
  expected.name = "api";
  expected.command = {"/bin/true"};
  EXPECT_EQ(result.config->programs.at(0), expected);
  EXPECT_EQ(result.config->log, LogConfig{});
  EXPECT_EQ(result.config->cgroup_root, kDefaultCgroupRoot);
}

TEST(Programs, KeepFileOrderAndCanBeFoundByName) {
  LoadResult result = parse(R"(programs:
  zeta: {command: [/bin/true]}
  alpha: {command: [/bin/true], instances: 2}
)");
  ASSERT_TRUE(result.config);
  ASSERT_EQ(result.config->programs.size(), 2u);
  EXPECT_EQ(result.config->programs[0].name, "zeta");
  EXPECT_EQ(result.config->programs[1].name, "alpha");
  ASSERT_NE(result.config->find("alpha"), nullptr);
  EXPECT_EQ(result.config->find("alpha")->instances, 2u);
  EXPECT_EQ(result.config->find("beta"), nullptr);
}

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
              ElementsAre("test.yaml:1:59: error: programs.a.limits.memory_max must be greater "
                          "than 0"));
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

// --- cgroup_root ------------------------------------------------------------------

class ValidCgroupRoot : public testing::TestWithParam<const char*> {};

TEST_P(ValidCgroupRoot, IsAccepted) {
  LoadResult result = parse("cgroup_root: " + std::string(GetParam()) +
                            "\nprograms: {a: {command: [/bin/true]}}\n");
  ASSERT_THAT(lines(result.errors), IsEmpty());
  EXPECT_EQ(result.config->cgroup_root, GetParam());
}

INSTANTIATE_TEST_SUITE_P(RelativeAndAbsolute, ValidCgroupRoot,
                         testing::Values("recycler", "system.slice/recycler.service", "/recycler",
                                         "a/b-c/d_e/user@1000", "..a/b..."));

struct CgroupRootCase {
  const char* value;
  const char* message;
};

class InvalidCgroupRoot : public testing::TestWithParam<CgroupRootCase> {};

TEST_P(InvalidCgroupRoot, IsRejected) {
  EXPECT_THAT(
      errors("cgroup_root: " + std::string(GetParam().value) +
             "\nprograms: {a: {command: [/bin/true]}}\n"),
      ElementsAre(std::string("test.yaml:1:14: error: cgroup_root: ") + GetParam().message));
}

INSTANTIATE_TEST_SUITE_P(
    EveryRule, InvalidCgroupRoot,
    testing::Values(CgroupRootCase{"\"\"", "must not be empty"},
                    CgroupRootCase{"a/../b", "\".\" and \"..\" are not allowed in \"a/../b\""},
                    CgroupRootCase{"./a", "\".\" and \"..\" are not allowed in \"./a\""},
                    CgroupRootCase{"a//b", "empty path component in \"a//b\""},
                    CgroupRootCase{"a/", "empty path component in \"a/\""},
                    CgroupRootCase{"/", "empty path component in \"/\""},
                    CgroupRootCase{"//a", "empty path component in \"//a\""},
                    CgroupRootCase{
                        "\"a b\"",
                        "invalid character \" \" in \"a b\"; use letters, digits and _ . @ / -"}));

// --- Program names ------------------------------------------------------------------

TEST(ProgramName, ValidNames) {
  EXPECT_TRUE(valid_program_name("api"));
  EXPECT_TRUE(valid_program_name("web-1.worker_A"));
  EXPECT_TRUE(valid_program_name(std::string(64, 'a')));
}

TEST(ProgramName, InvalidNames) {
  EXPECT_FALSE(valid_program_name(""));
  EXPECT_FALSE(valid_program_name(std::string(65, 'a')));
  EXPECT_FALSE(valid_program_name(".hidden"));
  EXPECT_FALSE(valid_program_name("a/b"));
  EXPECT_FALSE(valid_program_name("a b"));
  EXPECT_FALSE(valid_program_name(std::string("a\0b", 3)));
}

TEST(ProgramName, InvalidNameIsAnErrorAtTheKey) {
  EXPECT_THAT(errors(R"(programs:
  .api:
    command: [/bin/true]
)"),
              ElementsAre("test.yaml:2:3: error: invalid program name \".api\" in programs: use 1 "
                          "to 64 letters, digits, _ . or -, not starting with ."));
}

// --- Structure errors ------------------------------------------------------------------

TEST(Structure, DuplicateKeyNamesTheFirstOccurrence) {
  EXPECT_THAT(errors(R"(programs:
  api:
    command: [/bin/true]
    limits:
      memory_max: 1GiB
      pids_max: 10
      memory_max: 2GiB
)"),
              ElementsAre("test.yaml:7:7: error: duplicate key \"memory_max\" in "
                          "programs.api.limits (first at line 5)"));
}

TEST(Structure, DuplicateKeyKeepsTheFirstValue) {
  // Only errors come back for a config with a duplicate, so check at the top
  // level that parsing went on with the first value (no second error for it).
  EXPECT_THAT(errors(R"(programs:
  api:
    command: [/bin/true]
    instances: 2
    instances: not-a-number
)"),
              ElementsAre("test.yaml:5:5: error: duplicate key \"instances\" in programs.api "
                          "(first at line 4)"));
}

TEST(Structure, DuplicateProgramIsAnError) {
  EXPECT_THAT(errors(R"(programs:
  api: {command: [/bin/true]}
  api: {command: [/bin/true]}
)"),
              ElementsAre("test.yaml:3:3: error: duplicate key \"api\" in programs (first at "
                          "line 2)"));
}

TEST(Structure, DuplicateTopLevelKeyIsAnError) {
  EXPECT_THAT(errors(R"(log: {}
programs: {a: {command: [/bin/true]}}
log: {}
)"),
              ElementsAre("test.yaml:3:1: error: duplicate key \"log\" at the top level (first "
                          "at line 1)"));
}

TEST(Structure, SectionsMustBeMaps) {
  EXPECT_THAT(errors(R"(log: debug
programs:
  api:
    command: [/bin/true]
    limits: 512MiB
    stop: [TERM]
    env: [A=1]
    restart: {backoff: 1s}
)"),
              ElementsAre("test.yaml:1:6: error: log must be a map",
                          "test.yaml:5:13: error: programs.api.limits must be a map",
                          "test.yaml:6:11: error: programs.api.stop must be a map",
                          "test.yaml:7:10: error: programs.api.env must be a map",
                          "test.yaml:8:24: error: programs.api.restart.backoff must be a map"));
}

TEST(Structure, ProgramMustBeAMap) {
  EXPECT_THAT(errors("programs:\n  api: /bin/true\n"),
              ElementsAre("test.yaml:2:8: error: programs.api must be a map"));
}

TEST(Structure, ProgramsIsRequired) {
  EXPECT_THAT(errors("log: {level: info}\n"),
              ElementsAre("test.yaml:1:1: error: programs is required"));
}

TEST(Structure, ProgramsMustNotBeEmpty) {
  EXPECT_THAT(errors("programs: {}\n"),
              ElementsAre("test.yaml:1:11: error: programs must not be empty"));
  EXPECT_THAT(errors("log: {}\nprograms:\n"),
              ElementsAre("test.yaml:2:1: error: programs must not be empty"));
}

TEST(Structure, ProgramsMustBeAMap) {
  EXPECT_THAT(errors("programs: [api]\n"),
              ElementsAre("test.yaml:1:11: error: programs must be a map"));
}

TEST(Structure, CommandIsRequiredAtTheProgramKey) {
  EXPECT_THAT(errors(R"(programs:
  api:
    instances: 2
  web:
)"),
              ElementsAre("test.yaml:2:3: error: programs.api.command is required",
                          "test.yaml:4:3: error: programs.web.command is required"));
}

TEST(Structure, CommandMustNotBeEmpty) {
  EXPECT_THAT(errors(R"(programs:
  a:
    command: []
  b:
    command: ""
  c:
    command:
  d:
    command: ["", x]
)"),
              ElementsAre("test.yaml:3:14: error: programs.a.command must not be empty",
                          "test.yaml:5:14: error: programs.b.command must not be empty",
                          "test.yaml:7:5: error: programs.c.command must not be empty",
                          "test.yaml:9:15: error: programs.d.command[0] must not be empty"));
}

TEST(Structure, CommandItemsMustBeStrings) {
  EXPECT_THAT(errors(R"(programs:
  a:
    command: [/bin/echo, [x], {y: z}]
  b:
    command: {run: x}
)"),
              ElementsAre("test.yaml:3:26: error: programs.a.command[1] must be a string",
                          "test.yaml:3:31: error: programs.a.command[2] must be a string",
                          "test.yaml:5:14: error: programs.b.command must be a string or a list"));
}

TEST(Structure, NonStringKeysAreErrors) {
  EXPECT_THAT(errors(R"(programs:
  api:
    command: [/bin/true]
    ? [a, b]
    : 1
)"),
              ElementsAre("test.yaml:4:7: error: keys in programs.api must be strings"));
}

// --- Whole documents ----------------------------------------------------------------------

TEST(Document, SyntaxErrorIsOneErrorAtItsPosition) {
  EXPECT_THAT(errors(R"(programs:
  api:
    command: [/bin/true
    instances: 2
)"),
              ElementsAre("test.yaml:4:14: error: invalid YAML: end of sequence flow not found"));
}

TEST(Document, UndefinedAliasIsASyntaxError) {
  EXPECT_THAT(errors("programs: *nothing\n"),
              ElementsAre("test.yaml:1:11: error: invalid YAML: the referenced anchor is not "
                          "defined"));
}

TEST(Document, EmptyDocumentIsAnErrorAtTheStart) {
  auto expected = ElementsAre(
      "test.yaml:1:1: error: the config is empty; expected a map with a \"programs\" key");
  EXPECT_THAT(errors(""), expected);
  EXPECT_THAT(errors("# nothing but a comment\n"), expected);
  EXPECT_THAT(errors("---\n...\n"), expected);
}

TEST(Document, TopLevelMustBeAMap) {
  auto expected =
      ElementsAre("test.yaml:1:1: error: the config must be a map with a \"programs\" key");
  EXPECT_THAT(errors("- programs\n"), expected);
  EXPECT_THAT(errors("programs\n"), expected);
}

TEST(Document, OnlyOneDocumentIsAllowed) {
  EXPECT_THAT(errors(R"(programs: {a: {command: [/bin/true]}}
---
programs: {b: {command: [/bin/true]}}
)"),
              ElementsAre("test.yaml:3:1: error: the config must be a single YAML document"));
}

TEST(Document, AStrayCommaIsAnErrorNotAnEndlessStreamOfDocuments) {
  // Found by tests/fuzz: yaml-cpp's LoadAll never returned on these.
  EXPECT_THAT(errors(",x\n"), ElementsAre("test.yaml:1:1: error: invalid YAML: unexpected \",\""));
  EXPECT_THAT(errors("programs: {a: {command: [x]}}\n,\n"),
              ElementsAre("test.yaml:2:1: error: invalid YAML: end of map not found"));
}

TEST(Document, EveryErrorIsReportedInFileOrder) {
  // Sections are checked in a fixed order (log last here, though it comes
  // first in the checks); the report follows the file.
  LoadResult result = parse(R"(programs:
  api:
    limits: {memory_max: 2GB}
    command: []
    instances: 0
  web:
    command: [/bin/true]
    stop: {timeout: 30}
log: {level: loud}
)");
  EXPECT_FALSE(result.config);
  EXPECT_THAT(
      lines(result.errors),
      ElementsAre("test.yaml:3:26: error: programs.api.limits.memory_max: invalid size \"2GB\": "
                  "decimal units are ambiguous; use \"2GiB\" or a byte count",
                  "test.yaml:4:14: error: programs.api.command must not be empty",
                  "test.yaml:5:16: error: programs.api.instances: 0 is out of range; expected an "
                  "integer from 1 to 1024",
                  "test.yaml:8:21: error: programs.web.stop.timeout: invalid duration \"30\": "
                  "missing unit, e.g. \"30s\"",
                  "test.yaml:9:14: error: log.level: invalid value \"loud\"; expected trace, "
                  "debug, info, warn or error"));
}

TEST(Document, DiagnosticsCarryTheirParts) {
  LoadResult result = parse("programs: {a: {command: [/bin/true], instances: x}}\n");
  ASSERT_EQ(result.errors.size(), 1u);
  const Diagnostic& d = result.errors[0];
  EXPECT_EQ(d.file, "test.yaml");
  EXPECT_EQ(d.line, 1);
  EXPECT_EQ(d.column, 49);
  EXPECT_FALSE(d.warning);
  EXPECT_EQ(d.message,
            "programs.a.instances: invalid value \"x\"; expected an integer from 1 to 1024");
}

// --- Diagnostic::str -------------------------------------------------------------------

TEST(DiagnosticStr, ErrorWithPosition) {
  EXPECT_EQ((Diagnostic{"r.yaml", 3, 7, "bad thing", false}).str(), "r.yaml:3:7: error: bad thing");
}

TEST(DiagnosticStr, WarningWithPosition) {
  EXPECT_EQ((Diagnostic{"r.yaml", 12, 1, "odd thing", true}).str(),
            "r.yaml:12:1: warning: odd thing");
}

TEST(DiagnosticStr, NoLineMeansNoPosition) {
  EXPECT_EQ((Diagnostic{"r.yaml", 0, 0, "cannot read config: Permission denied", false}).str(),
            "r.yaml: error: cannot read config: Permission denied");
}

TEST(DiagnosticStr, ControlCharactersFromTheFileNeverReachTheTerminalRaw) {
  // A key that tries to clear the screen, then forge a diagnostic of its own.
  auto e =
      errors("\"ab\\e[2J\\rc\\nx.yaml:1:1: error: forged\": 1\nprograms: {a: {command: [x]}}\n");
  ASSERT_GE(e.size(), 1u);
  EXPECT_EQ(e[0],
            "test.yaml:1:1: error: unknown key \"ab\\x1b[2J\\x0dc\\x0ax.yaml:1:1: error: forged\" "
            "at the top level");
  for (char c : e[0]) EXPECT_GE(static_cast<unsigned char>(c), 0x20) << "a raw control character";
}

TEST(DiagnosticStr, EscapesWhatAMessageCarriesRaw) {
  EXPECT_EQ((Diagnostic{"r\x1b.yaml", 1, 2, "in programs.a\rb", false}).str(),
            "r\\x1b.yaml:1:2: error: in programs.a\\x0db");
}

// --- cwd and files -------------------------------------------------------------------------

TEST(Cwd, RelativeDirectoryResolvesAgainstTheConfigFile) {
  TempDir dir;
  fs::create_directories(dir.path() / "srv" / "app");
  fs::path file = dir.write("etc/recycler.yaml", R"(programs:
  a: {command: [/bin/true], cwd: ../srv/app}
  b: {command: [/bin/true], cwd: .}
)");
  LoadResult result = load_file(file.string());
  ASSERT_THAT(lines(result.errors), IsEmpty());
  EXPECT_EQ(result.config->path, file.string());
  EXPECT_EQ(result.config->programs[0].cwd, (dir.path() / "srv" / "app").string());
  EXPECT_EQ(result.config->programs[1].cwd, (dir.path() / "etc").string());
}

TEST(Cwd, ParseStringWithoutADirectoryResolvesAgainstTheCurrentDirectory) {
  EXPECT_EQ(program("programs: {a: {command: [/bin/true], cwd: .}}").cwd,
            fs::current_path().string());
}

TEST(Cwd, MustExistAndBeADirectory) {
  EXPECT_THAT(errors(R"(programs:
  a: {command: [/bin/true], cwd: /nonexistent/recycler-test}
  b: {command: [/bin/true], cwd: /etc/passwd}
)"),
              ElementsAre("test.yaml:2:34: error: programs.a.cwd: \"/nonexistent/recycler-test\" "
                          "does not exist",
                          "test.yaml:3:34: error: programs.b.cwd: \"/etc/passwd\" is not a "
                          "directory"));
}

TEST(LoadFile, MissingFileIsAnErrorWithoutPosition) {
  EXPECT_THAT(lines(load_file("/nonexistent/recycler.yaml").errors),
              ElementsAre("/nonexistent/recycler.yaml: error: cannot read config: No such file "
                          "or directory"));
}

TEST(LoadFile, DirectoryIsAnErrorWithoutPosition) {
  TempDir dir;
  LoadResult result = load_file(dir.path().string());
  EXPECT_FALSE(result.config);
  EXPECT_THAT(lines(result.errors),
              ElementsAre(dir.path().string() +
                          ": error: cannot read config: not a regular file: a directory"));
}

TEST(LoadFile, ADeviceIsRefusedInsteadOfReadUntilMemoryRunsOut) {
  EXPECT_THAT(lines(load_file("/dev/zero").errors),
              ElementsAre("/dev/zero: error: cannot read config: not a regular file: a character "
                          "device"));
}

TEST(LoadFile, AFifoIsRefusedWithoutWaitingForAWriter) {
  TempDir dir;
  std::string fifo = (dir.path() / "r.yaml").string();
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  EXPECT_THAT(lines(load_file(fifo).errors),
              ElementsAre(fifo + ": error: cannot read config: not a regular file: a FIFO"));
}

TEST(LoadFile, AFileOverTheSizeLimitIsRefused) {
  TempDir dir;
  fs::path file = dir.write("big.yaml", "programs: {}\n");
  fs::resize_file(file, kMaxConfigBytes + 1);
  EXPECT_THAT(lines(load_file(file.string()).errors),
              ElementsAre(file.string() + ": error: cannot read config: larger than 16 MiB"));
}

TEST(LoadFile, ErrorsNameTheFileAsGiven) {
  TempDir dir;
  fs::path file = dir.write("bad.yaml", "programs: {}\n");
  EXPECT_THAT(lines(load_file(file.string()).errors),
              ElementsAre(file.string() + ":1:11: error: programs must not be empty"));
}

// RECYCLER_FIXTURES_DIR should name tests/fixtures, but recycler_test() expands
// CMAKE_CURRENT_SOURCE_DIR when called from tests/unit; fall back to the tree
// next to this file until that is fixed.
fs::path fixture(const std::string& name) {
  fs::path defined = fs::path(RECYCLER_FIXTURES_DIR) / name;
  if (fs::exists(defined)) return defined;
  return fs::path(__FILE__).parent_path().parent_path() / "fixtures" / name;
}

TEST(LoadFile, ExampleFixtureLoadsWithoutDiagnostics) {
  std::string path = fixture("config/example.yaml").string();
  LoadResult result = load_file(path);
  ASSERT_THAT(lines(result.errors), IsEmpty());
  EXPECT_THAT(lines(result.warnings), IsEmpty());
  ASSERT_EQ(result.config->programs.size(), 2u);
  const ProgramConfig& api = result.config->programs[0];
  EXPECT_EQ(api.cwd, fs::path(path).parent_path().lexically_normal().string());
  EXPECT_EQ(api.stop.signal, SIGQUIT);
  EXPECT_THAT(api.rlimits, ElementsAre(Rlimit{RLIMIT_NOFILE, 65536, 65536},
                                       Rlimit{RLIMIT_CORE, 0, RLIM_INFINITY}));
  EXPECT_EQ(api.restart.backoff.initial, 500ms);
  EXPECT_EQ(result.config->programs[1].restart.mode, RestartMode::Never);
  EXPECT_TRUE(result.config->programs[1].shell);
}

// --- Users and groups --------------------------------------------------------------------

TEST(Identity, UserResolvesToUidAndPrimaryGroup) {
  passwd* me = getpwuid(geteuid());
  ProgramConfig p = program("programs: {a: {command: [/bin/true], user: " + current_user() + "}}");
  EXPECT_EQ(p.user, current_user());
  EXPECT_EQ(p.uid, me->pw_uid);
  EXPECT_EQ(p.gid, me->pw_gid);
  EXPECT_FALSE(p.group);
}

TEST(Identity, GroupOverridesTheUsersPrimaryGroup) {
  if (geteuid() != 0) GTEST_SKIP() << "another group needs root";
  group* other = getgrnam("nogroup");
  if (!other) GTEST_SKIP() << "no nogroup group";
  ProgramConfig p = program("programs: {a: {command: [/bin/true], user: root, group: nogroup}}");
  EXPECT_EQ(p.uid, 0u);
  EXPECT_EQ(p.gid, other->gr_gid);
}

TEST(Identity, UnknownUserAndGroupAreErrors) {
  EXPECT_THAT(errors(R"(programs:
  api:
    command: [/bin/true]
    user: no-such-user-recycler
    group: no-such-group-recycler
)"),
              ElementsAre("test.yaml:4:11: error: programs.api.user: unknown user "
                          "\"no-such-user-recycler\"",
                          "test.yaml:5:12: error: programs.api.group: unknown group "
                          "\"no-such-group-recycler\""));
}

TEST(Identity, AnotherUserNeedsRoot) {
  if (geteuid() == 0) GTEST_SKIP() << "running as root: any user is allowed";
  EXPECT_THAT(errors("programs: {a: {command: [/bin/true], user: root}}"),
              ElementsAre("test.yaml:1:44: error: programs.a.user: running programs as another "
                          "user needs root"));
}

TEST(Identity, AnotherGroupNeedsRoot) {
  if (geteuid() == 0) GTEST_SKIP() << "running as root: any group is allowed";
  group* other = getgrnam("root");
  if (!other || other->gr_gid == getegid()) GTEST_SKIP() << "no group other than our own";
  EXPECT_THAT(errors("programs: {a: {command: [/bin/true], group: root}}"),
              ElementsAre("test.yaml:1:45: error: programs.a.group: running programs as another "
                          "group needs root"));
}

TEST(Identity, RootMayRunProgramsAsAnotherUser) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root";
  if (!getpwnam("nobody")) GTEST_SKIP() << "no nobody user";
  EXPECT_EQ(program("programs: {a: {command: [/bin/true], user: nobody}}").uid,
            getpwnam("nobody")->pw_uid);
}

// --- PATH warnings ----------------------------------------------------------------------

TEST(PathWarning, CommandMissingFromTheProgramsOwnPath) {
  LoadResult result = parse(R"(programs:
  api:
    command: [sh, -c, "true"]
    env: {PATH: /nonexistent/bin}
)");
  EXPECT_TRUE(result.config) << "a warning does not fail the load";
  EXPECT_THAT(lines(result.warnings),
              ElementsAre("test.yaml:3:15: warning: programs.api.command: \"sh\" was not found "
                          "on PATH"));
}

TEST(PathWarning, CommandFoundOnTheProgramsOwnPath) {
  EXPECT_THAT(warnings(R"(programs:
  api:
    command: [sh]
    env: {PATH: "/nonexistent/bin:/usr/bin:/bin"}
)"),
              IsEmpty());
}

TEST(PathWarning, CommandFoundOnTheRecyclersPath) {
  EXPECT_THAT(warnings("programs: {a: {command: [sh]}}"), IsEmpty());
}

TEST(PathWarning, PathsAreCheckedAsFiles) {
  EXPECT_THAT(warnings(R"(programs:
  a: {command: [/nonexistent/bin/app]}
  b: {command: [/etc/passwd]}
  c: {command: [/etc]}
  d: {command: [./sh], cwd: /bin}
)"),
              ElementsAre("test.yaml:2:17: warning: programs.a.command: \"/nonexistent/bin/app\" "
                          "does not exist",
                          "test.yaml:3:17: warning: programs.b.command: \"/etc/passwd\" is not an "
                          "executable file",
                          "test.yaml:4:17: warning: programs.c.command: \"/etc\" is not an "
                          "executable file"));
}

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

}  // namespace
}  // namespace recycler::config

namespace recycler::config {
namespace {

TEST(Recycling, DefaultsSampleEverySecondOneRecycleAtATime) {
  ProgramConfig p = program(R"(programs:
  api:
    command: [/bin/true]
)");
  EXPECT_EQ(p.sample_interval, 1s);
  EXPECT_EQ(p.max_concurrent_recycles, 1u);
  EXPECT_EQ(p.min_uptime, 5s);
  EXPECT_FALSE(p.requests);
}

TEST(Recycling, ProgramKeysAreRead) {
  ProgramConfig p = program(R"(programs:
  api:
    command: [/bin/true]
    sample_interval: 250ms
    max_concurrent_recycles: 2
    min_uptime: 30s
    requests: {pattern: '"(GET|POST) '}
)");
  EXPECT_EQ(p.sample_interval, 250ms);
  EXPECT_EQ(p.max_concurrent_recycles, 2u);
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
)"),
      ElementsAre("test.yaml:4:22: error: programs.api.sample_interval: 1ms is too short; "
                  "at least 10ms",
                  "test.yaml:5:30: error: programs.api.max_concurrent_recycles: 0 is out of "
                  "range; expected an integer from 1 to 1024",
                  "test.yaml:6:25: error: programs.api.requests.pattern: invalid pattern "
                  "\"(GET\": missing closing parenthesis at offset 4"));
}

TEST(Recycling, APercentageLimitNeedsMemoryMax) {
  EXPECT_THAT(errors(R"(programs:
  api:
    command: [/bin/true]
    policies:
      - memory: {limit: 90%}
)"),
              ElementsAre("test.yaml:5:9: error: programs.api.policies[0].memory: a percentage "
                          "limit needs limits.memory_max, which is not set"));
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
