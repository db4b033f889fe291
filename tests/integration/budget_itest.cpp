// The whole box's budget (config budget:) with real workers in real cgroups
// (v1 here, v2 in the VM): three workers growing slowly under their own
// limits whose sum nears the budget, a spike that stays under it, and a
// real memory squeeze (a sibling cgroup held at memory.high, v2) read
// through PSI.
#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <csignal>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <regex>

#include "tests/support/itest.h"

namespace recycler::testing {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

// The kernel's OOM kills under a cgroup directory, its descendants included
// (v1 memory.oom_control's oom_kill counts the hierarchy's; v2
// memory.events' oom_kill does too).
std::optional<uint64_t> oom_kills_under(const std::string& dir, bool v2) {
  std::ifstream in(dir + (v2 ? "/memory.events" : "/memory.oom_control"));
  for (std::string key; in >> key;) {
    uint64_t n = 0;
    if (!(in >> n)) break;
    if (key == "oom_kill") return n;
  }
  return std::nullopt;
}

std::string xattr(const std::string& path, const char* name) {
  char value[16] = {};
  ssize_t n = ::getxattr(path.c_str(), name, value, sizeof value - 1);
  return n < 0 ? "" : std::string(value, static_cast<size_t>(n));
}

// slow and mid grow to a plateau (1 and 2 MiB/s, to 30 and 40 MiB), fast
// grows on at 6 MiB/s: their sum nears the budget's 160 MiB within 20 s, none
// near its own 256 MiB. The trend (window 12s) sees it coming; the box itself
// is held at 192 MiB.
std::string three_workers() {
  auto leaky = [](const std::string& rate, const std::string& more) {
    return "    command: [\"" + leaky_bin() + "\", \"--rate\", \"" + rate +
           "\", \"--step\", \"100\"" + more + "]\n    limits: {memory_max: 256MiB}\n" +
           "    min_uptime: 1s\n    restart: {mode: always, backoff: {initial: 100ms}}\n";
  };
  return "  slow:\n" + leaky("1MiB", ", \"--max\", \"30MiB\", \"--hold\"") +
         "    budget: {avoid: true}\n" + "  mid:\n" +
         leaky("2MiB", ", \"--max\", \"40MiB\", \"--hold\"") + "  fast:\n" + leaky("6MiB", "");
}

TEST(Budget, TheFastestGrowingWorkerIsRecycledGracefullyBeforeTheSumReachesTheBudget) {
  RECYCLER_REQUIRE_CGROUPS();
  Sandbox sb;
  std::string cfg = sb.write(
      "r.yaml", config_yaml(sb, three_workers(),
                            "budget: {limit: 160MiB, horizon: 30s, window: 12s, warmup: 1s, "
                            "cooldown: 2s, interval: 500ms}\n"));
  Recycler r({"run", "-c", cfg}, sb);
  ASSERT_TRUE(r.wait_for_count("[0] started: pid", 3));
  // The box: every worker's cgroup shares the root's hard limit.
  std::string root = sb.root_dir();
  {
    std::ofstream limit(root + "/" + sb.memory_max_file());
    limit << (192 << 20);
  }
  ASSERT_EQ(read_text(root + "/" + sb.memory_max_file()), std::to_string(192 << 20) + "\n");

  // The first choice, whichever it is.
  std::smatch m;
  ASSERT_TRUE(r.wait_for(std::regex(R"((\w+)\[0\] recycle: budget: workers current ([0-9.]+) MiB )"
                                    R"(of 160 MiB, trend crosses in \S+; recycling (\w+)\[0\]: )"
                                    R"(fastest-growing, [0-9.]+ MiB/min, [0-9.]+ MiB \(budget )"
                                    R"(policy\))"),
                         &m, 60s));
  EXPECT_EQ(m[1].str(), "fast");
  EXPECT_EQ(m[3].str(), "fast");
  EXPECT_LT(std::stod(m[2].str()), 160.0) << "before the sum reached the budget";
  // Gracefully: stopped as asked, then started again.
  EXPECT_TRUE(r.wait_for("fast[0] started: pid", scaled(20s)));
  EXPECT_EQ(r.count("slow[0] recycle"), 0u) << "slow is avoided and grows slowest";

  // What status says of it.
  Child status = spawn_cli({"status", "-c", cfg});
  std::string shown = read_until_eof(status.out.get(), 10s);
  EXPECT_THAT(shown, HasSubstr("budget: workers current "));
  EXPECT_THAT(shown, HasSubstr("of 160 MiB"));
  EXPECT_THAT(shown, HasSubstr("recycling fast[0]: fastest-growing"));
  ::waitpid(status.pid, nullptr, 0);

  // The killers' marks: systemd-oomd's and oomd's avoid on slow's cgroup
  // (cgroup v2; v1 takes extended attributes only when mounted with xattr).
  if (sb.v2()) {
    EXPECT_EQ(xattr(sb.worker_dir("slow", 0), "user.oomd_avoid"), "1");
    EXPECT_EQ(xattr(sb.worker_dir("slow", 0), "trusted.oomd_avoid"), "1");
    EXPECT_EQ(xattr(sb.worker_dir("fast", 0), "user.oomd_avoid"), "");
  }

  EXPECT_EQ(oom_kills_under(root, sb.v2()).value_or(99), 0u) << "no OOM kill in the box";
  EXPECT_EQ(r.count("OOM-killed"), 0u) << r.output();
  r.signal(SIGTERM);
  EXPECT_EQ(r.exit_code(scaled(10s)), 0);
}

TEST(Budget, ASpikeThatStaysUnderTheBudgetTriggersNothing) {
  RECYCLER_REQUIRE_CGROUPS();
  RECYCLER_HOST_ONLY();
  Sandbox sb;
  // Two steady workers of 40 MiB, and one that takes 50 MiB for a second and
  // gives it back, again and again: the sum peaks at 130 MiB of 160.
  std::string spike = "while :; do " + leaky_bin() +
                      " --rate 500MiB --step 20 --max 50MiB --hold & p=$!; sleep 1; kill $p; wait "
                      "$p; echo spiked; sleep 1; done";
  auto steady = [](const std::string& name) {
    return "  " + name + ":\n    command: [\"" + leaky_bin() +
           "\", \"--rate\", \"40MiB\", \"--step\", \"100\", \"--max\", \"40MiB\", \"--hold\"]\n";
  };
  std::string cfg = sb.write(
      "r.yaml",
      config_yaml(sb, steady("a") + steady("b") + "  spike:\n    command: \"" + spike + "\"\n",
                  "budget: {limit: 160MiB, horizon: 30s, window: 6s, warmup: 1s, "
                  "interval: 250ms}\n"));
  Recycler r({"run", "-c", cfg}, sb);
  ASSERT_TRUE(r.wait_for_count("spike[0] out | spiked", 8, scaled(60s)));
  EXPECT_EQ(r.count("budget:"), 1u) << "only the start-up line describing it:\n" << r.output();
  EXPECT_EQ(r.count(" recycle: "), 0u) << r.output();
  r.signal(SIGTERM);
  EXPECT_EQ(r.exit_code(scaled(10s)), 0);
}

// A memory cgroup with a limit that recycler starts in, as a pod's container:
// the sandbox's delegated cgroup on v2, one of the test's own on v1 (joined
// through options.join_fds, removed at the end).
struct ContainerCgroup {
  ContainerCgroup(Sandbox& sandbox, Recycler::Options& options) : sb(sandbox) {
    dir = fs::path(sb.root_dir()).parent_path().string();
    if (sb.v2()) return;
    dir += "/recycler-ctr-" + std::to_string(::getpid());
    ok = ::mkdir(dir.c_str(), 0755) == 0;
    if (ok)
      options.join_fds.emplace_back(::open((dir + "/cgroup.procs").c_str(), O_WRONLY | O_CLOEXEC));
  }
  ~ContainerCgroup() {
    if (!sb.v2() && ok) ::rmdir(dir.c_str());
  }
  void set_limit(uint64_t bytes) { std::ofstream(dir + "/" + sb.memory_max_file()) << bytes; }

  Sandbox& sb;
  std::string dir;
  bool ok = true;
};

// scope: container reads the cgroup recycler started in (a pod's container,
// here the sandbox's delegated cgroup), whose own limit a percentage is of.
TEST(Budget, ScopeContainerIsTheCgroupRecyclerRunsInAndAPercentageIsOfItsLimit) {
  RECYCLER_REQUIRE_CGROUPS();
  Sandbox sb;
  if (!sb.v2()) GTEST_SKIP() << "cgroup v2 only: here recycler starts in the test's own v1 cgroup";
  std::string container = fs::path(sb.root_dir()).parent_path().string();
  {
    std::ofstream max(container + "/memory.max");
    max << (256 << 20);
  }
  ASSERT_EQ(read_text(container + "/memory.max"), std::to_string(256 << 20) + "\n");
  std::string cfg = sb.write(
      "r.yaml", config_yaml(sb,
                            "  big:\n    command: [\"" + leaky_bin() +
                                "\", \"--rate\", \"96MiB\", \"--max\", \"96MiB\", \"--hold\"]\n"
                                "    min_uptime: 1s\n",
                            "budget: {scope: container, limit: 25%, for: 1s, interval: 500ms}\n"));
  Recycler r({"run", "-c", cfg}, sb);
  std::smatch m;
  EXPECT_TRUE(r.wait_for(std::regex(R"(big\[0\] recycle: budget: container current ([0-9.]+) MiB )"
                                    R"(> 64 MiB for 1s; recycling big\[0\]: )"),
                         &m, 30s));
  r.signal(SIGTERM);
  EXPECT_EQ(r.exit_code(scaled(10s)), 0);
}

// The container recycler runs in (here a memory cgroup with a limit that it
// starts in: the sandbox's delegated cgroup on v2, one of the test's own on
// v1): a percentage limit of a program without limits.memory_max is of the
// container's limit, and follows it when the container is resized in place;
// status shows the container's figures.
TEST(Container, APercentageIsOfTheContainersLimitAndFollowsAResize) {
  RECYCLER_REQUIRE_CGROUPS();
  Sandbox sb;
  Recycler::Options options = in_sandbox(sb);
  ContainerCgroup ctr(sb, options);
  ASSERT_TRUE(ctr.ok) << ctr.dir;
  const std::string& container = ctr.dir;
  ctr.set_limit(256 << 20);
  // v2: as Kubernetes (1.28+) sets it on a container, which recycler warns of.
  if (sb.v2()) std::ofstream(container + "/memory.oom.group") << 1;
  std::string cfg = sb.write(
      "r.yaml", config_yaml(sb,
                            "  big:\n    command: [\"" + leaky_bin() +
                                "\", \"--rate\", \"32MiB\"]\n"
                                "    sample_interval: 100ms\n    min_uptime: 1s\n"
                                "    policies:\n      - memory: {metric: rss, limit: 25%}\n",
                            ""));
  Recycler r({"run", "-c", cfg}, std::move(options));
  EXPECT_TRUE(r.wait_for("container: memory limit 256 MiB (" + container +
                         "): percentage limits are of it where a program sets no "
                         "limits.memory_max"))
      << r.output();
  std::smatch m;
  EXPECT_TRUE(r.wait_for(
      std::regex(R"(big\[0\] recycle: rss [0-9.]+ MiB > 64 MiB \(25% of 256 MiB\))"), &m, 20s))
      << r.output();
  Cli status = cli({"status", "-c", cfg});
  EXPECT_THAT(status.out, HasSubstr("container: ")) << status.out;
  EXPECT_THAT(status.out, HasSubstr(" of 256 MiB, 0 OOM kills")) << status.out;
  if (sb.v2()) {
    EXPECT_EQ(r.count("container: memory.oom.group is 1 (" + container +
                      "): an OOM kill at the container's 256 MiB takes every process in it, "
                      "recycler too"),
              1u)
        << r.output();
  }
  ctr.set_limit(512 << 20);
  EXPECT_TRUE(r.wait_for("container: memory limit 256 MiB -> 512 MiB (" + container +
                         "): percentage limits follow it"))
      << r.output();
  size_t before = r.count("> 128 MiB (25% of 512 MiB)");
  EXPECT_TRUE(r.wait_for(
      std::regex(R"(big\[0\] recycle: rss [0-9.]+ MiB > 128 MiB \(25% of 512 MiB\))"), &m, 20s))
      << r.output();
  EXPECT_EQ(before, 0u) << "the new limit came before the resize";
  r.signal(SIGTERM);
  EXPECT_EQ(r.exit_code(scaled(10s)), 0);
}

// With the default scope (the workers' sum), a percentage is of the limit of
// the container recycler runs in, as the README's recipe says, not of the
// host's memory (it was: 25% of this machine's memory never triggered).
TEST(Budget, ScopeWorkersPercentageIsOfTheContainersLimit) {
  RECYCLER_REQUIRE_CGROUPS();
  Sandbox sb;
  Recycler::Options options = in_sandbox(sb);
  ContainerCgroup ctr(sb, options);
  ASSERT_TRUE(ctr.ok) << ctr.dir;
  ctr.set_limit(256 << 20);
  std::string cfg = sb.write(
      "r.yaml", config_yaml(sb,
                            "  big:\n    command: [\"" + leaky_bin() +
                                "\", \"--rate\", \"96MiB\", \"--max\", \"96MiB\", \"--hold\"]\n"
                                "    min_uptime: 1s\n",
                            "budget: {limit: 25%, for: 1s, interval: 500ms}\n"));
  Recycler r({"run", "-c", cfg}, std::move(options));
  std::smatch m;
  EXPECT_TRUE(r.wait_for(std::regex(R"(big\[0\] recycle: budget: workers current ([0-9.]+) MiB )"
                                    R"(> 64 MiB for 1s; recycling big\[0\]: )"),
                         &m, 30s))
      << r.output();
  r.signal(SIGTERM);
  EXPECT_EQ(r.exit_code(scaled(10s)), 0);
}

// What the metrics endpoint says of the budget is the cgroup's own figure,
// and the text passes promtool.
TEST(Budget, ItsFigureLimitGrowthAndChoicesAreScrapedAndPassPromtool) {
  RECYCLER_REQUIRE_CGROUPS();
  RECYCLER_HOST_ONLY();
  Sandbox sb;
  std::string cfg = sb.write(
      "r.yaml",
      config_yaml(sb,
                  "  a:\n    command: [\"" + leaky_bin() +
                      "\", \"--rate\", \"64MiB\", \"--max\", \"64MiB\", \"--hold\"]\n",
                  "metrics: {listen: 127.0.0.1:0}\nbudget: {limit: 1GiB, interval: 200ms}\n"));
  Recycler r({"run", "-c", cfg}, sb);
  uint16_t port = metrics_port(r);
  ASSERT_NE(port, 0);
  const std::string used = R"(recycler_budget_used_bytes{scope="workers",metric="current"})";
  std::string body;
  EXPECT_TRUE(eventually(
      [&] {
        r.collect();
        body = get(port, "/metrics").body;
        return metric_value(body, used).value_or(0) >= 60.0 * (1 << 20);
      },
      20s))
      << body;
  EXPECT_EQ(metric_value(body, R"(recycler_budget_limit_bytes{scope="workers",metric="current"})"),
            1024.0 * (1 << 20));
  EXPECT_EQ(metric_value(body, R"(recycler_budget_recycles_total{scope="workers"})"), 0);
  EXPECT_TRUE(metric_value(
      body, R"(recycler_budget_growth_bytes_per_second{scope="workers",metric="current"})"));
  // The worker's cgroup's own figure, as of its last sample.
  std::string file = sb.v2() ? "memory.current" : "memory.usage_in_bytes";
  double cgroup = std::stod(read_text(sb.worker_dir("a", 0) + "/" + file));
  EXPECT_NEAR(metric_value(body, used).value_or(-1), cgroup, cgroup * 0.1);
  if (auto tool = promtool()) {
    auto [status, out] = promtool_check(*tool, body, sb.tmp());
    EXPECT_EQ(status, 0) << out << "\n" << body;
  } else {
    std::cout << "[  SKIPPED ] promtool check metrics: promtool is not installed here (Debian "
                 "package prometheus)\n";
  }
  r.signal(SIGTERM);
  EXPECT_EQ(r.exit_code(), 0);
}

// A process held at its cgroup's memory.high stalls in reclaim: PSI's "some"
// rises for the whole machine.
class Squeeze {
 public:
  explicit Squeeze(const Sandbox& sb) {
    dir_ = sb.v2() ? fs::path(sb.root_dir()).parent_path().parent_path().string() + "/squeeze." +
                         std::to_string(::getpid())
                   : "";
    if (dir_.empty() || ::mkdir(dir_.c_str(), 0755) != 0) return;
    std::ofstream(dir_ + "/memory.high") << (16 << 20);
    pid_ = ::fork();
    if (pid_ == 0) {
      std::ofstream(dir_ + "/cgroup.procs") << ::getpid();
      std::string leaky = leaky_bin();
      ::execl(leaky.c_str(), leaky.c_str(), "--rate", "400MiB", "--step", "50", "--max", "200MiB",
              "--hold", static_cast<char*>(nullptr));
      ::_exit(127);
    }
  }
  ~Squeeze() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
    if (!dir_.empty()) ::rmdir(dir_.c_str());
  }
  bool ok() const { return pid_ > 0; }

 private:
  std::string dir_;
  pid_t pid_ = -1;
};

TEST(Budget, MemoryPressureFromASqueezedSiblingCgroupRecyclesAWorker) {
  RECYCLER_REQUIRE_CGROUPS();
  Sandbox sb;
  if (!sb.v2()) GTEST_SKIP() << "cgroup v2 only: the squeeze is memory.high's, which v1 lacks";
  if (!fs::exists("/proc/pressure/memory")) GTEST_SKIP() << "this kernel has no PSI";
  std::string cfg = sb.write(
      "r.yaml", config_yaml(sb,
                            "  big:\n    command: [\"" + leaky_bin() +
                                "\", \"--rate\", \"64MiB\", \"--max\", \"64MiB\", \"--hold\"]\n"
                                "    min_uptime: 1s\n  small:\n    command: [\"" +
                                leaky_bin() +
                                "\", \"--rate\", \"40MiB\", \"--max\", \"40MiB\", \"--hold\"]\n"
                                "    min_uptime: 1s\n",
                            "budget: {scope: host, pressure: {some_avg10: 2%, for: 1s}, "
                            "choose: largest, interval: 500ms}\n"));
  Recycler r({"run", "-c", cfg}, sb);
  // leaky says what it holds every 32 MiB: both are at it.
  ASSERT_TRUE(r.wait_for_count("big[0] out | leaky: holding", 1, scaled(20s)));
  ASSERT_TRUE(r.wait_for_count("small[0] out | leaky: holding", 1, scaled(20s)));
  Squeeze squeeze(sb);
  ASSERT_TRUE(squeeze.ok()) << "cannot create a sibling cgroup beside " << sb.root_dir();
  std::smatch m;
  EXPECT_TRUE(r.wait_for(std::regex(R"(big\[0\] recycle: budget: host memory pressure some avg10 )"
                                    R"([0-9.]+% > 2% for 1s; recycling big\[0\]: largest)"),
                         &m, 60s));
  r.signal(SIGTERM);
  EXPECT_EQ(r.exit_code(scaled(10s)), 0);
}

}  // namespace
}  // namespace recycler::testing
