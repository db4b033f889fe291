// The systemd watchdog's pure part (supervisor/runtime/watchdog.h): reading
// WATCHDOG_USEC/WATCHDOG_PID, the ping period, and when a tick pings.
#include "supervisor/runtime/watchdog.h"

#include <gtest/gtest.h>

namespace recycler {
namespace {

using namespace std::chrono_literals;

TEST(WatchdogInterval, UnsetMeansNoWatchdog) {
  auto r = watchdog_interval(nullptr, nullptr, 42);
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r.value().has_value());
  r = watchdog_interval("", nullptr, 42);
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r.value().has_value());
}

TEST(WatchdogInterval, MicrosecondsForThisPid) {
  auto r = watchdog_interval("30000000", "42", 42);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r.value(), Duration(30s));
  r = watchdog_interval("2500000", nullptr, 42);  // no WATCHDOG_PID: ours
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r.value(), Duration(2500ms));
  r = watchdog_interval("10", nullptr, 42);  // below the loop's resolution
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r.value(), Duration(1ms));
}

TEST(WatchdogInterval, AnotherProcessesWatchdogIsIgnored) {
  auto r = watchdog_interval("30000000", "41", 42);
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r.value().has_value());
}

TEST(WatchdogInterval, GarbageIsAnErrorNamingTheVariable) {
  auto r = watchdog_interval("30s", nullptr, 42);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("WATCHDOG_USEC"), std::string::npos);
  r = watchdog_interval("0", nullptr, 42);
  ASSERT_FALSE(r.ok());
  r = watchdog_interval("1000", "-1", 42);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("WATCHDOG_PID"), std::string::npos);
}

TEST(WatchdogHealth, PingsEveryHalfIntervalWhileOnTime) {
  TimePoint t0{};
  WatchdogHealth h(10s, t0);
  EXPECT_EQ(h.period(), Duration(5s));
  for (int i = 1; i <= 5; ++i) {
    auto v = h.tick(t0 + i * 5s + 30ms, {});  // a little late: a loop's jitter
    EXPECT_TRUE(v.ping) << i << ": " << v.why;
    t0 += 30ms;
  }
}

TEST(WatchdogHealth, ABlockedLoopSkipsThePingThenRecovers) {
  TimePoint t0{};
  WatchdogHealth h(10s, t0);
  // Expected at 5 s; the loop was blocked until 7.6 s: half a period late.
  auto v = h.tick(t0 + 7600ms, {});
  EXPECT_FALSE(v.ping);
  EXPECT_NE(v.why.find("blocked"), std::string::npos) << v.why;
  EXPECT_NE(v.why.find("2.6s"), std::string::npos) << v.why;
  // The next tick, a period after that one, is on time again.
  v = h.tick(t0 + 12600ms, {});
  EXPECT_TRUE(v.ping) << v.why;
  // Just under half a period late still pings.
  v = h.tick(t0 + 17600ms + 2499ms, {});
  EXPECT_TRUE(v.ping) << v.why;
}

TEST(WatchdogHealth, StalledSamplingSkipsThePing) {
  TimePoint t0{};
  WatchdogHealth h(10s, t0);
  // sample_interval 1 s: stalled past 5 s (the period beats 3 x 1 s).
  EXPECT_EQ(h.stall_limit(1s), Duration(5s));
  EXPECT_EQ(h.stall_limit(10s), Duration(30s));
  auto v = h.tick(t0 + 5s, {{"api[0] sampling", 1s, 4s}, {"api[1] sampling", 1s, 900ms}});
  EXPECT_TRUE(v.ping) << v.why;
  v = h.tick(t0 + 10s, {{"api[0] sampling", 1s, 900ms}, {"api[1] sampling", 1s, 5001ms}});
  EXPECT_FALSE(v.ping);
  EXPECT_NE(v.why.find("api[1] sampling has stalled"), std::string::npos) << v.why;
  // A slow program (sample_interval 10 s) is not stalled at 20 s.
  v = h.tick(t0 + 15s, {{"batch[0] sampling", 10s, 20s}});
  EXPECT_TRUE(v.ping) << v.why;
  v = h.tick(t0 + 20s, {{"the GPU query", 1s, 6s}});
  EXPECT_FALSE(v.ping);
  EXPECT_NE(v.why.find("the GPU query"), std::string::npos) << v.why;
}

}  // namespace
}  // namespace recycler
