// A slot's launch: what every run of it starts with, apart from the
// lifecycle around it (worker_test covers that).
#include "supervisor/worker/slot.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/resource.h>

#include "tests/support/fakes.h"

namespace recycler {
namespace {

using ::testing::Contains;
using ::testing::ElementsAre;
using testing::FakeCgroup;
using testing::FakeCgroupState;
using testing::FakeLauncher;
using ::testing::Not;

class SlotTest : public ::testing::Test {
 protected:
  SlotTest() {
    program.name = "api";
    program.command = {"/bin/app", "--serve"};
    program.cwd = "/srv";
  }
  Slot make(unsigned index = 2) {
    return Slot(launcher, base_env, worker_nofile, std::make_shared<config::ProgramConfig>(program),
                index, "/run/notify", nullptr);
  }
  Result<std::unique_ptr<Process>> launch(const Slot& slot, unsigned generation,
                                          std::optional<RecycleCause> cause = std::nullopt) {
    return slot.launch(generation, cause, cgroup, nullptr, [](ExitStatus) {});
  }

  config::ProgramConfig program;
  FakeLauncher launcher;
  std::vector<std::string> base_env{"PATH=/usr/bin:/bin"};
  std::optional<config::Rlimit> worker_nofile;
  FakeCgroup cgroup{std::make_shared<FakeCgroupState>()};
};

TEST_F(SlotTest, NamesItselfAfterItsProgramAndNumber) {
  Slot slot = make(2);
  EXPECT_EQ(slot.name(), "api[2]");
  EXPECT_EQ(slot.index(), 2u);
  EXPECT_EQ(slot.program().name, "api");
}

TEST_F(SlotTest, LaunchesTheCommandWithTheEnvironmentOfThatGeneration) {
  Slot slot = make();
  ASSERT_TRUE(launch(slot, 7, RecycleCause{"max_requests 1000"}));
  const LaunchSpec& spec = launcher.last().spec;
  EXPECT_THAT(spec.argv, ElementsAre("/bin/app", "--serve"));
  EXPECT_EQ(spec.cwd, "/srv");
  EXPECT_THAT(spec.env, Contains("RECYCLER_SLOT=2"));
  EXPECT_THAT(spec.env, Contains("RECYCLER_GENERATION=7"));
  EXPECT_THAT(spec.env, Contains("NOTIFY_SOCKET=/run/notify"));
  EXPECT_THAT(spec.env, Contains("RECYCLER_RECYCLE_REASON=max_requests 1000"));
}

TEST_F(SlotTest, RestoresRecyclersOwnNofileLimitUnlessTheProgramSetsOne) {
  Slot slot = make();
  ASSERT_TRUE(launch(slot, 1));
  EXPECT_TRUE(launcher.last().spec.rlimits.empty());

  // Read at each launch: recycler raises its own limit after the workers exist.
  worker_nofile = config::Rlimit{RLIMIT_NOFILE, 1024, 4096};
  ASSERT_TRUE(launch(slot, 2));
  EXPECT_THAT(launcher.last().spec.rlimits, ElementsAre(*worker_nofile));

  program.rlimits = {{RLIMIT_NOFILE, 65536, 65536}};
  Slot own = make();
  ASSERT_TRUE(launch(own, 1));
  EXPECT_THAT(launcher.last().spec.rlimits, ElementsAre(program.rlimits[0]));
  EXPECT_THAT(launcher.last().spec.rlimits, Not(Contains(*worker_nofile)));
}

TEST_F(SlotTest, AFailedLaunchComesBackAsAnError) {
  Slot slot = make();
  launcher.fail_next = true;
  auto started = launch(slot, 1);
  ASSERT_FALSE(started);
  EXPECT_EQ(started.error().message, "fake: exec failed");
}

}  // namespace
}  // namespace recycler
