// A slot's restart record alone: what restart.mode, the backoff and the
// crash-loop window decide after a run ends, and what is counted.
#include "supervisor/worker/restart_record.h"

#include <gtest/gtest.h>

namespace recycler {
namespace {

using namespace std::chrono_literals;
using Then = RestartRecord::Decision::Then;

ExitStatus exited(int code) {
  return ExitStatus{code};
}

class RestartRecordTest : public ::testing::Test {
 protected:
  RestartRecordTest() {
    restart.mode = config::RestartMode::OnFailure;
    restart.backoff = {1s, 8s, 60s};
    restart.crash_loop = {3, 60s};
  }
  // A run that ended with `code` after `uptime`, then the decision, `step` later.
  RestartRecord::Decision end(RestartRecord& record, int code, Duration uptime = 1s,
                              Duration step = 10s) {
    now += step;
    record.ended(exited(code), uptime, code != 0);
    return record.next(false, now, rng);
  }

  config::RestartConfig restart;
  TimePoint now{1h};
  std::mt19937_64 rng{7};
};

TEST_F(RestartRecordTest, OnFailureRestartsAFailureAfterAJitteredDoublingBackoff) {
  RestartRecord record(restart);
  RestartRecord::Decision first = end(record, 1);
  EXPECT_EQ(first.then, Then::Restart);
  EXPECT_EQ(first.attempt, 1u);
  EXPECT_LE(first.delay, 1s);
  EXPECT_GT(first.delay, 800ms) << "jitter shortens a delay by at most a fifth";
  RestartRecord::Decision second = end(record, 1);
  EXPECT_EQ(second.attempt, 2u);
  EXPECT_LE(second.delay, 2s);
  EXPECT_GT(second.delay, 1600ms);
}

TEST_F(RestartRecordTest, OnFailureLeavesACleanExitStoppedAndDrawsNoJitter) {
  RestartRecord record(restart);
  std::mt19937_64 before = rng;
  EXPECT_EQ(end(record, 0).then, Then::NotRestarted);
  EXPECT_EQ(rng, before) << "the jitter is drawn only for a restart";
}

TEST_F(RestartRecordTest, AFailedStartIsNeverACleanExit) {
  RestartRecord record(restart);
  record.ended(exited(0), 0ms, true);
  EXPECT_EQ(record.next(true, now, rng).then, Then::Restart);
}

TEST_F(RestartRecordTest, AlwaysAndNeverOverrideHowTheRunEnded) {
  restart.mode = config::RestartMode::Always;
  RestartRecord always(restart);
  EXPECT_EQ(end(always, 0).then, Then::Restart);
  restart.mode = config::RestartMode::Never;
  RestartRecord never(restart);
  EXPECT_EQ(end(never, 1).then, Then::NotRestarted);
}

TEST_F(RestartRecordTest, TheCrashLoopWindowFailsTheSlotOnItsMaxthExit) {
  RestartRecord record(restart);
  EXPECT_EQ(end(record, 1).then, Then::Restart);
  EXPECT_EQ(end(record, 1).then, Then::Restart);
  RestartRecord::Decision third = end(record, 1);
  EXPECT_EQ(third.then, Then::CrashLoop);
  EXPECT_EQ(third.exits, 3u);
}

TEST_F(RestartRecordTest, ExitsSpreadWiderThanTheWindowNeverTripIt) {
  RestartRecord record(restart);
  for (int i = 0; i < 10; ++i) EXPECT_EQ(end(record, 1, 1s, 31s).then, Then::Restart);
}

TEST_F(RestartRecordTest, AStableRunOrAStartAskedForStartsTheSequenceOver) {
  RestartRecord record(restart);
  end(record, 1);
  end(record, 1);
  EXPECT_EQ(end(record, 1, 60s, 61s).attempt, 1u) << "a run of reset_after is stable";
  EXPECT_EQ(end(record, 1).attempt, 2u);
  record.reset();
  EXPECT_EQ(end(record, 1).attempt, 1u);
  EXPECT_EQ(end(record, 1).then, Then::Restart) << "the window started over too";
}

TEST_F(RestartRecordTest, CountsRecyclesOnceAndCrashesAsTold) {
  RestartRecord record(restart);
  EXPECT_FALSE(record.take_start_cause());
  record.replace_next(RecycleCause{"rss 600 MiB"});
  std::optional<RecycleCause> cause = record.take_start_cause();
  ASSERT_TRUE(cause);
  EXPECT_EQ(cause->reason, "rss 600 MiB");
  EXPECT_FALSE(record.take_start_cause()) << "taken: the start after it is a plain one";
  record.recycled(RecycleCause{"surge"});
  EXPECT_EQ(record.recycles(), 2u);
  EXPECT_EQ(record.last_recycle_reason(), "surge");

  record.ended(exited(3), 5s, true);
  record.ended(exited(0), 5s, false);
  EXPECT_EQ(record.crashes(), 1u);
  ASSERT_TRUE(record.last_exit());
  EXPECT_TRUE(record.last_exit()->success());
}

}  // namespace
}  // namespace recycler
