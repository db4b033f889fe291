#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <csignal>
#include <functional>
#include <limits>
#include <set>

#include "tests/support/policy_harness.h"

namespace recycler::testing {
namespace {

using namespace std::chrono_literals;
using policies::kNeedsProcesses;
using policies::kNeedsRequests;
using ::testing::ElementsAre;

class MaxRequestsPolicy : public ::testing::Test {
 protected:
  Sample requests(uint64_t n) {
    Sample s;
    s.t = clock.now();
    s.requests = n;
    return s;
  }
  // Processes with their request counts; the first is the main process.
  Sample per_process(std::vector<std::pair<pid_t, std::optional<uint64_t>>> processes) {
    Sample s;
    s.t = clock.now();
    for (size_t i = 0; i < processes.size(); ++i) {
      ProcessSample p = proc(processes[i].first, i == 0);
      p.requests = processes[i].second;
      s.processes.push_back(p);
    }
    return s;
  }
  // The smallest count at which the watch fires, searched from `from`.
  static std::optional<uint64_t> threshold(Watch& watch, const std::function<Sample(uint64_t)>& at,
                                           uint64_t from, uint64_t to) {
    for (uint64_t n = from; n <= to; ++n)
      if (watch(at(n))) return n;
    return std::nullopt;
  }

  FakeClock clock;
  WorkerContext worker = worker_at(clock.now());
};

TEST_F(MaxRequestsPolicy, FiresOnceTheLimitIsReached) {
  auto policy = make("max_requests", "{limit: 50}");
  ASSERT_TRUE(policy);
  EXPECT_EQ(policy->name(), "max_requests");
  Watch watch(*policy, worker);
  EXPECT_FALSE(watch(requests(49)));
  Decision d = watch(requests(50));
  EXPECT_EQ(d.action, Decision::Action::Restart);
  EXPECT_EQ(d.reason, "50 requests >= limit 50");
  EXPECT_TRUE(watch(requests(51))) << "keeps firing past the limit";
}

TEST_F(MaxRequestsPolicy, NoCountIsNoOpinion) {
  auto policy = make("max_requests", "{limit: 1}");
  Watch watch(*policy, worker);
  Sample s;
  s.t = clock.now();
  EXPECT_FALSE(watch(s));
}

TEST_F(MaxRequestsPolicy, JitterIsDrawnWithinRangeAndVariesWithTheSeed) {
  auto policy = make("max_requests", "{limit: 50, jitter: 10}");
  std::set<uint64_t> limits;
  for (uint64_t seed = 0; seed < 200; ++seed) {
    Watch watch(*policy, worker_at(clock.now(), seed));
    EXPECT_FALSE(watch(requests(49)));
    auto limit = threshold(
        watch, [&](uint64_t n) { return requests(n); }, 50, 60);
    ASSERT_TRUE(limit) << "seed " << seed << " never fired by limit + jitter";
    limits.insert(*limit);
  }
  EXPECT_GT(limits.size(), 5u) << "the jitter should spread limits over [50, 60]";
  EXPECT_EQ(*limits.begin(), 50u);
  EXPECT_EQ(*limits.rbegin(), 60u);
}

TEST_F(MaxRequestsPolicy, JitterIsDeterministicGivenTheSeed) {
  auto policy = make("max_requests", "{limit: 1000, jitter: 1000}");
  auto limit_for = [&](uint64_t seed) {
    Watch watch(*policy, worker_at(clock.now(), seed));
    return threshold(
        watch, [&](uint64_t n) { return requests(n); }, 1000, 2000);
  };
  EXPECT_EQ(limit_for(7), limit_for(7));
}

TEST_F(MaxRequestsPolicy, ReasonShowsTheDrawnJitter) {
  auto policy = make("max_requests", "{limit: 50, jitter: 10}");
  for (uint64_t seed = 0; seed < 50; ++seed) {
    Watch watch(*policy, worker_at(clock.now(), seed));
    auto limit = threshold(
        watch, [&](uint64_t n) { return requests(n); }, 50, 60);
    ASSERT_TRUE(limit);
    if (*limit == 50) continue;  // a jitter of 0 leaves the parenthesis out
    EXPECT_EQ(watch(requests(*limit)).reason, std::to_string(*limit) + " requests >= limit " +
                                                  std::to_string(*limit) + " (50 + jitter " +
                                                  std::to_string(*limit - 50) + ")");
    return;
  }
  FAIL() << "every seed drew a jitter of 0";
}

TEST_F(MaxRequestsPolicy, TheSameStateNeverDrawsAgain) {
  auto policy = make("max_requests", "{limit: 100, jitter: 1000}");
  Watch watch(*policy, worker_at(clock.now(), 3));
  auto first = threshold(
      watch, [&](uint64_t n) { return requests(n); }, 100, 1100);
  ASSERT_TRUE(first);
  for (int i = 0; i < 100; ++i) {
    EXPECT_FALSE(watch(requests(*first - 1)));
    EXPECT_TRUE(watch(requests(*first)));
  }
}

TEST_F(MaxRequestsPolicy, ProcessScopeSignalsTheProcessAtItsLimit) {
  auto policy = make("max_requests", "{limit: 10, scope: process}");
  Watch watch(*policy, worker);
  EXPECT_FALSE(watch(per_process({{1, 500}, {2, 9}, {3, std::nullopt}})))
      << "the main process is never counted; a process without a count has served none";
  Decision d = watch(per_process({{1, 500}, {2, 10}, {3, 2}}));
  EXPECT_EQ(d.action, Decision::Action::Signal);
  EXPECT_EQ(d.pid, 2);
  EXPECT_EQ(d.signal, SIGTERM);
  EXPECT_EQ(d.reason, "10 requests >= limit 10");
}

TEST_F(MaxRequestsPolicy, ProcessScopePicksTheProcessFurthestOver) {
  auto policy = make("max_requests", "{limit: 10, scope: process, signal: USR2}");
  Watch watch(*policy, worker);
  Decision d = watch(per_process({{1, 0}, {2, 12}, {3, 30}, {4, 11}}));
  EXPECT_EQ(d.pid, 3);
  EXPECT_EQ(d.signal, SIGUSR2);
}

TEST_F(MaxRequestsPolicy, RequestsLeftIsWhatTheWorkerMayStillServe) {
  auto policy = make("max_requests", "{limit: 50}");
  Watch watch(*policy, worker);
  EXPECT_EQ(watch.requests_left(), 50u) << "before any sample";
  watch(requests(12));
  EXPECT_EQ(watch.requests_left(), 38u);
  watch(requests(50));
  EXPECT_EQ(watch.requests_left(), 0u);
  watch(requests(70));
  EXPECT_EQ(watch.requests_left(), 0u) << "past the limit: none";
}

TEST_F(MaxRequestsPolicy, RequestsLeftIsTheNearestProcessLimitOrAFreshProcesssLimit) {
  auto policy = make("max_requests", "{limit: 10, scope: process}");
  Watch watch(*policy, worker);
  EXPECT_EQ(watch.requests_left(), 10u);
  watch(per_process({{1, 500}, {2, 3}, {3, 7}}));
  EXPECT_EQ(watch.requests_left(), 3u) << "the main process is not counted";
  watch(per_process({{1, 500}, {2, 4}}));
  EXPECT_EQ(watch.requests_left(), 6u);
  watch(per_process({{1, 500}}));
  EXPECT_EQ(watch.requests_left(), 10u) << "the next process to appear may serve 10";
  Sample s = per_process({{1, 0}, {2, 10}, {3, 9}});
  s.processes[1].recycling = true;
  watch(s);
  EXPECT_EQ(watch.requests_left(), 1u) << "a process on its way out is not counted";
}

// A process below requests_held_below (RECYCLER_REQUESTS_BATCH_BELOW) may
// have served up to one less than it unreported, and report them all at once:
// the notify socket must not rest on a count that can jump to a limit.
TEST_F(MaxRequestsPolicy, RequestsLeftCountsWhatAProcessMayHoldBack) {
  auto policy = make("max_requests", "{limit: 10, scope: process}");
  worker.requests_held_below = 10;
  Watch watch(*policy, worker);
  watch(per_process({{1, 0}, {2, 1}}));
  EXPECT_EQ(watch.requests_left(), 1u) << "it may be at 9: its next report can reach 10";
  watch(per_process({{1, 0}, {2, 10}}));
  EXPECT_EQ(watch.requests_left(), 0u);
  EXPECT_FALSE(watch(per_process({{1, 0}, {3, 1}}))) << "decisions go by what it reported";

  worker.requests_held_below = std::numeric_limits<uint64_t>::max();  // "unlimited"
  Watch unlimited(*policy, worker);
  unlimited(per_process({{1, 0}, {2, 1}}));
  EXPECT_EQ(unlimited.requests_left(), 0u) << "it may hold any count: never rest";
}

TEST_F(MaxRequestsPolicy, OtherPoliciesCountNoRequests) {
  auto policy = make("max_lifetime", "{after: 1h}");
  ASSERT_TRUE(policy);
  Watch watch(*policy, worker);
  EXPECT_EQ(watch.requests_left(), std::nullopt);
  EXPECT_EQ(policy->requests_exact_from(), std::nullopt);
}

// Below limit (the jitter only adds) a process's counts may come in batches;
// a whole worker's limit adds its processes up, so each of their requests counts.
TEST_F(MaxRequestsPolicy, CountsMustBeExactFromTheLimitPerProcessAndFromTheFirstPerWorker) {
  EXPECT_EQ(make("max_requests", "{limit: 200, jitter: 50, scope: process}")->requests_exact_from(),
            200u);
  EXPECT_EQ(make("max_requests", "{limit: 200, jitter: 50}")->requests_exact_from(), 1u);
}

TEST_F(MaxRequestsPolicy, ProcessScopeDrawsJitterPerProcessWithinRange) {
  auto policy = make("max_requests", "{limit: 100, jitter: 50, scope: process}");
  Watch watch(*policy, worker);
  std::vector<std::pair<pid_t, std::optional<uint64_t>>> processes{{1, 0}};
  for (pid_t pid = 2; pid < 42; ++pid) processes.emplace_back(pid, 0);
  // Raise every count together; each process fires once it reaches its own limit.
  std::set<uint64_t> limits;
  std::set<pid_t> fired;
  for (uint64_t n = 0; n <= 150; ++n) {
    for (auto& p : processes)
      if (p.first != 1 && !fired.count(p.first)) p.second = n;
    Decision d = watch(per_process(processes));
    while (d) {
      ASSERT_GE(n, 100u);
      limits.insert(n);
      fired.insert(d.pid);
      // Out of the way from now on, so the next one can show.
      for (auto& p : processes)
        if (p.first == d.pid) p.second = 0;
      d = watch(per_process(processes));
    }
  }
  EXPECT_EQ(fired.size(), 40u) << "every process reached its limit by limit + jitter";
  EXPECT_GT(limits.size(), 3u) << "limits differ between processes";
}

// What recycler tells a process of its limit (notify/message.h's Answer):
// the very limit the process is then recycled at, from its first sight on.
TEST_F(MaxRequestsPolicy, EachProcessLimitIsKnownOnceTheProcessWasSeen) {
  auto policy = make("max_requests", "{limit: 100, jitter: 50, scope: process}");
  Watch watch(*policy, worker);
  EXPECT_EQ(watch.process_request_limit(2), std::nullopt) << "not seen yet";
  watch(per_process({{1, 0}, {2, 1}}));
  EXPECT_EQ(watch.process_request_limit(1), std::nullopt) << "the main process has none";
  std::optional<uint64_t> limit = watch.process_request_limit(2);
  ASSERT_TRUE(limit);
  EXPECT_GE(*limit, 100u);
  EXPECT_LE(*limit, 150u);
  EXPECT_FALSE(watch(per_process({{1, 0}, {2, *limit - 1}})));
  Decision d = watch(per_process({{1, 0}, {2, *limit}}));
  EXPECT_EQ(d.pid, 2);
  EXPECT_EQ(watch.process_request_limit(2), limit) << "drawn once";
  watch(per_process({{1, 0}}));
  EXPECT_EQ(watch.process_request_limit(2), std::nullopt) << "forgotten once gone";
  EXPECT_EQ(Watch(*make("max_requests", "{limit: 100}"), worker).process_request_limit(2),
            std::nullopt)
      << "a whole worker's limit is no process's";
}

TEST_F(MaxRequestsPolicy, NeedsRequestsAndProcessesForProcessScope) {
  EXPECT_EQ(make("max_requests", "{limit: 5}")->needs(), kNeedsRequests);
  EXPECT_EQ(make("max_requests", "{limit: 5, scope: process}")->needs(),
            kNeedsRequests | kNeedsProcesses);
}

TEST_F(MaxRequestsPolicy, NeitherLoopsNorHasAFastThreshold) {
  auto policy = make("max_requests", "{limit: 5}");
  EXPECT_FALSE(policy->may_loop());
  EXPECT_FALSE(policy->needs_memory_max());
  EXPECT_EQ(policy->fast_threshold(worker), std::nullopt);
}

TEST_F(MaxRequestsPolicy, LimitIsRequired) {
  EXPECT_THAT(errors_of("max_requests", "{jitter: 5}"),
              ElementsAre("missing required key \"limit\""));
}

TEST_F(MaxRequestsPolicy, LimitMustBeAtLeastOne) {
  EXPECT_THAT(errors_of("max_requests", "{limit: 0}"),
              ElementsAre("limit: 0 is out of range; expected an integer from 1 to "
                          "1000000000000"));
}

TEST_F(MaxRequestsPolicy, NegativeJitterIsRejected) {
  EXPECT_THAT(errors_of("max_requests", "{limit: 5, jitter: -1}"),
              ElementsAre("jitter: -1 is out of range; expected an integer from 0 to "
                          "1000000000000"));
}

TEST_F(MaxRequestsPolicy, HasNoForKey) {
  EXPECT_THAT(errors_of("max_requests", "{limit: 5, for: 1m}"),
              ElementsAre("unknown key \"for\"; expected limit, jitter, scope or signal"));
}

TEST_F(MaxRequestsPolicy, SignalNeedsProcessScope) {
  EXPECT_THAT(errors_of("max_requests", "{limit: 5, scope: worker, signal: TERM}"),
              ElementsAre("signal: only applies with scope: process; scope: worker restarts the "
                          "whole worker"));
}

}  // namespace
}  // namespace recycler::testing
