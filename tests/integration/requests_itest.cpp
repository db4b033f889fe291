// Where a max_requests policy's counts come from, with the real recycler:
// `check` says it for each program that has one, and `run` warns once per
// program when a busy worker has never had a request counted (event
// requests_unseen), and never for a program whose requests are counted.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/support/itest.h"

namespace recycler::testing {
namespace {

using ::testing::HasSubstr;

TEST(Requests, CheckSaysWhereEachMaxRequestsPolicyGetsItsCounts) {
  Sandbox sb;
  std::string cfg = sb.write("r.yaml", R"(programs:
  reported:
    command: ["sleep", "100"]
    policies:
      - max_requests: {limit: 100}
  matched:
    command: ["sleep", "100"]
    requests: {pattern: 'GET \S+ 200'}
    policies:
      - max_requests: {limit: 100, scope: process}
  plain:
    command: ["sleep", "100"]
    policies:
      - memory: {limit: 100MiB}
)");
  Recycler r({"check", "-c", cfg}, Recycler::Options{});
  EXPECT_EQ(r.exit_code(), 0);
  EXPECT_THAT(
      r.output(),
      HasSubstr("\nreported: max_requests counts only RECYCLER_REQUESTS=N reports on its "
                "notify socket (NOTIFY_SOCKET); a worker that sends none is never recycled "
                "by it: see examples/gunicorn/ (recycler_notify) or set requests.pattern\n"));
  EXPECT_THAT(r.output(),
              HasSubstr("\nmatched: max_requests counts requests from output lines matching "
                        "/GET \\S+ 200/ and RECYCLER_REQUESTS=N reports on its notify socket "
                        "(NOTIFY_SOCKET)\n"));
  EXPECT_EQ(r.count("plain: "), 1u) << "no max_requests, no line about counts\n" << r.output();
}

// A worker that keeps the CPU busy until it has used 3 s of CPU time (its own
// utime + stime, 100 ticks a second), says "burned" and then idles. `first`
// runs before it starts.
std::string burner(const std::string& first = "") {
  return R"(["awk", 'BEGIN { )" + first +
         R"( while (1) { for (i = 0; i < 200000; i++) x++; getline l < "/proc/self/stat"; )"
         R"(close("/proc/self/stat"); split(l, f, " "); if (f[14] + f[15] >= 300) break } )"
         R"(print "burned"; fflush(); system("exec sleep 100000") }'])";
}

TEST(Requests, ABusyWorkerWhoseRequestsNobodyCountsIsWarnedAboutOncePerProgram) {
  RECYCLER_REQUIRE_CGROUPS();
  Sandbox sb;
  std::string programs = "  silent:\n    command: " + burner() + R"(
    instances: 2
    sample_interval: 100ms
    policies:
      - max_requests: {limit: 10}
)" +
                         "  counted:\n    command: " + burner(R"(print "served"; fflush();)") + R"(
    requests: {pattern: '^served$'}
    sample_interval: 100ms
    policies:
      - max_requests: {limit: 1000}
)";
  std::string cfg = sb.write("r.yaml", config_yaml(sb, programs, "log: {format: json}\n"));
  Recycler r({"run", "-c", cfg}, sb);
  auto warning = r.wait_for("\"event\":\"requests_unseen\"", scaled(30s));
  ASSERT_TRUE(warning);
  EXPECT_THAT(*warning, ::testing::ContainsRegex(
                            R"("msg":"silent\[[01]\] has used [0-9.]+s of CPU time since it )"
                            R"(started and its max_requests policy has not counted a single )"
                            R"(request: it counts only RECYCLER_REQUESTS=N reports)"));
  EXPECT_THAT(*warning, HasSubstr("see examples/gunicorn/ (recycler_notify) or set "
                                  "requests.pattern\""));
  EXPECT_THAT(*warning, HasSubstr("\"program\":\"silent\""));
  EXPECT_THAT(*warning, HasSubstr("\"policy\":\"max_requests\""));
  EXPECT_THAT(*warning, ::testing::ContainsRegex(R"("cpu_s":[0-9.]+)"));
  // Every worker has used 3 s of CPU time: past the 2 s of the warning by
  // many 100 ms samples, so a second warning would have come by now.
  ASSERT_TRUE(r.wait_for_count("\"msg\":\"burned\"", 3, scaled(60s)));
  r.signal(SIGTERM);
  EXPECT_EQ(r.exit_code(10s), 0);
  EXPECT_EQ(r.count("requests_unseen"), 1u) << r.output();
  EXPECT_EQ(r.count("\"msg\":\"served\""), 1u) << "counted's request\n" << r.output();
  EXPECT_EQ(r.count("\"event\":\"recycle\""), 0u) << r.output();
}

// `run --help` once told workers to send RECYCLER_REQUEST=1; recycler knows
// only RECYCLER_REQUESTS=N, and such a worker was never recycled, silently.
TEST(Requests, AnUnknownRecyclerKeyIsWarnedAboutOncePerProgram) {
  RECYCLER_REQUIRE_CGROUPS();
  auto python = python_bin();
  if (!python) GTEST_SKIP() << "needs Debian's python3 for a worker that sends datagrams";
  Sandbox sb;
  // Five misspelt reports, then a right one that reaches the limit: once a
  // worker is recycled for it, recycler has read the five before it.
  std::string script = sb.write("typo.py", R"(import os, socket, time
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
for _ in range(5):
    s.sendto(b"RECYCLER_REQUEST=1", os.environ["NOTIFY_SOCKET"])
s.sendto(b"RECYCLER_REQUESTS=3", os.environ["NOTIFY_SOCKET"])
time.sleep(1000)
)");
  std::string cfg = sb.write("r.yaml", config_yaml(sb, R"(  typo:
    command: [")" + *python + R"(", ")" + script + R"("]
    instances: 2
    policies:
      - max_requests: {limit: 3}
)"));
  Recycler r({"run", "-c", cfg}, sb);
  ASSERT_TRUE(r.wait_for("typo[0] recycle: 3 requests >= limit 3", scaled(20s))) << r.output();
  ASSERT_TRUE(r.wait_for("typo[1] recycle: 3 requests >= limit 3", scaled(20s))) << r.output();
  r.signal(SIGTERM);
  EXPECT_EQ(r.exit_code(10s), 0);
  EXPECT_THAT(r.output(),
              ::testing::ContainsRegex(
                  R"(notify socket: typo\[[01]\]: pid [0-9]+ sent the key )"
                  R"("RECYCLER_REQUEST", which recycler does not know: it is ignored)"));
  EXPECT_EQ(r.count("which recycler does not know"), 1u)
      << "ten such reports from two workers, one warning\n"
      << r.output();
}

}  // namespace
}  // namespace recycler::testing
