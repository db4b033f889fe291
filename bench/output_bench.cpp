// A worker's output line through recycler. log::output() formats it for the
// log (spdlog: its time, "api[0] out | " and the escaped text) and, since
// `recycler logs`, hands it to the observer that Supervisor::open_control
// sets: the line as JSON with its time (control::output_line) into its slot's
// ring (control::Server::publish_output, a map of EventRings).
//
//   BM_OutputLine/ring:0   the log alone, as before `recycler logs`
//   BM_OutputLine/ring:1   the log and the ring, as a run with a control socket does
//   BM_RingOnly            the ring's share alone: time, JSON, push
//
// Lines of 80 printable bytes; the log's lines go to a capture that drops
// them (no write(): the cost measured is recycler's own). Run from a Release
// build:  build-bench/bench/bench_output
#include <benchmark/benchmark.h>

#include <chrono>
#include <map>
#include <string>
#include <utility>

#include "supervisor/control/protocol.h"
#include "supervisor/log/log.h"

namespace {

using namespace recycler;

const std::string kLine(80, 'x');

std::map<std::pair<std::string, unsigned>, control::EventRing> g_rings;

void to_ring(std::string_view program, unsigned slot, pid_t pid, log::Stream stream,
             std::string_view line, bool partial) {
  std::string json =
      control::output_line(control::timestamp(), program, slot, pid,
                           stream == log::Stream::Stdout ? "stdout" : "stderr", line, partial);
  auto [it, added] =
      g_rings.try_emplace({std::string(program), slot},
                          control::EventRing(control::kLogRingLines, control::kLogRingBytes));
  it->second.push(std::move(json));
}

void BM_OutputLine(benchmark::State& state) {
  log::init(log::Level::Info, config::LogFormat::Text, [](std::string_view) {});
  log::observe_output(state.range(0) ? log::OutputObserver(to_ring) : nullptr);
  for (auto _ : state) log::output("api", 0, 4242, log::Stream::Stdout, kLine, false);
  log::observe_output(nullptr);
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_OutputLine)->ArgName("ring")->Arg(0)->Arg(1);

void BM_RingOnly(benchmark::State& state) {
  for (auto _ : state) to_ring("api", 0, 4242, log::Stream::Stdout, kLine, false);
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_RingOnly);

}  // namespace

BENCHMARK_MAIN();
