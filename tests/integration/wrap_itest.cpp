// Wrap mode (`recycler run [OPTIONS] -- CMD`) and commands that cannot be
// run: the flags that stand for the YAML's common cases, each seen to have
// its effect on a real worker, and exec failures that no retry can fix.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <csignal>
#include <filesystem>

#include "tests/support/itest.h"

namespace recycler::testing {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

TEST(Exec, ATypoedAbsolutePathExits127AtOnce) {
  RECYCLER_REQUIRE_CGROUPS();
  Sandbox sb;
  auto t0 = std::chrono::steady_clock::now();
  Recycler r({"run", "--", "/usr/bin/no-such-command-typo", "--flag"}, in_sandbox(sb));
  EXPECT_EQ(r.exit_code(), 127);
  // Not retried with backoff until a crash loop (that took ~14 s).
  EXPECT_LT(std::chrono::steady_clock::now() - t0, scaled(3s));
  EXPECT_EQ(r.count("failed to start"), 1u) << r.output();
  EXPECT_THAT(r.output(),
              HasSubstr("FAILED: its command cannot be run (/usr/bin/no-such-command-typo: No "
                        "such file or directory); recycler will not retry it. Fix the command, "
                        "then run recycler again"));
  EXPECT_THAT(r.output(), ::testing::Not(HasSubstr("SIGHUP")));
}

TEST(Exec, ACommandWithoutPermissionExits126) {
  RECYCLER_REQUIRE_CGROUPS();
  Sandbox sb;
  std::string script = sb.write("not-executable.sh", "#!/bin/sh\necho ran\n");
  ::chmod(script.c_str(), 0644);
  Recycler r({"run", "--", script}, in_sandbox(sb));
  EXPECT_EQ(r.exit_code(), 126);
  EXPECT_THAT(r.output(), HasSubstr("Permission denied"));
  EXPECT_EQ(r.count("ran"), 0u);
}

TEST(Exec, NotAProgramExits126) {
  RECYCLER_REQUIRE_CGROUPS();
  Sandbox sb;
  std::string junk = sb.write("junk", std::string("\x7f"
                                                  "ELF-not-really\x01\x02",
                                                  17));
  ::chmod(junk.c_str(), 0755);
  Recycler r({"run", "--", junk}, in_sandbox(sb));
  EXPECT_EQ(r.exit_code(), 126);
  EXPECT_THAT(r.output(), HasSubstr("Exec format error"));
}

TEST(Exec, InAConfigTheBrokenProgramIsFailedAtOnceAndTheRestKeepRunning) {
  RECYCLER_REQUIRE_CGROUPS();
  Sandbox sb;
  std::string cfg = sb.write("r.yaml", config_yaml(sb, R"(  broken:
    command: ["/opt/no/such/server", "--port", "80"]
  fine:
    command: ["sh", "-c", "echo up; exec sleep 1000"]
)"));
  Recycler r({"run", "-c", cfg}, in_sandbox(sb));
  auto failed = r.wait_for("broken[0] FAILED: its command cannot be run");
  ASSERT_TRUE(failed);
  EXPECT_THAT(*failed, HasSubstr("Fix the program, then reload (SIGHUP) or restart recycler."));
  ASSERT_TRUE(r.wait_for("fine[0] out | up"));
  EXPECT_EQ(r.count("broken[0] failed to start"), 1u) << r.output();
  EXPECT_EQ(r.count("broken[0] restarting"), 0u) << r.output();
  r.signal(SIGTERM);
  EXPECT_EQ(r.exit_code(), 0);
}

}  // namespace
}  // namespace recycler::testing
