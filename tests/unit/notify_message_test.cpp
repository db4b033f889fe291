// The notify protocol's messages: the sd_notify(3) parser on good and hostile
// input, recycler's answers, and the kernel's queue length.
#include <dirent.h>
#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstring>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "supervisor/notify/message.h"
#include "supervisor/notify/socket.h"
#include "supervisor/util/uv.h"

namespace recycler::notify {
namespace {

using namespace std::chrono_literals;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

// ---------------------------------------------------------------------------
// parse_message

TEST(KernelQueue, AShortQueueIsWarnedAboutWithTheFix) {
  auto warning = short_queue_warning(10);
  ASSERT_TRUE(warning);
  EXPECT_THAT(*warning, ::testing::HasSubstr("at most 10 datagrams"));
  EXPECT_THAT(*warning, ::testing::HasSubstr("sysctl -w net.unix.max_dgram_qlen=512"));
  EXPECT_FALSE(short_queue_warning(512)) << "systemd's setting";
  EXPECT_FALSE(short_queue_warning(kShortQueue));
  EXPECT_FALSE(short_queue_warning(std::nullopt)) << "unknown: nothing to say";
}

TEST(KernelQueue, TheLimitIsReadFromProc) {
  auto limit = kernel_queue_limit();
  ASSERT_TRUE(limit) << "Linux has /proc/sys/net/unix/max_dgram_qlen";
  EXPECT_GT(*limit, 0u);
}

TEST(ParseMessage, ReadsEveryField) {
  auto m = parse_message(
      "READY=1\nSTOPPING=1\nWATCHDOG=1\nSTATUS=serving 3 models\nMAINPID=4242\n"
      "RECYCLER_REQUESTS=17\nRECYCLER_CHECKPOINTED=1\nRECYCLER_DEVICE_BYTES=8589934592\n"
      "RECYCLER_ITERATION=3\n");
  EXPECT_TRUE(m.ready);
  EXPECT_TRUE(m.stopping);
  EXPECT_TRUE(m.watchdog);
  EXPECT_EQ(m.status, "serving 3 models");
  EXPECT_EQ(m.mainpid, 4242);
  EXPECT_EQ(m.requests, 17u);
  EXPECT_TRUE(m.checkpointed);
  EXPECT_EQ(m.device_bytes, 8589934592u);
  EXPECT_EQ(m.iteration, 3u);
  EXPECT_THAT(m.problems, IsEmpty());
}

TEST(ParseMessage, AnEmptyDatagramSaysNothing) {
  auto m = parse_message("");
  EXPECT_FALSE(m.ready || m.stopping || m.watchdog || m.checkpointed);
  EXPECT_FALSE(m.status || m.mainpid || m.requests || m.device_bytes || m.iteration);
  EXPECT_THAT(m.problems, IsEmpty());
}

TEST(ParseMessage, FieldsNotSentStayUnset) {
  auto m = parse_message("READY=1");
  EXPECT_TRUE(m.ready);
  EXPECT_FALSE(m.stopping || m.watchdog || m.checkpointed);
  EXPECT_FALSE(m.status || m.mainpid || m.requests || m.device_bytes || m.iteration);
}

TEST(ParseMessage, UnknownKeysAreIgnoredSilently) {
  auto m = parse_message("EXTEND_TIMEOUT_USEC=5000000\nERRNO=2\nFDSTORE=1\nX-CUSTOM=y\nREADY=1");
  EXPECT_TRUE(m.ready);
  EXPECT_THAT(m.problems, IsEmpty());
}

TEST(ParseMessage, AnUnknownKeyInRecyclersNamespaceIsKeptForAWarning) {
  auto m = parse_message("ERRNO=2\nRECYCLER_REQUEST=1\nRECYCLER_ITER=3\nRECYCLER_REQUESTS=2");
  EXPECT_EQ(m.unknown_key, "\"RECYCLER_REQUEST\"") << "the first one";
  EXPECT_EQ(m.requests, 2u) << "the known keys still count";
  EXPECT_THAT(m.problems, IsEmpty()) << "not malformed: a key recycler does not know";
  EXPECT_FALSE(parse_message("RECYCLER_REQUESTS=1\nX_RECYCLER_Y=1").unknown_key);
}

TEST(ParseMessage, EmptyLinesAreFine) {
  auto m = parse_message("\nREADY=1\n\n\n");
  EXPECT_TRUE(m.ready);
  EXPECT_THAT(m.problems, IsEmpty());
}

TEST(ParseMessage, ALineWithoutEqualsIsSkippedAndTheOthersCount) {
  auto m = parse_message("READY=1\nhello\nRECYCLER_REQUESTS=2");
  EXPECT_TRUE(m.ready);
  EXPECT_EQ(m.requests, 2u);
  EXPECT_THAT(m.problems, ElementsAre(R"(line without '=': "hello")"));
}

TEST(ParseMessage, AnEmptyKeyIsAProblem) {
  auto m = parse_message("=1\nWATCHDOG=1");
  EXPECT_TRUE(m.watchdog);
  EXPECT_THAT(m.problems, ElementsAre(R"(line with an empty key: "=1")"));
}

TEST(ParseMessage, ALineWithANulByteIsSkippedAndTheOthersCount) {
  auto m = parse_message(std::string("READY=1\nSTATUS=a\0b\nRECYCLER_REQUESTS=1", 38));
  EXPECT_TRUE(m.ready);
  EXPECT_FALSE(m.status) << "the NUL line is skipped whole";
  EXPECT_EQ(m.requests, 1u);
  EXPECT_THAT(m.problems, ElementsAre(R"(line with a NUL byte: "STATUS=a\x00b")"));
}

TEST(ParseMessage, BadNumbersAreProblems) {
  const std::pair<const char*, const char*> cases[] = {
      {"RECYCLER_REQUESTS=abc", R"(RECYCLER_REQUESTS: "abc" is not a number)"},
      {"RECYCLER_REQUESTS=", R"(RECYCLER_REQUESTS: "" is not a number)"},
      {"RECYCLER_REQUESTS=-1", R"(RECYCLER_REQUESTS: "-1" is not a number)"},
      {"RECYCLER_REQUESTS=+1", R"(RECYCLER_REQUESTS: "+1" is not a number)"},
      {"RECYCLER_REQUESTS= 1", R"(RECYCLER_REQUESTS: " 1" is not a number)"},
      {"RECYCLER_REQUESTS=0x10", R"(RECYCLER_REQUESTS: "0x10" is not a number)"},
      {"RECYCLER_DEVICE_BYTES=1.5e9", R"(RECYCLER_DEVICE_BYTES: "1.5e9" is not a number)"},
      {"RECYCLER_DEVICE_BYTES=18446744073709551616",
       R"(RECYCLER_DEVICE_BYTES: "18446744073709551616" is out of range)"},
      {"RECYCLER_ITERATION=-1", R"(RECYCLER_ITERATION: "-1" is not a number)"},
      {"RECYCLER_ITERATION=2\r", R"(RECYCLER_ITERATION: "2\x0d" is not a number)"},
      {"RECYCLER_ITERATION=99999999999999999999",
       R"(RECYCLER_ITERATION: "99999999999999999999" is out of range)"},
      {"MAINPID=abc", R"(MAINPID: "abc" is not a number)"},
      {"MAINPID=0", R"(MAINPID: "0" is not a valid pid)"},
      {"MAINPID=2147483648", R"(MAINPID: "2147483648" is not a valid pid)"},
  };
  for (const auto& [line, problem] : cases) {
    auto m = parse_message(line);
    EXPECT_FALSE(m.requests || m.device_bytes || m.iteration || m.mainpid) << line;
    EXPECT_THAT(m.problems, ElementsAre(problem)) << line;
  }
}

TEST(ParseMessage, NumbersAtTheirLimitsAreAccepted) {
  auto m = parse_message(
      "RECYCLER_REQUESTS=1000000\nRECYCLER_DEVICE_BYTES=18446744073709551615\n"
      "MAINPID=2147483647\nRECYCLER_ITERATION=9007199254740992");
  EXPECT_EQ(m.requests, kMaxRequestsPerMessage);
  EXPECT_EQ(m.device_bytes, UINT64_MAX);
  EXPECT_EQ(m.iteration, kMaxIteration);
  EXPECT_EQ(m.mainpid, 2147483647);
  EXPECT_THAT(m.problems, IsEmpty());
  EXPECT_EQ(parse_message("RECYCLER_REQUESTS=0").requests, 0u) << "zero is a valid count";
  EXPECT_EQ(parse_message("RECYCLER_ITERATION=0").iteration, 0u) << "counting from zero is fine";
}

TEST(ParseMessage, AnIterationOverTheLimitIsRejectedAndTheLastValidOneCounts) {
  auto m = parse_message("RECYCLER_ITERATION=7\nRECYCLER_ITERATION=9007199254740993");
  EXPECT_EQ(m.iteration, 7u);
  EXPECT_THAT(m.problems, ElementsAre("RECYCLER_ITERATION: 9007199254740993 is over the limit of "
                                      "9007199254740992"));
}

TEST(ParseMessage, ARequestCountOverTheLimitIsRejected) {
  auto m = parse_message("RECYCLER_REQUESTS=1000001");
  EXPECT_FALSE(m.requests);
  EXPECT_THAT(m.problems, ElementsAre("RECYCLER_REQUESTS: 1000001 is over the limit of 1000000"));
}

TEST(ParseMessage, FlagsOtherThanOneAreProblems) {
  auto m = parse_message("READY=0\nSTOPPING=true\nWATCHDOG=trigger\nRECYCLER_CHECKPOINTED=");
  EXPECT_FALSE(m.ready || m.stopping || m.watchdog || m.checkpointed);
  EXPECT_THAT(m.problems,
              ElementsAre(R"(READY: expected 1, got "0")", R"(STOPPING: expected 1, got "true")",
                          R"(WATCHDOG: expected 1, got "trigger")",
                          R"(RECYCLER_CHECKPOINTED: expected 1, got "")"));
}

TEST(ParseMessage, ACarriageReturnIsPartOfTheValue) {
  auto m = parse_message("STATUS=dos\r\nREADY=1\r\nRECYCLER_REQUESTS=5\r\n");
  EXPECT_EQ(m.status, "dos\r");
  EXPECT_FALSE(m.ready);
  EXPECT_FALSE(m.requests);
  EXPECT_THAT(m.problems, ElementsAre(R"(READY: expected 1, got "1\x0d")",
                                      R"(RECYCLER_REQUESTS: "5\x0d" is not a number)"));
}

TEST(ParseMessage, StatusKeepsEqualsSignsAndMayBeEmpty) {
  EXPECT_EQ(parse_message("STATUS=a=b").status, "a=b");
  EXPECT_EQ(parse_message("STATUS=").status, "") << "systemd reads this as clearing the status";
}

TEST(ParseMessage, AnOversizedStatusIsCutToTheLimit) {
  auto m = parse_message("STATUS=" + std::string(3000, 's') + "\nREADY=1");
  ASSERT_TRUE(m.status);
  EXPECT_EQ(m.status->size(), kMaxStatusBytes);
  EXPECT_TRUE(m.ready) << "lines after the long one still count";
}

TEST(ParseMessage, TheStatusCutDoesNotSplitAUtf8Character) {
  // "é" is two bytes and would straddle the limit.
  auto m = parse_message("STATUS=" + std::string(kMaxStatusBytes - 1, 's') + "\xc3\xa9");
  ASSERT_TRUE(m.status);
  EXPECT_EQ(*m.status, std::string(kMaxStatusBytes - 1, 's'));
}

TEST(ParseMessage, ALaterValueReplacesAnEarlierOne) {
  auto m = parse_message("RECYCLER_REQUESTS=1\nSTATUS=a\nRECYCLER_REQUESTS=2\nSTATUS=b");
  EXPECT_EQ(m.requests, 2u);
  EXPECT_EQ(m.status, "b");
}

TEST(ParseMessage, ProblemsAreCappedPerDatagram) {
  std::string datagram;
  for (int i = 0; i < 100; ++i) datagram += "junk\n";
  datagram += "READY=1";
  auto m = parse_message(datagram);
  EXPECT_TRUE(m.ready);
  ASSERT_EQ(m.problems.size(), kMaxProblems + 1);
  EXPECT_EQ(m.problems.back(), "92 more problems");
}

TEST(FormatAnswer, EachFieldOnItsLineAndNothingForAnEmptyAnswer) {
  EXPECT_EQ(format_answer({}), "");
  EXPECT_FALSE(Answer{});
  Answer a;
  a.request_limit = 237;
  EXPECT_EQ(format_answer(a), "RECYCLER_REQUEST_LIMIT=237");
  a.requests_seen = 240;
  EXPECT_EQ(format_answer(a), "RECYCLER_REQUEST_LIMIT=237\nRECYCLER_REQUESTS_SEEN=240");
  a.request_limit.reset();
  EXPECT_EQ(format_answer(a), "RECYCLER_REQUESTS_SEEN=240");
}

TEST(ParseMessage, ProblemTextsAreShortAndPrintable) {
  auto m = parse_message("RECYCLER_REQUESTS=" + std::string(500, '\x1b'));
  ASSERT_EQ(m.problems.size(), 1u);
  EXPECT_LT(m.problems[0].size(), 250u);
  EXPECT_THAT(m.problems[0], HasSubstr(R"("\x1b\x1b)"));
  EXPECT_THAT(m.problems[0], HasSubstr(R"(..." is not a number)"));
}

}  // namespace
}  // namespace recycler::notify
