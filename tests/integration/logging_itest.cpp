// What a worker writes reaches the log intact and can never break it: text
// and JSON formats, stderr marked, binary bytes, over-long lines.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <csignal>

#include "tests/support/itest.h"

namespace recycler::testing {
namespace {

using ::testing::HasSubstr;

TEST(Logging, TextFormatPrefixesEachLineWithProgramSlotAndStream) {
  RECYCLER_REQUIRE_CGROUPS();
  Sandbox sb;
  std::string cfg = sb.write("r.yaml", config_yaml(sb, R"(  talk:
    command: "echo to stdout; echo to stderr >&2; printf 'no newline at the end'"
    restart: {mode: never}
)"));
  Recycler r({"run", "-c", cfg}, sb);
  EXPECT_EQ(r.exit_code(), 0);
  EXPECT_EQ(r.count("talk[0] out | to stdout"), 1u);
  EXPECT_EQ(r.count("talk[0] err | to stderr"), 1u);
  EXPECT_EQ(r.count("talk[0] out | no newline at the end"), 1u) << r.output();
}

TEST(Logging, JsonFormatStaysOneObjectPerLineWhateverTheWorkerWrites) {
  RECYCLER_REQUIRE_CGROUPS();
  Sandbox sb;
  std::string cfg = sb.write("r.yaml", config_yaml(sb, R"(  noisy:
    command: |
      printf 'bin\000\377\033[31m"q"\\\n'; head -c 40000 /dev/zero | tr '\000' x; echo; echo done
    restart: {mode: never}
)",
                                                   "log: {format: json}\n"));
  Recycler r({"run", "-c", cfg}, sb);
  EXPECT_EQ(r.exit_code(), 0);
  ASSERT_FALSE(r.lines().empty());
  for (const std::string& line : r.lines()) {
    ASSERT_FALSE(line.empty());
    EXPECT_EQ(line.front(), '{') << line;
    EXPECT_EQ(line.back(), '}') << line;
    for (unsigned char c : line) ASSERT_GE(c, 0x20) << "raw control character in: " << line;
  }
  EXPECT_EQ(r.count(R"("stream":"stdout","msg":"bin\u0000\ufffd\u001b[31m\"q\"\\")"), 1u)
      << r.output();
  EXPECT_EQ(r.count(R"("partial":true)"), 2u) << "40000 bytes in pieces of 16 KiB";
  EXPECT_EQ(r.count(R"("msg":"done")"), 1u);
  EXPECT_EQ(r.count(R"("event":"exit")"), 1u);
}

}  // namespace
}  // namespace recycler::testing
