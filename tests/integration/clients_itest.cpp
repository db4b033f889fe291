// recycler against hostile clients of what it serves, with the real binary
// and real clients (tests/support/hostile_client, the CLI, raw sockets): the
// control socket, the metrics endpoint, and the files and sockets a config
// names. One test per defect of the second hardening round; each fails
// without its fix. Supervision must go on whatever a client does: where it
// can be stalled, a leaking neighbour (itest.h) must still be recycled in
// time.
#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <regex>
#include <thread>

#include "tests/support/itest.h"

namespace recycler::testing {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using Clock = std::chrono::steady_clock;

constexpr uid_t kNobody = 65534;

// hostile_client MODE ARGS..., as a process of its own.
Recycler::Options attacker() {
  Recycler::Options o;
  o.binary = hostile_client_bin();
  return o;
}

// A duration in seconds, scaled, as hostile_client's --seconds takes it.
std::string secs(Millis base) {
  return std::to_string(static_cast<double>(scaled(base).count()) / 1000.0);
}

// The number after `prefix` in the attacker's summary line.
long figure(Recycler& a, const std::string& prefix) {
  std::smatch m;
  if (!a.wait_for(std::regex(prefix + "([0-9]+)"), &m, scaled(60s))) return -1;
  return std::stol(m[1]);
}

// How long `recycler status` takes to answer.
Millis status_latency(const std::string& socket, int* code = nullptr) {
  auto start = Clock::now();
  Cli s = cli({"status", "--socket", socket});
  if (code) *code = s.code;
  EXPECT_THAT(s.out, HasSubstr("NAME")) << s.err;
  return std::chrono::duration_cast<Millis>(Clock::now() - start);
}

constexpr const char* kSleeper = "  app: {command: [sleep, \"1000\"]}\n";

class HostileClients : public ::testing::Test {
 protected:
  // recycler over `programs` (YAML under `programs:`, "{tmp}" standing for
  // the sandbox's directory; `top`: more top-level keys), its control socket
  // at socket(), once `started` is in its log. `honest_rss` for a test that
  // measures its RSS.
  Recycler& supervise(std::string programs, const std::string& started, bool honest_rss = false,
                      const std::string& top = "") {
    sb_.emplace();
    socket_ = sb_->tmp() + "/control.sock";
    for (size_t at; (at = programs.find("{tmp}")) != std::string::npos;)
      programs.replace(at, 5, sb_->tmp());
    std::string cfg = sb_->write("r.yaml", config_yaml(*sb_, programs, top));
    Recycler::Options o = in_sandbox(*sb_);
    if (honest_rss) o = with_honest_rss(std::move(o));
    r_ = std::make_unique<Recycler>(std::vector<std::string>{"run", "-c", cfg}, std::move(o));
    EXPECT_TRUE(r_->wait_for(started));
    return *r_;
  }
  // SIGTERM: recycler exits 0.
  void stop() {
    r_->signal(SIGTERM);
    EXPECT_EQ(r_->exit_code(20s), 0);
  }
  const Sandbox& sb() const { return *sb_; }
  const std::string& socket() const { return socket_; }
  size_t count(const std::string& needle) const { return r_->count(needle); }

  // A flood of pipelined `mode` requests (hostile_client) beside the leaking
  // neighbour, ended once the neighbour has been recycled three times. On the
  // way: another client is answered at once, and every recycle comes in
  // time, with no OOM kill.
  struct Flood {
    long answers = -1;   // what the flooder was answered
    double seconds = 0;  // how long the flood lasted
  };
  Flood flood_beside_the_neighbour(const std::string& mode) {
    Recycler& r = supervise(leaking_neighbour(), "leak[0] started: pid");
    auto start = Clock::now();
    Recycler flood({mode, "--socket", socket(), "--seconds", secs(60s)}, attacker());
    EXPECT_TRUE(flood.wait_for("hostile_client: flooding"));
    EXPECT_LT(status_latency(socket()), scaled(2s)) << "another client waited on the flood";
    EXPECT_TRUE(r.wait_for_count("leak[0] recycle: anon", 3, scaled(30s)))
        << "the neighbour was not recycled during the flood";
    EXPECT_LT(status_latency(socket()), scaled(2s));
    flood.signal(SIGTERM);  // the flood ends here, with its summary
    Flood f{figure(flood, "got "), std::chrono::duration<double>(Clock::now() - start).count()};
    EXPECT_EQ(oom_kills(sb(), "leak"), 0u);
    stop();
    EXPECT_GE(neighbour_recycles_in_time(r), 3u);
    return f;
  }

 private:
  std::optional<Sandbox> sb_;  // first: removes the cgroups after recycler is gone
  std::string socket_;
  std::unique_ptr<Recycler> r_;
};

// Defect 1: a client that pipelines status requests and reads the answers
// kept the server reading it in one loop turn forever: no sample, no kernel
// event, a leaking worker OOM-killed. Now it gets a few requests a turn,
// like everyone else.
TEST_F(HostileClients, APipelinedStatusFloodDelaysNeitherTheMemoryPolicyNorAnotherClient) {
  RECYCLER_REQUIRE_CGROUPS();
  EXPECT_GT(flood_beside_the_neighbour("pipeline-status").answers, 100)
      << "the flooder is served too";
}

// Defect 1: the same with reload requests, each a reread of the config and
// a log line. Reloads asked while one waits share it; one runs at most every
// half second.
TEST_F(HostileClients, PipelinedReloadsCoalesceAndDoNotDelayTheMemoryPolicy) {
  RECYCLER_REQUIRE_CGROUPS();
  RECYCLER_HOST_ONLY();
  Flood f = flood_beside_the_neighbour("pipeline-reload");
  EXPECT_GE(f.answers, 2) << "its reloads are answered";
  size_t reloads = count("reloaded: ");
  EXPECT_LE(reloads, 2 + static_cast<size_t>(f.seconds / 0.5)) << "in " << f.seconds << " s";
}

// Defect 2: each restart request naming a stopping slot 4,096 times queued
// 4,096 callbacks, run all at once when the stop ended. A slot named twice
// is acted on once, and a slot being restarted is restarted once however
// often it is asked.
TEST_F(HostileClients, ARestartStormOnAStoppingSlotCostsNothingAndRestartsItOnce) {
  RECYCLER_REQUIRE_CGROUPS();
  RECYCLER_HOST_ONLY();
  Recycler& r = supervise(R"(  slow:
    command: "trap '' TERM; echo up; exec sleep 1000"
    stop: {timeout: 4s}
)" + leaking_neighbour(),
                          "slow[0] out | up", true);
  ASSERT_TRUE(r.wait_for("leak[0] started: pid"));
  uint64_t before = rss_kib(r.pid());
  Recycler storm({"restart-storm", "--socket", socket(), "--target", "slow:0", "--repeat", "4096",
                  "--requests", "300"},
                 attacker());
  std::smatch m;
  ASSERT_TRUE(storm.wait_for(std::regex("answered ([0-9]+) of 300, results per answer at most "
                                        "([0-9]+), in "),
                             &m, scaled(60s)));
  EXPECT_EQ(m[1], "300");
  EXPECT_EQ(m[2], "1") << "slow:0 named 4096 times is one slot";
  uint64_t after = rss_kib(r.pid());
  EXPECT_LT(after, before + 32 * 1024) << "RSS " << before << " kB before, " << after << " kB";
  // The stop ends (SIGKILL after stop.timeout): one start, with the loop free.
  ASSERT_TRUE(r.wait_for("slow[0] stopped", scaled(20s)));
  ASSERT_TRUE(r.wait_for("slow[0] out | up", scaled(10s)));
  EXPECT_LT(status_latency(socket()), scaled(2s));
  EXPECT_EQ(r.count("slow[0] started: pid"), 2u) << "started once more, not once per request";
  EXPECT_EQ(oom_kills(sb(), "leak"), 0u);
  stop();
  EXPECT_GE(neighbour_recycles_in_time(r), 1u);
}

// Defect 8: `restart` then `stop` of the same slot: the stop answered
// "stopping" and the restart started it again anyway. The last operator
// command wins, and a start during an operator's stop starts it after.
TEST_F(HostileClients, StopAfterRestartLeavesTheSlotStopped) {
  RECYCLER_REQUIRE_CGROUPS();
  RECYCLER_HOST_ONLY();
  // job's stop lasts until the test lets it end (the file go), so that each
  // command below comes while it stops, however slowly the CLI starts.
  Recycler& r = supervise(R"(  job:
    command: "trap 'until [ -e {tmp}/go ]; do sleep 0.05; done; exit 0' TERM; echo up; while :; do sleep 0.2; done"
    stop: {timeout: 20s}
)" + std::string(kSleeper),
                          "job[0] out | up");
  std::string go = sb().tmp() + "/go";
  EXPECT_EQ(cli({"restart", "--socket", socket(), "job:0"}).code, 0);
  Cli stopping = cli({"stop", "--socket", socket(), "job:0"});
  EXPECT_EQ(stopping.code, 0) << stopping.err;
  EXPECT_THAT(stopping.out, HasSubstr("job:0: stopping"));
  sb().write("go", "");
  ASSERT_TRUE(r.wait_for("job[0] stopped", scaled(10s)));
  // A request after the stop is answered after anything the stop set off.
  Cli status = cli({"status", "--socket", socket(), "job"});
  EXPECT_EQ(status.code, 3) << status.out << status.err;
  EXPECT_THAT(status.out, HasSubstr("stopped"));
  EXPECT_EQ(r.count("job[0] started: pid"), 1u) << r.output();

  // And the other way round: a start during an operator's stop wins.
  ASSERT_EQ(::unlink(go.c_str()), 0);
  ASSERT_EQ(cli({"start", "--socket", socket(), "job:0"}).code, 0);
  ASSERT_TRUE(r.wait_for("job[0] out | up", scaled(10s)));
  EXPECT_EQ(cli({"stop", "--socket", socket(), "job:0"}).code, 0);
  Cli start = cli({"start", "--socket", socket(), "job:0"});
  EXPECT_THAT(start.out, HasSubstr("job:0: starting once stopped"));
  sb().write("go", "");
  ASSERT_TRUE(r.wait_for("job[0] stopped", scaled(10s)));
  EXPECT_TRUE(r.wait_for("job[0] out | up", scaled(10s)));
  stop();
}

// Defect 4: 16 connections that send a whole request and then neither read
// nor close held every place of the endpoint: a scraper got 0 of 48 answers.
TEST_F(HostileClients, ClientsThatTakeNoAnswerDoNotKeepAScraperOut) {
  RECYCLER_REQUIRE_CGROUPS();
  RECYCLER_HOST_ONLY();
  int port = free_port();
  ASSERT_GT(port, 0);
  supervise(kSleeper, "app[0] started: pid", false,
            "metrics: {listen: 127.0.0.1:" + std::to_string(port) + "}\n");
  Recycler hold({"hold-metrics", "--port", std::to_string(port), "--clients", "16", "--every",
                 "1.5", "--seconds", secs(12s)},
                attacker());
  ASSERT_TRUE(hold.wait_for("hostile_client: holding"));
  Recycler scraper({"scrape", "--port", std::to_string(port), "--requests", "48", "--every", "0.1"},
                   attacker());
  long answered = figure(scraper, "hostile_client: ");
  EXPECT_GE(answered, 46) << "of 48 scrapes";
  stop();
}

// Defect 5: one byte every few seconds kept a request open forever (each
// byte restarted its deadline), and 64 such clients locked root's own CLI
// out. A request must end 5 s after its first byte, and a newcomer evicts
// the oldest client that has no answer coming.
TEST_F(HostileClients, SlowRequestsEndOnTimeAndDoNotLockTheCliOut) {
  RECYCLER_REQUIRE_CGROUPS();
  RECYCLER_HOST_ONLY();
  supervise(kSleeper, "app[0] started: pid");
  Recycler slow(
      {"slow-bytes", "--socket", socket(), "--clients", "64", "--every", "1", "--seconds", "9"},
      attacker());
  ASSERT_TRUE(slow.wait_for("hostile_client: 64 connected"));
  Cli status = cli({"status", "--socket", socket()});
  EXPECT_EQ(status.code, 0) << status.err;
  std::smatch m;
  ASSERT_TRUE(
      slow.wait_for(std::regex("([0-9]+) closed by the server, after ([0-9.-]+) to ([0-9.-]+) s"),
                    &m, scaled(30s)));
  EXPECT_GE(std::stoi(m[1]), 63) << "each slow request ends (one gave its place to the CLI)";
  EXPECT_LT(std::stod(m[3]), 7.0) << "5 s after its first byte, not after its last";
  stop();
}

// Defect 6: a control socket in a directory anyone may write to (a sticky
// /tmp) could be bound first by another user, whose forged answers root's
// CLI printed. Such a directory is refused, and the CLI trusts only a
// server run by root, by itself or by the config file's owner.
TEST_F(HostileClients, AControlSocketAnotherUserCouldTakeIsRefusedAndAnImpostorIsNotBelieved) {
  RECYCLER_HOST_ONLY();
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to run an impostor as nobody";
  Sandbox sb;
  std::string shared = sb.tmp() + "/tmp";
  ASSERT_EQ(::mkdir(shared.c_str(), 0700), 0);
  ASSERT_EQ(::chmod(shared.c_str(), 01777), 0);
  std::string path = shared + "/api.sock";
  std::string cfg = sb.write("r.yaml", "control: {socket: " + path +
                                           "}\nprograms:\n  app: {command: [sleep, \"1000\"]}\n");
  Recycler check({"check", "-c", cfg}, Recycler::Options{});
  EXPECT_EQ(check.exit_code(), 2);
  EXPECT_THAT(check.output(), HasSubstr("r.yaml:1:19: error: control.socket: " + shared +
                                        ": writable by other users (mode 1777)"));
  // Another user's directory, writable by that user alone: refused by check
  // as by run (check looked at the mode bits only).
  std::string theirs = sb.tmp() + "/theirs";
  ASSERT_EQ(::mkdir(theirs.c_str(), 0755), 0);
  ASSERT_EQ(::chown(theirs.c_str(), kNobody, kNobody), 0);
  std::string theirs_cfg = sb.write("theirs.yaml", "control: {socket: " + theirs +
                                                       "/api.sock}\nprograms:\n  app: {command: "
                                                       "[sleep, \"1000\"]}\n");
  Recycler check_theirs({"check", "-c", theirs_cfg}, Recycler::Options{});
  EXPECT_EQ(check_theirs.exit_code(), 2);
  EXPECT_THAT(check_theirs.output(), HasSubstr("control.socket: " + theirs +
                                               ": owned by uid 65534, not by recycler's "
                                               "user (uid 0)"));

  // nobody binds the name first and answers like a recycler would.
  int ready[2];
  ASSERT_EQ(::pipe2(ready, O_CLOEXEC), 0);
  pid_t impostor = ::fork();
  if (impostor == 0) {
    if (::setgid(kNobody) != 0 || ::setuid(kNobody) != 0) ::_exit(1);
    UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    std::memcpy(a.sun_path, path.data(), path.size());
    if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
        ::listen(fd.get(), 8) != 0)
      ::_exit(2);
    ::close(ready[1]);
    for (;;) {
      UniqueFd c(::accept(fd.get(), nullptr, nullptr));
      const char forged[] =
          "{\"ok\":true,\"workers\":[{\"program\":\"FORGED\",\"slot\":0,\"state\":\"running\"}]}\n";
      char buf[4096];
      [[maybe_unused]] ssize_t n = ::read(c.get(), buf, sizeof buf);
      n = ::write(c.get(), forged, sizeof forged - 1);
    }
  }
  ::close(ready[1]);
  char byte;
  ASSERT_EQ(::read(ready[0], &byte, 1), 0) << "the impostor is listening";
  ::close(ready[0]);
  Cli status = cli({"status", "-c", cfg});
  EXPECT_EQ(status.code, 4);
  EXPECT_THAT(status.err, HasSubstr(path +
                                    " is served by uid 65534, which is neither root, you, "
                                    "nor the owner of " +
                                    cfg));
  EXPECT_THAT(status.out + status.err, ::testing::Not(HasSubstr("FORGED")));
  Cli restart = cli({"restart", "--socket", path, "app"});
  EXPECT_EQ(restart.code, 4) << "nothing is sent to it";
  // recycler itself refuses the place, rather than taking the impostor for a twin.
  Recycler run({"run", "-c", cfg}, Recycler::Options{});
  EXPECT_EQ(run.exit_code(10s), 2);
  EXPECT_THAT(run.output(), HasSubstr(": writable by other users (mode 1777)"));
  EXPECT_THAT(run.output(), ::testing::Not(HasSubstr("another recycler")));
  ::kill(impostor, SIGKILL);
  ::waitpid(impostor, nullptr, 0);
}

// Defect 7: clients that queue answers and read slowly made recycler hold
// them all (8 MiB a client, 64 clients). A client's next request waits until
// its last answer is taken, and all clients' unsent output has a cap.
TEST_F(HostileClients, ClientsThatQueueAnswersAndDoNotReadMakeRecyclerHoldLittle) {
  RECYCLER_REQUIRE_CGROUPS();
  RECYCLER_HOST_ONLY();
  // Many events in the ring: each `events` answer is large.
  Recycler& r = supervise(R"(  many:
    command: ["sleep", "1000"]
    instances: 200
)",
                          "many[0] started: pid", true);
  ASSERT_TRUE(r.wait_for_count("started: pid", 199, scaled(60s)));  // and the others
  uint64_t before = rss_kib(r.pid());
  Recycler hoard({"hoard-events", "--socket", socket(), "--clients", "60", "--requests", "40",
                  "--seconds", secs(4s)},
                 attacker());
  uint64_t peak = before;
  while (!hoard.wait_exit(0ms)) {
    peak = std::max(peak, rss_kib(r.pid()));
    r.collect();
    std::this_thread::sleep_for(20ms);  // sampling RSS while the clients hold their answers
  }
  EXPECT_LT(peak, before + 32 * 1024) << "RSS " << before << " kB before, peak " << peak << " kB";
  EXPECT_LT(status_latency(socket()), scaled(2s));
  stop();
}

// Defect 10: a follower that kept writing had every byte read (and dropped):
// seconds of recycler's CPU. A follower only listens; one that sends is closed.
TEST_F(HostileClients, AFollowerThatWritesIsClosed) {
  RECYCLER_REQUIRE_CGROUPS();
  RECYCLER_HOST_ONLY();
  supervise(kSleeper, "app[0] started: pid");
  Recycler writer({"follow-write", "--socket", socket(), "--seconds", secs(5s)}, attacker());
  std::smatch m;
  ASSERT_TRUE(
      writer.wait_for(std::regex("closed by the server after ([0-9.]+) s"), &m, scaled(20s)))
      << writer.output();
  EXPECT_LT(std::stod(m[1]), static_cast<double>(scaled(1s).count()) / 1000.0);
  stop();
}

// Defect 11: of two equal keys nlohmann keeps the last, so a request that
// read as `status` to a log or a proxy ran a reload.
TEST_F(HostileClients, ARequestWithAKeyGivenTwiceIsRefused) {
  RECYCLER_REQUIRE_CGROUPS();
  RECYCLER_HOST_ONLY();
  Recycler& r = supervise(kSleeper, "app[0] started: pid");
  UniqueFd fd = connect_unix(socket());
  ASSERT_TRUE(fd);
  std::string line = "{\"command\":\"status\",\"command\":\"reload\"}\n";
  ASSERT_EQ(::write(fd.get(), line.data(), line.size()), static_cast<ssize_t>(line.size()));
  std::string said;
  EXPECT_TRUE(closed_within(fd.get(), scaled(5s), &said));
  EXPECT_EQ(said, "{\"error\":\"key \\\"command\\\" given twice\",\"ok\":false}\n");
  EXPECT_LT(status_latency(socket()), scaled(2s));  // after anything the request set off
  EXPECT_EQ(r.count("reloaded"), 0u);
  stop();
}

// Defect 11: a refusal ("too many clients": every place holds a client being
// answered) came before the CLI's request had gone, and the CLI said "no
// answer" (exit 4). It reads what the server said: the reason, exit 1.
TEST_F(HostileClients, TheCliReportsARefusalWithItsReason) {
  RECYCLER_REQUIRE_CGROUPS();
  RECYCLER_HOST_ONLY();
  supervise(kSleeper, "app[0] started: pid");
  Recycler busy({"busy", "--socket", socket(), "--clients", "64", "--requests", "2000", "--seconds",
                 secs(20s)},
                attacker());
  ASSERT_TRUE(busy.wait_for("hostile_client: 64 busy", scaled(30s)));
  // A request larger than the socket's buffer: the CLI is still sending it
  // when the server refuses and closes.
  std::vector<std::string> args{"restart", "--socket", socket()};
  for (int i = 0; i < 4096; ++i) args.push_back(std::string(60, 'a') + std::to_string(i) + ":0");
  Cli refused = cli(args);
  EXPECT_EQ(refused.code, 1) << refused.err;
  EXPECT_THAT(refused.err, HasSubstr("too many clients"));
  busy.signal(SIGTERM);
  busy.wait_exit(10s);
  stop();
}

// A library planted where another user can write: nobody's file, mode
// 0666, in a 0777 directory. Its constructor leaves a mark when loaded.
struct PlantedLibrary {
  std::string path, mark;
  explicit PlantedLibrary(const Sandbox& sb) {
    std::string dir = sb.tmp() + "/open";
    EXPECT_EQ(::mkdir(dir.c_str(), 0700), 0);
    EXPECT_EQ(::chmod(dir.c_str(), 0777), 0);
    path = dir + "/libnvidia-ml.so.1";
    fs::copy_file(RECYCLER_CONSTRUCTOR_MARK_LIB, path);
    EXPECT_EQ(::chown(path.c_str(), kNobody, kNobody), 0);
    EXPECT_EQ(::chmod(path.c_str(), 0666), 0);
    mark = sb.tmp() + "/loaded";
  }
  Recycler::Options options() const {
    Recycler::Options o;
    o.env = {"RECYCLER_TEST_MARK=" + mark};
    return o;
  }
};

// Defect 3: `check` loaded gpu.nvml to see whether it works: a library
// another user could write ran its constructor as root. Validating a config
// runs no code, and `run` loads only a library no other user could write.
TEST_F(HostileClients, AnNvmlLibraryAnotherUserCouldWriteIsNeverLoaded) {
  RECYCLER_HOST_ONLY();
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to plant nobody's library";
  Sandbox sb;
  PlantedLibrary lib(sb);
  std::string cfg = sb.write("g.yaml", "gpu: {nvml: " + lib.path + R"(}
programs:
  train:
    command: [/bin/true]
    policies:
      - memory: {metric: gpu, limit: 90%}
)");
  Recycler check({"check", "-c", cfg}, lib.options());
  EXPECT_EQ(check.exit_code(), 2);
  EXPECT_THAT(check.output(),
              HasSubstr("g.yaml:6:9: error: programs.train.policies[0].memory: reads GPU memory "
                        "through NVML, which cannot be used: cannot load NVML: " +
                        sb.tmp() +
                        "/open: writable by other users (mode 0777) without the sticky "
                        "bit; refusing to load from there"));
  // Its directory made safe, the file itself is still nobody's and writable.
  ASSERT_EQ(::chmod((sb.tmp() + "/open").c_str(), 0755), 0);
  Recycler again({"check", "-c", cfg}, lib.options());
  EXPECT_EQ(again.exit_code(), 2);
  EXPECT_THAT(again.output(), HasSubstr(lib.path + ": owned by uid 65534, not by root or "
                                                   "recycler's user (uid 0); refusing to load it"));
  Recycler run({"run", "-c", cfg}, lib.options());
  EXPECT_EQ(run.exit_code(), 2);
  EXPECT_THAT(run.output(), HasSubstr(lib.path + ": owned by uid 65534"));
  EXPECT_FALSE(fs::exists(lib.mark)) << "the library's code ran";
}

// Defect 3: a preload another user could write went into a root worker
// without a word.
TEST_F(HostileClients, APreloadAnotherUserCouldWriteIsRefused) {
  RECYCLER_HOST_ONLY();
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to plant nobody's library";
  Sandbox sb;
  PlantedLibrary lib(sb);
  std::string cfg = sb.write("p.yaml", R"(programs:
  app:
    command: [/bin/true]
    allocator: {preload: )" + lib.path + R"(}
)");
  Recycler check({"check", "-c", cfg}, lib.options());
  EXPECT_EQ(check.exit_code(), 2);
  EXPECT_THAT(check.output(),
              HasSubstr("p.yaml:4:26: error: programs.app.allocator.preload: " + sb.tmp() +
                        "/open: writable by other users (mode 0777) without the sticky bit; "
                        "refusing to load from there"));
  Recycler run({"run", "-c", cfg}, lib.options());
  EXPECT_EQ(run.exit_code(), 2);
  EXPECT_FALSE(fs::exists(lib.mark)) << "a worker preloaded it";
}

// Defect 9: `listen: unix:` followed a directory nobody owns, with a symlink
// into a root-only directory: recycler removed a root service's socket there
// and bound its own. The socket's directory is checked as safe_dir.h says.
TEST_F(HostileClients, AListenSocketIsNeverBoundThroughADirectoryAnotherUserControls) {
  RECYCLER_REQUIRE_CGROUPS();
  RECYCLER_HOST_ONLY();
  Sandbox sb;
  std::string private_dir = sb.tmp() + "/service";
  ASSERT_EQ(::mkdir(private_dir.c_str(), 0700), 0);
  std::string victim = private_dir + "/svc.sock";
  UniqueFd service(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  std::memcpy(a.sun_path, victim.data(), victim.size());
  ASSERT_EQ(::bind(service.get(), reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  ASSERT_EQ(::listen(service.get(), 8), 0);
  struct stat before {};
  ASSERT_EQ(::stat(victim.c_str(), &before), 0);
  std::string theirs = sb.tmp() + "/theirs";
  ASSERT_EQ(::mkdir(theirs.c_str(), 0755), 0);
  ASSERT_EQ(::chown(theirs.c_str(), kNobody, kNobody), 0);
  fs::create_symlink(private_dir, theirs + "/link");
  ASSERT_EQ(::lchown((theirs + "/link").c_str(), kNobody, kNobody), 0);
  std::string cfg = sb.write("r.yaml", config_yaml(sb, R"(  web:
    command: ["sleep", "1000"]
    listen: ["unix:)" + theirs + R"(/link/svc.sock"]
)"));
  Recycler r({"run", "-c", cfg}, sb);
  EXPECT_TRUE(r.wait_for("web: listen unix:" + theirs + "/link/svc.sock: " + theirs +
                         ": owned by uid 65534, not by root or recycler's user (uid 0); refusing "
                         "to write there"));
  r.signal(SIGTERM);
  r.wait_exit(10s);
  struct stat after {};
  ASSERT_EQ(::stat(victim.c_str(), &after), 0) << "the service's socket is still there";
  EXPECT_EQ(after.st_ino, before.st_ino) << "and it is the service's own";
  EXPECT_TRUE(connect_unix(victim)) << "and the service still answers on it";
}

}  // namespace
}  // namespace recycler::testing
