// Real gunicorn (Debian's python3-gunicorn) under recycler: three sync
// workers, each recycled by `max_requests` at its own jittered limit, counted
// through the post_request notify hook of examples/gunicorn/gunicorn.conf.py.
// gunicorn's master replaces each signalled worker; no request fails.
#include <arpa/inet.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <map>
#include <regex>
#include <set>
#include <thread>

#include "tests/support/itest.h"

namespace recycler::testing {
namespace {

namespace fs = std::filesystem;

const char* kPython = "/usr/bin/python3";

std::string repo() {
  return fs::canonical(fs::path(RECYCLER_FIXTURES_DIR) / ".." / "..").string();
}

bool have_gunicorn() {
  if (::access(kPython, X_OK) != 0) return false;
  std::string cmd = std::string(kPython) + " -c 'import gunicorn' >/dev/null 2>&1";
  return std::system(cmd.c_str()) == 0;
}

// A port nobody listens on right now (the kernel's choice).
int free_port() {
  UniqueFd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) return -1;
  socklen_t len = sizeof addr;
  ::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&addr), &len);
  return ntohs(addr.sin_port);
}

struct Response {
  int status = 0;
  std::string body;
};

// One HTTP/1.0 GET on a fresh connection; status 0 when it failed.
Response get(int port, const std::string& path) {
  UniqueFd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) return {};
  std::string request = "GET " + path + " HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n";
  if (::send(fd.get(), request.data(), request.size(), MSG_NOSIGNAL) !=
      static_cast<ssize_t>(request.size()))
    return {};
  timeval tv{10, 0};
  ::setsockopt(fd.get(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  std::string raw;
  char buf[4096];
  while (true) {
    ssize_t n = ::recv(fd.get(), buf, sizeof buf, 0);
    if (n < 0) return {};
    if (n == 0) break;
    raw.append(buf, static_cast<size_t>(n));
  }
  Response r;
  if (raw.rfind("HTTP/1.", 0) != 0 || raw.size() < 12) return {};
  r.status = std::atoi(raw.c_str() + 9);
  size_t body = raw.find("\r\n\r\n");
  if (body != std::string::npos) r.body = raw.substr(body + 4);
  return r;
}

pid_t served_by(const Response& r) {
  std::smatch m;
  static const std::regex kPid(R"(pid (\d+))");
  return std::regex_search(r.body, m, kPid) ? std::stoi(m[1].str()) : 0;
}

TEST(Gunicorn, EachWorkerIsRecycledAtItsDrawnRequestLimitWithoutAFailedRequest) {
  RECYCLER_REQUIRE_CGROUPS();
  if (!have_gunicorn()) GTEST_SKIP() << "Debian's python3-gunicorn is not installed";
  Sandbox sb;
  int port = free_port();
  ASSERT_GT(port, 0);
  std::string dir = repo() + "/examples/gunicorn";
  std::string cfg = sb.write("r.yaml", config_yaml(sb, R"(  web:
    command: [")" + std::string(kPython) + R"(", "-m", "gunicorn", "-c", ")" +
                                                           dir +
                                                           R"(/gunicorn.conf.py", "--chdir", ")" +
                                                           dir + R"(", "app:app"]
    env: {BIND: "127.0.0.1:)" + std::to_string(port) + R"(", WORKERS: "3"}
    # All three may be replaced at once: a worker waiting its turn would go on
    # serving past its limit, and this test checks each stops at its own.
    max_concurrent_recycles: 3
    policies:
      - max_requests: {limit: 50, jitter: 10, scope: process}
    stop: {timeout: 10s}
)"));
  Recycler r({"run", "-c", cfg}, sb);
  auto started = r.wait_for("web[0] started: pid");
  ASSERT_TRUE(started);
  pid_t master = started_pid(*started);
  ASSERT_TRUE(r.wait_for_count("Booting worker with pid", 3, scaled(30s)));

  std::map<pid_t, int> served;
  std::vector<pid_t> order;
  int failed = 0;
  for (int i = 0; i < 600; ++i) {
    Response resp = get(port, "/");
    if (resp.status != 200) {
      ++failed;
      continue;
    }
    pid_t pid = served_by(resp);
    if (!served.count(pid)) order.push_back(pid);
    ++served[pid];
    r.collect();  // gunicorn's access log must not fill recycler's stderr pipe
  }
  EXPECT_EQ(failed, 0);

  // Every decision the policy took: which pid, at how many requests, at what limit.
  static const std::regex kRecycle(
      R"(web\[0\] recycle pid (\d+): (\d+) requests >= limit (\d+) \(50 \+ jitter (\d+)\))");
  auto recycles = [&] {
    std::map<pid_t, std::pair<int, int>> out;  // pid -> (count, limit)
    for (const std::string& line : r.lines()) {
      std::smatch m;
      if (std::regex_search(line, m, kRecycle))
        out[std::stoi(m[1].str())] = {std::stoi(m[2].str()), std::stoi(m[3].str())};
    }
    return out;
  };
  // The last reports may still be on their way: every pid that served more
  // than the largest possible limit must have been recycled.
  for (const auto& [pid, n] : served) {
    if (n <= 60) continue;
    // In whatever order they came: count, do not search on from the last match.
    ASSERT_TRUE(r.wait_for_count("recycle pid " + std::to_string(pid) + ":", 1, scaled(10s)));
  }
  auto decided = recycles();

  // At most 3 x 60 requests went to workers still running at the end.
  EXPECT_GE(decided.size(), (600u - 3 * 60) / 62) << r.output();
  std::set<int> limits;
  for (const auto& [pid, n] : served) {
    auto it = decided.find(pid);
    if (it == decided.end()) {
      EXPECT_LE(n, 60) << "pid " << pid << " was never recycled";
      continue;
    }
    auto [count, limit] = it->second;
    limits.insert(limit);
    EXPECT_GE(limit, 50);
    EXPECT_LE(limit, 60);
    EXPECT_EQ(count, limit) << "pid " << pid << ": decided on the report that reached the limit";
    EXPECT_GE(n, limit) << "pid " << pid;
    // This client sends the next request as soon as a response ends, about
    // one per millisecond, so requests accepted while the SIGTERM is on its
    // way (more on a loaded CI machine: 8 were seen) still land on the pid.
    // A pid that kept serving well past that ignored its recycle.
    EXPECT_LE(n, limit + 20) << "pid " << pid;
    EXPECT_TRUE(wait_gone(pid)) << "pid " << pid << " was recycled, so it exits";
  }
  EXPECT_GT(limits.size(), 1u) << "the jitter is drawn per process";
  // The master, recycler's worker, never changed; gunicorn replaced its workers.
  EXPECT_EQ(r.count("web[0] started: pid"), 1u);
  EXPECT_TRUE(process_exists(master));
  EXPECT_GE(order.size(), decided.size());

  r.signal(SIGTERM);
  EXPECT_EQ(r.exit_code(20s), 0);
  EXPECT_TRUE(wait_gone(master));
}

}  // namespace
}  // namespace recycler::testing
