// The config file as a whole: its documents, structure, programs, commands,
// cgroup root, files, diagnostics and PATH warnings.
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
#include "tests/support/fake_host.h"
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

// "memory_max: 512" was 512 bytes: every start OOM-killed in 9 ms, forever.
TEST(Limits, ASizeWithoutAUnitAndALimitNoProgramStartsInAreErrors) {
  EXPECT_THAT(errors(R"(programs:
  api:
    command: [/bin/true]
    limits: {memory_max: 512, memory_high: 100KiB}
)"),
              ElementsAre("test.yaml:4:26: error: programs.api.limits.memory_max: invalid size "
                          "\"512\": missing unit, e.g. \"512MiB\" (\"512B\" for bytes)",
                          "test.yaml:4:44: error: programs.api.limits.memory_high (100 KiB) is "
                          "too small: no program starts in less than 1 MiB"));
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
  EXPECT_EQ(api.allocator.arena_max, 2u);
  EXPECT_EQ(api.allocator.jemalloc_conf, "narenas:2");
  EXPECT_EQ(result.config->programs[1].restart.mode, RestartMode::Never);
  EXPECT_TRUE(result.config->programs[1].shell);
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

// --- control: the control socket ---------------------------------------------

TEST(Control, SocketModeAndGroup) {
  LoadResult result =
      parse(R"(control: {socket: run/api.sock, mode: 0660, group: )" + current_group() + R"(}
programs:
  api: {command: [/bin/true]}
)");
  ASSERT_TRUE(result.config) << lines(result.errors).front();
  const ControlConfig& c = result.config->control;
  EXPECT_EQ(c.socket, "run/api.sock") << "relative to the config's directory";
  EXPECT_EQ(c.mode, 0660u);
  EXPECT_EQ(c.group, current_group());
  EXPECT_EQ(c.gid, ::getegid());
  LoadResult plain = parse("programs:\n  api: {command: [/bin/true]}\n");
  EXPECT_EQ(plain.config->control, ControlConfig{});
  EXPECT_EQ(plain.config->control.mode, 0600u);
}

TEST(Control, ABadModeOrGroupOrKeyIsAnErrorAtItsPlace) {
  EXPECT_THAT(errors(R"(control: {mode: 0666}
programs: {api: {command: [/bin/true]}}
)"),
              ElementsAre(HasSubstr("test.yaml:1:17: error: control.mode: \"0666\" would let "
                                    "others connect")));
  EXPECT_THAT(
      errors(R"(control: {mode: rw}
programs: {api: {command: [/bin/true]}}
)"),
      ElementsAre(HasSubstr("test.yaml:1:17: error: control.mode: expected an octal mode")));
  EXPECT_THAT(errors(R"(control: {mode: 0400}
programs: {api: {command: [/bin/true]}}
)"),
              ElementsAre(HasSubstr("must give its owner read and write")));
  EXPECT_THAT(errors(R"(control: {group: no-such-group-here}
programs: {api: {command: [/bin/true]}}
)"),
              ElementsAre(HasSubstr("test.yaml:1:18: error: control.group: unknown group")));
  EXPECT_THAT(errors(R"(control: {sockt: /run/x.sock}
programs: {api: {command: [/bin/true]}}
)"),
              ElementsAre(AllOf(HasSubstr("test.yaml:1:11: error:"), HasSubstr("sockt"),
                                HasSubstr("socket"))));
}

// A socket in a directory others may write to (a sticky /tmp included):
// anyone could bind the name first and answer for recycler.
TEST(Control, ASocketInADirectoryOthersCanWriteToIsRefused) {
  FakeHost host = debian_host(0, 0);
  host.add_directory("/tmp", 01777).add_directory("/run/recycler", 0755);
  auto shared = parse_string(R"(control: {socket: /tmp/api.sock}
programs: {api: {command: [/bin/true]}}
)",
                             "test.yaml", host);
  EXPECT_THAT(lines(shared.errors),
              ElementsAre("test.yaml:1:19: error: control.socket: /tmp: writable by other "
                          "users (mode 1777): any of them could take a name there first; not a "
                          "place for recycler's socket: use a directory only recycler's user can "
                          "write to (the default: /run/recycler)"));
  auto own = parse_string(R"(control: {socket: /run/recycler/api.sock}
programs: {api: {command: [/bin/true]}}
)",
                          "test.yaml", host);
  EXPECT_THAT(lines(own.errors), IsEmpty());
}

}  // namespace
}  // namespace recycler::config
