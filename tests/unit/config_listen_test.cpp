// `listen:` and `recycle:` of a program: the forms each accepts, the errors
// (file:line:col and key), and the surge's memory headroom warning.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "supervisor/config/parse.h"
#include "tests/support/fake_host.h"
#include "tests/unit/config_test_util.h"

namespace recycler::config {
namespace {

using namespace std::chrono_literals;
using namespace test;
using testing::ElementsAre;
using testing::HasSubstr;
using testing::IsEmpty;

LoadResult on(const FakeHost& host, std::string_view yaml) {
  return parse_string(yaml, "test.yaml", host);
}

TEST(Listen, TcpV6AndUnixEntriesInOrderNamedByTheProgramUnlessNamed) {
  FakeHost host = debian_host(0, 0);
  LoadResult r = on(host, R"(programs:
  web:
    command: ["/bin/true"]
    group: nogroup
    listen:
      - 127.0.0.1:8000
      - {name: v6, address: "[::1]:8001", backlog: 128}
      - {name: admin, address: "unix:/run/web.sock", mode: "0600", owner: alice}
      - unix:web.sock
)");
  ASSERT_THAT(lines(r.errors), IsEmpty());
  const auto& l = r.config->programs[0].listen;
  ASSERT_EQ(l.size(), 4u);
  EXPECT_EQ(l[0].name, "web");
  EXPECT_EQ(l[0].address(), "127.0.0.1:8000");
  EXPECT_EQ(l[0].backlog, 0u) << "0: the kernel's somaxconn";
  EXPECT_EQ(l[1].name, "v6");
  EXPECT_TRUE(l[1].tcp->v6);
  EXPECT_EQ(l[1].address(), "[::1]:8001");
  EXPECT_EQ(l[1].backlog, 128u);
  EXPECT_EQ(l[2].path, "/run/web.sock");
  EXPECT_EQ(l[2].mode, 0600u);
  EXPECT_EQ(l[2].uid, 1000u);
  EXPECT_EQ(l[2].gid, 65534u) << "the program's group may connect";
  EXPECT_EQ(l[3].mode, 0660u);
  EXPECT_TRUE(fs::path(l[3].path).is_absolute()) << "relative to the config file: " << l[3].path;
}

TEST(Listen, ASingleAddressNeedsNoList) {
  ProgramConfig p = program(R"(programs:
  web:
    command: ["/bin/true"]
    listen: "127.0.0.1:8000"
)");
  ASSERT_EQ(p.listen.size(), 1u);
  EXPECT_EQ(p.listen[0].tcp->port, 8000);
}

TEST(Listen, BadEntriesNameTheirPlace) {
  EXPECT_THAT(errors(R"(programs:
  web:
    command: ["/bin/true"]
    listen: ["127.0.0.1:0", "unix:", "localhost:80", {address: "1.2.3.4:80", mode: "0660"}]
)"),
              ElementsAre(HasSubstr("test.yaml:4:14: error: programs.web.listen[0]: port 0"),
                          HasSubstr("test.yaml:4:29: error: programs.web.listen[1]: expected "
                                    "unix:/path"),
                          HasSubstr("test.yaml:4:38: error: programs.web.listen[2]:"),
                          HasSubstr("programs.web.listen[3].mode: only a unix socket has a mode")));
  EXPECT_THAT(errors(R"(programs:
  web:
    command: ["/bin/true"]
    listen: [{name: "a:b", address: "127.0.0.1:80"}, {adress: "127.0.0.1:81"}]
)"),
              ElementsAre(HasSubstr("programs.web.listen[0].name: \"a:b\" is not a valid name"),
                          HasSubstr("programs.web.listen[1].address is required"),
                          HasSubstr("did you mean \"address\"?")));
}

TEST(Listen, AnEndpointBelongsToOneEntryOfOneProgram) {
  EXPECT_THAT(errors(R"(programs:
  web:
    command: ["/bin/true"]
    listen: ["127.0.0.1:80", "127.0.0.1:80"]
  api:
    command: ["/bin/true"]
    listen: ["unix:/run/a.sock"]
  admin:
    command: ["/bin/true"]
    listen: ["unix:/run/a.sock"]
)"),
              ElementsAre(HasSubstr("programs.web.listen[1]: 127.0.0.1:80 is listed twice"),
                          HasSubstr("programs.admin.listen: unix:/run/a.sock is already a socket "
                                    "of api")));
}

TEST(Listen, AUnixPathLongerThanSunPathIsRefused) {
  std::string path = "/run/" + std::string(110, 'x');
  EXPECT_THAT(errors(R"(programs:
  web:
    command: ["/bin/true"]
    listen: ["unix:)" +
                     path + R"("]
)"),
              ElementsAre(HasSubstr("a unix socket's path has at most 107")));
}

TEST(Recycle, DefaultsToRestartAndReadsSurgeSettings) {
  ProgramConfig plain = program(R"(programs:
  web:
    command: ["/bin/true"]
)");
  EXPECT_EQ(plain.recycle.mode, RecycleMode::Restart);
  ProgramConfig p = program(R"(programs:
  web:
    command: ["/bin/true"]
    listen: ["127.0.0.1:8000"]
    recycle: {mode: surge, ready_timeout: 90s, ready_from: child}
)");
  EXPECT_EQ(p.recycle.mode, RecycleMode::Surge);
  EXPECT_EQ(p.recycle.ready_timeout, 90s);
  EXPECT_TRUE(p.recycle.ready_from_child);
  EXPECT_FALSE(p.recycle.ready_after);
  ProgramConfig delay = program(R"(programs:
  web:
    command: ["/bin/true"]
    listen: ["127.0.0.1:8000"]
    recycle: {mode: surge, ready_after: 5s}
)");
  EXPECT_EQ(delay.recycle.ready_after, 5s);
}

TEST(Recycle, BadValuesAndMisplacedKeys) {
  EXPECT_THAT(errors(R"(programs:
  web:
    command: ["/bin/true"]
    recycle: {mode: surje, ready_timeout: 0s, ready_from: worker}
)"),
              ElementsAre(HasSubstr("test.yaml:4:21: error: programs.web.recycle.mode: invalid "
                                    "value \"surje\"; expected restart or surge"),
                          HasSubstr("programs.web.recycle.ready_timeout must be greater than 0"),
                          HasSubstr("programs.web.recycle.ready_from: expected main or child")));
  EXPECT_THAT(
      warnings(R"(programs:
  web:
    command: ["/bin/true"]
    recycle: {ready_after: 5s}
)"),
      ElementsAre(HasSubstr("programs.web.recycle.ready_after applies to mode: surge only")));
}

TEST(Recycle, SurgeWithoutListenWarnsAboutThePort) {
  EXPECT_THAT(warnings(R"(programs:
  web:
    command: ["/bin/true"]
    recycle: {mode: surge}
)"),
              ElementsAre(HasSubstr("surge without listen")));
}

// In a container with a memory limit, a percentage without memory_max is of
// that limit (runtime/container_watch.h): no error.
TEST(Container, APercentageWithoutMemoryMaxIsOfTheContainersLimit) {
  FakeHost host = debian_host(0, 0);
  std::string yaml = R"(programs:
  web:
    command: ["/bin/true"]
    policies:
      - memory: {metric: uss, limit: 40%}
)";
  EXPECT_THAT(lines(on(host, yaml).errors),
              ElementsAre(HasSubstr("a percentage limit needs limits.memory_max")));
  host.set_container_limit(512ull << 20);
  LoadResult r = on(host, yaml);
  EXPECT_THAT(lines(r.errors), IsEmpty());
  ASSERT_TRUE(r.config);
  EXPECT_FALSE(r.config->programs[0].limits.memory_max) << "nothing is set on the worker";
}

TEST(Recycle, SurgeWarnsWhenTwoGenerationsCannotFitInMemory) {
  FakeHost host = debian_host(0, 0);
  host.set_memory(512ull << 20);  // seed 002's box
  std::string yaml = R"(programs:
  web:
    command: ["/bin/true"]
    instances: 1
    limits: {memory_max: 400MiB}
    listen: ["127.0.0.1:8000"]
    recycle: {mode: surge}
)";
  LoadResult r = on(host, yaml);
  ASSERT_THAT(lines(r.errors), IsEmpty());
  EXPECT_THAT(lines(r.warnings),
              ElementsAre(HasSubstr("test.yaml:7:14: warning: programs.web.recycle.mode: surge "
                                    "needs room for one more generation: memory_max 400 MiB x "
                                    "(instances 1 + 1) = 800 MiB exceeds the 512 MiB")));
  host.set_memory(4ull << 30);
  EXPECT_THAT(lines(on(host, yaml).warnings), IsEmpty());
}

}  // namespace
}  // namespace recycler::config
