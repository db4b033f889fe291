// The control socket's pure parts: request lines and their limits, targets,
// the default socket path, the event ring, the status JSON and table.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <csignal>

#include "supervisor/control/format.h"
#include "supervisor/control/protocol.h"

namespace recycler::control {
namespace {

using ::testing::ContainsRegex;
using ::testing::HasSubstr;
using ::testing::Not;

TEST(ControlProtocol, ARequestNamesACommandAndItsTargets) {
  auto r = parse_request(R"({"command":"restart","targets":["api","web:1"]})");
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(r->command, Command::Restart);
  ASSERT_EQ(r->targets.size(), 2u);
  EXPECT_EQ(r->targets[0].str(), "api");
  EXPECT_EQ(r->targets[1].program, "web");
  EXPECT_EQ(r->targets[1].slot, 1u);
  auto s = parse_request(R"({"command":"signal","targets":["api"],"signal":"HUP"})");
  ASSERT_TRUE(s);
  EXPECT_EQ(s->signal, SIGHUP);
  auto e = parse_request(R"({"command":"events","follow":true})");
  ASSERT_TRUE(e);
  EXPECT_TRUE(e->follow);
}

TEST(ControlProtocol, ARequestLineRoundTrips) {
  Request r;
  r.command = Command::Signal;
  r.targets = {{"api", 2}};
  r.signal = SIGUSR1;
  auto back = parse_request(request_line(r));
  ASSERT_TRUE(back) << back.error().message;
  EXPECT_EQ(back->targets[0].str(), "api:2");
  EXPECT_EQ(back->signal, SIGUSR1);
}

TEST(ControlProtocol, GarbageIsRefusedWithAReason) {
  auto error = [](std::string_view line) {
    auto r = parse_request(line);
    return r ? std::string("accepted") : r.error().message;
  };
  EXPECT_THAT(error("hello"), HasSubstr("not JSON"));
  EXPECT_THAT(error("[1,2]"), HasSubstr("not a JSON object"));
  EXPECT_THAT(error(R"({"command":"format-disk"})"), HasSubstr("unknown command \"format-disk\""));
  EXPECT_THAT(error(R"({"command":"status","verbose":true})"), HasSubstr("unknown key"));
  EXPECT_THAT(error(R"({"command":"stop"})"), HasSubstr("name at least one program"));
  EXPECT_THAT(error(R"({"command":"stop","targets":["../etc"]})"), HasSubstr("invalid program"));
  EXPECT_THAT(error(R"({"command":"stop","targets":["api:x"]})"), HasSubstr("invalid slot"));
  EXPECT_THAT(error(R"({"command":"signal","targets":["api"],"signal":"NOPE"})"),
              HasSubstr("\"signal\""));
  EXPECT_THAT(error(R"({"command":"signal","targets":["api"]})"), HasSubstr("missing"));
  EXPECT_THAT(error(R"({"command":"reload","targets":["api"]})"), HasSubstr("takes no"));
  EXPECT_THAT(error(std::string(kMaxRequestBytes + 1, ' ')), HasSubstr("too long"));
}

// What recycler acts on is what every other reader of the line sees: JSON
// parsers differ on which of two equal keys wins, so neither does here.
TEST(ControlProtocol, AKeyGivenTwiceIsRefused) {
  auto r = parse_request(R"({"command":"status","command":"reload"})");
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().message, "key \"command\" given twice");
  EXPECT_FALSE(parse_request(R"({"command":"stop","targets":["a"],"targets":["b"]})"));
  // The same key in two objects is not a repeat (and here the nested one is
  // refused as a target that is not a string).
  auto nested = parse_request(R"({"command":"stop","targets":[{"command":1}]})");
  ASSERT_FALSE(nested);
  EXPECT_THAT(nested.error().message, HasSubstr("array of strings"));
}

TEST(ControlProtocol, AnErrorLineIsOneLineOfJsonWhateverTheText) {
  std::string line = error_line("bad\n\xff", {"c.yaml:3:5: error: x"});
  EXPECT_EQ(line.find('\n'), std::string::npos);
  Json j = Json::parse(line);
  EXPECT_FALSE(j["ok"].get<bool>());
  EXPECT_EQ(j["errors"][0], "c.yaml:3:5: error: x");
}

TEST(ControlProtocol, TheDefaultSocketIsNamedAfterTheConfig) {
  EXPECT_EQ(config_name("/etc/recycler/api.yaml"), "api");
  EXPECT_EQ(config_name("web.prod.yml"), "web.prod");
  EXPECT_EQ(config_name("plain"), "plain");
  EXPECT_EQ(default_socket_path("api", 0, "/run/user/1000"), "/run/recycler/api.sock");
  EXPECT_EQ(default_socket_path("api", 1000, "/run/user/1000"), "/run/user/1000/recycler/api.sock");
  EXPECT_EQ(default_socket_path("api", 1000, nullptr), std::nullopt);
  EXPECT_EQ(default_socket_path("api", 1000, "relative"), std::nullopt);
}

TEST(ControlProtocol, TheEventRingKeepsTheMostRecent) {
  EventRing ring(3);
  for (int i = 0; i < 5; ++i) ring.push(std::to_string(i));
  EXPECT_THAT(ring.lines(), ::testing::ElementsAre("2", "3", "4"));
}

// A slot's output ring is bounded by bytes too: one chatty worker of long
// lines holds kLogRingBytes, not kLogRingLines of 16 KiB each.
TEST(ControlProtocol, TheOutputRingIsBoundedByBytes) {
  EventRing ring(1000, 10);
  for (const char* line : {"aaaa", "bbbb", "cccc"}) ring.push(line);
  EXPECT_THAT(ring.lines(), ::testing::ElementsAre("bbbb", "cccc"));
  EXPECT_EQ(ring.bytes(), 8u);
  ring.push(std::string(50, 'x'));  // longer than the bound: kept alone
  EXPECT_EQ(ring.lines().size(), 1u);
}

// Past 256 slots each keeps its share of kLogTotalBytes: a smaller bound
// applies from the next push.
TEST(ControlProtocol, AnOutputRingShrinksToANewBound) {
  EventRing ring(1000, 100);
  for (int i = 0; i < 10; ++i) ring.push(std::string(10, 'a'));
  EXPECT_EQ(ring.bytes(), 100u);
  ring.set_max_bytes(30);
  ring.push(std::string(10, 'b'));
  EXPECT_EQ(ring.bytes(), 30u);
  EXPECT_EQ(ring.lines().back(), std::string(10, 'b'));
}

TEST(ControlProtocol, LogsTakeTargetsACountAndFollow) {
  auto r = parse_request(R"({"command":"logs","targets":["api:1"],"lines":5,"follow":true})");
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(r->command, Command::Logs);
  EXPECT_EQ(r->targets.at(0).str(), "api:1");
  EXPECT_EQ(r->lines, 5u);
  EXPECT_TRUE(r->follow);
  auto again = parse_request(request_line(*r));
  ASSERT_TRUE(again);
  EXPECT_EQ(again->lines, 5u);
  EXPECT_TRUE(again->follow);
  auto many = parse_request(R"({"command":"logs","lines":99999999})");
  ASSERT_TRUE(many);
  EXPECT_EQ(many->lines, kLogRingLines) << "no more than a ring holds";
  EXPECT_FALSE(parse_request(R"({"command":"logs","lines":-1})"));
  EXPECT_FALSE(parse_request(R"({"command":"status","lines":3})"));
  auto events = parse_request(R"({"command":"events","lines":3})");
  ASSERT_TRUE(events);
  EXPECT_EQ(events->lines, 3u);
  EXPECT_EQ(parse_request(R"({"command":"events"})")->lines, std::nullopt) << "all";
}

TEST(ControlProtocol, AnOutputLineIsJsonWhateverTheBytes) {
  std::string line = output_line("2026-11-28T05:00:00.000Z", "api", 1, 42, "stderr",
                                 std::string("bad \xff \x1b[2J\n", 11), true);
  auto j = nlohmann::json::parse(line, nullptr, false);
  ASSERT_TRUE(j.is_object()) << line;
  EXPECT_EQ(j["program"], "api");
  EXPECT_EQ(j["slot"], 1);
  EXPECT_EQ(j["pid"], 42);
  EXPECT_EQ(j["stream"], "stderr");
  EXPECT_EQ(j["line"], "bad \xef\xbf\xbd \x1b[2J\n");
  EXPECT_EQ(j["partial"], true);
  EXPECT_EQ(line.find('\n'), std::string::npos) << "one line";
  std::string time = R"({"time":"2026-11-28T05:00:00.000Z)";  // up to the closing quote
  EXPECT_EQ(time.size(), kOutputTimePrefix);
  EXPECT_EQ(line.substr(0, kOutputTimePrefix), time);
}

// The newline-ended lines of a table.
std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  for (size_t at = 0, nl; (nl = text.find('\n', at)) != std::string::npos; at = nl + 1)
    out.push_back(text.substr(at, nl - at));
  return out;
}

WorkerStatus worker(std::string program, unsigned slot, uint64_t anon) {
  WorkerStatus w;
  w.program = std::move(program);
  w.slot = slot;
  w.state = "running";
  w.pid = 100 + static_cast<pid_t>(slot);
  w.uptime_s = 3725;
  w.generation = 2;
  w.restarts_recycles = 1;
  w.memory = {{"anon", anon}, {"current", anon * 2}};
  w.memory_metric = "anon";
  w.limit = 1ull << 30;
  w.requests = 42;
  w.threads = 4;
  w.outlooks.push_back({"leak", 1024.0 * 1024 / 60, 3840});
  w.last_recycle_reason = "anon 1 GiB > 1 GiB (memory policy)";
  return w;
}

TEST(ControlFormat, TheStatusTableHasAlignedColumnsAndEveryFigure) {
  WorkerStatus stopped;
  stopped.program = "web";
  stopped.state = "backoff";
  stopped.memory_metric = "current";
  stopped.restarts_crashes = 3;
  std::string table = status_table({worker("api", 0, 300u << 20), stopped});
  std::vector<std::string> lines = lines_of(table);
  ASSERT_EQ(lines.size(), 3u) << table;
  EXPECT_THAT(lines[0], HasSubstr("NAME"));
  EXPECT_THAT(lines[1], HasSubstr("api[0]"));
  EXPECT_THAT(lines[1], HasSubstr("anon 300 MiB"));
  EXPECT_THAT(lines[1], HasSubstr("600 MiB"));  // current
  EXPECT_THAT(lines[1], HasSubstr("1h2m"));
  EXPECT_THAT(lines[1], HasSubstr("+1 MiB/min, limit in 1h4m"));
  EXPECT_THAT(lines[1], HasSubstr("anon 1 GiB > 1 GiB (memory policy)"));
  EXPECT_THAT(lines[2], HasSubstr("web[0]"));
  EXPECT_THAT(lines[2], HasSubstr("backoff"));
  // Aligned: each column starts where its header does.
  EXPECT_EQ(lines[0].find("STATE"), lines[1].find("running"));
  EXPECT_EQ(lines[0].find("STATE"), lines[2].find("backoff"));
  EXPECT_EQ(lines[0].find("PID"), lines[1].find("100"));
}

// A pre-fork server under scope: process: the limit is each process's, so
// the largest process is what the row compares with it, the sum is said to
// be one, and each process gets a row when asked for.
WorkerStatus prefork() {
  WorkerStatus w = worker("web", 0, 0);
  w.memory = {{"uss", 408u << 20}, {"current", 500u << 20}};
  w.memory_metric = "uss";
  w.memory_scope = "process";
  w.limit = 200u << 20;
  w.process_memory = 150u << 20;
  w.processes = {{100, true, false, 18u << 20, std::nullopt, std::nullopt},
                 {101, false, false, 150u << 20, 17, 23},
                 {102, false, true, 120u << 20, 21, 21},
                 {103, false, false, 120u << 20, 3, 20}};
  return w;
}

TEST(ControlFormat, APerProcessLimitIsComparedWithTheLargestProcessAndEachHasARow) {
  std::string table = status_table({prefork()});
  EXPECT_THAT(table, HasSubstr("uss 150 MiB largest, 408 MiB sum"));
  EXPECT_THAT(table, HasSubstr("200 MiB each"));
  EXPECT_THAT(table, Not(HasSubstr("  process"))) << "one line per slot unless asked";
  std::string rows = status_table({prefork()}, true);
  std::vector<std::string> lines = lines_of(rows);
  ASSERT_EQ(lines.size(), 6u) << rows;
  EXPECT_THAT(lines[2], ContainsRegex("^  process +main +100 .* uss 18 MiB +-"));
  EXPECT_THAT(lines[3], ContainsRegex("^  process +running +101 .* uss 150 MiB +17 of 23"));
  EXPECT_THAT(lines[4], ContainsRegex("^  process +recycling +102 .* 21 of 21"));
  EXPECT_EQ(lines[0].find("PID"), lines[3].find("101"));
  EXPECT_EQ(lines[0].find("REQUESTS"), lines[3].find("17 of 23"));
}

TEST(ControlFormat, TopSortsAPreforkServerByItsLargestProcess) {
  WorkerStatus sum_is_larger = worker("a", 0, 300u << 20);
  auto sorted = by_memory({sum_is_larger, prefork()});
  EXPECT_EQ(sorted[0].program, "a") << "300 MiB against a largest process of 150 MiB";
}

TEST(ControlProtocol, APreforkWorkersProcessesSurviveItsJson) {
  WorkerStatus w = prefork();
  w.process_recycles = 5;
  w.restarts_recycles = 6;
  Json j = to_json(w);
  EXPECT_EQ(j["memory_scope"], "process");
  EXPECT_EQ(j["process_memory"], 150u << 20);
  EXPECT_EQ(j["restarts"]["process_recycles"], 5);
  ASSERT_EQ(j["processes"].size(), 4u);
  EXPECT_EQ(j["processes"][1]["request_limit"], 23);
  EXPECT_TRUE(j["processes"][0]["requests"].is_null());
  WorkerStatus back = worker_from_json(j);
  EXPECT_EQ(back.memory_scope, "process");
  EXPECT_EQ(back.process_memory, 150u << 20);
  EXPECT_EQ(back.process_recycles, 5u);
  EXPECT_EQ(back.restarts_recycles, 6u);
  ASSERT_EQ(back.processes.size(), 4u);
  EXPECT_TRUE(back.processes[0].main);
  EXPECT_TRUE(back.processes[2].recycling);
  EXPECT_EQ(back.processes[1].pid, 101);
  EXPECT_EQ(back.processes[1].memory, 150u << 20);
  EXPECT_EQ(back.processes[1].requests, 17u);
  EXPECT_EQ(back.processes[1].request_limit, 23u);
  EXPECT_FALSE(back.processes[0].request_limit);
  EXPECT_TRUE(to_json(WorkerStatus{})["processes"].empty());
}

TEST(ControlFormat, WhatAWorkerNamedIsEscaped) {
  WorkerStatus w = worker("api", 0, 1);
  w.last_recycle_reason = "evil\x1b[2J\nline";
  std::string table = status_table({w});
  EXPECT_EQ(table.find('\x1b'), std::string::npos);
  EXPECT_EQ(std::count(table.begin(), table.end(), '\n'), 2);
}

TEST(ControlFormat, WhatAWorkerSaysWithStatusIsBeneathTheTableEscapedAndInJson) {
  WorkerStatus quiet = worker("api", 0, 1);
  WorkerStatus said = worker("train", 1, 1);
  said.status_text = "epoch 3/10\x1b[2J";
  std::vector<std::string> lines = lines_of(status_table({quiet, said}));
  ASSERT_EQ(lines.size(), 4u);
  EXPECT_EQ(lines[3], "train[1] status: epoch 3/10\\x1b[2J");
  Json j = to_json(said);
  EXPECT_EQ(j["status_text"], "epoch 3/10\x1b[2J");
  EXPECT_EQ(worker_from_json(j).status_text, said.status_text);
  EXPECT_TRUE(to_json(quiet)["status_text"].is_null());
}

TEST(ControlFormat, StatusExitsThreeWhenASlotIsNotRunning) {
  WorkerStatus down = worker("api", 1, 1);
  down.state = "stopped";
  EXPECT_EQ(status_exit_code({worker("api", 0, 1)}), 0);
  EXPECT_EQ(status_exit_code({worker("api", 0, 1), down}), 3);
}

TEST(ControlFormat, TopSortsByTheWatchedFigure) {
  auto sorted = by_memory({worker("a", 0, 10), worker("b", 0, 30), worker("c", 0, 20)});
  EXPECT_EQ(sorted[0].program, "b");
  EXPECT_EQ(sorted[1].program, "c");
  EXPECT_EQ(sorted[2].program, "a");
}

TEST(ControlProtocol, AWorkersStatusSurvivesItsJson) {
  WorkerStatus w = worker("api", 3, 5u << 20);
  Json j = to_json(w);
  EXPECT_EQ(j["pid"], 103);
  EXPECT_EQ(j["memory"]["anon"], 5u << 20);
  EXPECT_EQ(j["restarts"]["recycles"], 1);
  WorkerStatus back = worker_from_json(j);
  EXPECT_EQ(back.program, "api");
  EXPECT_EQ(back.slot, 3u);
  EXPECT_EQ(back.pid, 103);
  EXPECT_EQ(back.memory, w.memory);
  EXPECT_EQ(back.requests, 42u);
  ASSERT_EQ(back.outlooks.size(), 1u);
  EXPECT_EQ(back.outlooks[0].policy, "leak");
  WorkerStatus none;
  EXPECT_TRUE(to_json(none)["pid"].is_null());
}

}  // namespace
}  // namespace recycler::control
