// `allocator:`: every key read, every bad value reported at its position,
// the preload library looked for on a fake machine, and the exact
// environment it makes (supervisor/config/allocator.h).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <string_view>
#include <vector>

#include "supervisor/config/allocator.h"
#include "supervisor/config/parse.h"
#include "tests/support/fake_host.h"

namespace recycler::config {
namespace {

using testing::ElementsAre;
using testing::IsEmpty;
using FileType = HostLookup::FileType;

std::vector<std::string> lines(const std::vector<Diagnostic>& diagnostics) {
  std::vector<std::string> out;
  for (const auto& d : diagnostics) out.push_back(d.str());
  return out;
}

const PreloadLibrary& jemalloc() {
  return *find_preload_library("jemalloc");
}
const PreloadLibrary& tcmalloc() {
  return *find_preload_library("tcmalloc");
}

// Where a library is found first: the build's multiarch directory on
// Debian, /usr/lib64 elsewhere.
std::string first_place(const PreloadLibrary& library) {
  return preload_candidates(library).front();
}

// A Debian machine with both allocators installed, and one with neither.
FakeHost with_allocators() {
  FakeHost host = debian_host(0, 0);
  host.add_file(first_place(jemalloc()), FileType::Regular)
      .add_file(first_place(tcmalloc()), FileType::Regular)
      .add_file("/opt/lib/libmine.so", FileType::Regular)
      .add_file("/opt/lib", FileType::Directory);
  return host;
}
const FakeHost kInstalled = with_allocators();
const FakeHost kBare = debian_host(0, 0);

LoadResult load(std::string_view yaml, const HostLookup& host = kInstalled) {
  return parse_string(yaml, "test.yaml", host);
}
std::vector<std::string> errors(std::string_view yaml, const HostLookup& host = kInstalled) {
  return lines(load(yaml, host).errors);
}
std::vector<std::string> warnings(std::string_view yaml, const HostLookup& host = kInstalled) {
  return lines(load(yaml, host).warnings);
}
AllocatorConfig allocator(std::string_view yaml, const HostLookup& host = kInstalled) {
  LoadResult result = load(yaml, host);
  EXPECT_THAT(lines(result.errors), IsEmpty());
  if (!result.config || result.config->programs.size() != 1) {
    ADD_FAILURE() << "expected exactly one program";
    return {};
  }
  return result.config->programs[0].allocator;
}

// --- Reading -------------------------------------------------------------------------------

TEST(AllocatorParse, EveryKeyIsRead) {
  AllocatorConfig a = allocator(R"(programs:
  api:
    command: [/bin/true]
    allocator:
      arena_max: 2
      trim_threshold: 128KiB
      mmap_threshold: 1MiB
      top_pad: 64K
      preload: jemalloc
      jemalloc_conf: "background_thread:true,dirty_decay_ms:5000"
)");
  EXPECT_EQ(a.arena_max, 2u);
  EXPECT_EQ(a.trim_threshold, 128u << 10);
  EXPECT_EQ(a.mmap_threshold, 1u << 20);
  EXPECT_EQ(a.top_pad, 64u << 10);
  EXPECT_EQ(a.preload, "jemalloc");
  EXPECT_EQ(a.preload_path, first_place(jemalloc()));
  EXPECT_EQ(a.jemalloc_conf, "background_thread:true,dirty_decay_ms:5000");
}

TEST(AllocatorParse, WithoutTheKeyOrWithAnEmptyOneNothingIsSet) {
  EXPECT_EQ(allocator("programs: {a: {command: [/bin/true]}}"), AllocatorConfig{});
  EXPECT_EQ(allocator("programs: {a: {command: [/bin/true], allocator: }}"), AllocatorConfig{});
  EXPECT_EQ(allocator("programs: {a: {command: [/bin/true], allocator: {arena_max: }}}"),
            AllocatorConfig{});
}

TEST(AllocatorParse, ZeroThresholdsAreGlibcsOwnMeaningAndAllowed) {
  AllocatorConfig a = allocator(
      "programs: {a: {command: [/bin/true], allocator: {trim_threshold: 0, top_pad: 0, "
      "mmap_threshold: 32MiB}}}");
  EXPECT_EQ(a.trim_threshold, 0u);
  EXPECT_EQ(a.top_pad, 0u);
  EXPECT_EQ(a.mmap_threshold, 32u << 20) << "the largest glibc takes on 64-bit";
}

TEST(AllocatorParse, TcmallocIsFoundByName) {
  AllocatorConfig a = allocator(
      "programs: {a: {command: [/bin/true], allocator: {preload: "
      "tcmalloc}}}");
  EXPECT_EQ(a.preload_path, first_place(tcmalloc()));
}

TEST(AllocatorParse, ANamedLibraryIsFoundInTheOtherUsualDirectories) {
  for (const char* dir : {"/usr/lib64", "/usr/lib", "/usr/local/lib"}) {
    FakeHost host = debian_host(0, 0);
    std::string path = std::string(dir) + "/libjemalloc.so.2";
    host.add_file(path, FileType::Regular);
    EXPECT_EQ(
        allocator("programs: {a: {command: [/bin/true], allocator: {preload: jemalloc}}}", host)
            .preload_path,
        path);
  }
}

TEST(AllocatorParse, APathIsTakenAsIsOrRelativeToTheConfigFile) {
  EXPECT_EQ(allocator("programs: {a: {command: [/bin/true], allocator: {preload: "
                      "/opt/lib/libmine.so}}}")
                .preload_path,
            "/opt/lib/libmine.so");
  LoadResult result =
      parse_string("programs: {a: {command: [/bin/true], allocator: {preload: ./lib/libmine.so}}}",
                   "/opt/recycler.yaml", kInstalled);
  ASSERT_THAT(lines(result.errors), IsEmpty());
  EXPECT_EQ(result.config->programs[0].allocator.preload, "./lib/libmine.so");
  EXPECT_EQ(result.config->programs[0].allocator.preload_path, "/opt/lib/libmine.so");
}

TEST(AllocatorParse, AChangedAllocatorIsAChangedProgramForAReload) {
  auto program = [](std::string_view yaml) {
    return parse_string(yaml, "test.yaml", kInstalled).config->programs.at(0);
  };
  EXPECT_EQ(program("programs: {a: {command: [/bin/true], allocator: {arena_max: 2}}}"),
            program("programs: {a: {command: [/bin/true], allocator: {arena_max: 2}}}"));
  EXPECT_NE(program("programs: {a: {command: [/bin/true], allocator: {arena_max: 2}}}"),
            program("programs: {a: {command: [/bin/true], allocator: {arena_max: 4}}}"));
}

// --- Errors --------------------------------------------------------------------------------

TEST(AllocatorErrors, AMissingNamedLibraryNamesWhereItLookedAndThePackage) {
  std::string looked;
  for (const std::string& path : preload_candidates(jemalloc()))
    looked += (looked.empty() ? "" : ", ") + path;
  EXPECT_THAT(errors(R"(programs:
  api:
    command: [/bin/true]
    allocator: {preload: jemalloc}
)",
                     kBare),
              ElementsAre("test.yaml:4:26: error: programs.api.allocator.preload: jemalloc is not "
                          "installed (no " +
                          looked + "); on Debian or Ubuntu: apt-get install libjemalloc2"));
  EXPECT_THAT(
      errors("programs: {a: {command: [/bin/true], allocator: {preload: tcmalloc}}}", kBare),
      ElementsAre(testing::EndsWith("apt-get install libtcmalloc-minimal4")));
}

// A preload runs in the worker, often as root: a library another user could
// have written is refused where the config names it, as check says.
TEST(AllocatorErrors, ALibraryAnotherUserCouldHaveWrittenIsRefused) {
  FakeHost host = with_allocators();
  host.add_file("/tmp/open/evil.so", HostLookup::FileType::Regular)
      .set_untrusted("/tmp/open/evil.so",
                     "/tmp/open: writable by other users (mode 0777) without the sticky bit; "
                     "refusing to load from there")
      .set_untrusted(first_place(jemalloc()), first_place(jemalloc()) +
                                                  ": owned by uid 65534, not by root or "
                                                  "recycler's user (uid 0); refusing to load it");
  EXPECT_THAT(errors(R"(programs:
  a: {command: [/bin/true], allocator: {preload: /tmp/open/evil.so}}
)",
                     host),
              ElementsAre("test.yaml:2:50: error: programs.a.allocator.preload: /tmp/open: "
                          "writable by other users (mode 0777) without the sticky bit; refusing "
                          "to load from there"));
  EXPECT_THAT(errors("programs: {a: {command: [/bin/true], allocator: {preload: jemalloc}}}", host),
              ElementsAre(testing::HasSubstr("programs.a.allocator.preload: " +
                                             first_place(jemalloc()) + ": owned by uid 65534")));
}

TEST(AllocatorErrors, APathMustBeAnExistingRegularFileWithoutSeparators) {
  EXPECT_THAT(errors(R"(programs:
  a: {command: [/bin/true], allocator: {preload: /opt/lib/libnone.so}}
  b: {command: [/bin/true], allocator: {preload: /opt/lib}}
  c: {command: [/bin/true], allocator: {preload: "/opt/lib/a.so:/opt/lib/b.so"}}
  d: {command: [/bin/true], allocator: {preload: "/opt/my lib/a.so"}}
)"),
              ElementsAre("test.yaml:2:50: error: programs.a.allocator.preload: "
                          "\"/opt/lib/libnone.so\" does not exist",
                          "test.yaml:3:50: error: programs.b.allocator.preload: \"/opt/lib\" is "
                          "not a regular file",
                          "test.yaml:4:50: error: programs.c.allocator.preload: "
                          "\"/opt/lib/a.so:/opt/lib/b.so\" cannot be preloaded: LD_PRELOAD cannot "
                          "hold a path with spaces, colons or control characters",
                          "test.yaml:5:50: error: programs.d.allocator.preload: \"/opt/my "
                          "lib/a.so\" cannot be preloaded: LD_PRELOAD cannot hold a path with "
                          "spaces, colons or control characters"));
}

TEST(AllocatorErrors, AnUnknownNameGetsADidYouMean) {
  EXPECT_THAT(errors(R"(programs:
  a: {command: [/bin/true], allocator: {preload: jemaloc}}
  b: {command: [/bin/true], allocator: {preload: hoard}}
  c: {command: [/bin/true], allocator: {preload: ""}}
)"),
              ElementsAre("test.yaml:2:50: error: programs.a.allocator.preload: unknown allocator "
                          "\"jemaloc\"; did you mean \"jemalloc\"? (expected jemalloc, tcmalloc "
                          "or the path of a library)",
                          "test.yaml:3:50: error: programs.b.allocator.preload: unknown allocator "
                          "\"hoard\" (expected jemalloc, tcmalloc or the path of a library)",
                          "test.yaml:4:50: error: programs.c.allocator.preload must not be empty"));
}

TEST(AllocatorErrors, BadNumbersAndSizesAreReportedAtTheirValues) {
  EXPECT_THAT(errors(R"(programs:
  api:
    command: [/bin/true]
    allocator:
      arena_max: 0
      trim_threshold: 1MB
      mmap_threshold: 64MiB
      top_pad: -1
)"),
              ElementsAre("test.yaml:5:18: error: programs.api.allocator.arena_max: 0 is out of "
                          "range; expected an integer from 1 to 65536",
                          "test.yaml:6:23: error: programs.api.allocator.trim_threshold: invalid "
                          "size \"1MB\": decimal units are ambiguous; use \"1MiB\" or a byte count",
                          "test.yaml:7:23: error: programs.api.allocator.mmap_threshold: 64 MiB is "
                          "above glibc's maximum of 32 MiB, which it would ignore without a word",
                          "test.yaml:8:16: error: programs.api.allocator.top_pad: invalid size "
                          "\"-1\": sizes cannot be negative"));
}

TEST(AllocatorErrors, ArenaMaxMustBeAWholeNumber) {
  EXPECT_THAT(errors("programs: {a: {command: [/bin/true], allocator: {arena_max: two}}}"),
              ElementsAre("test.yaml:1:61: error: programs.a.allocator.arena_max: invalid value "
                          "\"two\"; expected an integer from 1 to 65536"));
  EXPECT_THAT(errors("programs: {a: {command: [/bin/true], allocator: {arena_max: 65537}}}"),
              ElementsAre(testing::HasSubstr("65537 is out of range")));
}

TEST(AllocatorErrors, JemallocConfMustBeNameValuePairs) {
  EXPECT_THAT(errors(R"(programs:
  a: {command: [/bin/true], allocator: {jemalloc_conf: "background_thread"}}
  b: {command: [/bin/true], allocator: {jemalloc_conf: "narenas:2,"}}
  c: {command: [/bin/true], allocator: {jemalloc_conf: "dirty decay:1"}}
  d: {command: [/bin/true], allocator: {jemalloc_conf: ""}}
  e: {command: [/bin/true], allocator: {jemalloc_conf: [narenas:2]}}
)"),
              ElementsAre("test.yaml:2:56: error: programs.a.allocator.jemalloc_conf: invalid "
                          "option \"background_thread\" in \"background_thread\"; expected "
                          "NAME:VALUE pairs separated by commas, e.g. "
                          "\"background_thread:true,dirty_decay_ms:5000\"",
                          "test.yaml:3:56: error: programs.b.allocator.jemalloc_conf: invalid "
                          "option \"\" in \"narenas:2,\"; expected NAME:VALUE pairs separated by "
                          "commas, e.g. \"background_thread:true,dirty_decay_ms:5000\"",
                          "test.yaml:4:56: error: programs.c.allocator.jemalloc_conf: invalid "
                          "option \"dirty decay:1\" in \"dirty decay:1\"; expected NAME:VALUE "
                          "pairs separated by commas, e.g. "
                          "\"background_thread:true,dirty_decay_ms:5000\"",
                          "test.yaml:5:56: error: programs.d.allocator.jemalloc_conf must not be "
                          "empty; expected NAME:VALUE pairs separated by commas, e.g. "
                          "\"background_thread:true,dirty_decay_ms:5000\"",
                          "test.yaml:6:56: error: programs.e.allocator.jemalloc_conf must be a "
                          "string"));
}

TEST(AllocatorErrors, UnknownKeysAndAWrongShapeAreErrors) {
  EXPECT_THAT(errors(R"(programs:
  a: {command: [/bin/true], allocator: {arena_mx: 2, dirty_decay: 1}}
  b: {command: [/bin/true], allocator: jemalloc}
  c: {command: [/bin/true], alocator: {arena_max: 2}}
)"),
              ElementsAre("test.yaml:2:41: error: unknown key \"arena_mx\" in "
                          "programs.a.allocator; did you mean \"arena_max\"?",
                          "test.yaml:2:54: error: unknown key \"dirty_decay\" in "
                          "programs.a.allocator",
                          "test.yaml:3:40: error: programs.b.allocator must be a map",
                          "test.yaml:4:29: error: unknown key \"alocator\" in programs.c; did you "
                          "mean \"allocator\"?"));
}

// --- Warnings ------------------------------------------------------------------------------

TEST(AllocatorWarnings, GlibcSettingsDoNothingUnderAnotherAllocator) {
  EXPECT_THAT(warnings(R"(programs:
  a: {command: [/bin/true], allocator: {preload: jemalloc, arena_max: 2}}
  b: {command: [/bin/true], allocator: {preload: tcmalloc, top_pad: 0, arena_max: 2, trim_threshold: 0}}
)"),
              ElementsAre("test.yaml:2:50: warning: programs.a.allocator: arena_max only tunes "
                          "glibc's malloc, which jemalloc replaces",
                          "test.yaml:3:50: warning: programs.b.allocator: arena_max, "
                          "trim_threshold and top_pad only tune glibc's malloc, which tcmalloc "
                          "replaces"));
}

TEST(AllocatorWarnings, JemallocConfDoesNothingUnderTcmalloc) {
  EXPECT_THAT(warnings("programs: {a: {command: [/bin/true], allocator: {preload: tcmalloc, "
                       "jemalloc_conf: \"narenas:2\"}}}"),
              ElementsAre("test.yaml:1:84: warning: programs.a.allocator.jemalloc_conf: only "
                          "jemalloc reads MALLOC_CONF, and preload is tcmalloc"));
}

TEST(AllocatorWarnings, AMallocAlreadyInTheProgramsLdPreloadKeepsMalloc) {
  std::string mine = first_place(jemalloc());
  EXPECT_THAT(
      warnings("programs: {a: {command: [/bin/true], env: {LD_PRELOAD: "
               "\"/lib/libprof.so /opt/libmimalloc.so\"}, allocator: {preload: jemalloc}}}"),
      ElementsAre("test.yaml:1:117: warning: programs.a.allocator.preload: "
                  "env.LD_PRELOAD already preloads \"/opt/libmimalloc.so\", which comes "
                  "first and keeps malloc"));
  EXPECT_THAT(warnings("programs: {a: {command: [/bin/true], env: {LD_PRELOAD: \"" + mine +
                       "\"}, allocator: {preload: jemalloc}}}"),
              IsEmpty())
      << "the same library twice is no conflict";
}

TEST(AllocatorWarnings, ThePlainSettingsWarnOfNothing) {
  EXPECT_THAT(warnings("programs: {a: {command: [/bin/true], allocator: {arena_max: 2, "
                       "preload: /opt/lib/libmine.so, jemalloc_conf: \"narenas:1\"}}}"),
              IsEmpty());
}

// --- The environment -----------------------------------------------------------------------

AllocatorConfig everything() {
  AllocatorConfig a;
  a.arena_max = 2;
  a.trim_threshold = 131072;
  a.mmap_threshold = 1048576;
  a.top_pad = 65536;
  a.preload = "jemalloc";
  a.preload_path = "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2";
  a.jemalloc_conf = "background_thread:true";
  return a;
}

TEST(AllocatorEnv, SetsExactlyTheDocumentedVariables) {
  EnvMap env{{"HOME", "/root"}};
  apply_allocator(everything(), {}, env);
  EXPECT_EQ(env, (EnvMap{{"GLIBC_TUNABLES",
                          "glibc.malloc.trim_threshold=131072:glibc.malloc.mmap_threshold=1048576:"
                          "glibc.malloc.top_pad=65536"},
                         {"HOME", "/root"},
                         {"LD_PRELOAD", "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2"},
                         {"MALLOC_ARENA_MAX", "2"},
                         {"MALLOC_CONF", "background_thread:true"}}));
}

TEST(AllocatorEnv, EachKeySetsItsOwnVariableOnly) {
  auto only = [](auto set) {
    AllocatorConfig a;
    set(a);
    EnvMap env;
    apply_allocator(a, {}, env);
    return env;
  };
  EXPECT_EQ(only([](AllocatorConfig& a) { a.arena_max = 3; }), (EnvMap{{"MALLOC_ARENA_MAX", "3"}}));
  EXPECT_EQ(only([](AllocatorConfig& a) { a.trim_threshold = 0; }),
            (EnvMap{{"GLIBC_TUNABLES", "glibc.malloc.trim_threshold=0"}}));
  EXPECT_EQ(only([](AllocatorConfig& a) { a.mmap_threshold = 4096; }),
            (EnvMap{{"GLIBC_TUNABLES", "glibc.malloc.mmap_threshold=4096"}}));
  EXPECT_EQ(only([](AllocatorConfig& a) { a.top_pad = 1; }),
            (EnvMap{{"GLIBC_TUNABLES", "glibc.malloc.top_pad=1"}}));
  EXPECT_EQ(only([](AllocatorConfig& a) { a.preload_path = "/opt/libx.so"; }),
            (EnvMap{{"LD_PRELOAD", "/opt/libx.so"}}));
  EXPECT_EQ(only([](AllocatorConfig& a) { a.jemalloc_conf = "narenas:1"; }),
            (EnvMap{{"MALLOC_CONF", "narenas:1"}}));
  EXPECT_EQ(only([](AllocatorConfig&) {}), EnvMap{});
}

TEST(AllocatorEnv, WhatRecyclerInheritedIsOverridden) {
  EnvMap env{{"MALLOC_ARENA_MAX", "8"},
             {"MALLOC_CONF", "narenas:64"},
             {"GLIBC_TUNABLES", "glibc.malloc.top_pad=1:glibc.malloc.tcache_count=0"}};
  apply_allocator(everything(), {}, env);
  EXPECT_EQ(env["MALLOC_ARENA_MAX"], "2");
  EXPECT_EQ(env["MALLOC_CONF"], "background_thread:true");
  EXPECT_EQ(env["GLIBC_TUNABLES"],
            "glibc.malloc.tcache_count=0:glibc.malloc.trim_threshold=131072:"
            "glibc.malloc.mmap_threshold=1048576:glibc.malloc.top_pad=65536")
      << "other tunables stay; ours replace the inherited ones";
}

TEST(AllocatorEnv, AnInheritedArenaMaxTunableIsDroppedSinceGlibcPrefersItToTheVariable) {
  AllocatorConfig a;
  a.arena_max = 2;
  EnvMap env{{"GLIBC_TUNABLES", "glibc.malloc.arena_max=16"}};
  apply_allocator(a, {}, env);
  EXPECT_EQ(env, (EnvMap{{"MALLOC_ARENA_MAX", "2"}}));
  env = {{"GLIBC_TUNABLES", "glibc.malloc.arena_max=16:glibc.malloc.perturb=1"}};
  apply_allocator(a, {}, env);
  EXPECT_EQ(env, (EnvMap{{"GLIBC_TUNABLES", "glibc.malloc.perturb=1"}, {"MALLOC_ARENA_MAX", "2"}}));
}

// The worker's env so far: what recycler inherited, the program's env over it.
EnvMap merged(EnvMap inherited, const EnvMap& program_env) {
  for (const auto& [k, v] : program_env) inherited[k] = v;
  return inherited;
}

TEST(AllocatorEnv, TheProgramsOwnEnvWins) {
  EnvMap program_env{{"MALLOC_ARENA_MAX", "4"},
                     {"MALLOC_CONF", "narenas:1"},
                     {"GLIBC_TUNABLES", "glibc.malloc.trim_threshold=1:glibc.malloc.perturb=7"},
                     {"MALLOC_TOP_PAD_", "0"}};
  EnvMap env = merged({{"GLIBC_TUNABLES", "glibc.malloc.mmap_threshold=9"}}, program_env);
  apply_allocator(everything(), program_env, env);
  EXPECT_EQ(env["MALLOC_ARENA_MAX"], "4");
  EXPECT_EQ(env["MALLOC_CONF"], "narenas:1");
  EXPECT_EQ(env["MALLOC_TOP_PAD_"], "0");
  EXPECT_EQ(env["GLIBC_TUNABLES"],
            "glibc.malloc.trim_threshold=1:glibc.malloc.perturb=7:glibc.malloc.mmap_threshold="
            "1048576")
      << "the program's tunables stay; top_pad is the program's through MALLOC_TOP_PAD_";
}

TEST(AllocatorEnv, AnArenaMaxTunableInTheProgramsEnvWinsOverArenaMax) {
  AllocatorConfig a;
  a.arena_max = 2;
  EnvMap program_env{{"GLIBC_TUNABLES", "glibc.malloc.arena_max=1"}};
  EnvMap env = merged({}, program_env);
  apply_allocator(a, program_env, env);
  EXPECT_EQ(env, program_env) << "no MALLOC_ARENA_MAX that glibc would ignore anyway";
}

TEST(AllocatorEnv, LdPreloadKeepsWhatItHadAndGetsTheLibraryAppendedOnce) {
  AllocatorConfig a;
  a.preload_path = "/usr/lib/libjemalloc.so.2";
  EnvMap program_env{{"LD_PRELOAD", "/opt/libprof.so"}};
  EnvMap env = merged({{"LD_PRELOAD", "/lib/inherited.so"}}, program_env);
  apply_allocator(a, program_env, env);
  EXPECT_EQ(env["LD_PRELOAD"], "/opt/libprof.so:/usr/lib/libjemalloc.so.2");

  env = {{"LD_PRELOAD", "/lib/inherited.so"}};
  apply_allocator(a, {}, env);
  EXPECT_EQ(env["LD_PRELOAD"], "/lib/inherited.so:/usr/lib/libjemalloc.so.2");

  env = {{"LD_PRELOAD", "/lib/a.so /usr/lib/libjemalloc.so.2"}};
  apply_allocator(a, {}, env);
  EXPECT_EQ(env["LD_PRELOAD"], "/lib/a.so /usr/lib/libjemalloc.so.2") << "already there";
}

}  // namespace
}  // namespace recycler::config
