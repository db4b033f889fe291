#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <csignal>

#include "tests/support/policy_harness.h"

namespace recycler::testing {
namespace {

using namespace std::chrono_literals;
using policies::kNeedsProcesses;
using policies::kNeedsThreads;
using ::testing::ElementsAre;

class ThreadsPolicy : public ::testing::Test {
 protected:
  Sample threads(uint32_t n) {
    Sample s;
    s.t = clock.now();
    s.threads = n;
    return s;
  }
  // Processes with their thread counts; the first is the main process.
  Sample per_process(std::vector<std::pair<pid_t, std::optional<uint32_t>>> processes) {
    Sample s;
    s.t = clock.now();
    for (size_t i = 0; i < processes.size(); ++i) {
      ProcessSample p = proc(processes[i].first, i == 0);
      p.threads = processes[i].second;
      s.processes.push_back(p);
    }
    return s;
  }

  FakeClock clock;
  WorkerContext worker = worker_at(clock.now());
};

TEST_F(ThreadsPolicy, WithoutForFiresOnTheFirstSampleOverTheLimit) {
  auto policy = make("threads", "{limit: 200}");
  ASSERT_TRUE(policy);
  EXPECT_EQ(policy->name(), "threads");
  Watch watch(*policy, worker);
  EXPECT_FALSE(watch(threads(200)));
  Decision d = watch(threads(212));
  EXPECT_EQ(d.action, Decision::Action::Restart);
  EXPECT_EQ(d.reason, "212 threads > 200");
}

TEST_F(ThreadsPolicy, ForWaitsUntilTheCountHasHeldThatLong) {
  auto policy = make("threads", "{limit: 200, for: 1m}");
  Watch watch(*policy, worker);
  for (int i = 0; i < 6; ++i) {
    EXPECT_FALSE(watch(threads(212))) << "after " << i * 10 << "s";
    clock.advance(10s);
  }
  EXPECT_EQ(watch(threads(212)).reason, "212 threads > 200 for 1m");
}

TEST_F(ThreadsPolicy, ADipStartsForOver) {
  auto policy = make("threads", "{limit: 200, for: 1m}");
  Watch watch(*policy, worker);
  watch(threads(300));
  clock.advance(50s);
  EXPECT_FALSE(watch(threads(150)));
  clock.advance(10s);
  EXPECT_FALSE(watch(threads(300)));
  clock.advance(59s);
  EXPECT_FALSE(watch(threads(300)));
  clock.advance(1s);
  EXPECT_TRUE(watch(threads(300)));
}

TEST_F(ThreadsPolicy, AMissingCountNeitherResetsNorFires) {
  auto policy = make("threads", "{limit: 200, for: 1m}");
  Watch watch(*policy, worker);
  watch(threads(300));
  clock.advance(1min);
  Sample blind;
  blind.t = clock.now();
  EXPECT_FALSE(watch(blind));
  clock.advance(1s);
  EXPECT_EQ(watch(threads(300)).reason, "300 threads > 200 for 1m1s");
}

TEST_F(ThreadsPolicy, ProcessScopeSignalsTheProcessWithTooManyThreads) {
  auto policy = make("threads", "{limit: 50, scope: process, signal: TERM}");
  Watch watch(*policy, worker);
  EXPECT_FALSE(watch(per_process({{1, 900}, {2, 50}, {3, std::nullopt}})))
      << "the main process is never targeted";
  Decision d = watch(per_process({{1, 900}, {2, 51}, {3, 80}}));
  EXPECT_EQ(d.action, Decision::Action::Signal);
  EXPECT_EQ(d.pid, 3);
  EXPECT_EQ(d.signal, SIGTERM);
  EXPECT_EQ(d.reason, "80 threads > 50");
}

TEST_F(ThreadsPolicy, ProcessScopeKeepsForPerProcessAndForgetsExitedPids) {
  auto policy = make("threads", "{limit: 50, for: 10s, scope: process}");
  Watch watch(*policy, worker);
  watch(per_process({{1, 1}, {2, 60}, {3, 60}}));
  clock.advance(5s);
  EXPECT_FALSE(watch(per_process({{1, 1}, {3, 60}}))) << "pid 2 exited";
  clock.advance(1s);
  EXPECT_FALSE(watch(per_process({{1, 1}, {2, 60}, {3, 60}}))) << "pid 2 reused";
  clock.advance(4s);
  EXPECT_EQ(watch(per_process({{1, 1}, {2, 60}, {3, 60}})).pid, 3);
  clock.advance(6s);
  Decision d = watch(per_process({{1, 1}, {2, 70}}));
  EXPECT_EQ(d.pid, 2);
  EXPECT_EQ(d.reason, "70 threads > 50 for 10s");
}

TEST_F(ThreadsPolicy, NeedsThreadsAndProcessesForProcessScope) {
  EXPECT_EQ(make("threads", "{limit: 5}")->needs(), kNeedsThreads);
  EXPECT_EQ(make("threads", "{limit: 5, scope: process}")->needs(),
            kNeedsThreads | kNeedsProcesses);
}

TEST_F(ThreadsPolicy, MayLoopButHasNoFastThreshold) {
  auto policy = make("threads", "{limit: 5}");
  EXPECT_TRUE(policy->may_loop());
  EXPECT_EQ(policy->fast_threshold(worker), std::nullopt);
}

TEST_F(ThreadsPolicy, LimitIsRequired) {
  EXPECT_THAT(errors_of("threads", "{for: 1m}"), ElementsAre("missing required key \"limit\""));
}

TEST_F(ThreadsPolicy, LimitMustBeAPositiveInteger) {
  EXPECT_THAT(errors_of("threads", "{limit: 0}"),
              ElementsAre("limit: 0 is out of range; expected an integer from 1 to 4194304"));
  EXPECT_THAT(errors_of("threads", "{limit: many}"),
              ElementsAre("limit: invalid value \"many\"; expected an integer from 1 to 4194304"));
}

TEST_F(ThreadsPolicy, BadForIsReported) {
  EXPECT_THAT(errors_of("threads", "{limit: 5, for: 1 minute}"),
              ElementsAre("for: invalid duration \"1 minute\": unexpected \" minute\""));
}

TEST_F(ThreadsPolicy, HasNoMetricKey) {
  EXPECT_THAT(errors_of("threads", "{limit: 5, metric: rss}"),
              ElementsAre("unknown key \"metric\"; expected limit, for, scope or signal"));
}

}  // namespace
}  // namespace recycler::testing
