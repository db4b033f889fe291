// A program's `gang:` (its instances are the ranks of one job) and
// `checkpoint.signal_to` (who gets the checkpoint signal), and the choice of
// processes signal_to makes (worker/checkpoint_signal.h).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>

#include "supervisor/config/summary.h"
#include "supervisor/worker/checkpoint_signal.h"
#include "tests/unit/config_test_util.h"

namespace recycler::config {
namespace {

using test::errors;
using test::parse;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::string program(const std::string& keys) {
  return "programs:\n  ddp:\n    command: [/bin/true]\n    instances: 2\n" + keys;
}

TEST(GangConfig, OffByDefaultOnWithTrueOrAMap) {
  auto off = parse(program(""));
  ASSERT_TRUE(off.config);
  EXPECT_FALSE(off.config->programs[0].gang);
  auto no = parse(program("    gang: false\n"));
  ASSERT_TRUE(no.config);
  EXPECT_FALSE(no.config->programs[0].gang);
  auto on = parse(program("    gang: true\n"));
  ASSERT_TRUE(on.config);
  ASSERT_TRUE(on.config->programs[0].gang);
  EXPECT_FALSE(on.config->programs[0].gang->master);
  auto master = parse(program("    gang: {master: \"127.0.0.1:29500\"}\n"));
  ASSERT_TRUE(master.config);
  ASSERT_TRUE(master.config->programs[0].gang);
  ASSERT_TRUE(master.config->programs[0].gang->master);
  EXPECT_EQ(master.config->programs[0].gang->master->str(), "127.0.0.1:29500");
  EXPECT_THAT(describe_program(master.config->programs[0]),
              HasSubstr("a gang of 2 ranks (RANK, WORLD_SIZE, MASTER_ADDR:PORT "
                        "127.0.0.1:29500), recycled together"));
}

TEST(GangConfig, ErrorsNameFileLineColumnAndKey) {
  EXPECT_THAT(errors(program("    gang: yes please\n")),
              ElementsAre(HasSubstr("test.yaml:5:11: error: programs.ddp.gang: invalid value")));
  EXPECT_THAT(errors(program("    gang: {master: \"127.0.0.1:0\"}\n")),
              ElementsAre(HasSubstr("test.yaml:5:20: error: programs.ddp.gang.master: a port "
                                    "other than 0 is needed")));
  EXPECT_THAT(errors(program("    gang: {master: \"localhost:29500\"}\n")),
              ElementsAre(HasSubstr("test.yaml:5:20: error: programs.ddp.gang.master")));
  EXPECT_THAT(errors(program("    gang: {mastr: \"127.0.0.1:29500\"}\n")),
              ElementsAre(HasSubstr("unknown key \"mastr\" in programs.ddp.gang; did you mean "
                                    "\"master\"?")));
  EXPECT_THAT(errors(program("    gang: true\n    recycle: {mode: surge, ready_after: 5s}\n")),
              ElementsAre(HasSubstr("programs.ddp.gang: a gang's ranks stop and start together; "
                                    "recycle.mode: surge")));
}

// A setting that would do nothing is said: a gang stops every rank at its
// checkpoint.timeout whatever on_timeout says.
TEST(GangConfig, OnTimeoutWaitIsWarnedOfForAGang) {
  EXPECT_THAT(test::warnings(program("    gang: true\n    checkpoint: {on_timeout: wait}\n")),
              ElementsAre(HasSubstr("test.yaml:5:11: warning: programs.ddp.gang: a gang stops "
                                    "every rank at checkpoint.timeout")));
  EXPECT_THAT(test::warnings(program("    gang: true\n    checkpoint: {timeout: 1m}\n")),
              ::testing::IsEmpty());
}

TEST(CheckpointSignalTo, MainByDefaultChildrenOrAll) {
  auto loaded = parse(program("    checkpoint: {signal: USR1}\n"));
  ASSERT_TRUE(loaded.config);
  EXPECT_EQ(loaded.config->programs[0].checkpoint.signal_to, SignalTo::Main);
  auto children = parse(program("    checkpoint: {signal_to: children}\n"));
  ASSERT_TRUE(children.config);
  EXPECT_EQ(children.config->programs[0].checkpoint.signal_to, SignalTo::Children);
  EXPECT_THAT(describe_program(children.config->programs[0]),
              HasSubstr("checkpoint SIGUSR1 to the main process's children within 5m"));
  EXPECT_THAT(errors(program("    checkpoint: {signal_to: kids}\n")),
              ElementsAre("test.yaml:5:29: error: programs.ddp.checkpoint.signal_to: invalid "
                          "value \"kids\"; expected main, children or all"));
}

// torchrun (pid 10) and its two ranks (11, 12), a data loader of rank 0 (13),
// and a process that is not its child (14).
TEST(CheckpointTargets, ChildrenAreTheMainProcesssOwnAllIsEveryProcess) {
  std::map<pid_t, pid_t> parent{{10, 1}, {11, 10}, {12, 10}, {13, 11}, {14, 1}};
  auto parent_of = [&](pid_t pid) -> std::optional<pid_t> {
    auto it = parent.find(pid);
    if (it == parent.end()) return std::nullopt;
    return it->second;
  };
  std::vector<pid_t> members{10, 11, 12, 13, 14, 15};  // 15: gone
  EXPECT_THAT(checkpoint_targets(SignalTo::Main, 10, members, parent_of), ElementsAre(10));
  EXPECT_THAT(checkpoint_targets(SignalTo::Children, 10, members, parent_of), ElementsAre(11, 12));
  EXPECT_THAT(checkpoint_targets(SignalTo::All, 10, members, parent_of),
              ElementsAre(10, 11, 12, 13, 14, 15));
  // The main process left its cgroup: still the worker's.
  EXPECT_THAT(checkpoint_targets(SignalTo::All, 10, {11, 12}, parent_of), ElementsAre(10, 11, 12));
  EXPECT_EQ(checkpoint_target(SignalTo::Children, 10), "the children of pid 10");
}

}  // namespace
}  // namespace recycler::config
