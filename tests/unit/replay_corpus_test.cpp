// The acceptance test of the leak policy: every trace of the corpus in
// tests/fixtures/traces replayed through corpus.yaml, as expected.csv says:
//
//   trace,program,expect,crosses_at,min_lead
//   steady_leak,host,fire,6790.0,600
//   sawtooth,host,quiet,,600
//
// A `fire` trace must give a decision at least min_lead seconds before the
// metric crosses the limit (at crosses_at; no deadline when it is empty); a
// `quiet` trace must give none at all. Each trace is also replayed with
// PROGRAM_baseline (the least-squares estimator) for comparison: printed, not
// asserted. One test per row of the manifest, read when the tests are listed
// (ctest lists them again before each run); a missing manifest is one
// failing test. The corpus in tests/fixtures/timeline/corpus checks this
// machinery itself, with memory limits standing in for the leak policy.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <iostream>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "supervisor/config/parse.h"
#include "supervisor/timeline/replay.h"
#include "supervisor/timeline/trace.h"

namespace recycler::timeline {
namespace {

const std::string kCorpus = RECYCLER_FIXTURES_DIR "/traces";
const std::string kOwnCorpus = RECYCLER_FIXTURES_DIR "/timeline/corpus";

struct Case {
  std::string corpus;  // its directory
  std::string name;    // the test's name
  std::string trace;   // corpus/TRACE.csv
  std::string program;
  bool fire = false;
  std::optional<double> crosses_at;
  double min_lead = 0;
  std::string error;  // what is wrong with the manifest: the test fails with it
};

void PrintTo(const Case& c, std::ostream* os) {
  *os << c.trace << " (" << c.program << ")";
}

std::vector<std::string> split(const std::string& line) {
  std::vector<std::string> out;
  size_t start = 0;
  for (size_t comma; (comma = line.find(',', start)) != std::string::npos; start = comma + 1)
    out.push_back(line.substr(start, comma - start));
  out.push_back(line.substr(start));
  return out;
}

// A C++ identifier, unique among `taken`.
std::string test_name(const std::string& trace, std::set<std::string>& taken) {
  std::string base;
  for (char c : trace) base += std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
  std::string name = base;
  for (int i = 2; !taken.insert(name).second; ++i) name = base + "_" + std::to_string(i);
  return name;
}

std::optional<double> number(const std::string& cell) {
  try {
    size_t used = 0;
    double v = std::stod(cell, &used);
    if (used == cell.size()) return v;
  } catch (const std::exception&) {
  }
  return std::nullopt;
}

std::vector<Case> load_manifest(const std::string& corpus) {
  const std::string path = corpus + "/expected.csv";
  auto failing = [&](std::string name, std::string error) {
    Case c;
    c.corpus = corpus;
    c.name = std::move(name);
    c.error = path + ": " + std::move(error);
    return std::vector<Case>{c};
  };
  std::ifstream in(path);
  if (!in) return failing("manifest_missing", "cannot be read");
  std::vector<Case> out;
  std::set<std::string> taken;
  std::string line;
  const std::vector<std::string> header = {"trace", "program", "expect", "crosses_at", "min_lead"};
  for (int n = 1; std::getline(in, line); ++n) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty()) continue;
    std::vector<std::string> cells = split(line);
    if (n == 1) {
      if (cells != header) return failing("manifest_header", "the header is not trace,program,...");
      continue;
    }
    Case c;
    c.corpus = corpus;
    c.name = test_name(cells.front(), taken);
    c.trace = cells.front();
    auto bad = [&](const std::string& why) {
      c.error = path + ":" + std::to_string(n) + ": " + why;
    };
    if (cells.size() != header.size()) {
      bad(std::to_string(cells.size()) + " cells, not 5");
    } else {
      c.program = cells[1];
      c.fire = cells[2] == "fire";
      if (!c.fire && cells[2] != "quiet") bad("expect is \"" + cells[2] + "\", not fire or quiet");
      if (!cells[3].empty() && !(c.crosses_at = number(cells[3])))
        bad("crosses_at \"" + cells[3] + "\" is not a number");
      if (auto lead = number(cells[4]))
        c.min_lead = *lead;
      else
        bad("min_lead \"" + cells[4] + "\" is not a number");
    }
    out.push_back(c);
  }
  if (out.empty()) return failing("manifest_empty", "no traces");
  return out;
}

// When the first decision came (nullopt: never), or why the replay could not run.
struct Outcome {
  std::optional<double> fired_at;
  std::string reason;
  std::string error;
};

Outcome replay_case(const Case& c, const std::string& program) {
  Outcome out;
  config::LoadResult loaded = config::load_file(c.corpus + "/corpus.yaml");
  for (const auto& e : loaded.errors) out.error += e.str() + "\n";
  if (!loaded.config) return out;
  const config::ProgramConfig* p = loaded.config->find(program);
  if (!p) {
    out.error = "no program " + program + " in " + c.corpus + "/corpus.yaml";
    return out;
  }
  auto samples = read_trace_file(c.corpus + "/" + c.trace + ".csv");
  if (!samples) {
    out.error = samples.error().message;
    return out;
  }
  auto decisions = replay(*p, *samples, {.seed = 0, .stop_at_first = true});
  if (!decisions.empty()) {
    out.fired_at = decisions.front().t;
    out.reason = decisions.front().policy + ": " + decisions.front().decision.reason;
  }
  return out;
}

std::string cell(const std::optional<double>& v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", v.value_or(0));
  return v ? buf : "-";
}

void print_header() {
  std::printf("%-20s %-6s %11s | %-24s | %-24s\n", "trace", "expect", "crosses_at",
              "robust: fires at, lead", "baseline: fires at, lead");
}

void print_row(const Case& c, const Outcome& robust, const Outcome& baseline) {
  auto lead = [&](const Outcome& o) -> std::optional<double> {
    if (!o.fired_at || !c.crosses_at) return std::nullopt;
    return *c.crosses_at - *o.fired_at;
  };
  auto result = [&](const Outcome& o) {
    if (!o.error.empty()) return std::string("error");
    return o.fired_at ? cell(o.fired_at) + " s, " + cell(lead(o)) + " s" : std::string("quiet");
  };
  std::printf("%-20s %-6s %11s | %-24s | %-24s\n", c.trace.c_str(), c.fire ? "fire" : "quiet",
              cell(c.crosses_at).c_str(), result(robust).c_str(), result(baseline).c_str());
  std::fflush(stdout);
}

class CorpusTrace : public ::testing::TestWithParam<Case> {};

TEST_P(CorpusTrace, FiresEarlyEnoughOrStaysQuiet) {
  const Case& c = GetParam();
  ASSERT_EQ(c.error, "");
  Outcome robust = replay_case(c, c.program);
  ASSERT_EQ(robust.error, "");
  Outcome baseline = replay_case(c, c.program + "_baseline");
  print_header();
  print_row(c, robust, baseline);
  if (c.fire) {
    ASSERT_TRUE(robust.fired_at) << c.trace << " never fired";
    if (c.crosses_at) {
      EXPECT_LE(*robust.fired_at, *c.crosses_at - c.min_lead)
          << c.trace << " fired too late for a " << c.min_lead << " s lead: " << robust.reason;
    }
  } else {
    EXPECT_FALSE(robust.fired_at) << c.trace << " fired at " << cell(robust.fired_at)
                                  << " s: " << robust.reason;
  }
}

std::string case_name(const ::testing::TestParamInfo<Case>& info) {
  return info.param.name;
}

INSTANTIATE_TEST_SUITE_P(Corpus, CorpusTrace, ::testing::ValuesIn(load_manifest(kCorpus)),
                         case_name);
INSTANTIATE_TEST_SUITE_P(OwnCorpus, CorpusTrace, ::testing::ValuesIn(load_manifest(kOwnCorpus)),
                         case_name);

TEST(CorpusTable, PrintsEveryTraceWithTheRobustAndTheBaselineEstimator) {
  std::vector<Case> cases = load_manifest(kCorpus);
  ASSERT_EQ(cases.front().error, "");
  print_header();
  for (const Case& c : cases) {
    Outcome robust = replay_case(c, c.program);
    Outcome baseline = replay_case(c, c.program + "_baseline");
    print_row(c, robust, baseline);
    EXPECT_EQ(robust.error, "") << c.trace;
    EXPECT_EQ(baseline.error, "") << c.trace;
  }
}

TEST(CorpusManifest, AMissingManifestIsOneFailingCase) {
  std::vector<Case> cases = load_manifest("/nonexistent");
  ASSERT_EQ(cases.size(), 1u);
  EXPECT_EQ(cases[0].name, "manifest_missing");
  EXPECT_EQ(cases[0].error, "/nonexistent/expected.csv: cannot be read");
}

TEST(CorpusManifest, ReadsEveryRowOfTheOwnCorpus) {
  std::vector<Case> cases = load_manifest(kOwnCorpus);
  ASSERT_EQ(cases.size(), 2u);
  EXPECT_EQ(cases[0].error, "");
  EXPECT_EQ(cases[0].trace, "ramp");
  EXPECT_EQ(cases[0].program, "host");
  EXPECT_TRUE(cases[0].fire);
  EXPECT_EQ(cases[0].crosses_at, 60.0);
  EXPECT_EQ(cases[0].min_lead, 20.0);
  EXPECT_FALSE(cases[1].fire);
  EXPECT_FALSE(cases[1].crosses_at);
}

}  // namespace
}  // namespace recycler::timeline
