// Request counting from output lines: plain patterns, pid attribution through
// a named group, bad patterns, and the lines real workers print (long ones,
// binary bytes).
#include "supervisor/notify/output_match.h"

#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <utility>

namespace recycler::notify {
namespace {

// gunicorn's access log as examples/gunicorn/gunicorn.conf.py formats it.
constexpr std::string_view kAccessLine =
    R"(127.0.0.1 <4242> "GET /items?id=3 HTTP/1.1" 200 17 3ms)";

// The matcher for a pattern the test knows to be valid; says why if it is not.
std::optional<OutputMatcher> compiled(const std::string& pattern) {
  std::string error;
  auto m = OutputMatcher::compile(pattern, &error);
  EXPECT_TRUE(m) << pattern << ": " << error;
  return m;
}

TEST(OutputMatcher, CountsMatchingLinesWithoutAPidGroup) {
  auto m = compiled(R"("(GET|POST) )");
  ASSERT_TRUE(m);
  EXPECT_FALSE(m->has_pid_group());
  auto hit = m->match(kAccessLine);
  EXPECT_TRUE(hit.matched);
  EXPECT_FALSE(hit.pid) << "no pid group, no attribution";
}

TEST(OutputMatcher, ThePidGroupAttributesALineToItsProcess) {
  auto m = compiled(R"(<(?<pid>\d+)> "(GET|POST) )");
  ASSERT_TRUE(m);
  EXPECT_TRUE(m->has_pid_group());
  auto hit = m->match(kAccessLine);
  EXPECT_TRUE(hit.matched);
  EXPECT_EQ(hit.pid, 4242);
}

TEST(OutputMatcher, ALineThatDoesNotMatchIsNotARequest) {
  auto m = compiled(R"(<(?<pid>\d+)> "(GET|POST) )");
  ASSERT_TRUE(m);
  auto miss = m->match("[2024-01-01 10:00:00 +0000] [4242] [INFO] Booting worker with pid: 4242");
  EXPECT_FALSE(miss.matched);
  EXPECT_FALSE(miss.pid);
  EXPECT_FALSE(m->match("").matched);
}

TEST(OutputMatcher, AnEmptyLineCanMatch) {
  auto m = compiled("^$");
  ASSERT_TRUE(m);
  EXPECT_TRUE(m->match("").matched);
}

TEST(OutputMatcher, AnOptionalPidGroupThatDidNotTakePartGivesNoPid) {
  auto m = compiled(R"(served(?: by (?<pid>\d+))?)");
  ASSERT_TRUE(m);
  auto hit = m->match("served");
  EXPECT_TRUE(hit.matched);
  EXPECT_FALSE(hit.pid);
  EXPECT_EQ(m->match("served by 17").pid, 17);
}

TEST(OutputMatcher, APidGroupThatHoldsNoValidPidGivesNoPid) {
  auto m = compiled(R"(worker=(?<pid>\w+))");
  ASSERT_TRUE(m);
  EXPECT_TRUE(m->match("worker=abc").matched);
  EXPECT_FALSE(m->match("worker=abc").pid);
  EXPECT_FALSE(m->match("worker=0").pid) << "pid 0 is no process";
  EXPECT_FALSE(m->match("worker=99999999999").pid) << "beyond pid_t";
  EXPECT_FALSE(m->match("worker=12345678901234567890").pid) << "longer than any pid";
}

TEST(OutputMatcher, DuplicatePidGroupsTakeTheOneThatMatched) {
  auto m = compiled(R"((?J)(?:a=(?<pid>\d+)|b=(?<pid>\d+)))");
  ASSERT_TRUE(m);
  EXPECT_TRUE(m->has_pid_group());
  EXPECT_EQ(m->match("b=31").pid, 31);
}

TEST(OutputMatcher, ABadPatternIsAnErrorWithItsOffset) {
  std::string error;
  EXPECT_FALSE(OutputMatcher::compile(R"("(GET|POST )", &error));
  EXPECT_EQ(error, "missing closing parenthesis at offset 11");
  EXPECT_FALSE(OutputMatcher::compile("a{2,1}", nullptr)) << "no error string wanted: still fails";
}

TEST(OutputMatcher, UtfModeCannotBeSwitchedOnFromThePattern) {
  std::string error;
  EXPECT_FALSE(OutputMatcher::compile("(*UTF)GET", &error))
      << "in UTF mode every non-UTF-8 output line would be a match error";
  EXPECT_FALSE(error.empty());
}

TEST(OutputMatcher, MatchesAtTheEndOfALongLine) {
  auto m = compiled(R"(<(?<pid>\d+)> "GET )");
  ASSERT_TRUE(m);
  std::string line(1 << 20, 'x');
  line += R"( <77> "GET / HTTP/1.1" 200)";
  auto hit = m->match(line);
  EXPECT_TRUE(hit.matched);
  EXPECT_EQ(hit.pid, 77);
}

TEST(OutputMatcher, BinaryBytesAndNulsAreMatchedAsBytes) {
  auto m = compiled(R"(\xff\x00(?<pid>\d+)$)");
  ASSERT_TRUE(m);
  std::string line("\x80garbage\xfe\xff", 10);
  line += std::string("\0", 1) + "123";
  auto hit = m->match(line);
  EXPECT_TRUE(hit.matched);
  EXPECT_EQ(hit.pid, 123);
  EXPECT_FALSE(m->match(std::string("\xc3\x28 invalid utf-8", 16)).matched);
}

TEST(OutputMatcher, CatastrophicBacktrackingEndsAsNoMatch) {
  auto m = compiled("^(a+)+$");
  ASSERT_TRUE(m);
  // 2^40 paths without a limit: finishing at all is the assertion that matters.
  EXPECT_FALSE(m->match(std::string(40, 'a') + "b").matched);
  EXPECT_TRUE(m->match(std::string(40, 'a')).matched);
}

TEST(OutputMatcher, AMovedMatcherKeepsWorking) {
  auto a = compiled(R"(<(?<pid>\d+)>)");
  ASSERT_TRUE(a);
  OutputMatcher b = std::move(*a);
  EXPECT_EQ(b.match("<5>").pid, 5);
  auto c = compiled("other");
  ASSERT_TRUE(c);
  *c = std::move(b);
  EXPECT_TRUE(c->has_pid_group());
  EXPECT_EQ(c->match("<6>").pid, 6);
}

}  // namespace
}  // namespace recycler::notify
