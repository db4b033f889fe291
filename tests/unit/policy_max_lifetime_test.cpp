#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <csignal>
#include <set>

#include "policies/base/units.h"
#include "tests/support/policy_harness.h"

namespace recycler::testing {
namespace {

using namespace std::chrono_literals;
using policies::kNeedsProcesses;
using ::testing::ElementsAre;

class MaxLifetimePolicy : public ::testing::Test {
 protected:
  static Sample at(TimePoint t) {
    Sample s;
    s.t = t;
    return s;
  }
  // Pids listed at `t`; the first is the main process.
  static Sample listing(TimePoint t, std::vector<pid_t> pids) {
    Sample s = at(t);
    for (size_t i = 0; i < pids.size(); ++i) s.processes.push_back(proc(pids[i], i == 0));
    return s;
  }
  // The uptime at which a worker-scope watch first fires, within [lo, hi].
  static Duration first_firing(Watch& watch, TimePoint started, Duration lo, Duration hi) {
    while (lo < hi) {
      Duration mid = lo + (hi - lo) / 2;
      if (watch(at(started + mid)))
        hi = mid;
      else
        lo = mid + 1ms;
    }
    return lo;
  }

  FakeClock clock;
  TimePoint started = clock.now();
};

TEST_F(MaxLifetimePolicy, FiresOnceTheWorkerIsOldEnough) {
  auto policy = make("max_lifetime", "{after: 6h}");
  ASSERT_TRUE(policy);
  EXPECT_EQ(policy->name(), "max_lifetime");
  Watch watch(*policy, worker_at(started));
  EXPECT_FALSE(watch(at(started + 6h - 1ms)));
  Decision d = watch(at(started + 6h));
  EXPECT_EQ(d.action, Decision::Action::Restart);
  EXPECT_EQ(d.reason, "up 6h >= max lifetime 6h");
  EXPECT_EQ(watch(at(started + 6h + 30s)).reason, "up 6h0m30s >= max lifetime 6h");
}

TEST_F(MaxLifetimePolicy, CountsFromTheWorkersStartNotTheFirstSample) {
  auto policy = make("max_lifetime", "{after: 1h}");
  Watch watch(*policy, worker_at(started - 2h));
  EXPECT_TRUE(watch(at(started)));
}

TEST_F(MaxLifetimePolicy, JitterIsDrawnWithinRangeAndVariesWithTheSeed) {
  auto policy = make("max_lifetime", "{after: 6h, jitter: 10m}");
  std::set<Duration> limits;
  for (uint64_t seed = 0; seed < 100; ++seed) {
    Watch watch(*policy, worker_at(started, seed));
    EXPECT_FALSE(watch(at(started + 6h - 1ms)));
    EXPECT_TRUE(watch(at(started + 6h + 10min))) << "seed " << seed;
    limits.insert(first_firing(watch, started, 6h, 6h + 10min));
  }
  EXPECT_GT(limits.size(), 50u) << "jitter in milliseconds should rarely repeat";
  EXPECT_GE(*limits.begin(), 6h);
  EXPECT_LE(*limits.rbegin(), 6h + 10min);
}

TEST_F(MaxLifetimePolicy, ReasonShowsTheDrawnJitter) {
  auto policy = make("max_lifetime", "{after: 6h, jitter: 10m}");
  Watch watch(*policy, worker_at(started, 11));
  Duration limit = first_firing(watch, started, 6h, 6h + 10min);
  ASSERT_GT(limit, 6h);
  using units::format_duration;
  EXPECT_EQ(watch(at(started + limit)).reason,
            "up " + format_duration(limit) + " >= max lifetime " + format_duration(limit) +
                " (6h + jitter " + format_duration(limit - 6h) + ")");
}

TEST_F(MaxLifetimePolicy, TheSameStateNeverDrawsAgain) {
  auto policy = make("max_lifetime", "{after: 1h, jitter: 1h}");
  Watch watch(*policy, worker_at(started, 5));
  Duration limit = first_firing(watch, started, 1h, 2h);
  for (int i = 0; i < 50; ++i) {
    EXPECT_FALSE(watch(at(started + limit - 1ms)));
    EXPECT_TRUE(watch(at(started + limit)));
  }
  EXPECT_EQ(first_firing(watch, started, 1h, 2h), limit);
}

TEST_F(MaxLifetimePolicy, JitterIsDeterministicGivenTheSeed) {
  auto policy = make("max_lifetime", "{after: 1h, jitter: 1h}");
  Watch a(*policy, worker_at(started, 9));
  Watch b(*policy, worker_at(started, 9));
  EXPECT_EQ(first_firing(a, started, 1h, 2h), first_firing(b, started, 1h, 2h));
}

TEST_F(MaxLifetimePolicy, ProcessScopeCountsFromWhenAProcessWasFirstSeen) {
  auto policy = make("max_lifetime", "{after: 1h, scope: process}");
  Watch watch(*policy, worker_at(started - 5h));
  EXPECT_FALSE(watch(listing(started, {1, 2})));
  EXPECT_FALSE(watch(listing(started + 30min, {1, 2, 3})));
  Decision d = watch(listing(started + 1h, {1, 2, 3}));
  EXPECT_EQ(d.action, Decision::Action::Signal);
  EXPECT_EQ(d.pid, 2);
  EXPECT_EQ(d.signal, SIGTERM);
  EXPECT_EQ(d.reason, "up 1h >= max lifetime 1h");
  EXPECT_EQ(watch(listing(started + 90min, {1, 2, 3})).pid, 2) << "the oldest is furthest over";
  EXPECT_EQ(watch(listing(started + 90min, {1, 3})).pid, 3);
}

TEST_F(MaxLifetimePolicy, ProcessScopeNeverTargetsTheMainProcess) {
  auto policy = make("max_lifetime", "{after: 1m, scope: process, signal: INT}");
  Watch watch(*policy, worker_at(started));
  watch(listing(started, {1}));
  EXPECT_FALSE(watch(listing(started + 1h, {1})));
}

TEST_F(MaxLifetimePolicy, ProcessScopeAReusedPidStartsItsAgeOver) {
  auto policy = make("max_lifetime", "{after: 1h, scope: process}");
  Watch watch(*policy, worker_at(started));
  watch(listing(started, {1, 2}));
  EXPECT_FALSE(watch(listing(started + 50min, {1}))) << "pid 2 exited";
  EXPECT_FALSE(watch(listing(started + 55min, {1, 2}))) << "a new process with pid 2";
  EXPECT_FALSE(watch(listing(started + 1h + 54min, {1, 2})));
  EXPECT_TRUE(watch(listing(started + 1h + 55min, {1, 2})));
}

TEST_F(MaxLifetimePolicy, ProcessScopeDrawsJitterPerProcessWithinRange) {
  auto policy = make("max_lifetime", "{after: 1h, jitter: 1h, scope: process}");
  Watch watch(*policy, worker_at(started));
  std::vector<pid_t> pids{1};
  for (pid_t pid = 2; pid < 32; ++pid) pids.push_back(pid);
  EXPECT_FALSE(watch(listing(started, pids)));
  // Step through the jitter window a minute at a time; each process is
  // dropped from the listing when it fires, as a replaced process would be.
  std::set<Duration> limits;
  for (Duration t = 59min; t <= 2h && pids.size() > 1; t += 1min) {
    while (Decision d = watch(listing(started + t, pids))) {
      EXPECT_GE(t, 1h);
      limits.insert(t);
      std::erase(pids, d.pid);
    }
  }
  EXPECT_EQ(pids.size(), 1u) << "every process fired by after + jitter";
  EXPECT_GT(limits.size(), 5u) << "their limits differ";
}

TEST_F(MaxLifetimePolicy, NeedsNothingButTimeForWorkerScope) {
  EXPECT_EQ(make("max_lifetime", "{after: 1h}")->needs(), 0u);
  EXPECT_EQ(make("max_lifetime", "{after: 1h, scope: process}")->needs(), kNeedsProcesses);
}

TEST_F(MaxLifetimePolicy, DoesNotLoop) {
  auto policy = make("max_lifetime", "{after: 1h}");
  EXPECT_FALSE(policy->may_loop());
  EXPECT_EQ(policy->fast_threshold(worker_at(started)), std::nullopt);
}

TEST_F(MaxLifetimePolicy, AfterIsRequired) {
  EXPECT_THAT(errors_of("max_lifetime", ""), ElementsAre("missing required key \"after\""));
}

TEST_F(MaxLifetimePolicy, AfterMustBeAboveZero) {
  EXPECT_THAT(errors_of("max_lifetime", "{after: 0s}"),
              ElementsAre("after must be greater than 0"));
}

TEST_F(MaxLifetimePolicy, DurationsNeedAUnit) {
  EXPECT_THAT(errors_of("max_lifetime", "{after: 6, jitter: 10}"),
              ElementsAre("after: invalid duration \"6\": missing unit, e.g. \"6s\"",
                          "jitter: invalid duration \"10\": missing unit, e.g. \"10s\""));
}

TEST_F(MaxLifetimePolicy, HasNoLimitKey) {
  EXPECT_THAT(errors_of("max_lifetime", "{after: 1h, limit: 2}"),
              ElementsAre("unknown key \"limit\"; expected after, jitter, scope or signal"));
}

}  // namespace
}  // namespace recycler::testing
