#include "supervisor/worker/restart_backoff.h"

#include <gtest/gtest.h>

namespace recycler {
namespace {

using namespace std::chrono_literals;

RestartBackoff::Params params(Millis initial, Millis max, Millis reset_after, double jitter = 0) {
  return {initial, max, reset_after, jitter};
}

TEST(RestartBackoff, DoublesFromInitialUpToTheCap) {
  RestartBackoff b(params(1s, 10s, 60s));
  EXPECT_EQ(b.next(0ms, 0), 1s);
  EXPECT_EQ(b.next(0ms, 0), 2s);
  EXPECT_EQ(b.next(0ms, 0), 4s);
  EXPECT_EQ(b.next(0ms, 0), 8s);
  EXPECT_EQ(b.next(0ms, 0), 10s);
  EXPECT_EQ(b.next(0ms, 0), 10s);
  EXPECT_EQ(b.attempt(), 6u);
}

TEST(RestartBackoff, ManyAttemptsNeverOverflowPastTheCap) {
  RestartBackoff b(params(250ms, 1h, 24h));
  Millis last{};
  for (int i = 0; i < 200; ++i) last = b.next(1ms, 0);
  EXPECT_EQ(last, 1h);
}

TEST(RestartBackoff, StableUptimeStartsTheSequenceOver) {
  RestartBackoff b(params(1s, 60s, 30s));
  b.next(0ms, 0);
  b.next(0ms, 0);
  EXPECT_EQ(b.next(29s, 0), 4s) << "an uptime just short of reset_after keeps growing";
  EXPECT_EQ(b.next(30s, 0), 1s) << "reset_after of uptime resets the backoff";
  EXPECT_EQ(b.next(0ms, 0), 2s);
}

TEST(RestartBackoff, JitterOnlyShortensWithinItsFraction) {
  RestartBackoff b(params(10s, 10s, 60s, 0.2));
  EXPECT_EQ(b.next(0ms, 0.0), 10s);
  EXPECT_EQ(b.next(0ms, 0.5), 9s);
  EXPECT_EQ(b.next(0ms, 1.0), 8s) << "never shorter than (1 - jitter) of the base";
  EXPECT_EQ(b.next(0ms, 7.0), 8s) << "u is clamped to [0, 1]";
}

TEST(RestartBackoff, ZeroInitialMeansImmediateRestart) {
  RestartBackoff b(params(0ms, 10s, 60s));
  EXPECT_EQ(b.next(0ms, 0), 0ms);
  EXPECT_EQ(b.next(0ms, 0), 0ms);
}

TEST(CrashLoopDetector, TripsOnMaxExitsWithinTheWindow) {
  CrashLoopDetector d(3, 10s);
  CrashLoopDetector::TimePoint t0{};
  EXPECT_FALSE(d.record_exit(t0));
  EXPECT_FALSE(d.record_exit(t0 + 4s));
  EXPECT_TRUE(d.record_exit(t0 + 9s));
}

TEST(CrashLoopDetector, ExitsOlderThanTheWindowDoNotCount) {
  CrashLoopDetector d(3, 10s);
  CrashLoopDetector::TimePoint t0{};
  EXPECT_FALSE(d.record_exit(t0));
  EXPECT_FALSE(d.record_exit(t0 + 6s));
  EXPECT_FALSE(d.record_exit(t0 + 10s)) << "the first exit just left the window";
  EXPECT_EQ(d.exits_in_window(), 2u);
  EXPECT_TRUE(d.record_exit(t0 + 15s));
}
}  // namespace
}  // namespace recycler
