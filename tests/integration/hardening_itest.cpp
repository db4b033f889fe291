// recycler against hostile and unlucky inputs, with the real binary: files
// planted by other users, workers that flood or keep their output pipes, a
// stalled log reader, strangers on the notify socket, pids faked in output,
// control characters, odd config files, processes that leave their cgroup.
// One test per defect; each fails without its fix.
#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <thread>

#include "supervisor/process/escapes.h"
#include "supervisor/notify/socket.h"
#include "tests/support/itest.h"

namespace recycler::testing {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using Clock = std::chrono::steady_clock;

constexpr uid_t kNobody = 65534;

std::string read_all(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// Defect 1: a timeline directory another user made first (the example's
// predictable /tmp path) is refused, and the worker runs without a timeline.
TEST(Hardening, ATimelineDirectoryAnotherUserMadeIsRefusedAndTheWorkerStillRuns) {
  RECYCLER_REQUIRE_CGROUPS();
  Sandbox sb;
  std::string tmp = sb.tmp() + "/tmp";
  ASSERT_EQ(::mkdir(tmp.c_str(), 01777), 0);
  ASSERT_EQ(::chmod(tmp.c_str(), 01777), 0);
  std::string theirs = tmp + "/recycler-timelines";
  ASSERT_EQ(::mkdir(theirs.c_str(), 0777), 0);
  ASSERT_EQ(::chown(theirs.c_str(), kNobody, kNobody), 0);
  std::string cfg = sb.write("r.yaml", config_yaml(sb, R"(  app:
    command: ["sleep", "1000"]
    timeline: {dir: )" + theirs + R"(}
)"));
  Recycler r({"run", "-c", cfg}, sb);
  ASSERT_TRUE(r.wait_for("app[0] started: pid"));
  auto refused = r.wait_for("app[0]: no timeline: ");
  ASSERT_TRUE(refused);
  EXPECT_THAT(*refused, HasSubstr(theirs + ": owned by uid 65534, not by recycler's user (uid 0); "
                                           "refusing to write there"));
  EXPECT_TRUE(fs::is_empty(theirs)) << "nothing written where another user could read or swap it";
  r.signal(SIGTERM);
  EXPECT_EQ(r.exit_code(), 0);
}

// Defect 1: root recycler never writes (or truncates, with keep: 0) through
// a symlink planted where a timeline file goes.
TEST(Hardening, ATimelineFileSymlinkedElsewhereIsNeverWrittenThrough) {
  RECYCLER_REQUIRE_CGROUPS();
  Sandbox sb;
  std::string dir = sb.tmp() + "/timelines";
  ASSERT_EQ(::mkdir(dir.c_str(), 0750), 0);
  std::string victim = sb.write("victim", "precious\n");
  fs::create_symlink(victim, dir + "/app.0.csv");
  std::string cfg = sb.write("r.yaml", config_yaml(sb, R"(  app:
    command: ["sleep", "1000"]
    sample_interval: 50ms
    timeline: {dir: )" + dir + R"(, keep: 0}
)"));
  Recycler r({"run", "-c", cfg}, sb);
  ASSERT_TRUE(r.wait_for("app[0] started: pid"));
  auto refused = r.wait_for("app[0]: no timeline: ");
  ASSERT_TRUE(refused);
  EXPECT_THAT(*refused, HasSubstr(dir + "/app.0.csv: a symlink; refusing to write through it"));
  r.signal(SIGTERM);
  EXPECT_EQ(r.exit_code(), 0);
  EXPECT_EQ(read_all(victim), "precious\n");
  EXPECT_TRUE(fs::is_symlink(dir + "/app.0.csv"));
}

// Defect 2: the main process exits while a daemon it left (outside the
// worker's session, recycler without cgroups) keeps writing into its output
// pipe. The exit ends the run at once, the slot restarts, SIGTERM is
// honoured, and the daemon gets EPIPE once recycler has closed the pipe.
TEST(Hardening, AWorkerWhoseDaemonKeepsWritingToItsPipeIsRestartedAndRecyclerStaysResponsive) {
  if (::geteuid() != 0)
    GTEST_SKIP() << "needs root to run recycler as the unprivileged user nobody";
  Sandbox sb;
  std::string cfg = sb.write("r.yaml", R"(programs:
  app:
    command: "setsid sh -c 'echo daemon=$$; exec timeout 60 yes >&2' & sleep 1; exit 0"
    restart: {mode: always, backoff: {initial: 100ms, max: 1s, reset_after: 60s}}
)");
  Recycler::Options o = as_nobody(sb);
  o.discard_lines_with = "app[0] err | ";  // the flood itself
  Recycler r({"run", "-c", cfg}, std::move(o));
  std::smatch m;
  ASSERT_TRUE(r.wait_for(std::regex("app\\[0\\] out \\| daemon=([0-9]+)"), &m));
  pid_t daemon = std::stoi(m[1]);
  ASSERT_TRUE(r.wait_for("app[0] exited with status 0 after", scaled(5s)));
  ASSERT_TRUE(r.wait_for("app[0] started: pid", scaled(5s))) << "the next generation, at once";
  auto signalled = Clock::now();
  r.signal(SIGTERM);
  EXPECT_EQ(r.exit_code(5s), 0);
  EXPECT_LT(Clock::now() - signalled, scaled(5s));
  EXPECT_GT(r.discarded(), 0u) << "the daemon's output was read while it lasted";
  // Its pipe is closed: the next write fails and `tr` (then `timeout`) ends.
  EXPECT_TRUE(wait_gone(daemon, 10s)) << "daemon pid " << daemon;
  if (process_exists(daemon)) ::kill(daemon, SIGKILL);
}

// Defect 4: nobody reads recycler's stderr (a paused `less`, a full pipe)
// while a worker floods its output. Supervision goes on: the leaking
// neighbour is recycled in time, again and again, with no OOM kill; every
// decision line is kept and the dropped worker output is counted.
TEST(Hardening, AStalledLogReaderDoesNotDelayRecycling) {
  RECYCLER_REQUIRE_CGROUPS();
  Sandbox sb;
  std::string cfg = sb.write("r.yaml", config_yaml(sb, R"(  chatty:
    command: ["yes", "chatter chatter chatter chatter"]
)" + leaking_neighbour()));
  Recycler::Options o = in_sandbox(sb);
  o.discard_lines_with = "chatty[0] out | ";
  Recycler r({"run", "-c", cfg}, std::move(o));
  ASSERT_TRUE(r.wait_for("leak[0] started: pid"));
  // From here on the test reads nothing until the leaking worker has been
  // replaced three times (watched in its cgroup, not in the log).
  std::set<pid_t> generations;
  std::string leak_dir = sb.worker_dir("leak", 0);
  auto deadline = Clock::now() + scaled(40s);
  while (generations.size() < 4 && Clock::now() < deadline) {
    for (pid_t p : cgroup_pids(leak_dir)) generations.insert(p);
    std::this_thread::sleep_for(10ms);  // polling the cgroup, bounded by the deadline
  }
  EXPECT_GE(generations.size(), 4u) << "recycler stopped recycling while its log was not read";
  EXPECT_EQ(oom_kills(sb, "leak"), 0u);
  // The reader is back: every decision was kept, each one in time, and the
  // worker output that had to go is counted.
  ASSERT_TRUE(r.wait_for("lines of worker output dropped while stderr's reader was not keeping up",
                         scaled(20s)));
  r.signal(SIGTERM);
  EXPECT_EQ(r.exit_code(20s), 0);
  EXPECT_GE(neighbour_recycles_in_time(r), 3u) << r.output().substr(0, 20000);
}

// The sender in a child process running as `uid`: 0 when the datagram went,
// else its errno.
int send_as(uid_t uid, const std::string& path, const std::string& data) {
  pid_t child = ::fork();
  if (child == 0) {
    if (::setgid(uid) != 0 || ::setuid(uid) != 0) ::_exit(255);
    UniqueFd fd(::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0));
    auto addr = notify::unix_address(path);
    if (!fd || !addr) ::_exit(254);
    ssize_t n = ::sendto(fd.get(), data.data(), data.size(), 0, addr->get(), addr->len);
    ::_exit(n < 0 ? errno : 0);
  }
  int status = 0;
  ::waitpid(child, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

// Defect 3: the notify socket was an abstract one, open to every local user.
// Now each program has its own, in a directory only its workers can reach.
TEST(Hardening, OnlyAProgramsOwnWorkersCanReachItsNotifySocket) {
  RECYCLER_REQUIRE_CGROUPS();
  auto python = python_bin();
  if (!python) GTEST_SKIP() << "needs Debian's python3 for a worker that reports requests";
  Sandbox sb;
  std::string script = sb.write("report.py", R"(import os, socket, time
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
s.sendto(b"RECYCLER_REQUESTS=3", os.environ["NOTIFY_SOCKET"])
time.sleep(1000)
)");
  std::string cfg = sb.write("r.yaml", config_yaml(sb, R"(  mine:
    command: ["sleep", "1000"]
  theirs:
    command: [")" + *python + R"(", ")" + script + R"("]
    user: nobody
    policies:
      - max_requests: {limit: 3}
)"));
  Recycler r({"run", "-c", cfg}, sb);
  // The worker, as nobody, reached its program's socket.
  ASSERT_TRUE(r.wait_for("theirs[0] recycle: 3 requests >= limit 3", scaled(20s)));
  std::string run = "/run/recycler/" + std::to_string(r.pid());
  struct stat st {};
  ASSERT_EQ(::stat(run.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0711u);
  ASSERT_EQ(::stat((run + "/mine").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0700u) << "its workers run as recycler's user";
  ASSERT_EQ(::stat((run + "/mine/notify").c_str(), &st), 0);
  EXPECT_TRUE(S_ISSOCK(st.st_mode));
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  ASSERT_EQ(::stat((run + "/theirs").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0710u) << "its workers' group may pass, nobody else";
  EXPECT_EQ(st.st_uid, 0u);
  EXPECT_EQ(st.st_gid, kNobody);
  ASSERT_EQ(::stat((run + "/theirs/notify").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0660u);
  EXPECT_EQ(st.st_uid, kNobody);
  // Another local user (daemon, uid 1) reaches neither.
  EXPECT_EQ(send_as(1, run + "/mine/notify", "RECYCLER_REQUESTS=1"), EACCES);
  EXPECT_EQ(send_as(1, run + "/theirs/notify", "RECYCLER_REQUESTS=1"), EACCES);
  // nor does the other program's worker user reach `mine`.
  EXPECT_EQ(send_as(kNobody, run + "/mine/notify", "RECYCLER_REQUESTS=1"), EACCES);
  r.signal(SIGTERM);
  EXPECT_EQ(r.exit_code(), 0);
  EXPECT_FALSE(fs::exists(run)) << "removed at exit";
}

// Defect 3: every datagram of a sender that is no worker cost a read of
// cgroup.procs in four hierarchies per live worker. A local process flooding
// the socket (root can reach any) now costs a lookup per datagram, and a
// leaking neighbour is recycled as on a quiet machine.
TEST(Hardening, AFloodOfForeignNotifyDatagramsDoesNotDelayTheMemoryPolicy) {
  RECYCLER_REQUIRE_CGROUPS();
  Sandbox sb;
  std::string cfg = sb.write("r.yaml", config_yaml(sb, R"(  idle:
    command: "echo socket=$NOTIFY_SOCKET; exec sleep 1000"
    instances: 100
    policies:
      - max_requests: {limit: 1000000}
)" + leaking_neighbour()));
  Recycler r({"run", "-c", cfg}, sb);
  std::smatch socket;
  ASSERT_TRUE(r.wait_for(std::regex(R"(idle\[0\] out \| socket=(\S+))"), &socket, scaled(20s)));
  auto addr = notify::unix_address(socket[1].str());
  ASSERT_TRUE(r.wait_for_count("started: pid", 101, scaled(20s)));
  ASSERT_TRUE(addr);
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> sent{0};
  auto flood_start = Clock::now();
  std::thread flood([&] {
    UniqueFd fd(::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
    const char msg[] = "RECYCLER_REQUESTS=1";
    while (!stop) {
      if (::sendto(fd.get(), msg, sizeof msg - 1, 0, addr->get(), addr->len) > 0)
        ++sent;
      else
        std::this_thread::yield();  // the socket's queue is full: recycler is behind
    }
  });
  std::set<pid_t> generations;
  std::string leak_dir = sb.worker_dir("leak", 0);
  auto deadline = Clock::now() + scaled(40s);
  while (generations.size() < 4 && Clock::now() < deadline) {
    for (pid_t p : cgroup_pids(leak_dir)) generations.insert(p);
    r.collect();
    std::this_thread::sleep_for(10ms);  // polling the cgroup, bounded by the deadline
  }
  stop = true;
  flood.join();
  EXPECT_GE(generations.size(), 4u);
  // What went is what recycler took off the socket's queue: it kept up with
  // 10,000 datagrams a second (the old lookup managed about 1,000).
  double seconds = std::chrono::duration<double>(Clock::now() - flood_start).count();
  EXPECT_GT(static_cast<double>(sent.load()) / seconds, 10000.0 * 1000 / scaled(1000ms).count())
      << sent.load() << " datagrams in " << seconds << " s";
  EXPECT_EQ(oom_kills(sb, "leak"), 0u);
  r.signal(SIGTERM);
  EXPECT_EQ(r.exit_code(20s), 0);
  EXPECT_GE(neighbour_recycles_in_time(r), 3u);
  EXPECT_EQ(r.count("idle[0] recycle"), 0u) << "a stranger's requests are not counted";
  // Rate-limited: one warning, then at most one more every 10 s the flood
  // went on (here it lasts until the neighbour's fourth generation: 30 s and
  // more on a slow machine); its last datagrams are read within a second.
  size_t warnings = r.count("notify socket of idle: ignored a message from pid");
  EXPECT_GE(warnings, 1u);
  EXPECT_LE(warnings, 1u + static_cast<size_t>((seconds + 1.0) / 10.0))
      << "warnings in a flood of " << seconds << " s";
}

// Defect 5: with requests.pattern and a (?<pid>...) group, every new number
// in the output added a table entry (and, with scope: process, a process to
// scan on every line). A worker printing 1,000,000 made-up pids now leaves
// recycler's memory where it was, and its neighbour is recycled in time.
TEST(Hardening, MadeUpPidsInAWorkersOutputNeitherGrowRecyclerNorSlowItDown) {
  RECYCLER_REQUIRE_CGROUPS();
  Sandbox sb;
  // The end of the flood comes through a FIFO: a line on its output could be
  // dropped (as it should be) if this test reads recycler's log too slowly.
  std::string fifo = sb.tmp() + "/done";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0) << std::strerror(errno);
  UniqueFd done(::open(fifo.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC));
  ASSERT_TRUE(done);
  // The flood goes on (the same million pids again) until the neighbour has
  // been recycled: on an idle machine one round ends in half a second, before
  // its first recycle, and would show nothing about slowing recycler down.
  std::string stop_file = sb.tmp() + "/stop";
  std::string script = sb.write("fake.sh", R"(while [ ! -e )" + stop_file + R"( ]; do
  seq 1000000 1999999 | sed 's/.*/<&> "GET \/ HTTP\/1.1" 200/'
done
echo done > )" + fifo + R"(
exec sleep 1000
)");
  std::string cfg = sb.write("r.yaml", config_yaml(sb, R"(  printer:
    command: ["sh", ")" + script + R"("]
    requests: {pattern: '<(?<pid>\d+)> "'}
    policies:
      - max_requests: {limit: 1000000000, scope: process}
)" + leaking_neighbour()));
  Recycler::Options o = in_sandbox(sb);
  o.discard_lines_with = "printer[0] out | <";
  o = with_honest_rss(std::move(o));
  Recycler r({"run", "-c", cfg}, std::move(o));
  ASSERT_TRUE(r.wait_for_count("started: pid", 2));
  uint64_t before = rss_kib(r.pid());
  EXPECT_TRUE(
      r.wait_for("printer[0]: its output names pid 1000000 as serving a request, which "
                 "is not one of its processes",
                 scaled(10s)));
  EXPECT_TRUE(r.wait_for("leak[0] recycle: anon", scaled(30s)))
      << "the neighbour was not recycled during the flood";
  sb.write("stop", "");
  ASSERT_TRUE(r.wait_readable(done.get(), scaled(120s))) << "the worker's flood never ended";
  uint64_t after = rss_kib(r.pid());
  EXPECT_LT(after, before + 16 * 1024)
      << "RSS " << before << " kB before, " << after << " kB after";
  r.signal(SIGTERM);
  EXPECT_EQ(r.exit_code(20s), 0);
  EXPECT_GE(neighbour_recycles_in_time(r), 1u);
  EXPECT_EQ(r.count("which is not one of its processes"), 1u) << "said once";
  EXPECT_EQ(r.count("printer[0] recycle"), 0u);
}

bool has_raw_control(const std::string& text) {
  return std::any_of(text.begin(), text.end(), [](char c) {
    auto u = static_cast<unsigned char>(c);
    return (u < 0x20 && u != '\n' && u != '\t') || u == 0x7f;
  });
}

// Defect 6: a worker's STATUS= text and a config file's keys reached the
// terminal raw: ESC sequences, a CR that overwrites the line, a forged line.
TEST(Hardening, AWorkersStatusAndAConfigsKeysReachTheTerminalEscaped) {
  RECYCLER_REQUIRE_CGROUPS();
  auto python = python_bin();
  if (!python) GTEST_SKIP() << "needs Debian's python3 for a worker that sends STATUS=";
  Sandbox sb;
  std::string script = sb.write("status.py", R"(import os, socket, time
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
s.sendto(b"STATUS=\x1b[2J\rowned", os.environ["NOTIFY_SOCKET"])
time.sleep(1000)
)");
  std::string cfg = sb.write("r.yaml", config_yaml(sb, R"(  app:
    command: [")" + *python + R"(", ")" + script + R"("]
    policies:
      - max_lifetime: {after: 1h}
)",
                                                   "log: {level: debug}\n"));
  Recycler r({"run", "-c", cfg}, sb);
  EXPECT_TRUE(r.wait_for("app[0] status: \\x1b[2J\\x0downed"));
  r.signal(SIGTERM);
  EXPECT_EQ(r.exit_code(), 0);
  EXPECT_FALSE(has_raw_control(r.output())) << r.output();

  std::string bad = sb.write("bad.yaml", "\"ab\\e[2J\\rc\\nbad.yaml:9:9: error: forged\": 1\n" +
                                             config_yaml(sb, "  app: {command: [\"true\"]}\n"));
  Recycler check({"check", "-c", bad}, Recycler::Options{});
  EXPECT_EQ(check.exit_code(), 2);
  EXPECT_THAT(check.output(),
              HasSubstr("unknown key \"ab\\x1b[2J\\x0dc\\x0abad.yaml:9:9: error: forged\""));
  EXPECT_FALSE(has_raw_control(check.output())) << check.output();
  EXPECT_EQ(check.lines().size(), 1u) << "no forged line: " << check.output();
}

// Defect 7: `check -c /dev/zero` read until memory ran out and a FIFO hung
// it (and a reload). Anything but a regular file of at most 16 MiB is an
// error naming the file, with exit status 2.
TEST(Hardening, AConfigThatIsADeviceAFifoOrHugeIsRefusedAtOnce) {
  Sandbox sb;
  Recycler zero({"check", "-c", "/dev/zero"}, Recycler::Options{});
  EXPECT_EQ(zero.exit_code(5s), 2);
  EXPECT_THAT(zero.output(),
              HasSubstr("/dev/zero: error: cannot read config: not a regular file: a character "
                        "device"));

  std::string fifo = sb.tmp() + "/fifo.yaml";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  Recycler check({"check", "-c", fifo}, Recycler::Options{});
  EXPECT_EQ(check.exit_code(5s), 2);
  EXPECT_THAT(check.output(), HasSubstr(fifo + ": error: cannot read config: not a regular file: "
                                               "a FIFO"));

  std::string big = sb.write("big.yaml", "programs: {}\n");
  fs::resize_file(big, (16 << 20) + 1);
  Recycler huge({"check", "-c", big}, Recycler::Options{});
  EXPECT_EQ(huge.exit_code(5s), 2);
  EXPECT_THAT(huge.output(), HasSubstr(big + ": error: cannot read config: larger than 16 MiB"));
}

// Defect 7: a reload (SIGHUP) of a config that became a FIFO hung the loop.
TEST(Hardening, AReloadOfAConfigThatBecameAFifoFailsAndTheRunningConfigStays) {
  RECYCLER_REQUIRE_CGROUPS();
  Sandbox sb;
  std::string cfg = sb.write("r.yaml", config_yaml(sb, "  app: {command: [sleep, \"1000\"]}\n"));
  Recycler r({"run", "-c", cfg}, sb);
  ASSERT_TRUE(r.wait_for("app[0] started: pid"));
  std::string fifo = sb.tmp() + "/next.yaml";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  ASSERT_EQ(::rename(fifo.c_str(), cfg.c_str()), 0);
  r.signal(SIGHUP);
  EXPECT_TRUE(r.wait_for(cfg + ": error: cannot read config: not a regular file: a FIFO"));
  EXPECT_TRUE(r.wait_for("reload failed: 1 error in " + cfg));
  r.signal(SIGTERM);
  EXPECT_EQ(r.exit_code(), 0) << "the loop was not stuck in the FIFO";
  EXPECT_EQ(r.count("app[0] started"), 1u);
}

// A shell line that moves the shell into the root cgroup of every cgroup
// hierarchy mounted here, as a root worker can.
std::string escape_all_cgroups() {
  std::string line;
  for (const cgroup::MountEntry& m : cgroup::parse_mountinfo(read_text("/proc/self/mountinfo")))
    if (m.fstype == "cgroup" || m.fstype == "cgroup2")
      line += "echo $$ > " + m.mount_point + "/cgroup.procs; ";
  return line;
}

bool in_cgroup(pid_t pid, const std::string& cgroup) {
  return read_text("/proc/" + std::to_string(pid) + "/cgroup").find(cgroup + "\n") !=
         std::string::npos;
}

// Defect 8: a root worker's child that writes itself into another cgroup
// survived recycler's stop, and nothing said so. recycler notices it (it is
// the subreaper of its workers' processes), says so once, and kills it when
// the worker stops.
TEST(Hardening, AProcessThatLeavesItsWorkersCgroupIsReportedAndKilledAtStop) {
  RECYCLER_REQUIRE_CGROUPS();
  Sandbox sb;
  std::string script = sb.write("escape.sh", "sh -c '" + escape_all_cgroups() +
                                                 "echo escaped=$$; exec sleep 1000' &\n"
                                                 "exec sleep 1000\n");
  std::string cfg = sb.write("r.yaml", config_yaml(sb, R"(  app:
    command: ["sh", ")" + script + R"("]
    stop: {timeout: 2s}
)"));
  Recycler r({"run", "-c", cfg}, sb);
  std::smatch m;
  ASSERT_TRUE(r.wait_for(std::regex("app\\[0\\] out \\| escaped=([0-9]+)"), &m));
  pid_t escaped = std::stoi(m[1]);
  EXPECT_FALSE(in_cgroup(escaped, sb.worker_cgroup("app", 0))) << "it left";
  // Noticed while the worker runs (a scan every EscapeTracker::kScanInterval).
  EXPECT_TRUE(r.wait_for("app[0]: pid " + std::to_string(escaped) + " (",
                         EscapeTracker::kScanInterval + scaled(10s)));
  r.signal(SIGTERM);
  EXPECT_EQ(r.exit_code(), 0);
  EXPECT_TRUE(wait_gone(escaped, 5s)) << "pid " << escaped << " outlived recycler";
  EXPECT_EQ(r.count("app[0]: killed pid " + std::to_string(escaped)), 1u) << r.output();
  if (process_exists(escaped)) ::kill(escaped, SIGKILL);
}

// Defect 8: the escapee goes when its worker's run ends, while recycler
// (and the worker's next run) go on.
TEST(Hardening, AProcessThatLeftItsCgroupIsKilledWhenItsWorkersRunEnds) {
  RECYCLER_REQUIRE_CGROUPS();
  Sandbox sb;
  std::string script = sb.write("escape.sh", "sh -c '" + escape_all_cgroups() +
                                                 "echo escaped=$$; exec sleep 1000' &\n"
                                                 "exec sleep 1000\n");
  std::string cfg = sb.write("r.yaml", config_yaml(sb, R"(  app:
    command: ["sh", ")" + script + R"("]
    restart: {mode: always, backoff: {initial: 100ms, max: 1s, reset_after: 60s}}
    policies:
      - max_lifetime: {after: 1s}
)"));
  Recycler r({"run", "-c", cfg}, sb);
  std::smatch m;
  ASSERT_TRUE(r.wait_for(std::regex("app\\[0\\] out \\| escaped=([0-9]+)"), &m));
  pid_t escaped = std::stoi(m[1]);
  // max_lifetime recycles the worker: its run ends, and with it the escapee.
  ASSERT_TRUE(r.wait_for("app[0] recycle:", scaled(10s)));
  EXPECT_TRUE(r.wait_for("app[0]: killed pid " + std::to_string(escaped), scaled(10s)));
  EXPECT_TRUE(wait_gone(escaped, 5s));
  ASSERT_TRUE(r.wait_for("app[0] started: pid", scaled(10s))) << "the next run";
  EXPECT_FALSE(r.wait_exit(0ms)) << "recycler runs on";
  r.signal(SIGTERM);
  EXPECT_EQ(r.exit_code(), 0);
  if (process_exists(escaped)) ::kill(escaped, SIGKILL);
}

}  // namespace
}  // namespace recycler::testing
