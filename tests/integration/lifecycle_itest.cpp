// The supervisor's lifecycle with real processes: restarts, crash loops,
// reloads, failed starts, signals, wrap mode, environment, allocator and users.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/un.h>

#include <csignal>
#include <cstdio>
#include <filesystem>

#include "supervisor/config/allocator.h"
#include "tests/support/itest.h"

namespace recycler::testing {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

TEST(Lifecycle, AFailingProgramRestartsWithTheNextGeneration) {
  RECYCLER_REQUIRE_CGROUPS();
  Sandbox sb;
  std::string cfg = sb.write("r.yaml", config_yaml(sb, R"(  flaky:
    command: "echo gen=$RECYCLER_GENERATION; exit 1"
    restart: {mode: on-failure, backoff: {initial: 100ms, max: 200ms}, crash_loop: {max: 50, within: 1m}}
)"));
  Recycler r({"run", "-c", cfg}, sb);
  for (const char* gen : {"gen=1", "gen=2", "gen=3"})
    ASSERT_TRUE(r.wait_for(std::string("flaky[0] out | ") + gen));
  EXPECT_TRUE(r.wait_for("flaky[0] exited with status 1 after"));
  r.signal(SIGTERM);
  EXPECT_EQ(r.exit_code(), 0);
}

TEST(Lifecycle, ACrashLoopMarksTheProgramFailedLoudlyAndRecyclerExits) {
  RECYCLER_REQUIRE_CGROUPS();
  Sandbox sb;
  std::string cfg = sb.write("r.yaml", config_yaml(sb, R"(  broken:
    command: "exit 3"
    restart: {mode: on-failure, backoff: {initial: 50ms, max: 100ms}, crash_loop: {max: 3, within: 1m}}
)"));
  Recycler r({"run", "-c", cfg}, sb);
  auto failed = r.wait_for("broken[0] FAILED: it exited 3 times within 1m");
  ASSERT_TRUE(failed);
  EXPECT_THAT(*failed, HasSubstr("error"));
  EXPECT_EQ(r.exit_code(), 1);
  EXPECT_EQ(r.count("broken[0] exited with status 3"), 3u);
  EXPECT_EQ(r.count("broken[0] started"), 3u);
}

// exit.when: any_failed: one program failing for good ends recycler, and
// the pod with it, though another still runs.
TEST(Lifecycle, WithExitWhenAnyFailedOneProgramFailingForGoodStopsTheRestAndExitsWithFailure) {
  RECYCLER_REQUIRE_CGROUPS();
  RECYCLER_HOST_ONLY();
  Sandbox sb;
  std::string cfg = sb.write("r.yaml", config_yaml(sb, R"(  serve:
    command: "echo serving; exec sleep 1000"
  broken:
    command: "exit 3"
    restart: {mode: never}
)",
                                                   "exit: {when: any_failed}\n"));
  Recycler r({"run", "-c", cfg}, sb);
  ASSERT_TRUE(r.wait_for("serve[0] out | serving"));
  EXPECT_TRUE(
      r.wait_for("broken[0] failed for good (exit.when: any_failed): stopping every "
                 "program; recycler exits with status 1"));
  EXPECT_EQ(r.exit_code(), 1);
  EXPECT_EQ(r.count("serve[0] stopped"), 1u) << "stopped, not left behind:\n" << r.output();
}

// Zombies among the processes whose parent is `pid` (its children that
// have exited and that nobody reaped).
size_t zombie_children(pid_t pid) {
  size_t n = 0;
  for (const auto& entry : fs::directory_iterator("/proc")) {
    std::string stat = read_text(entry.path().string() + "/stat");
    size_t close = stat.rfind(')');
    if (close == std::string::npos || close + 4 > stat.size()) continue;
    char state = stat[close + 2];
    pid_t ppid = static_cast<pid_t>(std::atoi(stat.c_str() + close + 4));
    if (state == 'Z' && ppid == pid) ++n;
  }
  return n;
}

// A container's entrypoint: recycler as PID 1 of its own pid namespace (as
// `podman run` and a pod start it; tests/container runs the real thing). The
// orphans of its workers come to it and are reaped; SIGQUIT (an image's
// StopSignal may be QUIT; tests/container stops it with SIGTERM), which the
// kernel drops for a PID 1 without a handler, stops every worker gracefully
// and ends it with status 0; one program failing for good (exit.when:
// any_failed) ends it with 1, so the orchestrator restarts the pod.
TEST(Lifecycle, AsPid1OfAContainerItReapsOrphansStopsOnSigquitAndFailsThePod) {
  RECYCLER_REQUIRE_CGROUPS();
  if (auto why = pid_namespace_skip()) GTEST_SKIP() << *why;
  Sandbox sb;
  // On v2 the delegated cgroup would hold unshare beside recycler, a
  // process of another pid namespace it cannot move (no internal processes):
  // worker cgroups from the top instead, as with a privileged container's.
  sb.use_absolute_root();
  std::string flag = sb.tmp() + "/orphan-done";
  // Each start leaves an orphan (its subshell exits at once) that exits
  // 300 ms later, after saying so.
  std::string cfg =
      sb.write("r.yaml", config_yaml(sb,
                                     "  web:\n    command: \"(sh -c 'sleep 0.3; touch " + flag +
                                         "' &); echo serving; exec sleep 1000\"\n",
                                     "exit: {when: any_failed}\n"));
  Recycler r(in_pid_namespace_args({"run", "-c", cfg}), in_pid_namespace(in_sandbox(sb)));
  EXPECT_TRUE(r.wait_for("(pid 1): cgroup")) << r.output();
  ASSERT_TRUE(r.wait_for("web[0] out | serving")) << r.output();
  pid_t recycler = child_of(r.pid());
  ASSERT_GT(recycler, 0);
  auto deadline = std::chrono::steady_clock::now() + scaled(10s);
  while (!fs::exists(flag) && std::chrono::steady_clock::now() < deadline) r.read_some(20ms);
  ASSERT_TRUE(fs::exists(flag)) << "the orphan never ran";
  // It has exited (or is about to): it must not stay a zombie of PID 1.
  while (zombie_children(recycler) > 0 && std::chrono::steady_clock::now() < deadline)
    r.read_some(20ms);
  EXPECT_EQ(zombie_children(recycler), 0u);
  ::kill(recycler, SIGQUIT);
  EXPECT_EQ(r.exit_code(scaled(10s)), 0) << r.output();
  EXPECT_EQ(r.count("SIGQUIT: stopping every program"), 1u) << r.output();
  EXPECT_EQ(r.count("web[0] stopped"), 1u) << r.output();

  // The pod of a program that fails for good fails.
  std::string broken = sb.write(
      "b.yaml", config_yaml(sb,
                            "  web:\n    command: \"exec sleep 1000\"\n"
                            "  broken:\n    command: \"exit 3\"\n    restart: {mode: never}\n",
                            "exit: {when: any_failed}\n"));
  Recycler b(in_pid_namespace_args({"run", "-c", broken}), in_pid_namespace(in_sandbox(sb)));
  EXPECT_EQ(b.exit_code(scaled(10s)), 1) << b.output();
  EXPECT_EQ(b.count("web[0] stopped"), 1u) << b.output();
}

// By default one program dead leaves recycler running the others.
TEST(Lifecycle, ByDefaultAProgramFailingForGoodLeavesTheOthersRunning) {
  RECYCLER_REQUIRE_CGROUPS();
  RECYCLER_HOST_ONLY();
  Sandbox sb;
  std::string cfg = sb.write("r.yaml", config_yaml(sb, R"(  serve:
    command: "echo serving; exec sleep 1000"
  broken:
    command: "echo broken; exit 3"
    restart: {mode: never}
)"));
  Recycler r({"run", "-c", cfg}, sb);
  ASSERT_TRUE(r.wait_for_count("] out | ", 2));
  ASSERT_TRUE(r.wait_for("broken[0] exited with status 3"));
  // Status answers while it runs: recycler is still there, serve too.
  Ran status = run_command({recycler_bin(), "status", "-c", cfg}, 10s);
  EXPECT_THAT(status.out, HasSubstr("serve[0]"));
  EXPECT_THAT(status.out, HasSubstr("running"));
  r.signal(SIGTERM);
  EXPECT_EQ(r.exit_code(), 0);
}

// exit.when: never: recycler stays once every program has exited.
TEST(Lifecycle, WithExitWhenNeverRecyclerStaysOnceEveryProgramHasExited) {
  RECYCLER_REQUIRE_CGROUPS();
  RECYCLER_HOST_ONLY();
  Sandbox sb;
  std::string cfg = sb.write("r.yaml", config_yaml(sb, R"(  once:
    command: "echo done"
    restart: {mode: on-failure}
)",
                                                   "exit: {when: never}\n"));
  Recycler r({"run", "-c", cfg}, sb);
  ASSERT_TRUE(
      r.wait_for("every program has exited and none will be restarted; recycler stays "
                 "(exit.when: never)"));
  Ran status = run_command({recycler_bin(), "status", "-c", cfg}, 10s);
  EXPECT_THAT(status.out, HasSubstr("once[0]"));
  r.signal(SIGTERM);
  EXPECT_EQ(r.exit_code(), 0);
}

TEST(Lifecycle, SighupRestartsChangedProgramsStopsRemovedOnesStartsNewOnesAndLeavesTheRest) {
  RECYCLER_REQUIRE_CGROUPS();
  Sandbox sb;
  auto config = [&](const std::string& programs) { return config_yaml(sb, programs); };
  std::string path = sb.write("r.yaml", config(R"(  keep:
    command: ["sleep", "1001"]
  change:
    command: ["sleep", "1002"]
  remove:
    command: ["sleep", "1003"]
)"));
  Recycler r({"run", "-c", path}, sb);
  std::map<std::string, pid_t> pid;
  std::smatch m;
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(r.wait_for(std::regex(R"((\w+)\[0\] started: pid (\d+))"), &m));
    pid[m[1]] = std::stoi(m[2]);
  }
  sb.write("r.yaml", config(R"(  keep:
    command: ["sleep", "1001"]
  change:
    command: ["sleep", "2002"]
  add:
    command: ["sleep", "1004"]
)"));
  r.signal(SIGHUP);
  ASSERT_TRUE(r.wait_for("reloaded: 1 unchanged, 1 restarted, 1 stopped, 1 started"));
  ASSERT_TRUE(r.wait_for_count("change[0] started: pid", 2));
  ASSERT_TRUE(r.wait_for_count("remove: stopped and removed", 1));
  ASSERT_TRUE(r.wait_for_count("add[0] started: pid", 1));
  EXPECT_TRUE(process_exists(pid["keep"])) << "an unchanged program is not touched";
  EXPECT_FALSE(process_exists(pid["change"]));
  EXPECT_FALSE(process_exists(pid["remove"]));
  EXPECT_FALSE(fs::exists(sb.worker_dir("remove", 0)));
  EXPECT_TRUE(fs::exists(sb.worker_dir("add", 0)));

  sb.write("r.yaml", config(R"(  keep:
    command: ["sleep", "1001"]
    limits: {memory_mx: 1GiB}
)"));
  r.signal(SIGHUP);
  EXPECT_TRUE(r.wait_for("unknown key \"memory_mx\" in programs.keep.limits"));
  EXPECT_TRUE(r.wait_for("reload failed: 1 error in"));
  EXPECT_TRUE(process_exists(pid["keep"])) << "an invalid config changes nothing";
  r.signal(SIGTERM);
  EXPECT_EQ(r.exit_code(), 0);
  EXPECT_FALSE(process_exists(pid["keep"]));
}

TEST(Lifecycle, AnExecFailureIsReportedAsAFailedStartWithItsReason) {
  RECYCLER_REQUIRE_CGROUPS();
  Sandbox sb;
  std::string script = sb.write("not-executable.sh", "echo hi\n");
  std::string cfg = sb.write("r.yaml", config_yaml(sb, R"(  missing:
    command: ["/nonexistent/program"]
    restart: {mode: never}
  denied:
    command: [")" + script + R"("]
    restart: {mode: never}
)"));
  Recycler r({"run", "-c", cfg}, sb);
  EXPECT_TRUE(r.wait_for_count(
      "missing[0] failed to start: /nonexistent/program: No such file or directory", 1));
  EXPECT_TRUE(r.wait_for_count("denied[0] failed to start: " + script + ": Permission denied", 1));
  EXPECT_EQ(r.exit_code(), 1);
  EXPECT_EQ(r.count("exited with"), 0u) << "not mistaken for a crash";
}

TEST(Lifecycle, ASecondSigintKillsAtOnce) {
  RECYCLER_REQUIRE_CGROUPS();
  Sandbox sb;
  std::string cfg = sb.write("r.yaml", config_yaml(sb, R"(  deaf:
    command: "trap '' INT TERM; echo ready; exec sleep 1000"
    stop: {timeout: 1h}
)"));
  Recycler r({"run", "-c", cfg}, sb);
  auto started = r.wait_for("deaf[0] started: pid");
  ASSERT_TRUE(started);
  ASSERT_TRUE(r.wait_for("deaf[0] out | ready"));
  r.signal(SIGINT);
  ASSERT_TRUE(r.wait_for("deaf[0] stopping"));
  r.signal(SIGINT);
  EXPECT_EQ(r.exit_code(5s), 130);
  EXPECT_TRUE(r.wait_for("second SIGINT: killing every worker now"));
  EXPECT_FALSE(process_exists(started_pid(*started)));
  EXPECT_FALSE(fs::exists(sb.worker_dir("deaf", 0)));
}

TEST(Lifecycle, WrapModeExitsWithTheCommandsOwnStatus) {
  RECYCLER_REQUIRE_CGROUPS();
  auto run = [](const std::string& script) {
    Sandbox sb;  // a cgroup of its own for each run, as systemd would give
    Recycler r(
        {"run", "--cgroup-root", sb.cgroup_root(), "--restart", "never", "--", "sh", "-c", script},
        sb);
    return r.exit_code();
  };
  EXPECT_EQ(run("exit 7"), 7);
  EXPECT_EQ(run("kill -9 $$"), 128 + SIGKILL);
}

TEST(Lifecycle, SigtermDuringStartUpStopsWhatStartedStartsNothingMoreAndLeavesNothing) {
  RECYCLER_REQUIRE_CGROUPS();
  Sandbox sb;
  // Enough programs that starting them all takes far longer than the test
  // needs to see the first one start and send SIGTERM.
  constexpr int kPrograms = 120;
  std::string programs;
  for (int i = 0; i < kPrograms; ++i)
    programs +=
        "  p" + std::to_string(i) + ": {command: [sleep, \"1000\"], restart: {mode: never}}\n";
  std::string cfg = sb.write("r.yaml", config_yaml(sb, programs));
  Recycler r({"run", "-c", cfg}, sb);
  ASSERT_TRUE(r.wait_for("p0[0] started: pid", 60s));
  r.signal(SIGTERM);
  auto sent = std::chrono::steady_clock::now();
  // Within a second (scaled): what started stops, nothing more starts.
  auto status = r.wait_exit(1s);
  ASSERT_TRUE(status) << "recycler still running 1 s after SIGTERM; output:\n" << r.output();
  auto took = std::chrono::duration_cast<Millis>(std::chrono::steady_clock::now() - sent);
  EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 0) << r.output();
  EXPECT_TRUE(r.wait_for("SIGTERM: stopping every program"));
  EXPECT_TRUE(r.wait_for("recycler stopped"));
  std::vector<pid_t> started;
  for (const std::string& line : r.lines())
    if (line.find("] started: pid") != std::string::npos) started.push_back(started_pid(line));
  EXPECT_LT(started.size(), static_cast<size_t>(kPrograms)) << "start-up ran to its end first";
  for (pid_t pid : started)
    EXPECT_FALSE(process_exists(pid)) << "pid " << pid << " outlived recycler";
  EXPECT_FALSE(fs::exists(sb.root_dir())) << "cgroups left behind";
  RecordProperty("stop_ms", static_cast<int>(took.count()));
  RecordProperty("started", static_cast<int>(started.size()));
}

// Where a wrap-mode run puts its worker: recycler-run/NAME.PID/NAME/0.
std::string wrapped_worker_dir(const Sandbox& sb, const Recycler& r, const std::string& name) {
  std::string root = sb.root_dir();
  std::string base = root.substr(0, root.rfind('/'));  // recycler's cgroup root's parent
  return base + "/recycler-run/" + name + "." + std::to_string(r.pid()) + "/" + name + "/0";
}

TEST(Lifecycle, TwoWrappedCommandsRunSideBySide) {
  RECYCLER_REQUIRE_CGROUPS();
  Sandbox sb1, sb2;
  Recycler a({"run", "--", "sh", "-c", "echo up; exec sleep 1000"}, sb1);
  Recycler b({"run", "--", "sh", "-c", "echo up; exec sleep 1000"}, sb2);
  ASSERT_TRUE(a.wait_for("sh[0] out | up"));
  ASSERT_TRUE(b.wait_for("sh[0] out | up"));
  std::string dir_a = wrapped_worker_dir(sb1, a, "sh"), dir_b = wrapped_worker_dir(sb2, b, "sh");
  EXPECT_TRUE(fs::exists(dir_a)) << dir_a;
  EXPECT_TRUE(fs::exists(dir_b)) << dir_b;
  a.signal(SIGTERM);
  b.signal(SIGTERM);
  EXPECT_EQ(a.exit_code(), 0);
  EXPECT_EQ(b.exit_code(), 0);
  EXPECT_FALSE(fs::exists(fs::path(dir_a).parent_path().parent_path()));
  EXPECT_FALSE(fs::exists(fs::path(dir_b).parent_path().parent_path()));
}

TEST(Lifecycle, AWrappedRunLeftBehindByACrashIsCleanedByTheNextOne) {
  RECYCLER_REQUIRE_CGROUPS();
  Sandbox sb;
  if (sb.v2())
    GTEST_SKIP() << "on v2 a wrapped run's cgroups live in its own delegated cgroup, which the "
                    "service manager removes with it";
  std::string dir;
  pid_t orphan = -1;
  {
    Recycler first({"run", "--", "sh", "-c", "sleep 1000 & echo orphan=$!; wait"}, sb);
    std::smatch m;
    ASSERT_TRUE(first.wait_for(std::regex("orphan=([0-9]+)"), &m));
    orphan = std::stoi(m[1]);
    dir = wrapped_worker_dir(sb, first, "sh");
    first.signal(SIGKILL);
    ASSERT_TRUE(first.wait_exit());
  }
  ASSERT_TRUE(process_exists(orphan));
  Recycler next({"run", "--", "true"}, sb);
  EXPECT_EQ(next.exit_code(), 0);
  EXPECT_THAT(next.output(), HasSubstr("found 1 stale worker cgroup under " +
                                       fs::path(dir).parent_path().parent_path().string()));
  EXPECT_TRUE(wait_gone(orphan));
  EXPECT_FALSE(fs::exists(dir));
}

TEST(Lifecycle, WrapModeWithAnUnknownCommandFailsAtOnce) {
  Recycler r({"run", "--", "no-such-command-anywhere"}, Recycler::Options{});
  EXPECT_EQ(r.exit_code(), 127);
  EXPECT_THAT(r.output(), HasSubstr("no-such-command-anywhere: command not found"));
}

TEST(Lifecycle, WorkersGetTheirEnvironmentThreadsAndSlot) {
  RECYCLER_REQUIRE_CGROUPS();
  Sandbox sb;
  std::string cfg = sb.write("r.yaml", config_yaml(sb, R"(  env:
    command: "echo FOO=$FOO OMP=$OMP_NUM_THREADS MKL=$MKL_NUM_THREADS P=$RECYCLER_PROGRAM S=$RECYCLER_SLOT G=$RECYCLER_GENERATION N=${NOTIFY_SOCKET:-unset}"
    env: {FOO: bar, MKL_NUM_THREADS: "1"}
    threads: 3
    instances: 2
    restart: {mode: never}
)"));
  Recycler r({"run", "-c", cfg}, sb);
  EXPECT_EQ(r.exit_code(), 0);
  // NOTIFY_SOCKET: recycler's own notify socket for the program, in its
  // runtime directory.
  std::string n = "N=/run/recycler/" + std::to_string(r.pid()) + "/env/notify";
  EXPECT_EQ(r.count("env[0] out | FOO=bar OMP=3 MKL=1 P=env S=0 G=1 " + n), 1u) << r.output();
  EXPECT_EQ(r.count("env[1] out | FOO=bar OMP=3 MKL=1 P=env S=1 G=1 " + n), 1u) << r.output();
}

// Not only the variables: ld.so really loads jemalloc into the worker.
TEST(Lifecycle, AllocatorPreloadsJemallocAndLimitsArenasInTheWorker) {
  RECYCLER_REQUIRE_CGROUPS();
  std::string jemalloc;
  for (const std::string& path :
       config::preload_candidates(*config::find_preload_library("jemalloc")))
    if (jemalloc.empty() && fs::is_regular_file(path)) jemalloc = path;
  if (jemalloc.empty())
    GTEST_SKIP() << "jemalloc is not installed (scripts/install-deps --test installs libjemalloc2)";
  Sandbox sb;
  std::string cfg = sb.write("r.yaml", config_yaml(sb, R"(  alloc:
    command: "echo ARENAS=$MALLOC_ARENA_MAX PRELOAD=$LD_PRELOAD; grep -c libjemalloc /proc/$$/maps"
    allocator: {preload: jemalloc, arena_max: 2}
    restart: {mode: never}
)"));
  Recycler r({"run", "-c", cfg}, sb);
  EXPECT_EQ(r.exit_code(), 0);
  EXPECT_EQ(r.count("alloc[0] out | ARENAS=2 PRELOAD=" + jemalloc), 1u) << r.output();
  // grep -c: how many of the shell's mappings are jemalloc's.
  std::smatch mapped;
  ASSERT_TRUE(r.wait_for(std::regex(R"(alloc\[0\] out \| ([0-9]+)$)"), &mapped));
  EXPECT_NE(mapped[1].str(), "0") << "jemalloc is not mapped into the worker";
}

TEST(Lifecycle, ALowFileLimitDoesNotCapTheWorkersAndTheyKeepIt) {
  RECYCLER_REQUIRE_CGROUPS();
  Sandbox sb;
  std::string cfg = sb.write("r.yaml", config_yaml(sb, R"yaml(  many:
    command: "echo nofile=$(ulimit -n); exec sleep 1000"
    instances: 40
  own:
    command: "echo nofile=$(ulimit -n); exec sleep 1000"
    rlimits: {nofile: 100}
)yaml"));
  Recycler::Options options;
  options.join_fds = sb.join_fds();
  options.rlimits = {{RLIMIT_NOFILE, 32, 4096}};  // 40 workers need far more than 32 fds
  Recycler r({"run", "-c", cfg}, std::move(options));
  ASSERT_TRUE(r.wait_for_count("] out | nofile=", 41, 20s));
  EXPECT_EQ(r.count("out | nofile=32"), 40u) << "workers get the limit recycler was given";
  EXPECT_EQ(r.count("own[0] out | nofile=100"), 1u) << "unless their config sets one";
  EXPECT_EQ(r.count("failed to start"), 0u);
  r.signal(SIGTERM);
  EXPECT_EQ(r.exit_code(), 0);
}

TEST(Lifecycle, AWorkerRunsAsTheConfiguredUser) {
  RECYCLER_REQUIRE_CGROUPS();
  Sandbox sb;
  std::string cfg = sb.write("r.yaml", config_yaml(sb, R"yaml(  unprivileged:
    command: "echo uid=$(id -u) gid=$(id -g)"
    user: nobody
    cwd: /tmp
    restart: {mode: never}
)yaml"));
  Recycler r({"run", "-c", cfg}, sb);
  EXPECT_TRUE(r.wait_for("unprivileged[0] out | uid=65534 gid="));
  EXPECT_EQ(r.exit_code(), 0);
}

TEST(Lifecycle, AWorkerRunningAsAnotherUserStillDiesWithRecycler) {
  RECYCLER_REQUIRE_CGROUPS();
  Sandbox sb;
  std::string cfg = sb.write("r.yaml", config_yaml(sb, R"(  unprivileged:
    command: ["sleep", "1000"]
    user: nobody
    cwd: /tmp
)"));
  Recycler r({"run", "-c", cfg}, sb);
  auto started = r.wait_for("unprivileged[0] started: pid");
  ASSERT_TRUE(started);
  r.signal(SIGKILL);
  ASSERT_TRUE(r.wait_exit());
  // Changing credentials clears PR_SET_PDEATHSIG: it must be set after them.
  EXPECT_TRUE(wait_gone(started_pid(*started))) << "the worker outlived a SIGKILLed recycler";
}

// systemd's side of Type=notify: a datagram socket recycler reports to.
TEST(Lifecycle, UnderSystemdRecyclerNotifiesReadyAndStoppingAndKeepsTheSocketFromWorkers) {
  RECYCLER_REQUIRE_CGROUPS();
  Sandbox sb;
  SystemdSocket systemd(sb.tmp() + "/notify.sock");
  ASSERT_TRUE(systemd.bound());
  std::string cfg = sb.write("r.yaml", config_yaml(sb, R"(  app:
    command: "echo worker sees NOTIFY_SOCKET=${NOTIFY_SOCKET:-unset}; exec sleep 1000"
)"));
  Recycler::Options options;
  options.join_fds = sb.join_fds();
  options.env = {"NOTIFY_SOCKET=" + sb.tmp() + "/notify.sock"};
  Recycler r({"run", "-c", cfg}, std::move(options));
  EXPECT_THAT(systemd.receive(), HasSubstr("READY=1"));
  // Not systemd's socket: recycler's own, where worker messages are recycler's to read.
  EXPECT_TRUE(r.wait_for("app[0] out | worker sees NOTIFY_SOCKET=/run/recycler/" +
                         std::to_string(r.pid()) + "/app/notify"));
  r.signal(SIGTERM);
  EXPECT_THAT(systemd.receive(), HasSubstr("STOPPING=1"));
  EXPECT_EQ(r.exit_code(), 0);
}

}  // namespace
}  // namespace recycler::testing
