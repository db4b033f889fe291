// The top-level `preempt:` section: what recycler does on a scheduler's
// preemption signal (Slurm's sbatch --signal=B:USR1@T).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <csignal>

#include "supervisor/config/summary.h"
#include "supervisor/runtime/preempt.h"
#include "tests/unit/config_test_util.h"

namespace recycler::config {
namespace {

using namespace std::chrono_literals;
using test::errors;
using test::parse;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr const char* kPrograms = "programs: {train: {command: [/bin/true]}}\n";

// `exit: {when: ...}`: when recycler itself ends.
TEST(ExitConfig, AllExitedByDefaultAnyFailedOrNeverWhenAsked) {
  auto plain = parse(kPrograms);
  ASSERT_TRUE(plain.config);
  EXPECT_EQ(plain.config->exit.when, ExitWhen::AllExited);
  auto any = parse(std::string("exit: {when: any_failed}\n") + kPrograms);
  ASSERT_TRUE(any.config);
  EXPECT_EQ(any.config->exit.when, ExitWhen::AnyFailed);
  auto never = parse(std::string("exit: {when: never}\n") + kPrograms);
  ASSERT_TRUE(never.config);
  EXPECT_EQ(never.config->exit.when, ExitWhen::Never);
  EXPECT_THAT(errors(std::string("exit: {when: first_failure}\n") + kPrograms),
              ElementsAre(HasSubstr("test.yaml:1:14: error: exit.when: invalid value")));
  EXPECT_THAT(errors(std::string("exit: {when: never, code: 3}\n") + kPrograms),
              ElementsAre(HasSubstr("test.yaml:1:21: error: unknown key \"code\" in exit")));
}

// `drain: {unready_for: DUR}`: a whole-worker recycle waits, unready on
// /readyz, which only a metrics: section serves.
TEST(DrainConfig, UnreadyForIsReadAndBoundedAndNeedsTheMetricsListener) {
  constexpr const char* kServed =
      "metrics: {listen: 0.0.0.0:9464}\n"
      "programs: {web: {command: [/bin/true], drain: {unready_for: 5s}}}\n";
  auto loaded = parse(kServed);
  ASSERT_TRUE(loaded.config);
  EXPECT_EQ(loaded.config->programs[0].drain_unready_for, std::chrono::milliseconds(5s));
  EXPECT_THAT(test::warnings(kServed), ::testing::IsEmpty());
  EXPECT_FALSE(parse(kPrograms).config->programs[0].drain_unready_for);
  EXPECT_THAT(test::warnings("programs: {web: {command: [/bin/true], drain: {unready_for: 5s}}}\n"),
              ElementsAre(HasSubstr("test.yaml:1:61: warning: programs.web.drain.unready_for "
                                    "delays each recycle, but without a metrics: section")));
  EXPECT_THAT(errors("programs: {web: {command: [/bin/true], drain: {unready_for: 1h}}}\n"),
              ElementsAre(HasSubstr("test.yaml:1:61: error: programs.web.drain.unready_for: 1h "
                                    "is too long")));
  EXPECT_THAT(errors("programs: {web: {command: [/bin/true], drain: {unready: 5s}}}\n"),
              ElementsAre(HasSubstr("unknown key \"unready\" in programs.web.drain")));
}

TEST(PreemptConfig, OffUnlessTheSectionIsThere) {
  auto loaded = parse(kPrograms);
  ASSERT_TRUE(loaded.config);
  EXPECT_FALSE(loaded.config->preempt);
}

// A bare section: USR1, Slurm's 60 s, exit with 128 + 10 (as a shell reports
// a process ended by SIGUSR1: the job did not finish).
TEST(PreemptConfig, ABareSectionTakesSlurmsDefaults) {
  auto loaded = parse(std::string("preempt:\n") + kPrograms);
  ASSERT_TRUE(loaded.config);
  ASSERT_TRUE(loaded.config->preempt);
  const PreemptConfig& p = *loaded.config->preempt;
  EXPECT_EQ(p.signal, SIGUSR1);
  EXPECT_EQ(p.deadline, 60s);
  EXPECT_EQ(p.then, PreemptThen::Exit);
  EXPECT_EQ(p.exit_status(), 128 + SIGUSR1);
}

TEST(PreemptConfig, ReadsEveryKey) {
  auto loaded = parse(std::string("preempt: {signal: TERM, deadline: 90s, then: requeue, "
                                  "exit_code: 0}\n") +
                      kPrograms);
  ASSERT_TRUE(loaded.config);
  const PreemptConfig& p = *loaded.config->preempt;
  EXPECT_EQ(p.signal, SIGTERM);
  EXPECT_EQ(p.deadline, 90s);
  EXPECT_EQ(p.then, PreemptThen::Requeue);
  EXPECT_EQ(p.exit_status(), 0);
}

TEST(PreemptConfig, ErrorsNameFileLineColumnAndKey) {
  EXPECT_THAT(errors(std::string("preempt: {signal: HUP}\n") + kPrograms),
              ElementsAre(HasSubstr("test.yaml:1:19: error: preempt.signal: SIGHUP cannot be the "
                                    "preemption signal (recycler reloads on SIGHUP")));
  EXPECT_THAT(errors(std::string("preempt: {signal: KILL}\n") + kPrograms),
              ElementsAre(HasSubstr("cannot catch SIGKILL")));
  EXPECT_THAT(errors(std::string("preempt: {signal: PIPE}\n") + kPrograms),
              ElementsAre(HasSubstr("SIGPIPE cannot be the preemption signal")));
  EXPECT_THAT(errors(std::string("preempt: {signal: SEGV}\n") + kPrograms),
              ElementsAre(HasSubstr("SIGSEGV cannot be the preemption signal")));
  EXPECT_THAT(errors(std::string("preempt: {deadline: 0s}\n") + kPrograms),
              ElementsAre(HasSubstr("test.yaml:1:21: error: preempt.deadline must be greater "
                                    "than 0")));
  EXPECT_THAT(errors(std::string("preempt: {deadline: 90}\n") + kPrograms),
              ElementsAre(HasSubstr("test.yaml:1:21: error: preempt.deadline")));
  EXPECT_THAT(errors(std::string("preempt: {then: retry}\n") + kPrograms),
              ElementsAre("test.yaml:1:17: error: preempt.then: invalid value \"retry\"; "
                          "expected exit or requeue"));
  EXPECT_THAT(errors(std::string("preempt: {exit_code: 256}\n") + kPrograms),
              ElementsAre(HasSubstr("test.yaml:1:22: error: preempt.exit_code")));
  EXPECT_THAT(errors(std::string("preempt: {dedline: 30s}\n") + kPrograms),
              ElementsAre(HasSubstr("unknown key \"dedline\" in preempt; did you mean "
                                    "\"deadline\"?")));
}

// Each program's checkpoint gets its checkpoint.timeout, but leaves its
// stop.timeout before the deadline, and at least half of the deadline.
TEST(PreemptWindow, TheCheckpointLeavesRoomForTheStopBeforeTheDeadline) {
  ProgramConfig p;
  p.checkpoint.timeout = 5min;
  p.stop.timeout = 10s;
  EXPECT_EQ(preempt_checkpoint_window(p, 90s), 80s);
  p.checkpoint.timeout = 30s;
  EXPECT_EQ(preempt_checkpoint_window(p, 90s), 30s);
  p.checkpoint.timeout = 5min;
  p.stop.timeout = 60s;
  EXPECT_EQ(preempt_checkpoint_window(p, 90s), 45s) << "half the deadline at least";
}

TEST(PreemptConfig, CheckDescribesWhatAPreemptionWillDo) {
  auto loaded = parse(R"(preempt: {deadline: 90s, then: requeue}
programs:
  train: {command: [/bin/true], checkpoint: {timeout: 1m}}
  eval: {command: [/bin/true], checkpoint: {timeout: 10m}, stop: {timeout: 30s}}
  web: {command: [/bin/true]}
)");
  ASSERT_TRUE(loaded.config);
  EXPECT_EQ(describe_preempt(*loaded.config),
            "preempt: on SIGUSR1, checkpoint train within 1m, eval within 1m, stop every "
            "program within 1m30s, then requeue the job (scontrol requeue $SLURM_JOB_ID) and "
            "exit 138");
  EXPECT_EQ(describe_preempt(*parse(kPrograms).config), std::nullopt);
}

TEST(PreemptRequeue, RefusesWhatIsNotASlurmJobNumber) {
  EXPECT_THAT(requeue_slurm_job(std::nullopt, 1s), HasSubstr("SLURM_JOB_ID is not set"));
  EXPECT_THAT(requeue_slurm_job(std::string("12; rm -rf /"), 1s), HasSubstr("is not a job number"));
}

}  // namespace
}  // namespace recycler::config
