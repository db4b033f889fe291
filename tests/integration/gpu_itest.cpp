// GPU memory through NVML with the real binary, real processes and cgroups,
// and the fake driver of tests/support/fake_nvml (no GPU needed): workers
// write what they "hold" on the GPU into the fake's directory, as a CUDA
// program's allocations would show in NVML. A worker whose GPU memory grows
// is recycled before its limit; timelines get the gpu columns; NVML is
// queried once per interval for all workers; a missing library fails `check`
// for a config that needs it and is a warning for one that only records;
// a driver that goes away leaves host memory supervised. `devices:` gives
// each slot its GPUs, from a list or (gpus: auto) from what NVML sees.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <regex>
#include <sstream>
#include <vector>

#include "tests/support/itest.h"

namespace recycler::testing {
namespace {

using ::testing::HasSubstr;

// A shell worker that holds 16 MiB more on GPU 0 every 100 ms, up to `max`
// MiB, and frees it when it exits (a process's GPU memory goes with it).
std::string grower(const std::string& dir, int max_mib = 4096, int step_mib = 16) {
  std::string procs = dir + "/procs";
  return "[/bin/sh, -c, 'f=" + procs +
         "/$$; trap \"rm -f $f; exit 0\" TERM; i=0; "
         "while :; do [ $i -lt " +
         std::to_string(max_mib / step_mib) +
         " ] && i=$((i+1)); "
         "echo \"0 $((i*" +
         std::to_string(step_mib << 20) + "))\" > $f.new && mv $f.new $f; sleep 0.1; done']";
}

// Reads recycler's output until `done` holds (a file it writes says so);
// false after `timeout`.
bool until(Recycler& r, const std::function<bool()>& done, Millis timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!done()) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    r.wait_readable(-1, 20ms);  // no fd of its own: just the output, for 20 ms
  }
  return true;
}

size_t rows(const std::string& csv) {
  std::ifstream in(csv);
  size_t n = 0;
  for (std::string row; std::getline(in, row);) ++n;
  return n;
}

struct Gpu {
  explicit Gpu(const Sandbox& sb, uint64_t total = 1ull << 30) : dir(sb.tmp() + "/nvml") {
    std::filesystem::create_directories(dir + "/procs");
    std::ofstream(dir + "/devices") << total << "\n";
  }
  Recycler::Options options(const Sandbox& sb) const {
    Recycler::Options o;
    o.join_fds = sb.join_fds();
    o.env = {"RECYCLER_FAKE_NVML_DIR=" + dir};
    return o;
  }
  int calls() const {
    std::ifstream in(dir + "/calls");
    int n = 0;
    for (std::string line; std::getline(in, line);) ++n;
    return n;
  }
  std::string dir;
};

std::string gpu_section(const std::string& library = fake_nvml_lib()) {
  return "gpu: {nvml: " + library + "}\n";
}

// "train[0] recycle: gpu 560 MiB > 512 MiB (50% of 1 GiB) (memory policy)" -> 560
std::optional<double> recycled_at_mib(const std::string& line) {
  static const std::regex kValue(R"(recycle: gpu ([0-9.]+) MiB > )");
  std::smatch m;
  if (!std::regex_search(line, m, kValue)) return std::nullopt;
  return std::stod(m[1].str());
}

TEST(Gpu, AWorkerWhoseGpuMemoryGrowsIsRecycledBeforeTheDeviceFills) {
  RECYCLER_REQUIRE_CGROUPS();
  Sandbox sb;
  Gpu gpu(sb);
  std::string cfg = sb.write("g.yaml", config_yaml(sb, R"(  train:
    command: )" + grower(gpu.dir) + R"(
    sample_interval: 100ms
    policies:
      - memory: {metric: gpu, limit: 50%}
    stop: {timeout: 5s}
)",
                                                   gpu_section()));
  Recycler r({"run", "-c", cfg}, gpu.options(sb));
  auto line = r.wait_for("train[0] recycle: gpu", scaled(30s));
  ASSERT_TRUE(line);
  EXPECT_THAT(*line, HasSubstr("(50% of 1 GiB) (memory policy)"));
  auto mib = recycled_at_mib(*line);
  ASSERT_TRUE(mib) << *line;
  EXPECT_GT(*mib, 512.0);
  EXPECT_LT(*mib, 1024.0) << "recycled only once the GPU was full";
  ASSERT_TRUE(r.wait_for_count("train[0] started: pid", 2, scaled(20s)));
  r.signal(SIGTERM);
  EXPECT_EQ(r.exit_code(scaled(10s)), 0);
}

TEST(Gpu, TheLeakPolicyOnGpuRecyclesBeforeTheProjectedCrossing) {
  RECYCLER_REQUIRE_CGROUPS();
  Sandbox sb;
  Gpu gpu(sb);
  // 80 MiB/s toward 90% of a 1 GiB GPU: the limit is ~11.5 s away at start.
  std::string cfg = sb.write("g.yaml", config_yaml(sb, R"(  train:
    command: )" + grower(gpu.dir, 4096, 8) + R"(
    sample_interval: 100ms
    policies:
      - leak: {metric: gpu, window: 8s, warmup: 1s, horizon: 5s, limit: 90%}
    stop: {timeout: 5s}
)",
                                                   gpu_section()));
  Recycler r({"run", "-c", cfg}, gpu.options(sb));
  auto line = r.wait_for("train[0] recycle: gpu +", scaled(30s));
  ASSERT_TRUE(line);
  EXPECT_THAT(*line, HasSubstr("of 921.6 MiB (90% of 1 GiB)"));
  EXPECT_THAT(*line, HasSubstr("(leak policy)"));
  ASSERT_TRUE(r.wait_for_count("train[0] started: pid", 2, scaled(20s)));
  r.signal(SIGTERM);
  EXPECT_EQ(r.exit_code(scaled(10s)), 0);
}

TEST(Gpu, TimelinesRecordTheGpuColumnsAndNvmlIsAskedOncePerIntervalForAllWorkers) {
  RECYCLER_REQUIRE_CGROUPS();
  Sandbox sb;
  Gpu gpu(sb);
  std::string timelines = sb.tmp() + "/timelines";
  std::string cfg = sb.write("g.yaml", config_yaml(sb, R"(  train:
    command: )" + grower(gpu.dir, 64) + R"(
    instances: 4
    sample_interval: 100ms
    timeline: {dir: )" + timelines + R"(}
)",
                                                   gpu_section()));
  Recycler r({"run", "-c", cfg}, gpu.options(sb));
  ASSERT_TRUE(r.wait_for_count("started: pid", 4, scaled(20s)));
  // Until the last worker holds its 64 MiB and its timeline shows it.
  std::string csv = timelines + "/train.3.csv";
  auto holds_all = [&] {
    return read_text(csv).find(",67108864,67108864,\n") != std::string::npos;
  };
  ASSERT_TRUE(until(r, holds_all, scaled(20s))) << read_text(csv);
  std::ifstream in(csv);
  std::string header;
  std::getline(in, header);
  EXPECT_EQ(header,
            "t,current,anon,file,rss,pss,uss,device,requests,threads,gpu,gpu_total,iteration");
  // Over the next 20 samples of one worker, NVML is asked about once per
  // sample for the four workers together (four times that if it were asked
  // per worker).
  size_t from_rows = rows(csv);
  int from_calls = gpu.calls();
  ASSERT_TRUE(until(
      r, [&] { return rows(csv) >= from_rows + 20; }, scaled(20s)));
  int calls = gpu.calls() - from_calls;
  size_t samples = rows(csv) - from_rows;
  EXPECT_GE(calls, 1);
  EXPECT_LE(calls, static_cast<int>(samples) + 10) << samples << " samples";
  r.signal(SIGTERM);
  EXPECT_EQ(r.exit_code(scaled(10s)), 0);
}

// In a pod, recycler's /proc is its own pid namespace's while NVML lists the
// host's pids: here the fake NVML lists a host pid recycler cannot see (and
// the worker's own namespace number, which on a real node would be some
// other process's). The worker's gpu figure is unknown (an empty timeline
// column, no recycle), never 0, and the log says why once; a slot with a
// whole GPU of its own (devices:) has that GPU's used memory instead.
TEST(Gpu, InAPodsPidNamespaceTheFigureIsUnknownNotZeroUnlessTheSlotHasWholeGpus) {
  RECYCLER_REQUIRE_CGROUPS();
  if (auto why = pid_namespace_skip()) GTEST_SKIP() << *why;
  Sandbox sb;
  Gpu gpu(sb);
  // Two GPUs of 1 GiB; another pod's process (a host pid) holds 600 MiB on GPU 1.
  std::ofstream(gpu.dir + "/devices") << (1 << 30) << "\n" << (1 << 30) << "\n";
  std::ofstream(gpu.dir + "/procs/4000123") << "1 " << (600 << 20) << "\n";
  std::string timelines = sb.tmp() + "/timelines";
  // `pinned` has GPU 0 alone (devices:): its used memory stands in for the
  // worker's figure, and its policy acts on it.
  std::string cfg = sb.write("g.yaml", config_yaml(sb, R"(  train:
    command: )" + grower(gpu.dir, 64) + R"(
    sample_interval: 100ms
    timeline: {dir: )" + timelines + R"(}
    policies:
      - memory: {metric: gpu, limit: 10%}
  pinned:
    command: )" + grower(gpu.dir, 96) + R"(
    sample_interval: 100ms
    devices: {gpus: [0]}
    policies:
      - memory: {metric: gpu, limit: 5%}
)",
                                                   gpu_section()));
  Recycler r(in_pid_namespace_args({"run", "-c", cfg}), in_pid_namespace(gpu.options(sb)));
  EXPECT_TRUE(
      r.wait_for("GPU: NVML numbers processes in the host's pid namespace, which "
                 "recycler cannot see",
                 scaled(20s)))
      << r.output();
  std::string csv = timelines + "/train.0.csv";
  int from_calls = gpu.calls();
  ASSERT_TRUE(until(
      r, [&] { return rows(csv) >= 20 && gpu.calls() >= from_calls + 5; }, scaled(20s)))
      << read_text(csv);
  // Every row: gpu and gpu_total empty (columns 11 and 12 of 13).
  std::ifstream in(csv);
  std::string row;
  std::getline(in, row);
  size_t checked = 0;
  while (std::getline(in, row)) {
    std::vector<std::string> cells;
    std::stringstream ss(row);
    for (std::string cell; std::getline(ss, cell, ',');) cells.push_back(cell);
    cells.resize(13);
    EXPECT_EQ(cells[10], "") << row;
    EXPECT_EQ(cells[11], "") << row;
    ++checked;
  }
  EXPECT_GE(checked, 19u);
  EXPECT_EQ(r.count("train[0] recycle: gpu"), 0u) << r.output();
  EXPECT_TRUE(r.wait_for_count("pinned[0] recycle: gpu", 1, 20s)) << r.output();
  EXPECT_GE(r.count("MiB > 51.2 MiB (5% of 1 GiB) (memory policy)"), 1u) << r.output();
  EXPECT_EQ(r.count("pinned: its workers' gpu figure is the used memory of the GPUs each slot "
                    "has alone"),
            1u)
      << r.output();
  EXPECT_EQ(r.count("GPU: NVML numbers processes"), 1u) << "said once";
  ::kill(child_of(r.pid()), SIGTERM);
  EXPECT_EQ(r.exit_code(scaled(10s)), 0);
}

TEST(Gpu, CheckFailsAConfigThatNeedsAMissingNvmlAtThePolicy) {
  Sandbox sb;
  std::string cfg = sb.write("g.yaml", gpu_section("/nonexistent/libnvidia-ml.so.1") + R"(programs:
  train:
    command: [/bin/true]
    policies:
      - memory: {metric: gpu, limit: 90%}
)");
  Recycler r({"check", "-c", cfg}, Recycler::Options{});
  EXPECT_EQ(r.exit_code(scaled(10s)), 2);
  EXPECT_THAT(r.output(), HasSubstr("g.yaml:6:9: error: programs.train.policies[0].memory: reads "
                                    "GPU memory through NVML, which cannot be used: cannot load "
                                    "NVML: /nonexistent/libnvidia-ml.so.1"));
}

TEST(Gpu, AMissingNvmlIsOneWarningForAConfigThatOnlyRecordsTimelines) {
  RECYCLER_REQUIRE_CGROUPS();
  Sandbox sb;
  std::string cfg = sb.write("g.yaml", config_yaml(sb, R"(  idle:
    command: [/bin/sleep, "60"]
    sample_interval: 50ms
    timeline: {dir: )" + sb.tmp() + R"(/timelines}
)",
                                                   gpu_section("/nonexistent/libnvidia-ml.so.1")));
  Recycler r({"run", "-c", cfg}, sb);
  ASSERT_TRUE(r.wait_for("GPU: cannot load NVML: /nonexistent/libnvidia-ml.so.1", scaled(10s)));
  // Samples go on (the timeline grows) and the warning is not repeated.
  std::string csv = sb.tmp() + "/timelines/idle.0.csv";
  ASSERT_TRUE(until(
      r, [&] { return rows(csv) >= 20; }, scaled(20s)));
  EXPECT_EQ(r.count("GPU: cannot load NVML"), 1u) << r.output();
  r.signal(SIGTERM);
  EXPECT_EQ(r.exit_code(scaled(10s)), 0);
}

TEST(Gpu, ADriverThatGoesAwayIsAWarningAndHostMemoryIsStillSupervised) {
  RECYCLER_REQUIRE_CGROUPS();
  Sandbox sb;
  Gpu gpu(sb);
  std::string cfg = sb.write("g.yaml", config_yaml(sb, R"(  leak:
    command: [")" + leaky_bin() + R"(", "--rate", "20MiB", "--step", "50", "--max", "1GiB"]
    limits: {memory_max: 512MiB}
    sample_interval: 100ms
    policies:
      - memory: {metric: gpu, limit: 90%}
      - memory: {metric: anon, limit: 100MiB}
)",
                                                   gpu_section()));
  Recycler r({"run", "-c", cfg}, gpu.options(sb));
  ASSERT_TRUE(r.wait_for("leak[0] started: pid"));
  std::ofstream(gpu.dir + "/lost") << "";
  // Named by whichever NVML call of the sample found the driver gone: the file
  // may appear between the device count and the process query
  // (NvmlTest.ADriverThatGoesAwayMidQueryIsReportedByTheCallThatFound).
  ASSERT_TRUE(r.wait_for("GPU is lost (15); GPU figures stay empty", scaled(10s)));
  ASSERT_TRUE(r.wait_for("leak[0] recycle: anon", scaled(30s)));
  std::filesystem::remove(gpu.dir + "/lost");
  ASSERT_TRUE(r.wait_for("GPU: NVML answers again: 1 device", scaled(10s)));
  r.signal(SIGTERM);
  EXPECT_EQ(r.exit_code(scaled(10s)), 0);
}

// --- devices: each slot's CUDA_VISIBLE_DEVICES (config/devices.h) ---

// A worker that says which GPUs it was given, then waits.
constexpr const char* kSaysItsGpus =
    R"(["sh", "-c", "echo gpus=$CUDA_VISIBLE_DEVICES order=$CUDA_DEVICE_ORDER; exec sleep 1000"])";

TEST(Devices, EachSlotGetsItsShareOfTheListedGpusAndTheProgramsEnvWins) {
  RECYCLER_REQUIRE_CGROUPS();
  RECYCLER_HOST_ONLY();
  Sandbox sb;
  std::string cfg = sb.write("d.yaml", config_yaml(sb, std::string(R"(  train:
    command: )") + kSaysItsGpus + R"(
    instances: 2
    devices: {gpus: [0, 1, 2], per_slot: 2}
  mine:
    command: )" + kSaysItsGpus + R"(
    env: {CUDA_VISIBLE_DEVICES: "7", CUDA_DEVICE_ORDER: FASTEST_FIRST}
    devices: {gpus: [0]}
)"));
  Recycler r({"run", "-c", cfg}, sb);
  EXPECT_TRUE(r.wait_for_count("train[0] out | gpus=0,1 order=PCI_BUS_ID", 1));
  EXPECT_TRUE(r.wait_for_count("train[1] out | gpus=2,0 order=PCI_BUS_ID", 1));
  EXPECT_TRUE(r.wait_for_count("mine[0] out | gpus=7 order=FASTEST_FIRST", 1));
  r.signal(SIGTERM);
  EXPECT_EQ(r.exit_code(scaled(10s)), 0);
}

// The test's own CUDA_VISIBLE_DEVICES would be the pool instead of NVML's.
#define REQUIRE_NO_CUDA_VISIBLE_DEVICES()                       \
  if (std::getenv("CUDA_VISIBLE_DEVICES"))                      \
  GTEST_SKIP() << "CUDA_VISIBLE_DEVICES is set for the tests: " \
                  "recycler would share it out instead of asking NVML"

TEST(Devices, AutoSharesOutTheGpusNvmlSees) {
  RECYCLER_REQUIRE_CGROUPS();
  RECYCLER_HOST_ONLY();
  REQUIRE_NO_CUDA_VISIBLE_DEVICES();
  Sandbox sb;
  Gpu gpu(sb);
  std::ofstream(gpu.dir + "/devices") << "1073741824\n1073741824\n1073741824\n";
  std::string cfg = sb.write("d.yaml", config_yaml(sb, std::string(R"(  train:
    command: )") + kSaysItsGpus + R"(
    instances: 4
    devices: {gpus: auto}
)",
                                                   gpu_section()));
  Recycler r({"run", "-c", cfg}, gpu.options(sb));
  EXPECT_TRUE(r.wait_for("devices.gpus: auto shares out 3 GPUs (NVML): 0,1,2"));
  EXPECT_TRUE(r.wait_for_count("train[0] out | gpus=0 order=PCI_BUS_ID", 1));
  EXPECT_TRUE(r.wait_for_count("train[1] out | gpus=1 order=PCI_BUS_ID", 1));
  EXPECT_TRUE(r.wait_for_count("train[2] out | gpus=2 order=PCI_BUS_ID", 1));
  EXPECT_TRUE(r.wait_for_count("train[3] out | gpus=0 order=PCI_BUS_ID", 1));
  r.signal(SIGTERM);
  EXPECT_EQ(r.exit_code(scaled(10s)), 0);
}

// Under Slurm (or any launcher that picks the GPUs): what recycler was given
// is what it shares, and NVML is not needed.
TEST(Devices, AutoSharesOutTheCudaVisibleDevicesRecyclerWasGiven) {
  RECYCLER_REQUIRE_CGROUPS();
  RECYCLER_HOST_ONLY();
  Sandbox sb;
  std::string cfg = sb.write("d.yaml", config_yaml(sb, std::string(R"(  train:
    command: )") + kSaysItsGpus + R"(
    instances: 2
    devices: {gpus: auto}
)",
                                                   gpu_section("/nonexistent/libnvidia-ml.so.1")));
  Recycler::Options o = in_sandbox(sb);
  o.env = {"CUDA_VISIBLE_DEVICES=5,7", "CUDA_DEVICE_ORDER=PCI_BUS_ID"};
  Recycler r({"run", "-c", cfg}, std::move(o));
  EXPECT_TRUE(r.wait_for(
      "devices.gpus: auto shares out 2 GPUs (recycler's own CUDA_VISIBLE_DEVICES): 5,7"));
  EXPECT_TRUE(r.wait_for_count("train[0] out | gpus=5 order=PCI_BUS_ID", 1));
  EXPECT_TRUE(r.wait_for_count("train[1] out | gpus=7 order=PCI_BUS_ID", 1));
  r.signal(SIGTERM);
  EXPECT_EQ(r.exit_code(scaled(10s)), 0);
}

TEST(Devices, AutoWithAnNvmlThatCannotStartRefusesToStart) {
  RECYCLER_REQUIRE_CGROUPS();
  RECYCLER_HOST_ONLY();
  REQUIRE_NO_CUDA_VISIBLE_DEVICES();
  Sandbox sb;
  Gpu gpu(sb);
  std::ofstream(gpu.dir + "/fail_init") << "";
  std::string cfg = sb.write("d.yaml", config_yaml(sb, std::string(R"(  train:
    command: )") + kSaysItsGpus + R"(
    devices: {gpus: auto}
)",
                                                   gpu_section()));
  Recycler r({"run", "-c", cfg}, gpu.options(sb));
  EXPECT_EQ(r.exit_code(scaled(10s)), 1);
  EXPECT_THAT(r.output(), HasSubstr("train: devices.gpus: auto counts the GPUs through NVML, "
                                    "which cannot be used: NVML: nvmlInit_v2: "));
  EXPECT_EQ(r.count("train[0] started"), 0u) << r.output();
}

}  // namespace
}  // namespace recycler::testing
