// Timelines: the CSV rows, reading a trace back (and what it rejects, with
// FILE:LINE: column), and the writer's files, rotation and write errors.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <csignal>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

#include "policies/metric.h"
#include "supervisor/timeline/trace.h"
#include "supervisor/timeline/writer.h"

namespace recycler::timeline {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using policies::Metric;
using policies::ProcessSample;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

TimePoint at(std::chrono::milliseconds since_start) {
  return TimePoint{} + 1h + since_start;
}
const TimePoint kStarted = at(0ms);

ProcessSample process(pid_t pid, std::optional<uint64_t> rss, std::optional<uint64_t> pss = {}) {
  ProcessSample p;
  p.pid = pid;
  p.rss = rss;
  p.pss = pss;
  return p;
}

Result<std::vector<Sample>> parse(const std::string& text) {
  std::istringstream in(text);
  return read_trace(in, "trace.csv");
}

std::string parse_error(const std::string& text) {
  auto r = parse(text);
  EXPECT_FALSE(r.ok()) << "accepted:\n" << text;
  return r.ok() ? "" : r.error().message;
}

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::vector<std::string> lines_of(const std::string& path) {
  std::vector<std::string> out;
  std::istringstream in(read_text(path));
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

TEST(TraceRow, LeavesACellEmptyForWhatWasNotMeasured) {
  Sample s;
  s.t = at(1500ms);
  s.anon = 1024;
  s.requests = 7;
  EXPECT_EQ(format_row(s, kStarted), "1.500,,1024,,,,,,7,,,,");
}

TEST(TraceRow, WritesEveryColumnInHeaderOrder) {
  Sample s;
  s.t = at(12345ms);
  s.current = 1;
  s.anon = 2;
  s.file = 3;
  ProcessSample p = process(10, 4, 5);
  p.uss = 6;
  s.processes.push_back(p);
  s.device = 7;
  s.requests = 8;
  s.threads = 9;
  s.gpu = 10;
  s.gpu_total = 11;
  s.iteration = 12;
  EXPECT_EQ(kSamplesHeader,
            "t,current,anon,file,rss,pss,uss,device,requests,threads,gpu,gpu_total,iteration");
  EXPECT_EQ(format_row(s, kStarted), "12.345,1,2,3,4,5,6,7,8,9,10,11,12");
}

TEST(TraceRow, PadsMillisecondsToThreeDecimals) {
  Sample s;
  s.t = at(3007ms);
  EXPECT_EQ(format_row(s, kStarted), "3.007,,,,,,,,,,,,");
  s.t = at(60000ms);
  EXPECT_EQ(format_row(s, kStarted), "60.000,,,,,,,,,,,,");
}

TEST(TraceRow, SumsProcessMemoryAndLeavesItEmptyWhenAProcessLacksIt) {
  Sample s;
  s.t = kStarted;
  s.processes = {process(10, 100, 40), process(11, 200)};
  EXPECT_EQ(format_row(s, kStarted), "0.000,,,,300,,,,,,,,") << "rss summed, pss missing for 11";
}

TEST(ReadTrace, ReadsTimeAsSecondsFromTheEpochOfTheClock) {
  auto r = parse("t,anon\n0,5\n2.5,6\n");
  ASSERT_TRUE(r.ok()) << r.error().message;
  ASSERT_EQ(r->size(), 2u);
  EXPECT_EQ((*r)[0].t, TimePoint{});
  EXPECT_EQ((*r)[1].t, TimePoint{} + 2500ms);
  EXPECT_EQ((*r)[1].anon, 6u);
  EXPECT_TRUE((*r)[1].processes.empty()) << "no per-process column: no synthetic process";
}

TEST(ReadTrace, GpuGoesToTheWorkerAndItsSyntheticProcessGpuTotalToTheWorker) {
  auto r = parse("t,gpu,gpu_total\n0,5,9\n1,,\n");
  ASSERT_TRUE(r.ok()) << r.error().message;
  ASSERT_EQ(r->size(), 2u);
  EXPECT_EQ((*r)[0].gpu, 5u);
  EXPECT_EQ((*r)[0].gpu_total, 9u);
  ASSERT_EQ((*r)[0].processes.size(), 1u) << "scope: process on gpu sees it";
  EXPECT_EQ((*r)[0].processes[0].gpu, 5u);
  EXPECT_FALSE((*r)[1].gpu);
}

TEST(ReadTrace, AcceptsAnySubsetOfColumnsInAnyOrder) {
  auto r = parse("device,t,uss\n7,1.0,\n,2.0,9\n");
  ASSERT_TRUE(r.ok()) << r.error().message;
  ASSERT_EQ(r->size(), 2u);
  EXPECT_EQ((*r)[0].device, 7u);
  EXPECT_FALSE((*r)[0].anon);
  EXPECT_FALSE((*r)[1].device) << "empty cell";
  EXPECT_EQ(value((*r)[1], Metric::Uss), 9u);
}

TEST(ReadTrace, ReadsTheIterationTheWorkerReportedIntoTheSampleOnly) {
  auto r = parse("t,device,iteration\n0,7,\n1,8,3\n2,9,3.0\n");
  ASSERT_TRUE(r.ok()) << r.error().message;
  ASSERT_EQ(r->size(), 3u);
  EXPECT_FALSE((*r)[0].iteration) << "none reported yet";
  EXPECT_EQ((*r)[1].iteration, 3u);
  EXPECT_EQ((*r)[2].iteration, 3u);
  EXPECT_TRUE((*r)[1].processes.empty()) << "the worker's, not a process's";
  EXPECT_EQ(parse_error("t,iteration\n0,next\n"),
            "trace.csv:2: column iteration: \"next\" is not a number");
}

TEST(ReadTrace, ATraceRecordedBeforeTheIterationColumnStillLoads) {
  auto r = parse("t,current,anon,file,rss,pss,uss,device,requests,threads\n0,1,2,3,,,,,,\n");
  ASSERT_TRUE(r.ok()) << r.error().message;
  ASSERT_EQ(r->size(), 1u);
  EXPECT_EQ((*r)[0].anon, 2u);
  EXPECT_FALSE((*r)[0].iteration);
}

TEST(ReadTrace, PutsProcessFiguresIntoOneSyntheticProcessOnlyWhenTheRowHasThem) {
  auto r = parse("t,rss,requests,threads\n0,100,5,3\n1,,,\n");
  ASSERT_TRUE(r.ok()) << r.error().message;
  const Sample& s = (*r)[0];
  ASSERT_EQ(s.processes.size(), 1u);
  EXPECT_EQ(s.processes[0].pid, 1);
  EXPECT_FALSE(s.processes[0].main);
  EXPECT_EQ(s.processes[0].rss, 100u);
  EXPECT_EQ(s.processes[0].requests, 5u);
  EXPECT_EQ(s.processes[0].threads, 3u);
  EXPECT_EQ(s.requests, 5u) << "the worker's figures too";
  EXPECT_EQ(s.threads, 3u);
  EXPECT_TRUE((*r)[1].processes.empty());
}

TEST(ReadTrace, ToleratesBlankLinesCrlfABomSpacesAndQuotedCells) {
  auto r = parse("\xEF\xBB\xBFt, anon\r\n\r\n0.5, \"10\"\r\n\n  \n1,11");
  ASSERT_TRUE(r.ok()) << r.error().message;
  ASSERT_EQ(r->size(), 2u);
  EXPECT_EQ((*r)[0].anon, 10u);
  EXPECT_EQ((*r)[1].anon, 11u) << "no trailing newline";
}

TEST(ReadTrace, AHeaderAloneIsAnEmptyTrace) {
  auto r = parse(std::string(kSamplesHeader) + "\n");
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_TRUE(r->empty());
}

TEST(ReadTrace, AnEmptyFileIsAnError) {
  EXPECT_THAT(parse_error("\n\n"), HasSubstr("trace.csv: empty: no header line"));
}

TEST(ReadTrace, AnUnknownColumnIsNamedWithASuggestion) {
  EXPECT_THAT(parse_error("t,anno\n0,1\n"),
              HasSubstr("trace.csv:1: column anno: unknown column (did you mean anon?)"));
}

TEST(ReadTrace, ARepeatedColumnIsAnError) {
  EXPECT_EQ(parse_error("t,anon,anon\n"), "trace.csv:1: column anon: appears twice in the header");
}

TEST(ReadTrace, AHeaderWithoutTIsAnError) {
  EXPECT_THAT(parse_error("anon\n5\n"), HasSubstr("trace.csv:1: no t column"));
}

TEST(ReadTrace, ABadNumberNamesFileLineAndColumn) {
  EXPECT_EQ(parse_error("t,anon\n0,1\n\n1,12x\n"),
            "trace.csv:4: column anon: \"12x\" is not a number of bytes");
  EXPECT_EQ(parse_error("t,requests\n0,many\n"),
            "trace.csv:2: column requests: \"many\" is not a number");
  EXPECT_EQ(parse_error("t,anon\n0,-3\n"), "trace.csv:2: column anon: -3 is negative");
  EXPECT_EQ(parse_error("t,anon\n0,1e30\n"), "trace.csv:2: column anon: 1e30 is out of range");
  EXPECT_EQ(parse_error("t,threads\n0,5000000000\n"),
            "trace.csv:2: column threads: 5000000000 is out of range");
  EXPECT_EQ(parse_error("t,anon\nsoon,1\n"),
            "trace.csv:2: column t: \"soon\" is not a number of seconds");
  EXPECT_EQ(parse_error("t,anon\nnan,1\n"),
            "trace.csv:2: column t: \"nan\" is not a number of seconds");
}

TEST(ReadTrace, RoundsADecimalSizeDownToWholeBytes) {
  auto r = parse("t,anon,threads\n0,1048576.0,4.0\n1,2.5e3,\n");
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ((*r)[0].anon, 1048576u);
  EXPECT_EQ((*r)[0].threads, 4u);
  EXPECT_EQ((*r)[1].anon, 2500u);
}

TEST(ReadTrace, AHeaderCellWithoutANameIsAnError) {
  EXPECT_EQ(parse_error("t,anon,\n"), "trace.csv:1: column 3 of the header has no name");
}

TEST(ReadTrace, ANegativeTIsAnError) {
  EXPECT_EQ(parse_error("t,anon\n-1,1\n"), "trace.csv:2: column t: -1 is negative");
}

TEST(ReadTrace, ADecreasingTIsAnErrorButARepeatedOneIsNot) {
  EXPECT_TRUE(parse("t,anon\n1,1\n1,2\n").ok());
  EXPECT_EQ(parse_error("t,anon\n1,1\n2.5,2\n2.4,3\n"),
            "trace.csv:4: column t: 2.4 is before the previous row's 2.5");
}

TEST(ReadTrace, AnEmptyTIsAnError) {
  EXPECT_EQ(parse_error("t,anon\n,1\n"), "trace.csv:2: column t: empty; every row needs its time");
}

TEST(ReadTrace, ARowWithTheWrongCellCountIsAnError) {
  EXPECT_EQ(parse_error("t,anon\n0,1,2\n"), "trace.csv:2: 3 cells, but the header has 2");
  EXPECT_EQ(parse_error("t,anon\n0\n"), "trace.csv:2: 1 cells, but the header has 2");
}

TEST(ReadTrace, ADeviceOrAFifoIsRefusedWithoutBlocking) {
  auto r = read_trace_file("/dev/zero");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().message, "/dev/zero: not a regular file: a character device");
}

TEST(ReadTrace, AMissingFileNamesItsPath) {
  auto r = read_trace_file("/nonexistent/trace.csv");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().message, "/nonexistent/trace.csv: No such file or directory");
}

TEST(EventRow, FormatsWallClockTimeAsUtcWithMilliseconds) {
  WallClock::time_point t{std::chrono::sys_days{std::chrono::year{2026} / 11 / 22} + 10h + 15min +
                          3s + 123ms};
  EXPECT_EQ(format_utc(t), "2026-11-22T10:15:03.123Z");
  std::string row;
  append_event_row(row, t, 3, 997335ms, "recycle", 4242, "anon 612 MiB > 600 MiB");
  EXPECT_EQ(row, "2026-11-22T10:15:03.123Z,3,997.335,recycle,4242,anon 612 MiB > 600 MiB");
}

TEST(EventRow, QuotesADetailWithACommaAQuoteOrALineBreak) {
  auto quoted = [](std::string_view s) {
    std::string out;
    append_csv_field(out, s);
    return out;
  };
  EXPECT_EQ(quoted("exit status 1"), "exit status 1");
  EXPECT_EQ(quoted("a, b"), "\"a, b\"");
  EXPECT_EQ(quoted("say \"hi\""), "\"say \"\"hi\"\"\"");
  EXPECT_EQ(quoted("two\nlines"), "\"two\nlines\"");
  EXPECT_EQ(quoted("cr\r"), "\"cr\r\"");
}

class Writer : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/recycler-timeline-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    tmp_ = tmpl;
    config.dir = tmp_ + "/a/b";
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(tmp_, ec);
  }

  TimelineWriter make() {
    auto w = TimelineWriter::create(config, "api", 2);
    EXPECT_TRUE(w.ok()) << w.error().message;
    return std::move(w.value());
  }
  static Sample anon(TimePoint t, uint64_t bytes) {
    Sample s;
    s.t = t;
    s.anon = bytes;
    return s;
  }
  std::string file(const std::string& suffix = "") const {
    return config.dir + "/api.2.csv" + suffix;
  }

  std::string tmp_;
  config::TimelineConfig config;
};

TEST_F(Writer, CreatesTheDirectoryWithItsParentsAndBothFilesWithTheirHeaders) {
  TimelineWriter w = make();
  struct stat st {};
  ASSERT_EQ(::stat(config.dir.c_str(), &st), 0);
  mode_t umask = ::umask(0);
  ::umask(umask);
  EXPECT_EQ(st.st_mode & 0777, 0750 & ~umask);
  ASSERT_EQ(::stat(file().c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0640 & ~umask);
  EXPECT_EQ(w.samples_path(), file());
  EXPECT_EQ(w.events_path(), config.dir + "/api.2.events.csv");
  EXPECT_THAT(lines_of(w.samples_path()), ElementsAre(std::string(kSamplesHeader)));
  EXPECT_THAT(lines_of(w.events_path()), ElementsAre(std::string(kEventsHeader)));
}

TEST_F(Writer, ADirectoryThatCannotBeMadeIsAnErrorNamingThePath) {
  std::ofstream(tmp_ + "/plain") << "not a directory";
  config.dir = tmp_ + "/plain/timelines";
  auto w = TimelineWriter::create(config, "api", 0);
  ASSERT_FALSE(w.ok());
  EXPECT_EQ(w.error().message, tmp_ + "/plain: Not a directory");
}

TEST_F(Writer, NeverWritesThroughASymlinkPlantedInItsDirectory) {
  std::ofstream(tmp_ + "/precious") << "keep me\n";
  fs::create_directories(config.dir);
  fs::create_symlink(tmp_ + "/precious", file());
  auto w = TimelineWriter::create(config, "api", 2);
  ASSERT_FALSE(w.ok());
  EXPECT_EQ(w.error().message, config.dir + "/api.2.csv: a symlink; refusing to write through it");
  EXPECT_THAT(lines_of(tmp_ + "/precious"), ElementsAre("keep me"));
}

TEST_F(Writer, KeepZeroDoesNotTruncateThroughASymlinkPlantedLater) {
  config.keep = 0;
  config.max_size = 100;
  TimelineWriter w = make();
  ASSERT_TRUE(w.start_run(1, 100, kStarted).ok());
  // Swapped while recycler runs: the next rotation reopens by name.
  std::ofstream(tmp_ + "/precious") << "keep me\n";
  fs::remove(file());
  fs::create_symlink(tmp_ + "/precious", file());
  bool failed = false;
  for (int i = 0; i < 20; ++i) failed |= !w.sample(anon(at(std::chrono::seconds(i)), 1)).ok();
  EXPECT_TRUE(failed);
  EXPECT_THAT(lines_of(tmp_ + "/precious"), ElementsAre("keep me"));
}

TEST_F(Writer, RotatesInsideItsDirectoryEvenWhenThePathNowLeadsElsewhere) {
  config.max_size = 100;
  TimelineWriter w = make();
  ASSERT_TRUE(w.start_run(1, 100, kStarted).ok());
  // The directory is moved away and a symlink to another one takes its
  // place: rotation still renames inside the directory it opened.
  fs::rename(config.dir, tmp_ + "/moved");
  fs::create_directories(tmp_ + "/elsewhere");
  fs::create_symlink(tmp_ + "/elsewhere", config.dir);
  for (int i = 0; i < 20; ++i) ASSERT_TRUE(w.sample(anon(at(std::chrono::seconds(i)), 1)).ok());
  EXPECT_TRUE(fs::exists(tmp_ + "/moved/api.2.csv.1"));
  EXPECT_TRUE(fs::is_empty(tmp_ + "/elsewhere"));
}

TEST_F(Writer, WhatItWritesReadsBackAsTheSameSamples) {
  TimelineWriter w = make();
  ASSERT_TRUE(w.start_run(1, 100, kStarted).ok());
  Sample full = anon(at(1250ms), 1000);
  full.current = 1500;
  full.file = 500;
  full.device = 7;
  full.requests = 3;
  full.threads = 4;
  full.processes = {process(100, 600, 300), process(101, 400, 200)};
  ASSERT_TRUE(w.sample(anon(at(0ms), 900)).ok());
  ASSERT_TRUE(w.sample(full).ok());

  auto r = read_trace_file(w.samples_path());
  ASSERT_TRUE(r.ok()) << r.error().message;
  ASSERT_EQ(r->size(), 2u);
  const Sample& back = (*r)[1];
  EXPECT_EQ(back.t, TimePoint{} + 1250ms);
  EXPECT_EQ(back.current, 1500u);
  EXPECT_EQ(back.anon, 1000u);
  EXPECT_EQ(back.file, 500u);
  EXPECT_EQ(back.device, 7u);
  EXPECT_EQ(back.requests, 3u);
  EXPECT_EQ(back.threads, 4u);
  for (Metric m : {Metric::Rss, Metric::Pss, Metric::Uss})
    EXPECT_EQ(value(back, m), value(full, m)) << to_string(m);
  EXPECT_EQ((*r)[0].anon, 900u);
  EXPECT_TRUE((*r)[0].processes.empty());
}

TEST_F(Writer, AppendsToExistingFilesWithoutASecondHeader) {
  {
    TimelineWriter w = make();
    ASSERT_TRUE(w.event("exit", 5, "exit status 0").ok());
  }
  TimelineWriter w = make();
  ASSERT_TRUE(w.event("exit", 6, "exit status 1").ok());
  auto lines = lines_of(w.events_path());
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines[0], kEventsHeader);
  EXPECT_THAT(lines[2], HasSubstr(",exit,6,exit status 1"));
}

TEST_F(Writer, RotatesTheSamplesFileAtEachRunSoThatTStartsAgain) {
  TimelineWriter w = make();
  ASSERT_TRUE(w.start_run(1, 100, kStarted).ok());
  ASSERT_TRUE(w.sample(anon(at(5000ms), 1)).ok());
  TimePoint second = at(60000ms);
  ASSERT_TRUE(w.start_run(2, 200, second).ok());
  ASSERT_TRUE(w.sample(anon(second + 1s, 2)).ok());

  EXPECT_THAT(lines_of(file(".1")), ElementsAre(std::string(kSamplesHeader), "5.000,,1,,,,,,,,,,"));
  EXPECT_THAT(lines_of(file()), ElementsAre(std::string(kSamplesHeader), "1.000,,2,,,,,,,,,,"));
  auto events = lines_of(w.events_path());
  ASSERT_EQ(events.size(), 3u) << "the events file holds every run";
  EXPECT_THAT(events[1], ::testing::MatchesRegex(R"(.*Z,1,[0-9.]+,start,100,)"));
  EXPECT_THAT(events[2], ::testing::MatchesRegex(R"(.*Z,2,[0-9.]+,start,200,)"));
}

TEST_F(Writer, ARunThatRecordedNothingIsNotRotatedAway) {
  TimelineWriter w = make();
  ASSERT_TRUE(w.start_run(1, 100, kStarted).ok());
  ASSERT_TRUE(w.start_run(2, 200, kStarted).ok());
  EXPECT_FALSE(fs::exists(file(".1")));
}

TEST_F(Writer, RotatesBySizeKeepingTheConfiguredNumberOfOldFiles) {
  config.max_size = 200;
  config.keep = 2;
  TimelineWriter w = make();
  ASSERT_TRUE(w.start_run(1, 100, kStarted).ok());
  // A 56-byte header and rows of 16 or 17 bytes: 8 rows a file, 8 files.
  for (int i = 0; i < 60; ++i)
    ASSERT_TRUE(w.sample(anon(at(std::chrono::seconds(i)), 1)).ok()) << i;

  EXPECT_TRUE(fs::exists(file(".1")));
  EXPECT_TRUE(fs::exists(file(".2")));
  EXPECT_FALSE(fs::exists(file(".3")));
  double last = -1;
  for (std::string suffix : {".2", ".1", ""}) {
    EXPECT_LE(fs::file_size(file(suffix)), config.max_size) << suffix;
    auto r = read_trace_file(file(suffix));
    ASSERT_TRUE(r.ok()) << r.error().message;
    ASSERT_FALSE(r->empty()) << suffix;
    EXPECT_GT(seconds(r->front().t), last) << "t goes on across a size rotation";
    last = seconds(r->back().t);
  }
  EXPECT_EQ(last, 59.0);
}

TEST_F(Writer, KeepZeroTruncatesInsteadOfRotating) {
  config.max_size = 100;
  config.keep = 0;
  TimelineWriter w = make();
  ASSERT_TRUE(w.start_run(1, 100, kStarted).ok());
  for (int i = 0; i < 20; ++i) ASSERT_TRUE(w.sample(anon(at(std::chrono::seconds(i)), 1)).ok());
  EXPECT_FALSE(fs::exists(file(".1")));
  auto lines = lines_of(file());
  ASSERT_GE(lines.size(), 2u);
  EXPECT_EQ(lines.front(), kSamplesHeader);
  EXPECT_EQ(lines.back(), "19.000,,1,,,,,,,,,,");
  EXPECT_LE(fs::file_size(file()), config.max_size);
}

TEST_F(Writer, QuotesEventDetailsAndLeavesAMissingPidEmpty) {
  TimelineWriter w = make();
  ASSERT_TRUE(w.start_run(4, 4242, policies::Clock::now()).ok());
  ASSERT_TRUE(w.event("recycle", 4242, "anon 612 MiB > 600 MiB, \"memory\" policy").ok());
  ASSERT_TRUE(w.event("exit", 0, "killed by SIGKILL").ok());
  auto lines = lines_of(w.events_path());
  ASSERT_EQ(lines.size(), 4u);
  const std::string time = R"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z)";
  EXPECT_TRUE(std::regex_match(lines[1], std::regex(time + R"(,4,\d+\.\d{3},start,4242,)")))
      << lines[1];
  EXPECT_TRUE(std::regex_match(
      lines[2],
      std::regex(time +
                 R"(,4,\d+\.\d{3},recycle,4242,"anon 612 MiB > 600 MiB, ""memory"" policy")")))
      << lines[2];
  EXPECT_TRUE(
      std::regex_match(lines[3], std::regex(time + R"(,4,\d+\.\d{3},exit,,killed by SIGKILL)")))
      << lines[3];
}

// RLIMIT_FSIZE makes writes past a size fail (EFBIG), the first one part way:
// a full disk, for this process only.
class FileSizeLimit {
 public:
  explicit FileSizeLimit(rlim_t bytes) {
    old_handler_ = std::signal(SIGXFSZ, SIG_IGN);
    ::getrlimit(RLIMIT_FSIZE, &old_);
    rlimit limit{bytes, old_.rlim_max};
    ok_ = ::setrlimit(RLIMIT_FSIZE, &limit) == 0;
  }
  ~FileSizeLimit() {
    ::setrlimit(RLIMIT_FSIZE, &old_);
    std::signal(SIGXFSZ, old_handler_);
  }
  bool ok() const { return ok_; }

 private:
  rlimit old_{};
  void (*old_handler_)(int);
  bool ok_ = false;
};

TEST_F(Writer, AWriteErrorIsReportedOnceThenRetriedQuietlyAndCutsNoRowInHalf) {
  TimelineWriter w = make();
  ASSERT_TRUE(w.start_run(1, 100, kStarted).ok());
  ASSERT_TRUE(w.sample(anon(at(1000ms), 1)).ok());
  auto size = fs::file_size(file());
  {
    FileSizeLimit full(size + 5);
    ASSERT_TRUE(full.ok());
    Status first = w.sample(anon(at(2000ms), 22222));
    ASSERT_FALSE(first.ok());
    EXPECT_EQ(first.error().message, "write " + file() + ": File too large");
    EXPECT_TRUE(w.sample(anon(at(3000ms), 3)).ok()) << "reported once";
    EXPECT_EQ(fs::file_size(file()), size) << "the part written was cut off";
  }
  ASSERT_TRUE(w.sample(anon(at(4000ms), 4)).ok()) << "retried on the next sample";
  auto r = read_trace_file(file());
  ASSERT_TRUE(r.ok()) << r.error().message;
  ASSERT_EQ(r->size(), 2u);
  EXPECT_EQ((*r)[1].anon, 4u);
  {
    FileSizeLimit full(size);
    ASSERT_TRUE(full.ok());
    EXPECT_FALSE(w.sample(anon(at(5000ms), 5)).ok()) << "a new failure after a success is reported";
  }
}

}  // namespace
}  // namespace recycler::timeline
