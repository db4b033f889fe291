// Real gunicorn (Debian's python3-gunicorn) under recycler: three sync
// workers, each recycled by `max_requests` at its own jittered limit, counted
// through the post_request notify hook of examples/gunicorn/gunicorn.conf.py.
// gunicorn's master replaces each signalled worker; no request fails. Then
// whole-server recycles under concurrent load: with `listen:` (recycler holds
// the socket, gunicorn takes it through LISTEN_FDS) a restart refuses no
// connection, where one without it does; a surge serves throughout, and a
// next generation that never becomes ready is stopped while the old serves on.
#include <arpa/inet.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <sstream>
#include <thread>

#include "tests/support/itest.h"

namespace recycler::testing {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using Json = nlohmann::json;

const char* kPython = "/usr/bin/python3";

std::string repo() {
  return fs::canonical(fs::path(RECYCLER_FIXTURES_DIR) / ".." / "..").string();
}

bool have_gunicorn() {
  if (::access(kPython, X_OK) != 0) return false;
  std::string cmd = std::string(kPython) + " -c 'import gunicorn' >/dev/null 2>&1";
  return std::system(cmd.c_str()) == 0;
}

pid_t served_by(const Response& r) {
  std::smatch m;
  static const std::regex kPid(R"(pid (\d+))");
  return std::regex_search(r.body, m, kPid) ? std::stoi(m[1].str()) : 0;
}

// How the workers' recycler_notify reports requests: held back below each
// limit, as recycler's RECYCLER_REQUESTS_BATCH_BELOW lets it (the default), or
// each one as it is served (the program's env sets it to 1), which makes the
// notify socket rest between reads under load (notify/read_pacer.h).
enum class Reports { kBatched, kEachRequest };

std::string reports_env(Reports reports) {
  return reports == Reports::kEachRequest ? R"(, RECYCLER_REQUESTS_BATCH_BELOW: "1")" : "";
}

// One client, one request at a time: each recycle is decided on the very
// report that reaches the process's drawn limit.
void each_worker_is_recycled_at_its_drawn_request_limit(Reports reports) {
  Sandbox sb;
  int port = free_port();
  ASSERT_GT(port, 0);
  std::string dir = repo() + "/examples/gunicorn";
  std::string cfg =
      sb.write("r.yaml", config_yaml(sb, R"(  web:
    command: [")" + std::string(kPython) + R"(", "-m", "gunicorn", "-c", ")" +
                                             dir + R"(/gunicorn.conf.py", "--chdir", ")" + dir +
                                             R"(", "app:app"]
    env: {PYTHONPATH: ")" + repo() + R"(/python", BIND: "127.0.0.1:)" +
                                             std::to_string(port) + R"(", WORKERS: "3")" +
                                             reports_env(reports) + R"(}
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
      R"(web\[0\] recycle pid (\d+): (\d+) requests >= limit (\d+) \((?:50 \+ jitter \d+\) \()?max_requests policy)");
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
    if (reports == Reports::kBatched) {
      // recycler told each process its limit; at it, the process reported and
      // waited in its post_request hook until recycler had signalled it, so
      // it left after that very request.
      EXPECT_EQ(n, limit) << "pid " << pid;
    } else {
      // Reported each as served, no answer waited for: this client sends the
      // next request as soon as a response ends, about one per millisecond,
      // so requests accepted while the SIGTERM is on its way (more on a
      // loaded CI machine: 8 were seen) still land on the pid. A pid that
      // kept serving well past that ignored its recycle.
      EXPECT_LE(n, limit + 20) << "pid " << pid;
    }
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

TEST(Gunicorn, EachWorkerIsRecycledAtItsDrawnRequestLimitWithoutAFailedRequest) {
  RECYCLER_REQUIRE_CGROUPS();
  if (!have_gunicorn()) GTEST_SKIP() << "Debian's python3-gunicorn is not installed";
  each_worker_is_recycled_at_its_drawn_request_limit(Reports::kBatched);
}

// The same with every request reported, while the notify socket rests between
// reads (notify/read_pacer.h): with a queue of 512 (in a network namespace of
// the test's own) this client's 3-5 reports a millisecond are read in batches,
// never past a limit.
TEST(Gunicorn, EachWorkerIsRecycledAtItsDrawnRequestLimitWhileTheNotifySocketRests) {
  RECYCLER_REQUIRE_CGROUPS();
  if (!have_gunicorn()) GTEST_SKIP() << "Debian's python3-gunicorn is not installed";
  NetNamespace ns(512);
  if (!ns.ok()) GTEST_SKIP() << "no network namespace of its own: " << ns.why();
  each_worker_is_recycled_at_its_drawn_request_limit(Reports::kEachRequest);
}

// bench/serving's gunicorn settings: 2 sync workers, env knobs (SERVE_BIND,

// Under concurrent load with default settings, every recycled worker serves
// at most its drawn limit + 5, counted from gunicorn's own access log, not
// from recycler's figures. By default each process hears its drawn limit
// from recycler (the notify socket's answers) and, at it, waits in its
// post_request hook until recycler has signalled it: an empty view served
// as fast as this machine can holds its limit too. With every request
// reported and no answer waited for, a worker goes on serving between the
// report that reached its limit and its SIGTERM handler: recycler's part is
// some 0.3 ms, the worker's own (Python runs the handler between two
// bytecodes, once it has the CPU) up to a few ms on a loaded machine; so that
// load's requests take 1 ms each (/work?ms=1), as a view that waits on its
// database (an empty view served 10 requests a millisecond to one worker and
// overshot by up to 10). Before issue 12, workers served 2-7 times their limit.
// The scenario of the tests below. A scrape of recycler's metrics before it
// stops shows how the reports came: one or two a process; each one, read in
// batches.
void each_recycled_pid_serves_at_most_its_limit_and_a_few(Reports reports) {
  constexpr int kSlack = 5;
  Sandbox sb;
  int port = free_port();
  ASSERT_GT(port, 0);
  int metrics = free_port();
  ASSERT_GT(metrics, 0);
  std::string dir = repo() + "/examples/gunicorn";
  std::string access = sb.tmp() + "/access.log";
  std::string cfg = sb.write("r.yaml", config_yaml(sb,
                                                   R"(  web:
    command: [")" + std::string(kPython) + R"(", "-m", "gunicorn", "-c", ")" +
                                                       dir + R"(/gunicorn.conf.py"]
    env: {PYTHONPATH: ")" + repo() + R"(/python", WORKERS: "3", ACCESS_LOG: ")" +
                                                       access + R"(")" + reports_env(reports) + R"(}
    listen: ["127.0.0.1:)" + std::to_string(port) + R"("]
    policies:
      - max_requests: {limit: 100, jitter: 20, scope: process}
    stop: {timeout: 10s}
)",
                                                   "metrics: {listen: 127.0.0.1:" +
                                                       std::to_string(metrics) + "}\n"));
  Recycler r({"run", "-c", cfg}, sb);
  ASSERT_TRUE(r.wait_for_count("Booting worker with pid", 3, scaled(30s)));
  {
    Load load(port, 4, reports == Reports::kBatched ? "/" : "/work?ms=1");
    ASSERT_TRUE(r.wait_for_count("exited after its recycle", 9, scaled(60s))) << r.output();
    load.finish();
    EXPECT_EQ(load.failed(), 0);
  }
  Response scraped = get(metrics, "/metrics");
  ASSERT_EQ(scraped.status, 200);
  auto counter = [&](const std::string& name) {
    std::smatch m;
    std::regex re(name + R"(\{program="web"\} (\d+))");
    return std::regex_search(scraped.body, m, re) ? std::stod(m[1].str()) : -1.0;
  };
  double messages = counter("recycler_notify_messages_total");
  double reads = counter("recycler_notify_reads_total");
  std::cout << messages << " notify messages in " << reads << " reads\n";
  EXPECT_GT(reads, 0);
  // pid -> the limit drawn for it, and the count recycler signalled it at.
  static const std::regex kRecycle(
      R"(web\[0\] recycle pid (\d+): (\d+) requests >= limit (\d+) \((?:100 \+ jitter \d+\) \()?max_requests policy)");
  std::map<pid_t, int> limit;
  for (const std::string& line : r.lines()) {
    std::smatch m;
    if (std::regex_search(line, m, kRecycle)) limit[std::stoi(m[1].str())] = std::stoi(m[3].str());
  }
  ASSERT_GE(limit.size(), 9u) << r.output();
  // gunicorn writes its access log line per request, with the worker's pid.
  r.signal(SIGTERM);
  EXPECT_EQ(r.exit_code(20s), 0);
  std::map<pid_t, int> served;
  static const std::regex kLine(R"(<(\d+)> "GET )");
  std::istringstream log(read_text(access));
  for (std::string line; std::getline(log, line);) {
    std::smatch m;
    if (std::regex_search(line, m, kLine)) ++served[std::stoi(m[1].str())];
  }
  int worst = 0;
  for (const auto& [pid, drawn] : limit) {
    EXPECT_GE(served[pid], drawn) << "pid " << pid;
    if (served[pid] > drawn + kSlack) {
      std::string said;
      for (const std::string& line : r.lines())
        if (line.find("pid " + std::to_string(pid)) != std::string::npos) said += line + "\n";
      ADD_FAILURE() << "pid " << pid << " served " << served[pid] << " requests for a limit of "
                    << drawn << "; recycler said:\n"
                    << said;
    }
    worst = std::max(worst, served[pid] - drawn);
  }
  std::cout << "worst overshoot: +" << worst << " over " << limit.size() << " recycles\n";
  int requests = 0;
  for (const auto& [pid, n] : served) requests += n;
  std::cout << requests << " requests served\n";
  if (reports == Reports::kBatched) {
    // Per process: its first request, one report at its limit carrying the
    // rest (and one a second meanwhile), READY=1 and STOPPING=1.
    EXPECT_LT(messages, static_cast<double>(limit.size() + 3) * 6) << "reports held to each limit";
    std::smatch m;
    static const std::regex kAnswers(
        R"(recycler_notify_answers_total\{program="web",result="sent"\} (\d+))");
    ASSERT_TRUE(std::regex_search(scraped.body, m, kAnswers)) << scraped.body;
    EXPECT_GE(std::stod(m[1].str()), 2.0 * static_cast<double>(limit.size()))
        << "each recycled process heard its limit, and at it the count seen";
  } else {
    // (A report that finds the queue full goes with the next one.)
    EXPECT_GT(messages, requests * 0.9) << "every request reported";
    // Read as they come, about 0.97 reads a message under this load; resting
    // between reads, 0.35-0.5 (with a busy loop on the other core).
    EXPECT_LT(reads, messages * 0.75) << "read in batches";
  }
}

// What an operator sees of a pre-fork server whose policies look at each
// process: status listed RECYCLES 0 after 277 process recycles, and set a
// limit on each process (uss 200 MiB) against the sum over all of them. Now
// each process has a row (its figure, its requests out of its drawn limit),
// the largest process is what the limit is compared with, and its recycles
// count, in status, its JSON and the metrics.
TEST(Gunicorn, StatusAndMetricsShowEachProcessItsRecyclesAndItsFiguresAgainstItsLimit) {
  RECYCLER_REQUIRE_CGROUPS();
  if (!have_gunicorn()) GTEST_SKIP() << "Debian's python3-gunicorn is not installed";
  Sandbox sb;
  int port = free_port();
  ASSERT_GT(port, 0);
  std::string socket = sb.tmp() + "/ctl.sock";
  std::string dir = repo() + "/examples/gunicorn";
  std::string cfg = sb.write("r.yaml", config_yaml(sb,
                                                   R"(  web:
    command: [")" + std::string(kPython) + R"(", "-m", "gunicorn", "-c", ")" +
                                                       dir + R"(/gunicorn.conf.py", "--chdir", ")" +
                                                       dir + R"(", "app:app"]
    env: {PYTHONPATH: ")" + repo() + R"(/python", BIND: "127.0.0.1:)" +
                                                       std::to_string(port) + R"(", WORKERS: "3"}
    sample_interval: 100ms
    policies:
      - memory: {metric: uss, limit: 200MiB, scope: process}
      - max_requests: {limit: 20, jitter: 5, scope: process}
    stop: {timeout: 10s}
)",
                                                   "control: {socket: " + socket +
                                                       "}\nmetrics: {listen: 127.0.0.1:0}\n"));
  Recycler r({"run", "-c", cfg}, sb);
  uint16_t metrics = metrics_port(r);
  ASSERT_NE(metrics, 0);
  auto started = r.wait_for("web[0] started: pid");
  ASSERT_TRUE(started);
  pid_t master = started_pid(*started);
  ASSERT_TRUE(r.wait_for_count("Booting worker with pid", 3, scaled(30s)));
  // Sequential requests: each process reports at its limit and waits there
  // until recycler has signalled it, so once the last response is in, every
  // recycle this traffic causes has been decided.
  for (int i = 0; i < 100; ++i) {
    EXPECT_EQ(get(port, "/").status, 200);
    r.collect();
  }
  size_t recycled = r.count("web[0] recycle pid ");
  ASSERT_GE(recycled, 3u) << r.output();

  // The master and three worker processes, each seen and with its limit drawn
  // (the replacements too), within a few samples.
  Json w;
  auto listed = [&] {
    Cli c = cli({"status", "--socket", socket, "--json", "web"});
    Json j = Json::parse(c.out, nullptr, false);
    if (!j.is_array() || j.size() != 1) return false;
    w = j[0];
    const Json& ps = w["processes"];
    if (!ps.is_array() || ps.size() != 4) return false;
    for (const Json& p : ps) {
      if (p["memory"].is_null()) return false;
      if (!p["main"].get<bool>() && p["request_limit"].is_null()) return false;
    }
    return true;
  };
  auto deadline = std::chrono::steady_clock::now() + scaled(20s);
  bool seen = false;
  while (!(seen = listed()) && std::chrono::steady_clock::now() < deadline) r.collect();
  ASSERT_TRUE(seen) << w.dump(2);
  // Every request served is counted, also those the processes still running
  // held back below their limits: sent once they went idle (status said 169
  // after 200 requests, for as long as no more came).
  deadline = std::chrono::steady_clock::now() + scaled(10s);
  while (!(listed() && w["requests"] == 100) && std::chrono::steady_clock::now() < deadline)
    r.collect();
  EXPECT_EQ(w["requests"], 100) << w.dump(2);
  EXPECT_EQ(w["restarts"]["recycles"], recycled) << w.dump(2);
  EXPECT_EQ(w["restarts"]["process_recycles"], recycled);
  EXPECT_EQ(w["generation"], 1) << "the master never restarted";
  EXPECT_THAT(w["last_recycle_reason"].get<std::string>(),
              ::testing::ContainsRegex(R"(^pid [0-9]+: [0-9]+ requests >= limit [0-9]+)"));
  EXPECT_EQ(w["memory_metric"], "uss");
  EXPECT_EQ(w["memory_scope"], "process");
  EXPECT_EQ(w["limit"], 200u << 20) << "each process's";
  uint64_t largest = 0, main_count = 0;
  for (const Json& p : w["processes"]) {
    largest = std::max(largest, p["memory"].get<uint64_t>());
    if (p["main"].get<bool>()) {
      ++main_count;
      EXPECT_EQ(p["pid"], master);
      EXPECT_TRUE(p["request_limit"].is_null()) << "the master serves nothing";
    } else {
      EXPECT_GE(p["request_limit"].get<uint64_t>(), 20u);
      EXPECT_LE(p["request_limit"].get<uint64_t>(), 25u);
      EXPECT_LE(p["requests"].get<uint64_t>(), p["request_limit"].get<uint64_t>());
    }
  }
  EXPECT_EQ(main_count, 1u);
  EXPECT_EQ(w["process_memory"], largest) << "the largest process's figure";
  EXPECT_GT(w["memory"]["uss"].get<uint64_t>(), largest) << "the sum over the four";

  // The table: the largest against the limit each has, the sum said to be
  // one, and a row per process under the slot when it is named.
  Cli named = cli({"status", "--socket", socket, "web"});
  EXPECT_EQ(named.code, 0) << named.err;
  EXPECT_THAT(named.out,
              ::testing::ContainsRegex(R"(uss [0-9.]+ [KM]iB largest, [0-9.]+ MiB sum)"));
  EXPECT_THAT(named.out, HasSubstr("200 MiB each"));
  EXPECT_THAT(named.out, ::testing::ContainsRegex("\n  process +main +" + std::to_string(master) +
                                                  " .* uss "));
  // The header, the slot, its four processes, and what gunicorn said of
  // itself (STATUS=, as systemctl status shows it).
  EXPECT_EQ(std::count(named.out.begin(), named.out.end(), '\n'), 7) << named.out;
  EXPECT_THAT(named.out, HasSubstr("\nweb[0] status: Gunicorn arbiter booted\n"));
  Cli all = cli({"status", "--socket", socket});
  EXPECT_THAT(all.out, ::testing::Not(HasSubstr("  process"))) << "one line per slot";

  // The metrics: the recycles counted, the largest process against the
  // per-process limit, no worker-wide limit to divide a sum by.
  Response m = get(metrics, "/metrics");
  ASSERT_EQ(m.status, 200);
  const std::string slot = R"({program="web",slot="0")";
  EXPECT_EQ(metric_value(m.body, "recycler_worker_restarts_total" + slot + R"(,cause="recycle"})"),
            static_cast<double>(recycled));
  EXPECT_EQ(metric_value(m.body,
                         "recycler_worker_process_memory_limit_bytes" + slot + R"(,metric="uss"})"),
            200.0 * (1 << 20));
  EXPECT_GT(
      metric_value(m.body, "recycler_worker_process_memory_max_bytes" + slot + R"(,metric="uss"})")
          .value_or(0),
      0);
  EXPECT_FALSE(
      metric_value(m.body, "recycler_worker_memory_limit_bytes" + slot + R"(,metric="uss"})"));
  if (auto tool = promtool()) {
    auto [status, out] = promtool_check(*tool, m.body, sb.tmp());
    EXPECT_EQ(status, 0) << out << "\n" << m.body;
  } else {
    std::cout << "[  SKIPPED ] promtool check metrics: promtool is not installed here\n";
  }
  r.signal(SIGTERM);
  EXPECT_EQ(r.exit_code(20s), 0);
}

TEST(Gunicorn, UnderConcurrentLoadEachRecycledWorkerServesAtMostItsLimitAndAFew) {
  RECYCLER_REQUIRE_CGROUPS();
  if (!have_gunicorn()) GTEST_SKIP() << "Debian's python3-gunicorn is not installed";
  each_recycled_pid_serves_at_most_its_limit_and_a_few(Reports::kBatched);
}

// With every request reported and the queue systemd sets (512; the host here
// may keep the kernel's 10), the notify socket rests between reads under this
// load (notify/read_pacer.h) and the limits hold all the same. The queue is
// set in a network namespace of the test's own: the host's is left alone.
TEST(Gunicorn, EveryRequestReportedWithASystemdSizedQueueIsReadInBatchesAndLimitsStillHold) {
  RECYCLER_REQUIRE_CGROUPS();
  if (!have_gunicorn()) GTEST_SKIP() << "Debian's python3-gunicorn is not installed";
  NetNamespace ns(512);
  if (!ns.ok()) GTEST_SKIP() << "no network namespace of its own: " << ns.why();
  each_recycled_pid_serves_at_most_its_limit_and_a_few(Reports::kEachRequest);
}

// SERVE_READY: READY=1 from each worker once it has loaded the app).
std::string serving_program(int port, bool listen, const std::string& extra) {
  std::string dir = repo() + "/bench/serving";
  std::string yaml = R"(  web:
    command: [")" + std::string(kPython) +
                     R"(", "-m", "gunicorn", "-c", ")" + dir + R"(/gunicorn.conf.py"]
    env: {SERVE_ACCESS_LOG: /dev/null, SERVE_BIND: "127.0.0.1:)" +
                     std::to_string(port) + R"(", SERVE_READY: "1"}
    stop: {timeout: 10s}
)";
  if (listen) yaml += "    listen: [\"127.0.0.1:" + std::to_string(port) + "\"]\n";
  return yaml + extra;
}

// Whole-server restarts every 2 s under 4 clients: how many requests failed.
int failures_across_restarts(bool listen) {
  return failures_across_restarts(RestartsUnderLoad{
      .program =
          [&](int port) {
            return serving_program(port, listen,
                                   "    policies:\n      - max_lifetime: {after: 2s}\n");
          },
      .booted =
          [](Recycler& r) { return r.wait_for_count("Booting worker with pid", 2, scaled(30s)); },
      .after_restarts = 50,
      .check =
          [&](Recycler& r, int port) {
            EXPECT_GE(r.count("recycle: up"), 2u);
            if (!listen) return;
            EXPECT_EQ(r.count("web: listening on 127.0.0.1:" + std::to_string(port)), 1u)
                << "bound once, kept across every restart";
          },
  });
}

TEST(GunicornListen, AWholeServerRestartRefusesNoConnectionWithListen) {
  RECYCLER_REQUIRE_CGROUPS();
  if (!have_gunicorn()) GTEST_SKIP() << "Debian's python3-gunicorn is not installed";
  // Without listen: the port is closed between the old server's exit and the
  // new one's bind: connections are refused.
  EXPECT_GT(failures_across_restarts(false), 0);
  // With it, they wait in recycler's socket's backlog.
  EXPECT_EQ(failures_across_restarts(true), 0);
}

TEST(GunicornListen, ASurgeServesThroughEveryRecycle) {
  RECYCLER_REQUIRE_CGROUPS();
  if (!have_gunicorn()) GTEST_SKIP() << "Debian's python3-gunicorn is not installed";
  Sandbox sb;
  int port = free_port();
  ASSERT_GT(port, 0);
  std::string cfg = sb.write(
      "r.yaml",
      config_yaml(
          sb, serving_program(port, true,
                              R"(    recycle: {mode: surge, ready_from: child, ready_timeout: 30s}
    policies:
      - max_lifetime: {after: 2s}
)")));
  Recycler r({"run", "-c", cfg}, sb);
  auto first = r.wait_for("web[0] started: pid");
  ASSERT_TRUE(first);
  pid_t master = started_pid(*first);
  ASSERT_TRUE(r.wait_for_count("Booting worker with pid", 2, scaled(30s)));
  Load load(port, 4);
  ASSERT_TRUE(load.served_more(20, r, scaled(20s)));
  // Each surge: the next generation starts, a worker of it says READY=1, then
  // the old one stops; twice.
  ASSERT_TRUE(r.wait_for_count("ready after", 2, scaled(40s))) << r.output();
  ASSERT_TRUE(r.wait_for_count("(retiring) exited with status 0", 2, scaled(30s))) << r.output();
  ASSERT_TRUE(load.served_more(50, r, scaled(20s)));
  load.finish();
  EXPECT_EQ(load.failed(), 0) << "of " << load.ok() + load.failed();
  // Every 2 s another surge starts: one may be under way by now.
  size_t started = r.count(") starting beside generation");
  EXPECT_LE(started, r.count("ready after") + 1) << r.output();
  EXPECT_EQ(r.count("surge: generation"), started) << "every surge succeeded\n" << r.output();
  EXPECT_EQ(r.count("web[0] started: pid"), 1u) << "a surge is no restart";
  EXPECT_TRUE(wait_gone(master)) << "the first generation was stopped";
  // The old generation's cgroup is gone; the slot lives in the other one now.
  r.signal(SIGTERM);
  EXPECT_EQ(r.exit_code(20s), 0);
}

TEST(GunicornListen, ANextGenerationThatIsNeverReadyIsStoppedWhileTheOldServesOn) {
  RECYCLER_REQUIRE_CGROUPS();
  if (!have_gunicorn()) GTEST_SKIP() << "Debian's python3-gunicorn is not installed";
  Sandbox sb;
  int port = free_port();
  ASSERT_GT(port, 0);
  // The workers never say READY=1 (SERVE_READY unset), and the arbiter's own
  // does not count with ready_from: child.
  std::string program = serving_program(
      port, true, R"(    recycle: {mode: surge, ready_from: child, ready_timeout: 2s}
    restart: {backoff: {initial: 30s, max: 60s}}
    policies:
      - max_lifetime: {after: 2s}
)");
  program.replace(program.find(", SERVE_READY: \"1\""), std::string(", SERVE_READY: \"1\"").size(),
                  "");
  std::string cfg = sb.write("r.yaml", config_yaml(sb, program));
  Recycler r({"run", "-c", cfg}, sb);
  auto first = r.wait_for("web[0] started: pid");
  ASSERT_TRUE(first);
  pid_t master = started_pid(*first);
  ASSERT_TRUE(r.wait_for_count("Booting worker with pid", 2, scaled(30s)));
  Load load(port, 4);
  ASSERT_TRUE(load.served_more(20, r, scaled(20s)));
  std::smatch m;
  ASSERT_TRUE(
      r.wait_for(std::regex(R"(surge: generation 2 \(pid (\d+)\) starting)"), &m, scaled(20s)))
      << r.output();
  pid_t next = std::stoi(m[1].str());
  ASSERT_TRUE(r.wait_for("surge: generation 2 sent no READY=1 within 2s", scaled(20s)))
      << r.output();
  EXPECT_TRUE(wait_gone(next, scaled(15s))) << "the next generation was stopped";
  ASSERT_TRUE(load.served_more(50, r, scaled(20s)));
  load.finish();
  EXPECT_EQ(load.failed(), 0);
  EXPECT_TRUE(process_exists(master)) << "the old generation serves on";
  EXPECT_EQ(r.count("ready after"), 0u);
  EXPECT_EQ(r.count("generation 1 (pid " + std::to_string(master) + ") serves on"), 1u);
  r.signal(SIGTERM);
  EXPECT_EQ(r.exit_code(20s), 0);
  EXPECT_TRUE(wait_gone(master));
}

}  // namespace
}  // namespace recycler::testing
