// The Prometheus endpoint with the real binary: scrapes over TCP on
// 127.0.0.1, checked by promtool, against the cgroup's own files, across a
// reload, in wrap mode, with an address in use, and under hostile scrapers.
//
// The port: the config asks for port 0 and the test reads the one the kernel
// picked from recycler's "metrics: serving http://127.0.0.1:PORT/metrics"
// line, so tests running side by side never collide.
#include <arpa/inet.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <regex>

#include "tests/support/itest.h"

namespace recycler::testing {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using Clock = std::chrono::steady_clock;

UniqueFd connect_to(uint16_t port) {
  UniqueFd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(port);
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) != 0) return UniqueFd();
  return fd;
}

// Everything the peer sends until it closes; nullopt on timeout or reset.
std::optional<std::string> read_to_end(int fd, Millis timeout) {
  std::string out;
  auto deadline = Clock::now() + timeout;
  while (Clock::now() < deadline) {
    pollfd p{fd, POLLIN, 0};
    auto left = std::chrono::duration_cast<Millis>(deadline - Clock::now()).count();
    if (::poll(&p, 1, static_cast<int>(std::max<int64_t>(left, 1))) <= 0) continue;
    char buf[65536];
    ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n == 0) return out;
    if (n < 0) return std::nullopt;
    out.append(buf, static_cast<size_t>(n));
  }
  return std::nullopt;
}

struct Reply {
  std::string head;
  std::string body;
  bool ok() const { return head.starts_with("HTTP/1.1 200 "); }
};

std::optional<Reply> http_exchange(uint16_t port, const std::string& request, Millis timeout = 5s) {
  UniqueFd fd = connect_to(port);
  if (!fd) return std::nullopt;
  if (::send(fd.get(), request.data(), request.size(), MSG_NOSIGNAL) !=
      static_cast<ssize_t>(request.size()))
    return std::nullopt;
  auto all = read_to_end(fd.get(), scaled(timeout));
  if (!all) return std::nullopt;
  size_t end = all->find("\r\n\r\n");
  if (end == std::string::npos) return Reply{*all, ""};
  return Reply{all->substr(0, end + 2), all->substr(end + 4)};
}

std::optional<Reply> scrape(uint16_t port) {
  return http_exchange(port, "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n");
}

constexpr auto value = metric_value;

// Scrapes until `ok` holds for a body; that body, or nullopt at the deadline.
std::optional<std::string> scrape_until(Recycler& r, uint16_t port,
                                        const std::function<bool(const std::string&)>& ok,
                                        Millis timeout = 10s) {
  auto deadline = Clock::now() + scaled(timeout);
  std::optional<Reply> last;
  while (Clock::now() < deadline) {
    r.collect();
    last = scrape(port);
    if (last && last->ok() && ok(last->body)) return last->body;
    struct pollfd none {};
    ::poll(&none, 0, 50);  // between scrapes; the deadline bounds the wait
  }
  ADD_FAILURE() << "no scrape matched; last body:\n" << (last ? last->body : "<none>");
  return std::nullopt;
}

constexpr const char* kSleeper = R"(    command: ["sleep", "1000"]
    instances: 2
    sample_interval: 100ms
    limits: {memory_max: 100MiB}
    policies:
      - memory: {metric: current, limit: 90%}
)";

TEST(Metrics, AScrapeHasEveryWorkerSeriesMatchesTheCgroupAndPassesPromtool) {
  RECYCLER_REQUIRE_CGROUPS();
  Sandbox sb;
  std::string cfg = sb.write("r.yaml", config_yaml(sb, "  web.api-2:\n" + std::string(kSleeper),
                                                   "metrics: {listen: 127.0.0.1:0}\n"));
  Recycler r({"run", "-c", cfg}, sb);
  uint16_t port = metrics_port(r);
  ASSERT_NE(port, 0);
  ASSERT_TRUE(r.wait_for_count("started: pid", 2));
  const std::string worker = R"({program="web.api-2",slot="1")";
  auto body = scrape_until(r, port, [&](const std::string& b) {
    return value(b, "recycler_sample_duration_seconds_count").value_or(0) > 2;
  });
  ASSERT_TRUE(body);
  std::optional<Reply> reply = scrape(port);
  ASSERT_TRUE(reply && reply->ok());
  EXPECT_THAT(reply->head, HasSubstr("Content-Type: text/plain; version=0.0.4; charset=utf-8\r\n"));
  EXPECT_THAT(reply->head,
              HasSubstr("Content-Length: " + std::to_string(reply->body.size()) + "\r\n"));
  const std::string& b = reply->body;
  EXPECT_EQ(value(b, "recycler_worker_up" + worker + "}"), 1);
  EXPECT_EQ(value(b, "recycler_worker_generation" + worker + "}"), 1);
  EXPECT_EQ(value(b, "recycler_worker_memory_limit_bytes" + worker + R"(,metric="current"})"),
            90.0 * (1 << 20));
  EXPECT_TRUE(value(b, "recycler_worker_start_time_seconds" + worker + "}"));
  EXPECT_TRUE(value(b, "recycler_worker_memory_bytes" + worker + R"(,metric="anon"})"));
  EXPECT_EQ(value(b, R"(recycler_exits_total{program="web.api-2",reason="crash"})"), 0);
  EXPECT_EQ(value(b, R"(recycler_oom_kills_total{program="web.api-2"})"), 0);
  EXPECT_GT(value(b, "recycler_sample_duration_seconds_count").value_or(0), 0);
  EXPECT_GT(value(b, "process_resident_memory_bytes").value_or(0), 0);
  EXPECT_GT(value(b, "process_open_fds").value_or(0), 0);
  EXPECT_THAT(b, HasSubstr("# TYPE recycler_worker_memory_bytes gauge\n"));
  EXPECT_THAT(b, HasSubstr("# TYPE recycler_sample_duration_seconds histogram\n"));
  EXPECT_THAT(b, ::testing::Not(HasSubstr("pid=")));

  // `current` is the cgroup's own figure, as of the last sample (100 ms).
  std::string file = sb.v2() ? "memory.current" : "memory.usage_in_bytes";
  double cgroup = std::stod(read_text(sb.worker_dir("web.api-2", 1) + "/" + file));
  double scraped =
      value(b, "recycler_worker_memory_bytes" + worker + R"(,metric="current"})").value_or(-1);
  EXPECT_NEAR(scraped, cgroup, std::max(cgroup * 0.1, 512.0 * 1024))
      << "scraped " << scraped << ", " << file << " " << cgroup;

  if (auto tool = promtool()) {
    auto [status, out] = promtool_check(*tool, b, sb.tmp());
    EXPECT_EQ(status, 0) << out << "\n" << b;
  } else {
    std::cout << "[  SKIPPED ] promtool check metrics: promtool is not installed here (Debian "
                 "package prometheus; the v2 VM has none)\n";
  }
  // HEAD: the same head, no body.
  auto head = http_exchange(port, "HEAD /metrics HTTP/1.0\r\n\r\n");
  ASSERT_TRUE(head);
  EXPECT_TRUE(head->ok()) << head->head;
  EXPECT_EQ(head->body, "");
  r.signal(SIGTERM);
  EXPECT_EQ(r.exit_code(), 0);
}

TEST(Metrics, NotifyMessagesAreCountedWithTheReadsThatTookThem) {
  RECYCLER_REQUIRE_CGROUPS();
  Sandbox sb;
  int server_port = free_port();
  ASSERT_GT(server_port, 0);
  // Each of its 3 processes sends READY=1 once it is about to accept: 3
  // messages, read as they come (1 to 3 reads).
  std::string cfg = sb.write(
      "r.yaml", config_yaml(sb,
                            "  web:\n    command: [\"" + listen_server_bin() +
                                "\", \"--workers\", \"3\", \"--ready\", \"child\", \"--bind\", \"" +
                                std::to_string(server_port) + "\"]\n  idle:\n" + kSleeper,
                            "metrics: {listen: 127.0.0.1:0}\n"));
  Recycler r({"run", "-c", cfg}, sb);
  uint16_t port = metrics_port(r);
  ASSERT_NE(port, 0);
  const std::string messages = R"(recycler_notify_messages_total{program="web"})";
  const std::string reads = R"(recycler_notify_reads_total{program="web"})";
  auto body = scrape_until(
      r, port, [&](const std::string& b) { return value(b, messages).value_or(0) >= 3; });
  ASSERT_TRUE(body) << r.output();
  EXPECT_EQ(value(*body, messages), 3);
  EXPECT_GE(value(*body, reads).value_or(0), 1);
  EXPECT_LE(value(*body, reads).value_or(99), 3);
  EXPECT_EQ(value(*body, R"(recycler_notify_messages_total{program="idle"})"), 0)
      << "a program whose workers say nothing";
  r.signal(SIGTERM);
  EXPECT_EQ(r.exit_code(20s), 0);
}

TEST(Metrics, OtherRequestsAreRefusedWithTheirStatus) {
  RECYCLER_REQUIRE_CGROUPS();
  Sandbox sb;
  std::string cfg = sb.write("r.yaml", config_yaml(sb, "  a:\n" + std::string(kSleeper),
                                                   "metrics: {listen: 127.0.0.1:0}\n"));
  Recycler r({"run", "-c", cfg}, sb);
  uint16_t port = metrics_port(r);
  ASSERT_NE(port, 0);
  auto status_of = [&](const std::string& request) {
    auto reply = http_exchange(port, request);
    return reply ? reply->head.substr(0, reply->head.find("\r\n")) : "<no reply>";
  };
  EXPECT_EQ(status_of("GET / HTTP/1.1\r\n\r\n"), "HTTP/1.1 404 Not Found");
  EXPECT_EQ(status_of("POST /metrics HTTP/1.1\r\n\r\n"), "HTTP/1.1 405 Method Not Allowed");
  EXPECT_EQ(status_of("\x16\x03\x01\x02\x00\x01\x00"), "HTTP/1.1 400 Bad Request");
  EXPECT_EQ(status_of("GET /metrics HTTP/1.1\r\n" + std::string(9000, 'x')),
            "HTTP/1.1 431 Request Header Fields Too Large");
  r.signal(SIGTERM);
  EXPECT_EQ(r.exit_code(), 0);
}

// The probes Kubernetes asks (docs/operations.md "Probes"): /healthz while
// sampling is on time; /readyz once every slot runs and has sent READY=1 (the
// program has been seen to send it), unready first for drain.unready_for
// before a recycle, and unready while the replacement has not said READY=1.
TEST(Metrics, ReadyzFollowsReadyAndDropsBeforeARecycleForDrain) {
  RECYCLER_REQUIRE_CGROUPS();
  auto python = python_bin();
  if (!python) GTEST_SKIP() << "no Debian python3";
  Sandbox sb;
  std::string go = sb.tmp() + "/go";
  // The first run says READY=1 at once (as sd_notify does); a recycle's
  // replacement (it has RECYCLER_RECYCLE_REASON) only once the test makes `go`.
  std::string script = sb.write("ready.py", R"(import os, socket, time
if os.environ.get("RECYCLER_RECYCLE_REASON"):
    while not os.path.exists(")" + go + R"("):
        time.sleep(0.05)
address = os.environ["NOTIFY_SOCKET"]
if address.startswith("@"):
    address = "\0" + address[1:]
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
s.sendto(b"READY=1", address)
time.sleep(1000)
)");
  std::string worker = "  web:\n    command: [\"" + *python + "\", \"" + script + "\"]" + R"(
    drain: {unready_for: 2s}
    stop: {timeout: 2s}
)";
  std::string cfg = sb.write("r.yaml", config_yaml(sb, worker, "metrics: {listen: 127.0.0.1:0}\n"));
  Recycler r({"run", "-c", cfg}, sb);
  uint16_t port = metrics_port(r);
  ASSERT_NE(port, 0);
  auto probe = [&](const char* path) {
    auto reply = http_exchange(port, std::string("GET ") + path + " HTTP/1.1\r\nHost: x\r\n\r\n");
    return reply ? reply->head.substr(0, reply->head.find("\r\n")) + " " + reply->body
                 : std::string("<no reply>");
  };
  auto probe_until = [&](const char* path, const std::string& want) {
    auto deadline = Clock::now() + scaled(10s);
    std::string last;
    while (Clock::now() < deadline) {
      r.collect();
      last = probe(path);
      if (last.find(want) != std::string::npos) return last;
      struct pollfd none {};
      ::poll(&none, 0, 20);  // between probes; the deadline bounds the wait
    }
    ADD_FAILURE() << path << " never answered " << want << "; last: " << last << "\n" << r.output();
    return last;
  };
  probe_until("/readyz", "HTTP/1.1 200 OK ready: 1 workers\n");
  EXPECT_EQ(probe("/healthz"), "HTTP/1.1 200 OK ok\n");
  auto head = http_exchange(port, "HEAD /readyz HTTP/1.1\r\n\r\n");
  ASSERT_TRUE(head);
  EXPECT_THAT(head->body, ::testing::IsEmpty());

  Cli recycle = cli({"recycle", "-c", cfg, "web"});
  ASSERT_EQ(recycle.code, 0) << recycle.err;
  // Unready, while the old run still serves: nothing has been stopped yet.
  std::string draining =
      probe_until("/readyz",
                  "HTTP/1.1 503 Service Unavailable not ready: 0 of 1 workers ready; web[0]: "
                  "draining before its recycle\n");
  EXPECT_EQ(r.count("started: pid"), 1u) << r.output();
  EXPECT_TRUE(r.wait_for("web[0]: unready for 2s before its recycle (drain.unready_for)"))
      << r.output();
  // Then the recycle; the replacement runs but has not said READY=1.
  ASSERT_TRUE(r.wait_for_count("started: pid", 2, scaled(10s))) << r.output();
  probe_until("/readyz", "web[0]: no READY=1 from this run yet\n");
  EXPECT_EQ(probe("/healthz"), "HTTP/1.1 200 OK ok\n");
  std::ofstream(go).close();
  probe_until("/readyz", "HTTP/1.1 200 OK ready: 1 workers\n");
  Cli status = cli({"status", "--json", "-c", cfg});
  EXPECT_THAT(status.out, HasSubstr(R"("ready":true)")) << status.out;
  r.signal(SIGTERM);
  EXPECT_EQ(r.exit_code(), 0);
}

TEST(Metrics, ARemovedProgramsSeriesDisappearAfterAReload) {
  RECYCLER_REQUIRE_CGROUPS();
  Sandbox sb;
  std::string programs = "  a:\n" + std::string(kSleeper) + "  b:\n" + std::string(kSleeper);
  std::string cfg =
      sb.write("r.yaml", config_yaml(sb, programs, "metrics: {listen: 127.0.0.1:0}\n"));
  Recycler r({"run", "-c", cfg}, sb);
  uint16_t port = metrics_port(r);
  ASSERT_NE(port, 0);
  ASSERT_TRUE(r.wait_for_count("started: pid", 4));
  ASSERT_TRUE(scrape_until(r, port, [](const std::string& b) {
    return b.find(R"(recycler_worker_up{program="b",slot="1"} 1)") != std::string::npos &&
           b.find(R"(recycler_exits_total{program="b",reason="clean"})") != std::string::npos;
  }));
  // The port stays: the same address across the reload.
  sb.write("r.yaml",
           config_yaml(sb, "  a:\n" + std::string(kSleeper), "metrics: {listen: 127.0.0.1:0}\n"));
  r.signal(SIGHUP);
  ASSERT_TRUE(r.wait_for("b: stopped and removed"));
  auto body = scrape_until(
      r, port, [](const std::string& b) { return b.find(R"(program="b")") == std::string::npos; });
  ASSERT_TRUE(body);
  EXPECT_EQ(value(*body, R"(recycler_worker_up{program="a",slot="0"})"), 1);
  EXPECT_EQ(value(*body, R"(recycler_exits_total{program="a",reason="clean"})"), 0);
  EXPECT_EQ(r.count("metrics: serving"), 1u) << "an unchanged address is not reopened";
  r.signal(SIGTERM);
  EXPECT_EQ(r.exit_code(), 0);
}

TEST(Metrics, AnAddressInUseIsAnErrorAtStartUpAndNothingStarts) {
  RECYCLER_REQUIRE_CGROUPS();
  Sandbox sb;
  UniqueFd taken(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(taken.get(), reinterpret_cast<sockaddr*>(&sa), sizeof(sa)), 0);
  ASSERT_EQ(::listen(taken.get(), 1), 0);
  socklen_t len = sizeof(sa);
  ASSERT_EQ(::getsockname(taken.get(), reinterpret_cast<sockaddr*>(&sa), &len), 0);
  std::string port = std::to_string(ntohs(sa.sin_port));
  std::string cfg = sb.write("r.yaml", config_yaml(sb, "  a:\n" + std::string(kSleeper),
                                                   "metrics: {listen: 127.0.0.1:" + port + "}\n"));
  Recycler r({"run", "-c", cfg}, sb);
  EXPECT_EQ(r.exit_code(), 1);
  EXPECT_THAT(r.output(), HasSubstr("metrics: cannot listen on 127.0.0.1:" + port +
                                    ": address already in use"));
  EXPECT_EQ(r.count("started: pid"), 0u);
  EXPECT_FALSE(fs::exists(sb.worker_dir("a", 0))) << "no cgroup was created";
}

TEST(Metrics, WrapModeServesWithTheMetricsFlag) {
  RECYCLER_REQUIRE_CGROUPS();
  Sandbox sb;
  Recycler r(
      {"run", "--cgroup-root", sb.cgroup_root(), "--metrics", "127.0.0.1:0", "--", "sleep", "1000"},
      sb);
  uint16_t port = metrics_port(r);
  ASSERT_NE(port, 0);
  ASSERT_TRUE(scrape_until(r, port, [](const std::string& b) {
    return value(b, R"(recycler_worker_up{program="sleep",slot="0"})") == 1;
  }));
  r.signal(SIGTERM);
  EXPECT_EQ(r.exit_code(), 0);
}

// Idle connections past the client limit, a byte-a-second client, garbage
// and a client that never reads its response: sampling goes on (the leaking
// neighbour is recycled in time, samples are counted), a real scrape is
// answered at once, and the stalled ones are dropped by their timeouts.
TEST(Metrics, HostileScrapersStallNeitherSamplingNorOtherScrapes) {
  RECYCLER_REQUIRE_CGROUPS();
  Sandbox sb;
  std::string cfg =
      sb.write("r.yaml", config_yaml(sb, "  a:\n" + std::string(kSleeper) + leaking_neighbour(),
                                     "metrics: {listen: 127.0.0.1:0}\n"));
  Recycler r({"run", "-c", cfg}, sb);
  uint16_t port = metrics_port(r);
  ASSERT_NE(port, 0);
  ASSERT_TRUE(r.wait_for("leak[0] started: pid"));
  auto before = scrape_until(r, port, [](const std::string&) { return true; });
  ASSERT_TRUE(before);
  double samples_before = value(*before, "recycler_sample_duration_seconds_count").value_or(0);

  std::vector<UniqueFd> idle;
  for (int i = 0; i < 200; ++i) {
    UniqueFd fd = connect_to(port);
    ASSERT_TRUE(fd) << "connection " << i;
    idle.push_back(std::move(fd));
  }
  UniqueFd slow = connect_to(port);
  UniqueFd deaf = connect_to(port);  // asks, never reads
  ASSERT_TRUE(slow && deaf);
  std::string ask = "GET /metrics HTTP/1.1\r\n\r\n";
  ASSERT_EQ(::send(deaf.get(), ask.data(), ask.size(), MSG_NOSIGNAL),
            static_cast<ssize_t>(ask.size()));
  auto garbage = http_exchange(port, std::string(64, '\x01'));
  ASSERT_TRUE(garbage);
  EXPECT_THAT(garbage->head, ::testing::StartsWith("HTTP/1.1 400 "));

  // A real scrape gets through while they hold on, and so do recycles.
  auto start = Clock::now();
  auto during = scrape(port);
  ASSERT_TRUE(during && during->ok());
  EXPECT_LT(Clock::now() - start, scaled(2s));
  size_t recycles = r.count("leak[0] recycle: ");
  auto deadline = Clock::now() + scaled(15s);
  size_t slow_sent = 0;
  bool slow_dropped = false;
  while (Clock::now() < deadline &&
         (!slow_dropped || r.count("leak[0] recycle: ") < recycles + 2)) {
    r.collect();
    // One byte of a request head every 200 ms: never complete in time.
    if (!slow_dropped && ::send(slow.get(), &ask[slow_sent % ask.size()], 1, MSG_NOSIGNAL) != 1)
      slow_dropped = true;
    ++slow_sent;
    pollfd p{slow.get(), POLLIN, 0};
    if (::poll(&p, 1, 200) > 0) {
      char c;
      if (::read(slow.get(), &c, 1) <= 0) slow_dropped = true;
    }
  }
  EXPECT_TRUE(slow_dropped) << "a head sent a byte at a time is dropped by the head timeout";
  EXPECT_GE(r.count("leak[0] recycle: "), recycles + 2) << r.output();
  EXPECT_GE(neighbour_recycles_in_time(r), recycles + 2);

  auto after = scrape_until(r, port, [](const std::string&) { return true; });
  ASSERT_TRUE(after);
  EXPECT_GT(value(*after, "recycler_sample_duration_seconds_count").value_or(0),
            samples_before + 10);
  EXPECT_GT(value(*after, R"(recycler_metrics_scrapes_total{outcome="dropped"})").value_or(0), 0);
  EXPECT_GE(value(*after, R"(recycler_metrics_scrapes_total{outcome="refused"})").value_or(0), 1);
  // The idle ones were evicted or timed out: recycler closed them.
  pollfd p{idle.back().get(), POLLIN, 0};
  EXPECT_EQ(::poll(&p, 1, 1000), 1);
  r.signal(SIGTERM);
  EXPECT_EQ(r.exit_code(), 0);
}

}  // namespace
}  // namespace recycler::testing
