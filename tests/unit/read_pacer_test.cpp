// The notify socket's pacing (notify/read_pacer.h): when it may rest between
// reads, and that a rest never lets a request limit pass unread.
#include "supervisor/notify/read_pacer.h"

#include <gtest/gtest.h>

#include <chrono>

namespace recycler::notify {
namespace {

using namespace std::chrono_literals;
using Clock = ReadPacer::Clock;

class ReadPacerTest : public ::testing::Test {
 protected:
  // A drain `gap` after the previous one that read `datagrams` carrying
  // `requests` requests, with `left` requests to go before the nearest limit.
  std::chrono::microseconds read(std::chrono::microseconds gap, uint64_t datagrams,
                                 uint64_t requests, std::optional<uint64_t> left,
                                 std::optional<unsigned> queue = 512, bool emptied = true) {
    at_ += gap;
    requests_ += requests;
    return pacer_.after({.at = at_,
                         .datagrams = datagrams,
                         .emptied = emptied,
                         .requests = requests_,
                         .requests_left = left,
                         .queue_limit = queue});
  }
  // The same with reports of one request each.
  std::chrono::microseconds drain(std::chrono::microseconds gap, uint64_t datagrams,
                                  std::optional<uint64_t> left = std::nullopt,
                                  std::optional<unsigned> queue = 512, bool emptied = true) {
    return read(gap, datagrams, datagrams, left, queue, emptied);
  }

  ReadPacer pacer_;
  Clock::time_point at_{};
  uint64_t requests_ = 0;
};

TEST_F(ReadPacerTest, TheFirstDrainIsNeverHeld) {
  EXPECT_EQ(drain(0us, 100), 0us);
}

TEST_F(ReadPacerTest, ReportsSlowerThanOneAMillisecondAreReadAsTheyCome) {
  drain(0us, 1);
  EXPECT_EQ(drain(2ms, 1), 0us);
  EXPECT_EQ(drain(10ms, 5), 0us);
}

TEST_F(ReadPacerTest, FastReportsWithNoLimitRestTheLongestHold) {
  drain(0us, 1);
  EXPECT_EQ(drain(100us, 1), ReadPacer::kMaxHold);  // 10 a millisecond
}

TEST_F(ReadPacerTest, AHoldFillsAtMostAQuarterOfTheKernelsQueue) {
  drain(0us, 1);
  // 40 datagrams a millisecond and a queue of 128: 32 datagrams' worth, 0.8 ms.
  EXPECT_EQ(drain(25us, 1, std::nullopt, 128), 800us);
}

TEST_F(ReadPacerTest, AShortOrUnknownKernelQueueIsNeverHeld) {
  drain(0us, 1);
  // A full queue makes a sender keep its count for later: a count that could
  // jump past a limit. The kernel's default (10) is short; `run` warns.
  EXPECT_EQ(drain(100us, 1, std::nullopt, 10), 0us);
  EXPECT_EQ(drain(100us, 1, std::nullopt, kShortQueue - 1), 0us);
  EXPECT_EQ(drain(100us, 1, std::nullopt, std::nullopt), 0us);
  EXPECT_GT(drain(100us, 1, std::nullopt, kShortQueue), 0us);
}

TEST_F(ReadPacerTest, AHoldCoversTwiceTheRequestsItPredictsAndLeavesTheMargin) {
  drain(0us, 1);
  // 10 requests a millisecond, 22 left: (22 - 2) / (2 * 10) = 1 ms.
  auto hold = drain(100us, 1, 22);
  EXPECT_EQ(hold, 1000us);
  // What the measured rate serves in that hold stays within the limit, twice over.
  EXPECT_LE(2 * 10 * hold.count() / 1000, 22 - static_cast<int64_t>(ReadPacer::kMargin));
}

TEST_F(ReadPacerTest, NearALimitEveryReportIsReadAsItComes) {
  drain(0us, 1);
  EXPECT_EQ(drain(100us, 1, ReadPacer::kMargin), 0us);
  EXPECT_EQ(drain(100us, 1, 0), 0us);
  // 3 left at 10 a millisecond: 50 us, under the shortest hold worth taking.
  EXPECT_EQ(drain(100us, 1, 3), 0us);
}

TEST_F(ReadPacerTest, ADatagramCarryingManyRequestsCountsThemAll) {
  drain(0us, 1);
  // One datagram: 40 requests a worker had kept back.
  auto hold = read(1ms, 1, 40, 82);
  // 40 requests a millisecond: (82 - 2) / 80 = 1 ms; by datagrams alone it would be 2 ms.
  EXPECT_EQ(hold, 1000us);
}

TEST_F(ReadPacerTest, DatagramsWithoutRequestsStillBoundTheHoldNearALimit) {
  drain(0us, 0);
  // 10 datagrams a millisecond that counted nothing (READY, STATUS...): any
  // of the next could be a request.
  auto hold = read(100us, 1, 0, 12);
  EXPECT_EQ(hold, 500us);  // (12 - 2) / (2 * 10)
}

TEST_F(ReadPacerTest, ADrainThatLeftDatagramsQueuedIsNotHeld) {
  drain(0us, 1);
  EXPECT_EQ(drain(100us, 256, std::nullopt, 512, /*emptied=*/false), 0us);
}

TEST_F(ReadPacerTest, AHoldEndingOnAnEmptyQueueGoesBackToReadingOnWakeUp) {
  drain(0us, 1);
  ASSERT_GT(drain(100us, 1), 0us);
  EXPECT_EQ(drain(2ms, 0), 0us);
}

TEST_F(ReadPacerTest, ACountThatWentDownMeasuresNothing) {
  drain(0us, 1);
  requests_ = 0;  // the counting started over
  auto hold = read(100us, 1, 0, 22);
  EXPECT_EQ(hold, 1000us);  // bounded by the datagram rate: (22 - 2) / (2 * 10)
}

}  // namespace
}  // namespace recycler::notify
