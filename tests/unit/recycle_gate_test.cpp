#include "supervisor/engine/recycle_gate.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace recycler::engine {
namespace {

using namespace std::chrono_literals;
using ::testing::ElementsAre;
using ::testing::IsEmpty;
using Admit = RecycleQueue::Admit;

RecycleKey worker(unsigned slot) {
  return {slot, 0};
}

RecycleKey process(unsigned slot, pid_t pid) {
  return {slot, pid};
}

TEST(RecycleQueue, AdmitsUpToTheCapAndQueuesTheRest) {
  RecycleQueue q(2);
  EXPECT_EQ(q.request(worker(0)), Admit::Now);
  EXPECT_EQ(q.request(worker(1)), Admit::Now);
  EXPECT_EQ(q.request(worker(2)), Admit::Queued);
  EXPECT_EQ(q.in_flight_count(), 2u);
  EXPECT_EQ(q.waiting(), 1u);
  EXPECT_TRUE(q.in_flight(worker(1)));
  EXPECT_TRUE(q.queued(worker(2)));
  EXPECT_FALSE(q.in_flight(worker(2)));
}

TEST(RecycleQueue, FinishingAdmitsTheWaitingInFifoOrder) {
  RecycleQueue q(1);
  q.request(worker(0));
  q.request(worker(3));
  q.request(worker(1));
  q.request(worker(2));
  EXPECT_THAT(q.finish(worker(0)), ElementsAre(worker(3)));
  EXPECT_THAT(q.finish(worker(3)), ElementsAre(worker(1)));
  EXPECT_THAT(q.finish(worker(1)), ElementsAre(worker(2)));
  EXPECT_THAT(q.finish(worker(2)), IsEmpty());
  EXPECT_EQ(q.in_flight_count(), 0u);
}

TEST(RecycleQueue, EachKeyIsInAtMostOnce) {
  RecycleQueue q(1);
  q.request(worker(0));
  q.request(worker(1));
  EXPECT_EQ(q.request(worker(0)), Admit::AlreadyInFlight);
  EXPECT_EQ(q.request(worker(1)), Admit::AlreadyQueued);
  EXPECT_EQ(q.in_flight_count(), 1u);
  EXPECT_EQ(q.waiting(), 1u);
}

TEST(RecycleQueue, ProcessesOfOneSlotAreSeparateKeys) {
  RecycleQueue q(2);
  EXPECT_EQ(q.request(process(0, 100)), Admit::Now);
  EXPECT_EQ(q.request(process(0, 101)), Admit::Now);
  EXPECT_EQ(q.request(worker(0)), Admit::Queued);
  EXPECT_EQ(q.request(process(0, 100)), Admit::AlreadyInFlight);
}

TEST(RecycleQueue, FinishingAQueuedKeyDropsItWithoutAdmittingAnything) {
  RecycleQueue q(1);
  q.request(worker(0));
  q.request(worker(1));
  q.request(worker(2));
  EXPECT_THAT(q.finish(worker(1)), IsEmpty());
  EXPECT_FALSE(q.queued(worker(1)));
  EXPECT_THAT(q.finish(worker(0)), ElementsAre(worker(2)));
}

TEST(RecycleQueue, FinishingAnUnknownKeyChangesNothing) {
  RecycleQueue q(1);
  q.request(worker(0));
  q.request(worker(1));
  EXPECT_THAT(q.finish(worker(7)), IsEmpty());
  EXPECT_EQ(q.in_flight_count(), 1u);
  EXPECT_EQ(q.waiting(), 1u);
}

TEST(RecycleQueue, ForgetSlotRemovesAllItsKeysAndAdmitsOthers) {
  RecycleQueue q(2);
  q.request(process(0, 100));
  q.request(worker(1));
  q.request(process(0, 101));
  q.request(worker(2));
  q.request(worker(3));
  EXPECT_THAT(q.forget_slot(0), ElementsAre(worker(2)));
  EXPECT_FALSE(q.in_flight(process(0, 100)));
  EXPECT_FALSE(q.queued(process(0, 101)));
  EXPECT_TRUE(q.in_flight(worker(1)));
  EXPECT_TRUE(q.in_flight(worker(2)));
  EXPECT_TRUE(q.queued(worker(3)));
}

TEST(RecycleQueue, RaisingTheCapAdmitsMoreOnTheNextFinish) {
  RecycleQueue q(1);
  for (unsigned slot = 0; slot < 5; ++slot) q.request(worker(slot));
  q.set_max_concurrent(3);
  EXPECT_EQ(q.in_flight_count(), 1u) << "nothing moves until something finishes";
  EXPECT_EQ(q.request(worker(9)), Admit::Queued) << "those waiting go first";
  EXPECT_THAT(q.finish(worker(0)), ElementsAre(worker(1), worker(2), worker(3)));
  EXPECT_EQ(q.in_flight_count(), 3u);
}

TEST(RecycleQueue, LoweringTheCapLetsRecyclesInFlightFinish) {
  RecycleQueue q(3);
  for (unsigned slot = 0; slot < 4; ++slot) q.request(worker(slot));
  q.set_max_concurrent(1);
  EXPECT_EQ(q.in_flight_count(), 3u);
  EXPECT_THAT(q.finish(worker(0)), IsEmpty());
  EXPECT_THAT(q.finish(worker(1)), IsEmpty());
  EXPECT_THAT(q.finish(worker(2)), ElementsAre(worker(3)));
}

TEST(RecycleQueue, WithoutACapEveryKeyGoesAtOnce) {
  RecycleQueue q(RecycleQueue::kNoCap);
  for (pid_t pid = 100; pid < 164; ++pid) EXPECT_EQ(q.request(process(0, pid)), Admit::Now);
  EXPECT_EQ(q.in_flight_count(), 64u);
  EXPECT_EQ(q.waiting(), 0u);
  EXPECT_EQ(q.request(process(0, 100)), Admit::AlreadyInFlight);
  EXPECT_THAT(q.finish(process(0, 100)), IsEmpty());
}

TEST(RecycleQueue, LiftingTheCapAdmitsEveryWaitingKeyOnTheNextFinish) {
  RecycleQueue q(1);
  q.request(worker(0));
  q.request(worker(1));
  q.request(worker(2));
  q.set_max_concurrent(RecycleQueue::kNoCap);
  EXPECT_THAT(q.finish(worker(0)), ElementsAre(worker(1), worker(2)));
}

TEST(RecycleLoopGuard, ARecycleAfterAStableRunStartsAtOnce) {
  RecycleLoopGuard g(1min, 1s, 1min);
  EXPECT_EQ(g.on_recycle(2h, true, "memory"), 0ms);
  EXPECT_EQ(g.loops(), 0u);
}

TEST(RecycleLoopGuard, TheFirstQuickRecycleIsNotYetALoop) {
  RecycleLoopGuard g(1min, 1s, 1min);
  EXPECT_EQ(g.on_recycle(5s, true, "memory"), 0ms)
      << "the previous run was not recycled by this policy";
}

TEST(RecycleLoopGuard, AReplacementTrippingTheSamePolicyQuicklyIsDelayed) {
  RecycleLoopGuard g(1min, 1s, 1min);
  g.on_recycle(3h, true, "policies[0]");
  EXPECT_EQ(g.on_recycle(10s, true, "policies[0]"), 1s);
  EXPECT_EQ(g.loops(), 1u);
}

TEST(RecycleLoopGuard, DelaysDoubleUpToTheCap) {
  RecycleLoopGuard g(1min, 1s, 10s);
  g.on_recycle(1h, true, "memory");
  std::vector<Duration> delays;
  for (int i = 0; i < 7; ++i) delays.push_back(g.on_recycle(2s, true, "memory"));
  EXPECT_THAT(delays, ElementsAre(1s, 2s, 4s, 8s, 10s, 10s, 10s));
  EXPECT_EQ(g.loops(), 7u);
}

TEST(RecycleLoopGuard, ManyLoopsNeverOverflowPastTheCap) {
  RecycleLoopGuard g(1min, 250ms, 1h);
  Duration last{};
  for (int i = 0; i < 300; ++i) last = g.on_recycle(1s, true, "memory");
  EXPECT_EQ(last, 1h);
}

TEST(RecycleLoopGuard, AStableRunResetsTheCount) {
  RecycleLoopGuard g(1min, 1s, 1min);
  g.on_recycle(1h, true, "memory");
  g.on_recycle(1s, true, "memory");
  g.on_recycle(1s, true, "memory");
  EXPECT_EQ(g.on_recycle(1min, true, "memory"), 0ms) << "min_uptime reached";
  EXPECT_EQ(g.loops(), 0u);
  EXPECT_EQ(g.on_recycle(1s, true, "memory"), 1s) << "counting starts over";
}

TEST(RecycleLoopGuard, AnotherPolicyResetsTheCount) {
  RecycleLoopGuard g(1min, 1s, 1min);
  g.on_recycle(1h, true, "memory");
  g.on_recycle(1s, true, "memory");
  EXPECT_EQ(g.on_recycle(1s, true, "threads"), 0ms);
  EXPECT_EQ(g.loops(), 0u);
  EXPECT_EQ(g.on_recycle(1s, true, "threads"), 1s) << "threads now loops on its own";
}

TEST(RecycleLoopGuard, PoliciesThatCannotLoopNeverDelay) {
  RecycleLoopGuard g(1min, 1s, 1min);
  for (int i = 0; i < 5; ++i) EXPECT_EQ(g.on_recycle(1s, false, "max_requests"), 0ms);
  EXPECT_EQ(g.loops(), 0u);
}

TEST(RecycleLoopGuard, ARunThatEndedOtherwiseBreaksTheChain) {
  RecycleLoopGuard g(1min, 1s, 1min);
  g.on_recycle(1h, true, "memory");
  g.on_recycle(1s, true, "memory");
  g.reset();
  EXPECT_EQ(g.loops(), 0u);
  EXPECT_EQ(g.on_recycle(1s, true, "memory"), 0ms) << "the crashed run was not recycled";
}

}  // namespace
}  // namespace recycler::engine
