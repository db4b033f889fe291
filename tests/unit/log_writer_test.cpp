// LogWriter against a real pipe whose reader stops reading: the writer never
// blocks, drops worker output first, keeps recycler's own lines, and says
// what it dropped once the reader is back.
#include "supervisor/log/writer.h"

#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <unistd.h>

#include <string>
#include <vector>

namespace recycler::log {
namespace {

using ::testing::HasSubstr;
using Kind = LogWriter::Kind;

std::vector<std::string> g_reports;

class LogWriterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    int fds[2];
    ASSERT_EQ(::pipe2(fds, O_CLOEXEC), 0);
    read_.reset(fds[0]);
    write_.reset(fds[1]);
    ::fcntl(write_.get(), F_SETPIPE_SZ, 4096);  // fills after a page
    uv_loop_init(&loop_);
    g_reports.clear();
  }
  void TearDown() override {
    uv_run(&loop_, UV_RUN_NOWAIT);
    uv_loop_close(&loop_);
  }

  // Everything in the pipe now.
  std::string drain() {
    std::string out;
    char buf[65536];
    for (;;) {
      pollfd p{read_.get(), POLLIN, 0};
      if (::poll(&p, 1, 0) <= 0) break;
      ssize_t n = ::read(read_.get(), buf, sizeof buf);
      if (n <= 0) break;
      out.append(buf, static_cast<size_t>(n));
    }
    return out;
  }
  // Turns of the loop until the writer has nothing pending (bounded).
  void run_until_written(LogWriter& w, std::string& received) {
    for (int i = 0; i < 10000 && w.stats().pending > 0; ++i) {
      received += drain();
      uv_run(&loop_, UV_RUN_NOWAIT);
    }
    received += drain();
  }

  UniqueFd read_, write_;
  uv_loop_t loop_{};
};

TEST_F(LogWriterTest, DetachedItWritesEachLineAtOnce) {
  LogWriter w(write_.get());
  w.write(Kind::Own, "one\n");
  w.write(Kind::Output, "two\n");
  EXPECT_EQ(drain(), "one\ntwo\n");
}

TEST_F(LogWriterTest, AttachedWorkerOutputIsWrittenOncePerTurnAndOwnLinesAtOnce) {
  {
    LogWriter w(write_.get());
    w.attach(&loop_);
    w.write(Kind::Output, "out 1\n");
    w.write(Kind::Output, "out 2\n");
    EXPECT_EQ(drain(), "") << "worker output waits for the end of the turn";
    w.write(Kind::Own, "decision\n");
    EXPECT_EQ(drain(), "out 1\nout 2\ndecision\n") << "an own line goes out at once, in order";
    w.write(Kind::Output, "out 3\n");
    uv_run(&loop_, UV_RUN_NOWAIT);
    EXPECT_EQ(drain(), "out 3\n");
    w.detach(std::chrono::milliseconds(100));
  }
}

TEST_F(LogWriterTest, AStalledReaderNeverBlocksAndOnlyWorkerOutputIsDropped) {
  LogWriter w(write_.get());
  w.on_dropped([](std::string_view text) { g_reports.emplace_back(text); });
  w.attach(&loop_);
  const std::string output(99, 'o');
  // Far more than the pipe and the buffer hold: with a blocking write this
  // test would hang here.
  size_t sent = 0;
  for (size_t i = 0; i < 3 * LogWriter::kOutputLimit / 100; ++i, ++sent)
    w.write(Kind::Output, output + "\n");
  for (int i = 0; i < 1000; ++i) w.write(Kind::Own, "decision " + std::to_string(i) + "\n");
  LogWriter::Stats stats = w.stats();
  EXPECT_GT(stats.dropped_output, sent / 2);
  EXPECT_EQ(stats.dropped_own, 0u);
  EXPECT_GT(stats.pending, LogWriter::kOutputLimit) << "own lines go past the output limit";
  EXPECT_TRUE(g_reports.empty()) << "said when the reader is back, not while it is away";

  // The reader comes back: everything kept arrives, decisions included, in order.
  std::string received;
  run_until_written(w, received);
  EXPECT_EQ(w.stats().pending, 0u);
  size_t last = 0;
  for (int i = 0; i < 1000; ++i) {
    size_t at = received.find("decision " + std::to_string(i) + "\n", last);
    ASSERT_NE(at, std::string::npos) << "decision " << i;
    last = at;
  }
  ASSERT_EQ(g_reports.size(), 1u);
  EXPECT_EQ(g_reports[0], "log: " + std::to_string(stats.dropped_output) +
                              " lines of worker output dropped while stderr's reader was not "
                              "keeping up");
  w.detach(std::chrono::milliseconds(100));
}

TEST_F(LogWriterTest, PastTheOwnLimitEvenOwnLinesAreDroppedAndCounted) {
  LogWriter w(write_.get());
  w.on_dropped([](std::string_view text) { g_reports.emplace_back(text); });
  w.attach(&loop_);
  const std::string line(1023, 'd');
  for (size_t i = 0; i < LogWriter::kOwnLimit / 1024 + 100; ++i) w.write(Kind::Own, line + "\n");
  EXPECT_GT(w.stats().dropped_own, 0u);
  EXPECT_LE(w.stats().pending, LogWriter::kOwnLimit);
  std::string received;
  run_until_written(w, received);
  ASSERT_EQ(g_reports.size(), 1u);
  EXPECT_THAT(g_reports[0], HasSubstr("of recycler's own, past 16 MiB waiting"));
  w.detach(std::chrono::milliseconds(100));
}

TEST_F(LogWriterTest, ItLeavesTheSharedDescriptionBlockingForOthers) {
  LogWriter w(write_.get());
  w.attach(&loop_);
  EXPECT_EQ(::fcntl(write_.get(), F_GETFL) & O_NONBLOCK, 0)
      << "the shell's terminal or pipe is not switched to non-blocking";
  w.detach(std::chrono::milliseconds(100));
}

TEST_F(LogWriterTest, DetachWaitsABoundedTimeForAStalledReader) {
  LogWriter w(write_.get());
  w.attach(&loop_);
  for (int i = 0; i < 1000; ++i) w.write(Kind::Own, std::string(100, 'x') + "\n");
  auto start = std::chrono::steady_clock::now();
  w.detach(std::chrono::milliseconds(200));
  auto took = std::chrono::steady_clock::now() - start;
  EXPECT_LT(took, std::chrono::seconds(2));
  EXPECT_EQ(w.stats().pending, 0u) << "given up on";
}

}  // namespace
}  // namespace recycler::log
