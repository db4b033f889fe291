// recycler as a systemd service, with systemd's side played by the test:
// the watchdog pings (WATCHDOG_USEC, NOTIFY_SOCKET at a test-owned datagram
// socket), and one cgroup root per recycler@ instance (--cgroup-root,
// RECYCLER_CGROUP_ROOT).
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <poll.h>

#include <csignal>
#include <filesystem>

#include "tests/support/itest.h"

namespace recycler::testing {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

// Datagrams until one contains `what`, for at most `timeout`: how many
// of them did, counting that one (0 when none came).
// WATCHDOG_USEC for an interval of `interval`, scaled like every wait here
// (RECYCLER_TEST_TIME_SCALE): a slow machine or the VM may turn recycler's
// loop some 150 ms late at start-up, which must not read as a blocked loop.
std::string watchdog_usec(Millis interval) {
  return "WATCHDOG_USEC=" + std::to_string(scaled(interval).count() * 1000);
}

size_t receive_until(SystemdSocket& s, const std::string& what, Millis timeout = 10s) {
  auto deadline = std::chrono::steady_clock::now() + scaled(timeout);
  while (std::chrono::steady_clock::now() < deadline) {
    std::string d =
        s.receive(std::chrono::duration_cast<Millis>(deadline - std::chrono::steady_clock::now()));
    if (d.find(what) != std::string::npos) return 1;
  }
  return 0;
}

TEST(Service, WatchdogPingsArriveEveryHalfIntervalWhileHealthy) {
  RECYCLER_REQUIRE_CGROUPS();
  Sandbox sb;
  SystemdSocket systemd(sb.tmp() + "/notify.sock");
  ASSERT_TRUE(systemd.bound());
  std::string cfg = sb.write("r.yaml", config_yaml(sb, R"(  app:
    command: ["sleep", "1000"]
    sample_interval: 100ms
)"));
  Recycler::Options options = in_sandbox(sb);
  options.env = {"NOTIFY_SOCKET=" + sb.tmp() + "/notify.sock", watchdog_usec(600ms)};
  Recycler r({"run", "-c", cfg}, std::move(options));
  ASSERT_TRUE(r.wait_for("systemd watchdog: WATCHDOG=1 every "));  // 300ms, scaled
  ASSERT_TRUE(r.wait_for("app[0] started"));
  // Five pings in a row, each within the watchdog interval of the last.
  size_t pings = 0;
  auto last = std::chrono::steady_clock::now();
  while (pings < 5) {
    std::string d = systemd.receive(scaled(600ms));
    ASSERT_FALSE(d.empty()) << "no datagram within the watchdog interval; " << pings
                            << " pings so far\n"
                            << r.output();
    if (d.find("WATCHDOG=1") == std::string::npos) continue;
    ++pings;
    auto now = std::chrono::steady_clock::now();
    EXPECT_LT(now - last, scaled(600ms));
    last = now;
  }
  EXPECT_EQ(r.count("not pinging"), 0u) << r.output();
  r.signal(SIGTERM);
  EXPECT_EQ(r.exit_code(), 0);
}

TEST(Service, ABlockedLoopSendsNoPingAndSaysWhy) {
  RECYCLER_REQUIRE_CGROUPS();
  Sandbox sb;
  SystemdSocket systemd(sb.tmp() + "/notify.sock");
  ASSERT_TRUE(systemd.bound());
  std::string cfg = sb.write("r.yaml", config_yaml(sb, R"(  app:
    command: ["sleep", "1000"]
)"));
  Recycler::Options options = in_sandbox(sb);
  options.env = {"NOTIFY_SOCKET=" + sb.tmp() + "/notify.sock", watchdog_usec(400ms)};
  Recycler r({"run", "-c", cfg}, std::move(options));
  ASSERT_TRUE(r.wait_for("app[0] started"));
  // Healthy right now: a ping sent after those queued so far (the first one
  // goes out at start-up, and a slow start-up, as in the VM, may have stopped
  // the pings since; recycler says "not pinging" once until it is healthy again).
  while (!systemd.receive(10ms).empty()) {
  }
  ASSERT_EQ(receive_until(systemd, "WATCHDOG=1"), 1u) << r.output();
  r.collect();
  const std::string blocked = "systemd watchdog: not pinging (the loop was blocked";
  const std::string healthy = "systemd watchdog: healthy again; pinging";
  size_t blocked_before = r.count(blocked), healthy_before = r.count(healthy);
  // Stopped, recycler's loop cannot turn: nothing may arrive meanwhile.
  r.signal(SIGSTOP);
  while (!systemd.receive(10ms).empty()) {  // what was sent before it stopped
  }
  EXPECT_EQ(systemd.receive(scaled(800ms)), "") << "a stopped recycler pinged";
  r.signal(SIGCONT);
  ASSERT_TRUE(r.wait_for_count(blocked, blocked_before + 1)) << r.output();
  // And once the loop turns on time again, the pings come back.
  ASSERT_TRUE(r.wait_for_count(healthy, healthy_before + 1)) << r.output();
  EXPECT_EQ(receive_until(systemd, "WATCHDOG=1"), 1u);
  r.signal(SIGTERM);
  EXPECT_EQ(r.exit_code(), 0);
}

TEST(Service, AWatchdogMeantForAnotherProcessIsIgnored) {
  RECYCLER_REQUIRE_CGROUPS();
  Sandbox sb;
  SystemdSocket systemd(sb.tmp() + "/notify.sock");
  ASSERT_TRUE(systemd.bound());
  std::string cfg = sb.write("r.yaml", config_yaml(sb, R"(  app:
    command: ["sleep", "1000"]
)"));
  Recycler::Options options = in_sandbox(sb);
  // WATCHDOG_PID names the test, not recycler.
  options.env = {"NOTIFY_SOCKET=" + sb.tmp() + "/notify.sock", "WATCHDOG_USEC=200000",
                 "WATCHDOG_PID=" + std::to_string(::getpid())};
  Recycler r({"run", "-c", cfg}, std::move(options));
  EXPECT_THAT(systemd.receive(), HasSubstr("READY=1"));
  // Three watchdog intervals without a ping.
  auto until = std::chrono::steady_clock::now() + 600ms;
  while (std::chrono::steady_clock::now() < until) {
    std::string d = systemd.receive(
        std::chrono::duration_cast<Millis>(until - std::chrono::steady_clock::now()));
    EXPECT_THAT(d, ::testing::Not(HasSubstr("WATCHDOG=1")));
  }
  EXPECT_EQ(r.count("systemd watchdog"), 0u) << r.output();
  r.signal(SIGTERM);
  EXPECT_EQ(r.exit_code(), 0);
}

// Two recycler@ instances of the same file: on v1 a relative cgroup_root sits
// under each controller's mount, so without a root each the second is refused.
TEST(Service, InstancesOfOneConfigGetACgroupRootEach) {
  RECYCLER_REQUIRE_CGROUPS();
  Sandbox sb;
  if (sb.v2())
    GTEST_SKIP() << "on v2 each instance's root is under its own delegated cgroup; this sandbox "
                    "gives the test one delegated cgroup";
  // One file each, the same but for its control socket (recycler@NAME
  // instances run NAME.yaml: their default sockets differ by name).
  auto config = [&](const std::string& name) {
    return sb.write(name + ".yaml",
                    config_yaml(sb, R"(  app:
    command: ["sleep", "1000"]
)",
                                "control: {socket: " + sb.tmp() + "/" + name + ".sock}\n"));
  };
  std::string cfg = config("a");
  std::string root_a = sb.cgroup_root() + "/a", root_b = sb.cgroup_root() + "/b";
  Recycler a({"run", "-c", cfg, "--cgroup-root", root_a}, in_sandbox(sb));
  Recycler::Options ob = in_sandbox(sb);
  ob.env = {"RECYCLER_CGROUP_ROOT=" + root_b};  // as recycler@.service sets it
  Recycler b({"run", "-c", config("b")}, std::move(ob));
  std::smatch m;
  ASSERT_TRUE(a.wait_for(std::regex(R"(app\[0\] started: pid (\d+))"), &m));
  pid_t pid_a = std::stoi(m[1]);
  ASSERT_TRUE(b.wait_for(std::regex(R"(app\[0\] started: pid (\d+))"), &m));
  pid_t pid_b = std::stoi(m[1]);
  std::string dir_a = sb.root_dir() + "/a/app/0", dir_b = sb.root_dir() + "/b/app/0";
  EXPECT_THAT(cgroup_pids(dir_a), ::testing::Contains(pid_a)) << dir_a;
  EXPECT_THAT(cgroup_pids(dir_b), ::testing::Contains(pid_b)) << dir_b;
  // The workers never inherit the variable.
  EXPECT_THAT(read_text("/proc/" + std::to_string(pid_b) + "/environ"),
              ::testing::Not(HasSubstr("RECYCLER_CGROUP_ROOT")));
  // A third on the file's own root runs; a fourth on a's root is refused.
  Recycler c({"run", "-c", config("c")}, in_sandbox(sb));
  ASSERT_TRUE(c.wait_for("app[0] started"));
  Recycler d({"run", "-c", config("d"), "--cgroup-root", root_a}, in_sandbox(sb));
  EXPECT_EQ(d.exit_code(), 1);
  for (Recycler* r : {&a, &b, &c}) {
    r->signal(SIGTERM);
    EXPECT_EQ(r->exit_code(), 0);
  }
  EXPECT_FALSE(fs::exists(dir_a));
}

TEST(Service, ABadCgroupRootIsAUsageErrorNamingWhereItCameFrom) {
  Recycler r({"run", "-c", "/nonexistent.yaml", "--cgroup-root", "a/../b"}, Recycler::Options{});
  EXPECT_EQ(r.exit_code(), 2);
  EXPECT_THAT(r.output(), HasSubstr("--cgroup-root: \".\" and \"..\" are not allowed"));
  Recycler::Options o;
  o.env = {"RECYCLER_CGROUP_ROOT=has space"};
  Recycler e({"run", "--", "true"}, std::move(o));
  EXPECT_EQ(e.exit_code(), 2);
  EXPECT_THAT(e.output(), HasSubstr("RECYCLER_CGROUP_ROOT: invalid character \" \""));
}

}  // namespace
}  // namespace recycler::testing
