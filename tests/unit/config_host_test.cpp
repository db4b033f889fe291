// Users and groups: the identity checks of the config, on this machine and,
// for what depends on being root or not, on a fake one (FakeHost).
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <pwd.h>
#include <unistd.h>

#include <string>
#include <string_view>
#include <vector>

#include "supervisor/config/parse.h"
#include "tests/support/fake_host.h"

namespace recycler::config {
namespace {

using testing::ElementsAre;
using testing::IsEmpty;

std::vector<std::string> lines(const std::vector<Diagnostic>& diagnostics) {
  std::vector<std::string> out;
  for (const auto& d : diagnostics) out.push_back(d.str());
  return out;
}

// On this machine.
std::vector<std::string> errors(std::string_view yaml) {
  return lines(parse_string(yaml, "test.yaml").errors);
}

ProgramConfig program(std::string_view yaml, const HostLookup& host = HostLookup::real()) {
  LoadResult result = parse_string(yaml, "test.yaml", host);
  EXPECT_THAT(lines(result.errors), IsEmpty());
  if (!result.config || result.config->programs.size() != 1) {
    ADD_FAILURE() << "expected exactly one program";
    return {};
  }
  return result.config->programs[0];
}

// On `host`.
std::vector<std::string> errors(std::string_view yaml, const HostLookup& host) {
  return lines(parse_string(yaml, "test.yaml", host).errors);
}

std::string current_user() {
  return getpwuid(geteuid())->pw_name;
}

// The fake machine, as root and as alice (uid and gid 1000).
const FakeHost kAsRoot = debian_host(0, 0);
const FakeHost kAsAlice = debian_host(1000, 1000);

// --- Users and groups --------------------------------------------------------------------

TEST(Identity, UserResolvesToUidAndPrimaryGroup) {
  passwd* me = getpwuid(geteuid());
  ProgramConfig p = program("programs: {a: {command: [/bin/true], user: " + current_user() + "}}");
  EXPECT_EQ(p.user, current_user());
  EXPECT_EQ(p.uid, me->pw_uid);
  EXPECT_EQ(p.gid, me->pw_gid);
  EXPECT_FALSE(p.group);
}

TEST(Identity, UserResolvesToUidAndPrimaryGroupOnAFakeHost) {
  ProgramConfig p = program("programs: {a: {command: [/bin/true], user: alice}}", kAsAlice);
  EXPECT_EQ(p.user, "alice");
  EXPECT_EQ(p.uid, 1000u);
  EXPECT_EQ(p.gid, 1000u);
  EXPECT_FALSE(p.group);
}

TEST(Identity, GroupOverridesTheUsersPrimaryGroup) {
  ProgramConfig p =
      program("programs: {a: {command: [/bin/true], user: root, group: nogroup}}", kAsRoot);
  EXPECT_EQ(p.uid, 0u);
  EXPECT_EQ(p.gid, 65534u);
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
  EXPECT_THAT(errors("programs: {a: {command: [/bin/true], user: root}}", kAsAlice),
              ElementsAre("test.yaml:1:44: error: programs.a.user: running programs as another "
                          "user needs root"));
}

TEST(Identity, AnotherGroupNeedsRoot) {
  EXPECT_THAT(errors("programs: {a: {command: [/bin/true], group: root}}", kAsAlice),
              ElementsAre("test.yaml:1:45: error: programs.a.group: running programs as another "
                          "group needs root"));
}

TEST(Identity, RootMayRunProgramsAsAnotherUser) {
  EXPECT_EQ(program("programs: {a: {command: [/bin/true], user: nobody}}", kAsRoot).uid, 65534u);
}

}  // namespace
}  // namespace recycler::config
