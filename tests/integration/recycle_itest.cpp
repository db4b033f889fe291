// Recycling in time, with real processes and real cgroups (v1 here, v2 in the
// VM): a leaking worker is recycled below its limit again and again and the
// kernel's OOM killer never acts; a spike is caught by the kernel fast path
// between samples; a replacement that starts over its limit backs off instead
// of looping; at most max_concurrent_recycles workers recycle at a time;
// requests reported on the notify socket are counted exactly, and only from
// the workers; each decision is a JSON event too.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <regex>

#include "supervisor/notify/socket.h"
#include "tests/support/itest.h"

namespace recycler::testing {
namespace {

using ::testing::HasSubstr;

// "leaky[0] recycle: anon 301 MiB > 300 MiB (memory policy)" -> 301 (MiB, rounded down).
std::vector<double> recycled_at_mib(const Recycler& r, const std::string& worker) {
  static const std::regex kLine(R"(recycle: anon ([0-9.]+) (MiB|GiB) > )");
  std::vector<double> out;
  for (const std::string& line : r.lines()) {
    if (line.find(worker + " recycle: ") == std::string::npos) continue;
    std::smatch m;
    if (!std::regex_search(line, m, kLine)) continue;
    double v = std::stod(m[1].str());
    out.push_back(m[2].str() == "GiB" ? v * 1024 : v);
  }
  return out;
}

TEST(Recycle, ALeakingWorkerIsRecycledBelowItsLimitAgainAndAgainWithoutOomKills) {
  RECYCLER_REQUIRE_CGROUPS();
  Sandbox sb;
  std::string cfg = sb.write("r.yaml", config_yaml(sb, R"(  leak:
    command: [")" + leaky_bin() + R"(", "--rate", "50MiB", "--step", "50", "--max", "1GiB"]
    limits: {memory_max: 512MiB}
    policies:
      - memory: {metric: anon, limit: 300MiB}
    stop: {timeout: 5s}
)"));
  Recycler r({"run", "-c", cfg}, sb);
  // 300 MiB at 50 MiB/s: a recycle every ~6 s, so five take the 30 s the
  // worker must live next to its limit without one OOM kill.
  ASSERT_TRUE(r.wait_for_count("leak[0] recycle: anon", 5, scaled(60s)));
  EXPECT_EQ(oom_kills(sb, "leak", 0), std::optional<uint64_t>(0));
  EXPECT_EQ(r.count("OOM"), 0u) << r.output();
  std::vector<double> at = recycled_at_mib(r, "leak[0]");
  ASSERT_GE(at.size(), 5u) << r.output();
  for (double mib : at) {
    // Over the limit, as the log prints it: to 0.01 MiB, so 300.004 MiB reads
    // "300" (seen in the v2 VM, where memory.high holds the worker there).
    EXPECT_GE(mib, 300.0);
    EXPECT_LE(mib, 330.0) << "recycled too late:\n" << r.output();
  }
  // Each recycle is a graceful stop and a fresh start through the normal path.
  EXPECT_GE(r.count("leak[0] started: pid"), 5u);
  EXPECT_THAT(r.output(), HasSubstr("SIGTERM, exiting"));
  r.signal(SIGTERM);
  EXPECT_EQ(r.exit_code(10s), 0);
}

TEST(Recycle, ASpikeIsCaughtByTheKernelFastPathBetweenSamples) {
  RECYCLER_REQUIRE_CGROUPS();
  Sandbox sb;
  // Samples every 60 s would see the worker long after the kernel killed it
  // (512 MiB at 200 MiB/s is 2.5 s): only the threshold notification can act.
  std::string cfg = sb.write("r.yaml", config_yaml(sb, R"(  spike:
    command: [")" + leaky_bin() + R"(", "--rate", "200MiB", "--step", "20", "--max", "1GiB"]
    limits: {memory_max: 512MiB}
    sample_interval: 60s
    policies:
      - memory: {metric: anon, limit: 300MiB}
    restart: {mode: never}
)"));
  Recycler r({"run", "-c", cfg}, sb);
  ASSERT_TRUE(r.wait_for("spike[0] started: pid"));
  ASSERT_TRUE(r.wait_for("spike[0] recycle: anon", scaled(20s)));
  std::vector<double> at = recycled_at_mib(r, "spike[0]");
  ASSERT_EQ(at.size(), 1u);
  EXPECT_LE(at[0], 330.0) << r.output();
  EXPECT_EQ(oom_kills(sb, "spike", 0), std::optional<uint64_t>(0));
  r.signal(SIGTERM);
  EXPECT_EQ(r.exit_code(10s), 0);
}

TEST(Recycle, AReplacementOverItsLimitAtStartBacksOffInsteadOfLooping) {
  RECYCLER_REQUIRE_CGROUPS();
  Sandbox sb;
  // Every start holds 96 MiB within a fraction of a second, over the 64 MiB
  // policy: each replacement trips it again long before min_uptime.
  std::string cfg = sb.write(
      "r.yaml",
      config_yaml(sb, R"(  heavy:
    command: [")" + leaky_bin() +
                          R"(", "--rate", "960MiB", "--step", "20", "--max", "96MiB", "--hold"]
    limits: {memory_max: 256MiB}
    sample_interval: 100ms
    min_uptime: 30s
    policies:
      - memory: {metric: anon, limit: 64MiB}
    restart: {backoff: {initial: 500ms, max: 2s}}
)"));
  Recycler r({"run", "-c", cfg}, sb);
  std::smatch m;
  static const std::regex kLoop(R"(next start waits (\S+) \(recycle loop (\d+)\))");
  std::vector<std::string> delays;
  for (int i = 1; i <= 4; ++i) {
    ASSERT_TRUE(r.wait_for(kLoop, &m, scaled(20s)));
    EXPECT_EQ(m[2].str(), std::to_string(i));
    delays.push_back(m[1].str());
  }
  // Exponential from restart.backoff.initial, capped at restart.backoff.max.
  EXPECT_THAT(delays, ::testing::ElementsAre("500ms", "1s", "2s", "2s"));
  r.signal(SIGTERM);
  EXPECT_EQ(r.exit_code(10s), 0);
}

TEST(Recycle, AtMostMaxConcurrentRecyclesOfAProgramRunAtATime) {
  RECYCLER_REQUIRE_CGROUPS();
  Sandbox sb;
  std::string cfg = sb.write(
      "r.yaml",
      config_yaml(sb, R"(  pool:
    instances: 3
    command: [")" + leaky_bin() +
                          R"(", "--rate", "320MiB", "--step", "20", "--max", "48MiB", "--hold"]
    limits: {memory_max: 256MiB}
    sample_interval: 100ms
    min_uptime: 0s
    max_concurrent_recycles: 1
    policies:
      - memory: {metric: anon, limit: 32MiB}
    # leaky ignores SIGWINCH: each recycle lasts the 300 ms of stop.timeout,
    # long enough for the other workers to trip their policy meanwhile.
    stop: {signal: WINCH, timeout: 300ms}
)"));
  Recycler r({"run", "-c", cfg}, sb);
  ASSERT_TRUE(r.wait_for_count("recycle: anon", 6, scaled(30s)));
  EXPECT_GE(r.count("waits its turn"), 1u) << r.output();
  // Between two recycles the first one's replacement has started: never two at once.
  static const std::regex kRecycle(R"((pool\[\d\]) recycle: )");
  std::optional<std::string> in_flight;
  for (const std::string& line : r.lines()) {
    std::smatch m;
    if (std::regex_search(line, m, kRecycle)) {
      EXPECT_FALSE(in_flight) << "recycled while " << *in_flight << " was still recycling:\n"
                              << r.output();
      in_flight = m[1].str();
    } else if (in_flight && line.find(*in_flight + " started: pid") != std::string::npos) {
      in_flight.reset();
    }
  }
  r.signal(SIGTERM);
  EXPECT_EQ(r.exit_code(10s), 0);
}

TEST(Recycle, RequestsReportedOnTheNotifySocketAreCountedExactly) {
  RECYCLER_REQUIRE_CGROUPS();
  Sandbox sb;
  // One request per 10 ms step, reported with RECYCLER_REQUESTS=1.
  std::string cfg = sb.write(
      "r.yaml",
      config_yaml(
          sb,
          R"(  server:
    command: [")" +
              leaky_bin() +
              R"(", "--rate", "1MiB", "--step", "10", "--max", "1MiB", "--hold", "--requests", "1"]
    policies:
      - max_requests: {limit: 30, jitter: 10}
    stop: {timeout: 5s}
)"));
  Recycler r({"run", "-c", cfg}, sb);
  static const std::regex kLine(R"(server\[0\] recycle: (\d+) requests >= limit (\d+))");
  std::smatch m;
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(r.wait_for(kLine, &m, scaled(20s)));
    int served = std::stoi(m[1].str()), limit = std::stoi(m[2].str());
    EXPECT_EQ(served, limit) << "evaluated on every report, so never past the limit";
    EXPECT_GE(limit, 30);
    EXPECT_LE(limit, 40);
  }
  r.signal(SIGTERM);
  EXPECT_EQ(r.exit_code(10s), 0);
}

TEST(Recycle, EachDecisionIsAJsonEventWithItsFigures) {
  RECYCLER_REQUIRE_CGROUPS();
  Sandbox sb;
  std::string cfg = sb.write("r.yaml", config_yaml(sb, R"(  leak:
    command: [")" + leaky_bin() + R"(", "--rate", "320MiB", "--step", "20", "--max", "1GiB"]
    limits: {memory_max: 256MiB}
    policies:
      - memory: {metric: anon, limit: 64MiB}
    restart: {mode: never}
)",
                                                   "log: {format: json}\n"));
  Recycler r({"run", "-c", cfg}, sb);
  auto line = r.wait_for("\"event\":\"recycle\"", scaled(20s));
  ASSERT_TRUE(line);
  EXPECT_THAT(*line, HasSubstr("\"msg\":\"leak[0] recycle: anon "));
  EXPECT_THAT(*line, HasSubstr("\"program\":\"leak\",\"slot\":0,\"pid\":"));
  EXPECT_THAT(*line, HasSubstr("\"policy\":\"memory\",\"action\":\"restart\""));
  EXPECT_THAT(*line, ::testing::ContainsRegex("\"reason\":\"anon [0-9.]+ MiB > 64 MiB\""));
  r.signal(SIGTERM);
  EXPECT_EQ(r.exit_code(10s), 0);
}

TEST(Recycle, NotifyMessagesFromOutsideTheWorkersAreDroppedAndSaidSo) {
  RECYCLER_REQUIRE_CGROUPS();
  Sandbox sb;
  std::string cfg = sb.write("r.yaml", config_yaml(sb, R"(  app:
    command: ["sh", "-c", "echo socket=$NOTIFY_SOCKET; exec sleep 1000"]
    policies:
      - max_requests: {limit: 5}
)"));
  Recycler r({"run", "-c", cfg}, sb);
  std::smatch m;
  static const std::regex kSocket(R"(app\[0\] out \| socket=(\S+))");
  ASSERT_TRUE(r.wait_for(kSocket, &m));
  // The test process is no worker: its requests must not count.
  for (int i = 0; i < 10; ++i)
    ASSERT_TRUE(notify::send_datagram(m[1].str(), "RECYCLER_REQUESTS=1"));
  ASSERT_TRUE(r.wait_for("notify socket of app: ignored a message from pid " +
                         std::to_string(::getpid()) +
                         ", which is not one of its workers (1 so far)"));
  // One warning for all ten (rate-limited); the worker was never recycled.
  r.signal(SIGTERM);
  EXPECT_EQ(r.exit_code(10s), 0);
  EXPECT_EQ(r.count("notify socket of app: ignored"), 1u) << r.output();
  EXPECT_EQ(r.count("app[0] recycle"), 0u) << r.output();
}

// Whether `dir`/`name` exists within `timeout` (inotify: no polling).
bool file_appears(const std::string& dir, const std::string& name, Millis timeout) {
  UniqueFd fd(::inotify_init1(IN_CLOEXEC));
  if (!fd || ::inotify_add_watch(fd.get(), dir.c_str(), IN_CREATE | IN_MOVED_TO) < 0) return false;
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!std::filesystem::exists(dir + "/" + name)) {
    auto left = std::chrono::duration_cast<Millis>(deadline - std::chrono::steady_clock::now());
    pollfd p{fd.get(), POLLIN, 0};
    if (left.count() <= 0 || ::poll(&p, 1, static_cast<int>(left.count())) <= 0) return false;
    char events[4096];
    if (::read(fd.get(), events, sizeof events) < 0) return false;
  }
  return true;
}

// Debian's systemd-notify with --no-block (or as older versions do) sends and
// exits at once: by the time recycler reads its datagram, its /proc entry (so
// its cgroup) may be gone. recycler is stopped while it sends, so that it
// surely is: the message still counts for the program whose socket it came to
// (it has one slot): STATUS= as sent, WATCHDOG=1 as the watchdog's ping. And
// as most workers send it (--ready, blocking): READY=1, and STATUS= in
// `recycler status`.
TEST(Recycle, SystemdNotifyMessagesCountAfterTheSenderHasExited) {
  RECYCLER_REQUIRE_CGROUPS();
  if (::access("/bin/systemd-notify", X_OK) != 0) GTEST_SKIP() << "no /bin/systemd-notify";
  Sandbox sb;
  // As root, systemd-notify sends with its parent's credentials; as another
  // user it can only send its own, and then exits.
  std::string shared = sb.tmp() + "/shared";
  ASSERT_EQ(::chmod(sb.tmp().c_str(), 0711), 0);
  ASSERT_EQ(::mkdir(shared.c_str(), 0777), 0);
  ASSERT_EQ(::chmod(shared.c_str(), 0777), 0);
  std::string cfg = sb.write(
      "r.yaml",
      config_yaml(
          sb,
          R"(  app:
    command: ["/bin/sh", "-c", "while [ ! -e )" +
              shared +
              R"(/go ]; do sleep 0.05; done; systemd-notify --no-block 'STATUS=sent while recycler was stopped'; systemd-notify --no-block WATCHDOG=1; touch )" +
              shared + R"(/sent; exec sleep 1000"]
    user: nobody
    cwd: /tmp
    watchdog: {timeout: 1s}
    stop: {timeout: 2s}
  talker:
    command: ["/bin/sh", "-c", "systemd-notify --ready --status='serving 3 models'; exec sleep 1000"]
)",
          "log: {level: debug}\n"));
  Recycler r({"run", "-c", cfg}, sb);
  ASSERT_TRUE(r.wait_for("app[0] started", scaled(10s)));
  r.signal(SIGSTOP);
  std::ofstream(shared + "/go").close();
  bool done = file_appears(shared, "sent", scaled(10s));
  r.signal(SIGCONT);
  ASSERT_TRUE(done) << "the worker never sent";
  EXPECT_TRUE(r.wait_for("app[0] status: sent while recycler was stopped", scaled(5s)))
      << r.output();
  // Armed by the WATCHDOG=1 of a sender that is gone, then silent: hung.
  EXPECT_TRUE(r.wait_for("app[0] recycle: hung: no WATCHDOG=1", scaled(5s))) << r.output();
  EXPECT_EQ(r.count("which is not one of its workers"), 0u) << r.output();
  // The way most workers send it: READY=1 and STATUS=, shown by status.
  EXPECT_EQ(r.count("talker[0] is ready (READY=1 from pid"), 1u) << r.output();
  Cli status = cli({"status", "-c", cfg, "talker"});
  EXPECT_THAT(status.out, HasSubstr("talker[0] status: serving 3 models")) << status.out;
}

}  // namespace
}  // namespace recycler::testing
