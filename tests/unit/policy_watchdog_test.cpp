// The watchdog policy (policies/watchdog.cpp): a run that said it was alive
// (Sample::alive) and then says nothing for `timeout`, or whose iterations
// stop advancing for `progress`, is restarted, never asked for a checkpoint.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/support/policy_harness.h"

namespace recycler::testing {
namespace {

using namespace std::chrono_literals;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

class WatchdogPolicy : public ::testing::Test {
 protected:
  Sample at(Duration after, std::optional<Duration> alive = std::nullopt,
            std::optional<uint64_t> iteration = std::nullopt) const {
    Sample s;
    s.t = started + after;
    if (alive) s.alive = started + *alive;
    s.iteration = iteration;
    return s;
  }

  FakeClock clock;
  TimePoint started = clock.now();
};

TEST_F(WatchdogPolicy, RestartsARunSilentForLongerThanTheTimeout) {
  auto policy = make("watchdog", "{timeout: 30s}");
  ASSERT_TRUE(policy);
  EXPECT_EQ(policy->name(), "watchdog");
  EXPECT_TRUE(policy->watches_hangs());
  EXPECT_EQ(policy->needs(), 0u);  // no probe: the engine's times only
  Watch watch(*policy, worker_at(started));
  EXPECT_FALSE(watch(at(40s, 10s)));  // 30s exactly: not yet
  EXPECT_FALSE(watch(at(60s, 45s)));  // alive again
  Decision d = watch(at(76s, 45s));
  EXPECT_EQ(d.action, Decision::Action::Restart);
  EXPECT_EQ(d.reason, "hung: no WATCHDOG=1 or RECYCLER_ITERATION for 31s (watchdog timeout 30s)");
}

TEST_F(WatchdogPolicy, IsNotArmedUntilTheRunFirstSaysItIsAlive) {
  auto policy = make("watchdog", "{timeout: 5s}");
  Watch watch(*policy, worker_at(started));
  EXPECT_FALSE(watch(at(1h)));  // a worker that never sends WATCHDOG=1 is never hung
  EXPECT_FALSE(watch(at(1h + 1s, 1h)));
  EXPECT_TRUE(watch(at(1h + 6s, 1h)));
}

TEST_F(WatchdogPolicy, ProgressRestartsARunWhoseIterationStopsAdvancing) {
  auto policy = make("watchdog", "{progress: 10m}");
  Watch watch(*policy, worker_at(started));
  EXPECT_FALSE(watch(at(1min, 1min, 7)));
  EXPECT_FALSE(watch(at(9min, 9min, 8)));    // advanced: the clock starts again
  EXPECT_FALSE(watch(at(19min, 19min, 8)));  // alive (a heartbeat thread), but stuck: 10min exactly
  Decision d = watch(at(19min + 1s, 19min + 1s, 8));
  EXPECT_EQ(d.action, Decision::Action::Restart);
  EXPECT_EQ(d.reason, "stalled: iteration 8 for 10m1s (watchdog progress 10m)");
}

TEST_F(WatchdogPolicy, ProgressAloneIgnoresSilenceAndTimeoutAloneIgnoresAStuckIteration) {
  auto progress = make("watchdog", "{progress: 1m}");
  Watch p(*progress, worker_at(started));
  EXPECT_FALSE(p(at(1s, 1s, 1)));
  EXPECT_FALSE(p(at(50s, 1s, 2)));  // silent since 1s, but its iteration advanced
  auto timeout = make("watchdog", "{timeout: 1m}");
  Watch t(*timeout, worker_at(started));
  EXPECT_FALSE(t(at(1s, 1s, 1)));
  EXPECT_FALSE(t(at(1h, 1h - 1s, 1)));  // the same iteration for an hour, alive all along
}

TEST_F(WatchdogPolicy, EachRunStartsUnarmedWithItsOwnIterationClock) {
  auto policy = make("watchdog", "{progress: 1m}");
  Watch first(*policy, worker_at(started));
  EXPECT_FALSE(first(at(1s, 1s, 5)));
  EXPECT_TRUE(first(at(2min, 2min, 5)));
  Watch second(*policy, worker_at(started + 2min));
  EXPECT_FALSE(second(at(2min + 1s, 2min + 1s, 5)));  // the replacement's first sight of 5
}

TEST_F(WatchdogPolicy, RejectsWhatCannotWork) {
  EXPECT_THAT(errors_of("watchdog", "{}"),
              ElementsAre(HasSubstr("give timeout (WATCHDOG=1 or RECYCLER_ITERATION")));
  EXPECT_THAT(errors_of("watchdog", "{timeout: 500ms}"),
              ElementsAre("timeout: 500ms is too short; at least 1s"));
  EXPECT_THAT(errors_of("watchdog", "{progress: 30}"), ElementsAre(HasSubstr("progress")));
  EXPECT_THAT(errors_of("watchdog", "{timout: 30s}"), ElementsAre(HasSubstr("did you mean")));
}

}  // namespace
}  // namespace recycler::testing
