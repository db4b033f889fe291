// The control socket and its CLI with the real binary, real workers and real
// sockets: `status` (text, --json, exit codes 0/3/4) while workers run, after
// a recycle and after a crash; restart/stop/start of one program; reload with
// its errors and its changes; `events --follow` seeing a live event; the
// default socket path, a second recycler of the same config, and the one
// running recycler found without -c; `logs` and `logs -f`; and hostile
// clients (another user, garbage, a stalled request, one that never reads)
// refused or dropped while supervision and other clients go on.
#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <nlohmann/json.hpp>

#include "tests/support/itest.h"

namespace recycler::testing {
namespace {

using ::testing::HasSubstr;
using Json = nlohmann::json;

Json status_json(const std::string& socket, const std::string& which = "") {
  std::vector<std::string> args{"status", "--socket", socket, "--json"};
  if (!which.empty()) args.push_back(which);
  Cli r = cli(args);
  Json j = Json::parse(r.out, nullptr, false);
  EXPECT_TRUE(j.is_array()) << r.out << r.err;
  return j;
}

// Reads `fd` until `needle` shows up or the deadline passes.
std::string read_until(int fd, const std::string& needle, Millis timeout) {
  std::string seen;
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (seen.find(needle) == std::string::npos && std::chrono::steady_clock::now() < deadline) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 100) <= 0) continue;
    char buf[4096];
    ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n <= 0) break;
    seen.append(buf, static_cast<size_t>(n));
  }
  return seen;
}

class Control : public ::testing::Test {
 protected:
  void SetUp() override {
    if (auto why = Sandbox::skip_reason()) GTEST_SKIP() << *why;
    sb_.emplace();
    socket_ = sb_->tmp() + "/ctl.sock";
  }
  std::string write_config(const std::string& programs) {
    return sb_->write("c.yaml",
                      config_yaml(*sb_, programs, "control: {socket: " + socket_ + "}\n"));
  }
  std::optional<Sandbox> sb_;
  std::string socket_;
};

constexpr const char* kTwoSleepers = R"(  web:
    command: ["sleep", "1000"]
    instances: 2
    stop: {timeout: 2s}
)";

// "recycler stauts" said only that an argument was not expected.
TEST(Cli, AMistypedCommandNamesTheOneMeant) {
  Recycler typo({"stauts"}, Recycler::Options{});
  EXPECT_EQ(typo.exit_code(), 2);
  EXPECT_THAT(typo.output(), HasSubstr("recycler: unknown command \"stauts\"; did you mean "
                                       "\"status\"?"));
  Recycler far({"frobnicate"}, Recycler::Options{});
  EXPECT_EQ(far.exit_code(), 2);
  EXPECT_THAT(far.output(), HasSubstr("recycler: unknown command \"frobnicate\"\nRun "
                                      "'recycler --help' for the commands."));
}

TEST_F(Control, StatusWhileWorkersRunAfterARecycleAndAfterACrash) {
  std::string cfg = write_config(std::string(kTwoSleepers) + R"(  crasher:
    command: "sleep 0.2; exit 3"
    restart: {backoff: {initial: 60s, max: 60s}}
)");
  Recycler r({"run", "-c", cfg}, *sb_);
  ASSERT_TRUE(r.wait_for("web[1] started: pid"));
  ASSERT_TRUE(r.wait_for("crasher[0] exited with status 3", scaled(10s)));
  ASSERT_TRUE(r.wait_for("crasher[0] restarting in"));

  // Text: one aligned line per slot; 3 because crasher is not running.
  Cli all = cli({"status", "-c", cfg});
  EXPECT_EQ(all.code, 3) << all.out << all.err;
  EXPECT_THAT(all.out, HasSubstr("NAME"));
  EXPECT_THAT(all.out, HasSubstr("web[0]"));
  EXPECT_THAT(all.out, HasSubstr("web[1]"));
  EXPECT_THAT(all.out, HasSubstr("crasher[0]"));
  EXPECT_THAT(all.out, HasSubstr("backoff"));
  Cli web = cli({"status", "-c", cfg, "web"});
  EXPECT_EQ(web.code, 0) << web.out << web.err;
  EXPECT_THAT(web.out, ::testing::Not(HasSubstr("crasher")));

  Json j = status_json(socket_, "web");
  ASSERT_EQ(j.size(), 2u);
  for (const Json& w : j) {
    EXPECT_EQ(w["program"], "web");
    EXPECT_EQ(w["state"], "running");
    EXPECT_TRUE(w["pid"].is_number_integer());
    EXPECT_EQ(w["generation"], 1);
    EXPECT_TRUE(w["uptime_s"].is_number());
    EXPECT_TRUE(w["memory"].is_object());
    EXPECT_TRUE(w["memory"]["current"].is_number_unsigned()) << w.dump();
    EXPECT_TRUE(w.contains("requests"));
    EXPECT_TRUE(w.contains("threads"));
  }
  Json crasher = status_json(socket_, "crasher")[0];
  EXPECT_EQ(crasher["state"], "backoff");
  EXPECT_TRUE(crasher["pid"].is_null());
  EXPECT_GE(crasher["restarts"]["crashes"].get<int>(), 1);

  // A recycle from the CLI goes through the program's controller.
  Cli recycle = cli({"recycle", "--socket", socket_, "web:1"});
  EXPECT_EQ(recycle.code, 0) << recycle.out << recycle.err;
  EXPECT_THAT(recycle.out, HasSubstr("web:1: recycling"));
  ASSERT_TRUE(r.wait_for("web[1] recycle: asked by recycler recycle (control policy)"));
  ASSERT_TRUE(r.wait_for("web[1] started: pid", scaled(10s)));
  Json after = status_json(socket_, "web:1");
  ASSERT_EQ(after.size(), 1u);
  EXPECT_EQ(after[0]["generation"], 2);
  EXPECT_EQ(after[0]["restarts"]["recycles"], 1);
  EXPECT_EQ(after[0]["last_recycle_reason"], "asked by recycler recycle");
  EXPECT_EQ(after[0]["state"], "running");

  r.signal(SIGTERM);
  EXPECT_EQ(r.exit_code(scaled(10s)), 0);
  Cli gone = cli({"status", "-c", cfg});
  EXPECT_EQ(gone.code, 4) << gone.out << gone.err;
  EXPECT_THAT(gone.err, HasSubstr("cannot reach recycler"));
}

TEST_F(Control, RestartStopAndStartOneProgram) {
  std::string cfg = write_config(std::string(kTwoSleepers) + R"(  api:
    command: ["sleep", "1000"]
    stop: {timeout: 2s}
)");
  Recycler r({"run", "-c", cfg}, *sb_);
  ASSERT_TRUE(r.wait_for_count("started: pid", 3));

  Cli stop = cli({"stop", "--socket", socket_, "web"});
  EXPECT_EQ(stop.code, 0) << stop.err;
  ASSERT_TRUE(r.wait_for_count("] stopped", 2, scaled(10s)));
  Json stopped = status_json(socket_, "web");
  for (const Json& w : stopped) EXPECT_EQ(w["state"], "stopped");
  EXPECT_EQ(cli({"status", "--socket", socket_, "web"}).code, 3);
  EXPECT_EQ(cli({"status", "--socket", socket_, "api"}).code, 0) << "the other program runs on";

  // Every slot stopped by the operator: recycler stays to start them again.
  Cli stop_api = cli({"stop", "--socket", socket_, "api"});
  EXPECT_EQ(stop_api.code, 0);
  ASSERT_TRUE(r.wait_for("api[0] stopped", scaled(10s)));
  Cli start = cli({"start", "--socket", socket_, "web", "api"});
  EXPECT_EQ(start.code, 0) << start.err;
  EXPECT_THAT(start.out, HasSubstr("web:0: started"));
  EXPECT_TRUE(r.wait_for("api[0] started: pid", scaled(10s)));
  EXPECT_FALSE(r.wait_exit(0ms).has_value());
  EXPECT_EQ(cli({"status", "--socket", socket_}).code, 0);

  Cli restart = cli({"restart", "--socket", socket_, "api"});
  EXPECT_EQ(restart.code, 0) << restart.err;
  ASSERT_TRUE(r.wait_for("api[0] started: pid", scaled(10s)));
  Json api = status_json(socket_, "api");
  EXPECT_EQ(api[0]["generation"], 3);
  EXPECT_EQ(api[0]["state"], "running");

  // top: not a terminal here, so plain text, once per refresh, and it stops by itself.
  Cli top = cli({"top", "--socket", socket_, "-n", "2", "--interval", "0.1"});
  EXPECT_EQ(top.code, 0) << top.err;
  EXPECT_EQ(top.out.find('\x1b'), std::string::npos) << "no escapes when not a terminal";
  size_t views = 0;
  for (size_t at = 0;
       (at = top.out.find("recycler: 2 programs, 3 workers running", at)) != std::string::npos;
       ++at)
    ++views;
  EXPECT_EQ(views, 2u) << top.out;
  EXPECT_THAT(top.out, HasSubstr("api[0]"));
  // Under the table, the last events: the restart just made among them.
  EXPECT_THAT(top.out, ::testing::ContainsRegex("last events:\n(.*\n)*20[0-9 :.-]+ info    "
                                                "start: api\\[0\\] started: pid"));

  Cli unknown = cli({"restart", "--socket", socket_, "nope"});
  EXPECT_EQ(unknown.code, 1);
  EXPECT_THAT(unknown.err, HasSubstr("no program \"nope\""));
  r.signal(SIGTERM);
  EXPECT_EQ(r.exit_code(scaled(10s)), 0);
}

TEST_F(Control, ReloadReturnsEveryConfigErrorOrWhatChanged) {
  std::string cfg = write_config(kTwoSleepers);
  Recycler r({"run", "-c", cfg}, *sb_);
  ASSERT_TRUE(r.wait_for_count("started: pid", 2));

  sb_->write("c.yaml", config_yaml(*sb_, R"(  web:
    command: ["sleep", "1000"]
    instancez: 2
    limits: {memory_max: lots}
)",
                                   "control: {socket: " + socket_ + "}\n"));
  Cli bad = cli({"reload", "-c", cfg});
  EXPECT_EQ(bad.code, 1) << bad.out << bad.err;
  EXPECT_THAT(bad.err, HasSubstr("reload failed: 2 errors"));
  EXPECT_THAT(bad.err, HasSubstr("c.yaml:6:5: error:"));
  EXPECT_THAT(bad.err, HasSubstr("instancez"));
  EXPECT_THAT(bad.err, HasSubstr("c.yaml:7:"));
  EXPECT_EQ(cli({"status", "--socket", socket_}).code, 0) << "the old config stays";

  write_config(std::string(kTwoSleepers) + R"(  extra:
    command: ["sleep", "1000"]
)");
  Cli good = cli({"reload", "--socket", socket_});
  EXPECT_EQ(good.code, 0) << good.out << good.err;
  EXPECT_THAT(good.out, HasSubstr("started: extra"));
  EXPECT_THAT(good.out, HasSubstr("unchanged: web"));
  ASSERT_TRUE(r.wait_for("extra[0] started: pid"));
  r.signal(SIGTERM);
  EXPECT_EQ(r.exit_code(scaled(10s)), 0);
}

TEST_F(Control, EventsFollowSeesALiveEvent) {
  std::string cfg = write_config(kTwoSleepers);
  Recycler r({"run", "-c", cfg}, *sb_);
  ASSERT_TRUE(r.wait_for_count("started: pid", 2));
  Cli recent = cli({"events", "--socket", socket_});
  EXPECT_EQ(recent.code, 0);
  EXPECT_THAT(recent.out, HasSubstr("start: web[0] started"));
  // The log's style: local time to the millisecond, the level padded to 7.
  EXPECT_THAT(recent.out, ::testing::ContainsRegex("20[0-9][0-9]-[0-9][0-9]-[0-9][0-9] "
                                                   "[0-9][0-9]:[0-9][0-9]:[0-9][0-9]\\.[0-9]{3} "
                                                   "info    start: web\\[0\\] started"));
  Cli last = cli({"events", "--socket", socket_, "-n", "1", "--json"});
  EXPECT_EQ(last.code, 0);
  EXPECT_EQ(std::count(last.out.begin(), last.out.end(), '\n'), 1) << last.out;

  Child follower = spawn_cli({"events", "--follow", "--json", "--socket", socket_});
  // The recent ones come first: then the follower is in place.
  std::string seen = read_until(follower.out.get(), "web[1] started", scaled(10s));
  ASSERT_THAT(seen, HasSubstr("web[1] started"));
  EXPECT_EQ(cli({"recycle", "--socket", socket_, "web:0"}).code, 0);
  if (seen.find("\"event\":\"recycle\"") == std::string::npos)
    seen += read_until(follower.out.get(), "\"event\":\"recycle\"", scaled(10s));
  EXPECT_THAT(seen, HasSubstr("\"event\":\"recycle\""));
  EXPECT_THAT(seen, HasSubstr("\"policy\":\"control\""));
  ::kill(follower.pid, SIGTERM);
  ::waitpid(follower.pid, nullptr, 0);
  r.signal(SIGTERM);
  EXPECT_EQ(r.exit_code(scaled(10s)), 0);
}

TEST_F(Control, HostileClientsAreRefusedOrDroppedWhileSupervisionGoesOn) {
  // A leaking worker recycled every couple of seconds: supervision is seen to go on.
  std::string cfg = write_config(R"(  leak:
    command: [")" + leaky_bin() + R"(", "--rate", "40MiB", "--step", "50", "--max", "1GiB"]
    limits: {memory_max: 512MiB}
    sample_interval: 100ms
    policies:
      - memory: {metric: anon, limit: 60MiB}
    stop: {timeout: 2s}
)");
  Recycler r({"run", "-c", cfg}, *sb_);
  ASSERT_TRUE(r.wait_for("leak[0] started: pid"));
  struct stat st {};
  ASSERT_EQ(::stat(socket_.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u) << "owner-only";

  // A stalled client (half a request, never finished) and a client that
  // never reads what it asked for.
  UniqueFd stalled = connect_unix(socket_);
  ASSERT_TRUE(stalled);
  ASSERT_EQ(::write(stalled.get(), "{\"command\":", 11), 11);
  UniqueFd deaf = connect_unix(socket_);
  ASSERT_TRUE(deaf);
  int small = 4096;
  ::setsockopt(deaf.get(), SOL_SOCKET, SO_RCVBUF, &small, sizeof(small));
  std::string ask_a_lot;
  for (int i = 0; i < 2000; ++i) ask_a_lot += "{\"command\":\"status\"}\n";
  ASSERT_EQ(::write(deaf.get(), ask_a_lot.data(), ask_a_lot.size()),
            static_cast<ssize_t>(ask_a_lot.size()));

  // Garbage: one error line, then closed.
  UniqueFd garbage = connect_unix(socket_);
  ASSERT_TRUE(garbage);
  ASSERT_GT(::write(garbage.get(), "\x01\x02 hello\n", 9), 0);
  std::string said;
  EXPECT_TRUE(closed_within(garbage.get(), scaled(5s), &said));
  EXPECT_THAT(said, HasSubstr("\"ok\":false"));
  EXPECT_THAT(said, HasSubstr("not JSON"));

  // A request longer than 64 KiB: one error line, then closed.
  UniqueFd huge = connect_unix(socket_);
  ASSERT_TRUE(huge);
  std::string long_line(70 * 1024, 'x');
  ::send(huge.get(), long_line.data(), long_line.size(), MSG_NOSIGNAL);
  std::string huge_said;
  EXPECT_TRUE(closed_within(huge.get(), scaled(5s), &huge_said));
  EXPECT_THAT(huge_said, HasSubstr("request too long"));

  // Another user: the socket file keeps it out; and were the file opened to
  // all, the credentials check would.
  ASSERT_EQ(::chmod(socket_.c_str(), 0666), 0);
  int pipefd[2];
  ASSERT_EQ(::pipe(pipefd), 0);
  pid_t child = ::fork();
  if (child == 0) {
    ::close(pipefd[0]);
    if (::setresgid(65534, 65534, 65534) != 0 || ::setresuid(65534, 65534, 65534) != 0) _exit(2);
    UniqueFd fd = connect_unix(socket_);
    if (!fd) _exit(3);
    // Refused at once: a request it might send would meet a closed socket.
    const char req[] = "{\"command\":\"status\"}\n";
    ::send(fd.get(), req, sizeof(req) - 1, MSG_NOSIGNAL);
    char buf[512];
    ssize_t n = ::read(fd.get(), buf, sizeof(buf));
    if (n > 0 && ::write(pipefd[1], buf, static_cast<size_t>(n)) < 0) _exit(5);
    char more;
    _exit(::read(fd.get(), &more, 1) <= 0 ? 0 : 6);  // closed after the refusal
  }
  ::close(pipefd[1]);
  std::string refused = read_until_eof(pipefd[0], scaled(5s));
  ::close(pipefd[0]);
  int status = 0;
  ::waitpid(child, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "child status " << status;
  EXPECT_THAT(refused, HasSubstr("permission denied: uid 65534"));
  EXPECT_THAT(refused, ::testing::Not(HasSubstr("workers")));
  ASSERT_EQ(::chmod(socket_.c_str(), 0600), 0);

  // Meanwhile others are answered (0, or 3 when this call lands while the
  // leaking neighbour is between two runs) and the worker is still sampled
  // and recycled.
  Cli answered = cli({"status", "--socket", socket_});
  EXPECT_TRUE(answered.code == 0 || answered.code == 3) << answered.code << ": " << answered.err;
  EXPECT_THAT(answered.out, HasSubstr("leak[0]"));
  EXPECT_TRUE(r.wait_for_count("leak[0] recycle: anon", 2, scaled(20s)));
  // The stalled request is dropped once its time is up; so is the deaf client.
  EXPECT_TRUE(closed_within(stalled.get(), scaled(15s)));
  // Without reading a byte: the server hangs up on it.
  pollfd hup{deaf.get(), POLLRDHUP, 0};
  EXPECT_EQ(::poll(&hup, 1, static_cast<int>(scaled(30s).count())), 1);
  EXPECT_TRUE(hup.revents & (POLLRDHUP | POLLHUP));
  Cli still = cli({"status", "--socket", socket_, "--json"});
  EXPECT_THAT(still.out, HasSubstr("\"program\":\"leak\""));
  r.signal(SIGTERM);
  EXPECT_EQ(r.exit_code(scaled(10s)), 0);
}

TEST_F(Control, SystemdStatusSaysWhatRunsAndChangesWithIt) {
  // systemd's side of Type=notify: a datagram socket named in NOTIFY_SOCKET.
  std::string path = sb_->tmp() + "/systemd.notify";
  UniqueFd systemd(::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  std::memcpy(a.sun_path, path.data(), path.size());
  ASSERT_EQ(::bind(systemd.get(), reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  std::string received;
  auto wait_status = [&](const std::string& needle) {
    auto deadline = std::chrono::steady_clock::now() + scaled(10s);
    while (received.find(needle) == std::string::npos &&
           std::chrono::steady_clock::now() < deadline) {
      pollfd p{systemd.get(), POLLIN, 0};
      if (::poll(&p, 1, 100) <= 0) continue;
      char buf[4096];
      ssize_t n = ::recv(systemd.get(), buf, sizeof(buf), 0);
      if (n > 0) received.append(buf, static_cast<size_t>(n)).append("\n");
    }
    return received.find(needle) != std::string::npos;
  };
  std::string cfg = write_config(kTwoSleepers);
  Recycler::Options o = in_sandbox(*sb_);
  o.env.push_back("NOTIFY_SOCKET=" + path);
  Recycler r({"run", "-c", cfg}, std::move(o));
  EXPECT_TRUE(wait_status("READY=1\nSTATUS=1 program, 2 workers running, 0 recycles, 0 OOM kills"))
      << received;
  EXPECT_EQ(cli({"recycle", "--socket", socket_, "web:0"}).code, 0);
  EXPECT_TRUE(wait_status("STATUS=1 program, 2 workers running, 1 recycle, 0 OOM kills"))
      << received;
  r.signal(SIGTERM);
  EXPECT_EQ(r.exit_code(scaled(10s)), 0);
}

TEST_F(Control, TheDefaultSocketIsFoundFromTheConfigAndASecondRecyclerIsRefused) {
  // Named after the config file: unique per test run.
  std::string name = "ctl-itest-" + std::to_string(::getpid());
  std::string cfg = sb_->write(
      name + ".yaml", "cgroup_root: " + sb_->cgroup_root() + "\nprograms:\n" + kTwoSleepers);
  Recycler r({"run", "-c", cfg}, *sb_);
  ASSERT_TRUE(r.wait_for("control socket: /run/recycler/" + name + ".sock"));
  ASSERT_TRUE(r.wait_for_count("started: pid", 2));
  EXPECT_EQ(cli({"status", "-c", cfg}).code, 0);

  // Refused before it would touch a cgroup, so it starts outside the
  // sandbox's (on v2 the first recycler's delegated cgroup has children now,
  // and no process may join it).
  Recycler second({"run", "-c", cfg}, Recycler::Options{});
  EXPECT_EQ(second.exit_code(scaled(10s)), 1);
  EXPECT_THAT(second.output(), HasSubstr("another recycler is running this config"));
  EXPECT_EQ(cli({"status", "-c", cfg}).code, 0) << "the first one is untouched";
  r.signal(SIGTERM);
  EXPECT_EQ(r.exit_code(scaled(10s)), 0);
  struct stat st {};
  EXPECT_NE(::stat(("/run/recycler/" + name + ".sock").c_str(), &st), 0) << "removed at exit";
}

// Each slot's recent output from a ring in recycler, hostile bytes escaped,
// then followed live; only what is named.
TEST_F(Control, LogsShowsASlotsRecentOutputAndFollowsIt) {
  std::string cfg = write_config(R"(  talk:
    command: ["sh", "-c", "printf 'bell\\007 \\033[2J\\n'; i=0; while :; do echo \"line $i\"; i=$((i+1)); sleep 0.2; done"]
    instances: 2
    stop: {timeout: 2s}
  quiet:
    command: ["sh", "-c", "echo quiet-start; exec sleep 1000"]
    stop: {timeout: 2s}
)");
  Recycler r({"run", "-c", cfg}, *sb_);
  ASSERT_TRUE(r.wait_for_count("talk[1] out | line 3", 1));
  ASSERT_TRUE(r.wait_for("quiet[0] out | quiet-start"));

  Cli last = cli({"logs", "--socket", socket_, "talk:1", "-n", "2"});
  EXPECT_EQ(last.code, 0) << last.err;
  std::vector<std::string> lines;
  for (size_t at = 0, nl; (nl = last.out.find('\n', at)) != std::string::npos; at = nl + 1)
    lines.push_back(last.out.substr(at, nl - at));
  ASSERT_EQ(lines.size(), 2u) << last.out;
  for (const std::string& line : lines) {
    EXPECT_THAT(line, ::testing::MatchesRegex(
                          R"(20[0-9-]+ [0-9:]+\.[0-9]{3} talk\[1\] out \| line [0-9]+)"));
  }
  EXPECT_THAT(last.out, ::testing::Not(HasSubstr("talk[0]")));

  // From the start of slot 0: the control bytes it printed, escaped.
  Cli all = cli({"logs", "--socket", socket_, "talk:0", "-n", "1000"});
  EXPECT_EQ(all.code, 0) << all.err;
  EXPECT_THAT(all.out, HasSubstr("talk[0] out | bell\\x07 \\x1b[2J"));
  EXPECT_EQ(all.out.find('\x1b'), std::string::npos) << "no raw escape reaches the terminal";

  Cli json = cli({"logs", "--socket", socket_, "quiet", "--json"});
  EXPECT_EQ(json.code, 0);
  Json line = Json::parse(json.out, nullptr, false);
  ASSERT_TRUE(line.is_object()) << json.out;
  EXPECT_EQ(line.value("line", ""), "quiet-start");
  EXPECT_EQ(line.value("stream", ""), "stdout");
  EXPECT_EQ(line.value("program", ""), "quiet");

  Cli unknown = cli({"logs", "--socket", socket_, "nosuch"});
  EXPECT_EQ(unknown.code, 1);
  EXPECT_THAT(unknown.err, HasSubstr("no program \"nosuch\""));
  Cli no_slot = cli({"logs", "--socket", socket_, "talk:5"});
  EXPECT_EQ(no_slot.code, 1);
  EXPECT_THAT(no_slot.err, HasSubstr("no slot 5 (talk has 2)"));

  // -n 0 -f: only what comes next, of slot 0 only.
  Child follower = spawn_cli({"logs", "--socket", socket_, "talk:0", "-n", "0", "-f"});
  std::string seen = read_until(follower.out.get(), "talk[0] out | line", scaled(10s));
  EXPECT_THAT(seen, HasSubstr("talk[0] out | line"));
  seen += read_until(follower.out.get(), "\n", scaled(5s));
  EXPECT_THAT(seen, ::testing::Not(HasSubstr("talk[1]")));
  EXPECT_THAT(seen, ::testing::Not(HasSubstr("bell"))) << "-n 0: nothing from before";
  ::kill(follower.pid, SIGTERM);
  ::waitpid(follower.pid, nullptr, 0);
  r.signal(SIGTERM);
  EXPECT_EQ(r.exit_code(scaled(10s)), 0);
}

// 40 slots' full rings (256 KiB each) make more than a client may be sent at
// once (kMaxPendingOutput, 8 MiB): it was dropped unanswered. Now the newest
// lines that fit in one answer (4 MiB) come, and the CLI says how many older
// ones it left out.
TEST_F(Control, LogsOfManySlotsSendsTheNewestThatFitInOneAnswer) {
  std::string cfg = write_config(R"(  big:
    command: ["sh", "-c", "yes \"$(head -c 2000 /dev/zero | tr '\\0' x)\" | head -n 150; echo done; exec sleep 1000"]
    instances: 40
    stop: {timeout: 2s}
)");
  Recycler::Options o = in_sandbox(*sb_);
  o.discard_lines_with = "out | xxxxxxxxxx";  // counted, not kept
  Recycler r({"run", "-c", cfg}, std::move(o));
  // Each slot's last line is "done" once it has printed all (the log may drop
  // lines while this test does not read it; the rings keep them).
  auto all_done = [&] {
    r.collect();
    Cli last = cli({"logs", "--socket", socket_, "big", "-n", "1"});
    size_t done = 0;
    for (size_t at = 0; (at = last.out.find("out | done\n", at)) != std::string::npos; ++at) ++done;
    return done == 40;
  };
  auto deadline = std::chrono::steady_clock::now() + scaled(30s);
  bool done = false;
  while (!(done = all_done()) && std::chrono::steady_clock::now() < deadline) {
  }
  ASSERT_TRUE(done);
  Cli all = cli({"logs", "--socket", socket_, "big", "-n", "1000"});
  EXPECT_EQ(all.code, 0) << all.err;
  EXPECT_THAT(all.err, ::testing::MatchesRegex("recycler: the [0-9]+ oldest lines left out \\(one "
                                               "answer holds 4 MiB\\): name a slot, or ask for "
                                               "fewer with -n\n"));
  EXPECT_GT(all.out.size(), 3u << 20);
  EXPECT_LE(all.out.size(), 4u << 20) << "the text is shorter than the JSON it came as";
  Cli json = cli({"logs", "--socket", socket_, "big", "-n", "1000", "--json"});
  EXPECT_EQ(json.code, 0);
  EXPECT_EQ(json.err, "") << "--json: no note";
  Cli one = cli({"logs", "--socket", socket_, "big:7", "-n", "1000"});
  EXPECT_EQ(one.code, 0);
  EXPECT_EQ(one.err, "") << "one slot's ring fits whole";
  EXPECT_THAT(one.out, ::testing::EndsWith("big[7] out | done\n"));
  r.signal(SIGTERM);
  EXPECT_EQ(r.exit_code(scaled(20s)), 0);
}

// Without -c or --socket, the one recycler answering in /run/recycler; with
// several, each is listed and none chosen. (Other tests may run recyclers
// there meanwhile: each case says which it met.)
TEST_F(Control, WithoutAConfigTheOneRunningRecyclerIsFoundAndSeveralAreListed) {
  if (::geteuid() != 0) GTEST_SKIP() << "the default socket directory is /run/recycler as root";
  std::string id = std::to_string(::getpid());
  std::string program = "found" + id;
  Sandbox other;  // one recycler per sandbox: each its own cgroups
  auto start = [&](Sandbox& sb, const std::string& name) {
    std::string cfg =
        sb.write(name + ".yaml", "cgroup_root: " + sb.cgroup_root() + "\nprograms:\n  " + program +
                                     ":\n    command: [sleep, \"1000\"]\n");
    return std::make_unique<Recycler>(std::vector<std::string>{"run", "-c", cfg}, sb);
  };
  auto a = start(*sb_, "finda-" + id);
  auto b = start(other, "findb-" + id);
  ASSERT_TRUE(a->wait_for("started: pid"));
  ASSERT_TRUE(b->wait_for("started: pid"));
  Cli several = cli({"status"});
  EXPECT_EQ(several.code, 4);
  EXPECT_THAT(several.err, HasSubstr("recyclers are running; give -c FILE (its config) or "
                                     "--socket PATH:"));
  EXPECT_THAT(several.err, HasSubstr("--socket /run/recycler/finda-" + id + ".sock"));
  EXPECT_THAT(several.err, HasSubstr("--socket /run/recycler/findb-" + id + ".sock"));

  b->signal(SIGTERM);
  EXPECT_EQ(b->exit_code(scaled(10s)), 0);
  Cli one = cli({"status"});
  if (one.code == 4) {  // another test's recycler runs beside it
    EXPECT_THAT(one.err, HasSubstr("--socket /run/recycler/finda-" + id + ".sock"));
    EXPECT_THAT(one.err, ::testing::Not(HasSubstr("findb-" + id)));
  } else {
    EXPECT_EQ(one.code, 0) << one.err;
    EXPECT_THAT(one.out, HasSubstr(program));
  }
  a->signal(SIGTERM);
  EXPECT_EQ(a->exit_code(scaled(10s)), 0);
}

}  // namespace
}  // namespace recycler::testing
