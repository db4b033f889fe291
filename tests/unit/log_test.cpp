// Log formatting: escaping of worker output (binary, control characters,
// invalid UTF-8), line splitting with over-long lines, and the JSON shapes.
#include "supervisor/log/log.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/support/log_capture.h"

namespace recycler::log {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using testing::LogCapture;
using ::testing::Pair;

std::vector<std::pair<std::string, bool>> split(LineSplitter& s, std::string_view data,
                                                bool eof = false) {
  std::vector<std::pair<std::string, bool>> out;
  auto sink = [&](std::string_view line, bool partial) { out.emplace_back(line, partial); };
  s.feed(data, sink);
  if (eof) s.finish(sink);
  return out;
}

TEST(LineSplitter, SplitsOnNewlinesAcrossReads) {
  LineSplitter s;
  EXPECT_THAT(split(s, "one\ntw"), ElementsAre(Pair("one", false)));
  EXPECT_THAT(split(s, "o\n\nthree"), ElementsAre(Pair("two", false), Pair("", false)));
  EXPECT_THAT(split(s, "", true), ElementsAre(Pair("three", false))) << "EOF flushes the last line";
}

TEST(LineSplitter, DropsTheCarriageReturnOfCrlf) {
  LineSplitter s;
  EXPECT_THAT(split(s, "dos\r\n"), ElementsAre(Pair("dos", false)));
}

TEST(LineSplitter, CutsOverLongLinesIntoMarkedPieces) {
  LineSplitter s(4);
  EXPECT_THAT(split(s, "abcdefghij\nxy\n"), ElementsAre(Pair("abcd", true), Pair("efgh", true),
                                                        Pair("ij", false), Pair("xy", false)));
}

TEST(LineSplitter, ALineOfExactlyTheMaximumIsOnePiece) {
  LineSplitter s(4);
  EXPECT_THAT(split(s, "abcd\n"), ElementsAre(Pair("abcd", false)));
  EXPECT_THAT(split(s, "abcdefgh\n"), ElementsAre(Pair("abcd", true), Pair("efgh", false)));
}

TEST(LineSplitter, AnUnterminatedLongTailIsFlushedAtEof) {
  LineSplitter s(4);
  EXPECT_THAT(split(s, "abcdef", true), ElementsAre(Pair("abcd", true), Pair("ef", false)));
}

TEST(Escape, TextKeepsUtf8AndEscapesControlAndInvalidBytes) {
  EXPECT_EQ(text_escape("plain\ttab"), "plain\ttab");
  EXPECT_EQ(text_escape("caf\xc3\xa9 \xe2\x9c\x93"), "caf\xc3\xa9 \xe2\x9c\x93");
  EXPECT_EQ(text_escape(std::string("a\0b", 3)), "a\\x00b");
  EXPECT_EQ(text_escape("\x1b[31mred"), "\\x1b[31mred") << "no terminal escapes reach the log";
  EXPECT_EQ(text_escape("\xff\xfe"), "\\xff\\xfe");
  EXPECT_EQ(text_escape("\xc3"), "\\xc3") << "a truncated sequence";
  EXPECT_EQ(text_escape("\xed\xa0\x80"), "\\xed\\xa0\\x80") << "UTF-16 surrogates are not UTF-8";
}

TEST(Escape, JsonProducesValidStrings) {
  EXPECT_EQ(json_escape("say \"hi\"\\"), "say \\\"hi\\\"\\\\");
  EXPECT_EQ(json_escape("a\nb\r\tc"), "a\\nb\\r\\tc");
  EXPECT_EQ(json_escape(std::string("\0\x1f\x7f", 3)), "\\u0000\\u001f\\u007f");
  EXPECT_EQ(json_escape("caf\xc3\xa9"), "caf\xc3\xa9");
  EXPECT_EQ(json_escape("bad\xff"), "bad\\ufffd");
}

TEST(Format, TextWorkerLinesCarryProgramSlotAndStream) {
  LogCapture log;
  output("api", 2, 123, Stream::Stdout, "hello", false);
  output("api", 2, 123, Stream::Stderr, "oops\x01", true);
  ASSERT_EQ(log.lines.size(), 2u);
  EXPECT_THAT(log.lines[0], HasSubstr(" api[2] out | hello"));
  EXPECT_THAT(log.lines[1], HasSubstr(" api[2] err | oops\\x01 ..."));
}

TEST(Format, JsonWorkerLinesAreOneObjectEach) {
  LogCapture log(LogFormat::Json);
  output("api", 0, 77, Stream::Stderr, "line with \"quotes\"\n", false);
  ASSERT_EQ(log.lines.size(), 1u);
  const std::string& l = log.lines[0];
  EXPECT_EQ(l.front(), '{');
  EXPECT_EQ(l.back(), '}');
  EXPECT_THAT(
      l,
      HasSubstr(
          R"("program":"api","slot":0,"pid":77,"stream":"stderr","msg":"line with \"quotes\"\n")"));
}

TEST(Format, JsonEventsCarryTheirFields) {
  LogCapture log(LogFormat::Json);
  event(Level::Warn, "exit", "api[0] exited with status 1 after 3.2s",
        {{"program", "api"}, {"slot", 0u}, {"status", -1}, {"uptime_s", 3.2}, {"oom_kill", false}});
  ASSERT_EQ(log.lines.size(), 1u);
  EXPECT_THAT(log.lines[0], HasSubstr(R"("level":"warning")"));
  EXPECT_THAT(
      log.lines[0],
      HasSubstr(R"("msg":"api[0] exited with status 1 after 3.2s","event":"exit","program":"api",)"
                R"("slot":0,"status":-1,"uptime_s":3.2,"oom_kill":false})"));
}

TEST(Format, LevelFiltersTheRecyclersOwnLinesButNeverWorkerOutput) {
  LogCapture log;
  init(Level::Warn, LogFormat::Text);
  info("not shown");
  warn("shown");
  output("api", 0, 1, Stream::Stdout, "worker line", false);
  EXPECT_FALSE(log.contains("not shown"));
  EXPECT_TRUE(log.contains("shown"));
  EXPECT_TRUE(log.contains("worker line"));
}

}  // namespace
}  // namespace recycler::log
