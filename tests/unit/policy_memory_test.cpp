#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <csignal>

#include "policies/metric.h"
#include "tests/support/policy_harness.h"

namespace recycler::testing {
namespace {

using namespace std::chrono_literals;
using policies::kNeedsCgroupMemory;
using policies::kNeedsProcesses;
using policies::kNeedsProcessMemory;
using ::testing::ElementsAre;

class MemoryPolicy : public ::testing::Test {
 protected:
  Sample anon(uint64_t bytes) {
    Sample s;
    s.t = clock.now();
    s.anon = bytes;
    return s;
  }
  Sample current(uint64_t bytes) {
    Sample s;
    s.t = clock.now();
    s.current = bytes;
    return s;
  }
  // One sample of processes with their uss; the first is the main process.
  Sample uss(std::vector<std::pair<pid_t, uint64_t>> processes) {
    Sample s;
    s.t = clock.now();
    for (size_t i = 0; i < processes.size(); ++i) {
      ProcessSample p = proc(processes[i].first, i == 0);
      p.uss = processes[i].second;
      s.processes.push_back(p);
    }
    return s;
  }

  FakeClock clock;
  WorkerContext worker = worker_at(clock.now());
};

TEST_F(MemoryPolicy, IsRegisteredAsMemory) {
  auto policy = make("memory", "{limit: 1GiB}");
  ASSERT_TRUE(policy);
  EXPECT_EQ(policy->name(), "memory");
}

TEST_F(MemoryPolicy, WithoutForFiresOnTheFirstSampleOverTheLimit) {
  auto policy = make("memory", "{limit: 300MiB}");
  Watch watch(*policy, worker);
  EXPECT_FALSE(watch(anon(299_MiB)));
  clock.advance(1s);
  Decision d = watch(anon(301_MiB));
  EXPECT_EQ(d.action, Decision::Action::Restart);
  EXPECT_EQ(d.reason, "anon 301 MiB > 300 MiB");
}

TEST_F(MemoryPolicy, AtTheLimitIsNotOver) {
  auto policy = make("memory", "{limit: 300MiB}");
  Watch watch(*policy, worker);
  EXPECT_FALSE(watch(anon(300_MiB)));
}

TEST_F(MemoryPolicy, KeepsFiringWhileOverTheLimit) {
  auto policy = make("memory", "{limit: 300MiB}");
  Watch watch(*policy, worker);
  for (int i = 0; i < 3; ++i) {
    EXPECT_TRUE(watch(anon(400_MiB))) << "evaluation " << i;
    clock.advance(1s);
  }
}

TEST_F(MemoryPolicy, ForWaitsUntilTheLimitHasHeldThatLong) {
  auto policy = make("memory", "{metric: anon, limit: 600MiB, for: 10s}");
  Watch watch(*policy, worker);
  for (int i = 0; i < 10; ++i) {
    EXPECT_FALSE(watch(anon(612_MiB))) << "after " << i << "s";
    clock.advance(1s);
  }
  Decision d = watch(anon(612_MiB));
  EXPECT_EQ(d.action, Decision::Action::Restart);
  EXPECT_EQ(d.reason, "anon 612 MiB > 600 MiB for 10s");
}

TEST_F(MemoryPolicy, ReasonGivesTheTimeTheLimitActuallyHeld) {
  auto policy = make("memory", "{limit: 600MiB, for: 10s}");
  Watch watch(*policy, worker);
  watch(anon(700_MiB));
  clock.advance(12500ms);
  EXPECT_EQ(watch(anon(700_MiB)).reason, "anon 700 MiB > 600 MiB for 12.5s");
}

TEST_F(MemoryPolicy, ADipUnderTheLimitStartsForOver) {
  auto policy = make("memory", "{limit: 600MiB, for: 10s}");
  Watch watch(*policy, worker);
  watch(anon(700_MiB));
  clock.advance(8s);
  EXPECT_FALSE(watch(anon(500_MiB)));
  clock.advance(1s);
  EXPECT_FALSE(watch(anon(700_MiB)));
  clock.advance(9s);
  EXPECT_FALSE(watch(anon(700_MiB))) << "9s over since the dip";
  clock.advance(1s);
  EXPECT_TRUE(watch(anon(700_MiB)));
}

TEST_F(MemoryPolicy, ShortSpikesUnderALongForNeverFire) {
  auto policy = make("memory", "{limit: 1GiB, for: 10s}");
  Watch watch(*policy, worker);
  // A 2 s spike every 5 s for ten minutes, sampled every 500 ms.
  for (int tick = 0; tick < 1200; ++tick) {
    bool spike = tick % 10 < 4;
    EXPECT_FALSE(watch(anon(spike ? 2_GiB : 512_MiB))) << "tick " << tick;
    clock.advance(500ms);
  }
}

TEST_F(MemoryPolicy, AMissingFigureNeitherResetsNorFires) {
  auto policy = make("memory", "{limit: 600MiB, for: 10s}");
  Watch watch(*policy, worker);
  watch(anon(700_MiB));
  clock.advance(10s);
  Sample blind;
  blind.t = clock.now();
  EXPECT_FALSE(watch(blind)) << "no figure, no opinion";
  clock.advance(1s);
  EXPECT_EQ(watch(anon(700_MiB)).reason, "anon 700 MiB > 600 MiB for 11s")
      << "the hold started before the gap";
}

TEST_F(MemoryPolicy, DefaultMetricIsAnonNotCurrent) {
  auto policy = make("memory", "{limit: 1GiB}");
  Watch watch(*policy, worker);
  Sample s = anon(100_MiB);
  s.current = 3_GiB;  // page cache would fake a leak
  s.file = 2_GiB;
  EXPECT_FALSE(watch(s));
}

TEST_F(MemoryPolicy, CurrentMetricReadsTheCgroupTotal) {
  auto policy = make("memory", "{metric: current, limit: 1GiB}");
  Watch watch(*policy, worker);
  EXPECT_EQ(watch(current(2_GiB)).reason, "current 2 GiB > 1 GiB");
}

TEST_F(MemoryPolicy, PercentageResolvesAgainstMemoryMax) {
  auto policy = make("memory", "{metric: current, limit: 90%}");
  EXPECT_TRUE(policy->needs_memory_max());
  worker.memory_max = 512_MiB;
  Watch watch(*policy, worker);
  EXPECT_FALSE(watch(current(460_MiB)));
  EXPECT_EQ(watch(current(470_MiB)).reason, "current 470 MiB > 460.8 MiB (90% of 512 MiB)");
}

TEST_F(MemoryPolicy, PercentageAndForBothShowInTheReason) {
  auto policy = make("memory", "{limit: 50%, for: 1m}");
  worker.memory_max = 2_GiB;
  Watch watch(*policy, worker);
  watch(anon(1500_MiB));
  clock.advance(1min);
  EXPECT_EQ(watch(anon(1500_MiB)).reason, "anon 1.46 GiB > 1 GiB (50% of 2 GiB) for 1m");
}

TEST_F(MemoryPolicy, PercentageWithoutMemoryMaxNeverFires) {
  auto policy = make("memory", "{metric: current, limit: 90%}");
  Watch watch(*policy, worker);
  EXPECT_FALSE(watch(current(1ull << 50)));
}

TEST_F(MemoryPolicy, SizeLimitDoesNotNeedMemoryMax) {
  EXPECT_FALSE(make("memory", "{limit: 1GiB}")->needs_memory_max());
}

TEST_F(MemoryPolicy, WorkerScopeRssIsTheSumOverAllProcesses) {
  auto policy = make("memory", "{metric: rss, limit: 600MiB}");
  Watch watch(*policy, worker);
  Sample s;
  s.t = clock.now();
  for (pid_t pid : {10, 11, 12}) {
    ProcessSample p = proc(pid, pid == 10);
    p.rss = 250_MiB;
    s.processes.push_back(p);
  }
  EXPECT_EQ(watch(s).reason, "rss 750 MiB > 600 MiB");
}

TEST_F(MemoryPolicy, WorkerScopeSumIsMissingWhenAnyProcessLacksTheFigure) {
  auto policy = make("memory", "{metric: pss, limit: 600MiB}");
  Watch watch(*policy, worker);
  Sample s;
  s.t = clock.now();
  ProcessSample big = proc(10, true);
  big.pss = 2_GiB;
  s.processes = {big, proc(11)};
  EXPECT_FALSE(watch(s));
}

TEST_F(MemoryPolicy, ProcessScopeSignalsTheProcessOverTheLimitWithSigterm) {
  auto policy = make("memory", "{limit: 600MiB, scope: process}");
  Watch watch(*policy, worker);
  Decision d = watch(uss({{100, 50_MiB}, {101, 200_MiB}, {102, 612_MiB}}));
  EXPECT_EQ(d.action, Decision::Action::Signal);
  EXPECT_EQ(d.pid, 102);
  EXPECT_EQ(d.signal, SIGTERM);
  EXPECT_EQ(d.reason, "uss 612 MiB > 600 MiB") << "uss is the default with process scope";
}

TEST_F(MemoryPolicy, ProcessScopeUsesTheConfiguredSignal) {
  auto policy = make("memory", "{limit: 600MiB, scope: process, signal: QUIT}");
  Watch watch(*policy, worker);
  EXPECT_EQ(watch(uss({{100, 1_MiB}, {101, 700_MiB}})).signal, SIGQUIT);
}

TEST_F(MemoryPolicy, ProcessScopeNeverTargetsTheMainProcess) {
  auto policy = make("memory", "{limit: 600MiB, scope: process}");
  Watch watch(*policy, worker);
  EXPECT_FALSE(watch(uss({{100, 4_GiB}, {101, 200_MiB}})));
  Decision d = watch(uss({{100, 4_GiB}, {101, 601_MiB}}));
  EXPECT_EQ(d.pid, 101) << "a worker child is fair game even when the master is bigger";
}

TEST_F(MemoryPolicy, ProcessScopePicksTheProcessFurthestOver) {
  auto policy = make("memory", "{metric: rss, limit: 600MiB, scope: process}");
  Watch watch(*policy, worker);
  Sample s;
  s.t = clock.now();
  s.processes = {proc(1, true), proc(2), proc(3), proc(4)};
  s.processes[1].rss = 700_MiB;
  s.processes[2].rss = 900_MiB;
  s.processes[3].rss = 650_MiB;
  Decision d = watch(s);
  EXPECT_EQ(d.pid, 3);
  EXPECT_EQ(d.reason, "rss 900 MiB > 600 MiB");
}

TEST_F(MemoryPolicy, ProcessScopeKeepsForPerProcess) {
  auto policy = make("memory", "{limit: 600MiB, for: 10s, scope: process}");
  Watch watch(*policy, worker);
  EXPECT_FALSE(watch(uss({{1, 0}, {2, 700_MiB}, {3, 100_MiB}})));
  clock.advance(5s);
  EXPECT_FALSE(watch(uss({{1, 0}, {2, 700_MiB}, {3, 700_MiB}})));
  clock.advance(5s);
  Decision d = watch(uss({{1, 0}, {2, 700_MiB}, {3, 800_MiB}}));
  EXPECT_EQ(d.pid, 2) << "pid 3 is further over but has held for 5s only";
  EXPECT_EQ(d.reason, "uss 700 MiB > 600 MiB for 10s");
  clock.advance(5s);
  EXPECT_EQ(watch(uss({{1, 0}, {2, 700_MiB}, {3, 800_MiB}})).pid, 3);
}

TEST_F(MemoryPolicy, ProcessScopeAMissingFigureKeepsThatProcessHold) {
  auto policy = make("memory", "{limit: 600MiB, for: 10s, scope: process}");
  Watch watch(*policy, worker);
  watch(uss({{1, 0}, {2, 700_MiB}}));
  clock.advance(5s);
  Sample s = uss({{1, 0}, {2, 0}});
  s.processes[1].uss.reset();
  EXPECT_FALSE(watch(s));
  clock.advance(5s);
  EXPECT_EQ(watch(uss({{1, 0}, {2, 700_MiB}})).pid, 2);
}

TEST_F(MemoryPolicy, ProcessScopeForgetsAPidThatLeftASample) {
  auto policy = make("memory", "{limit: 600MiB, for: 10s, scope: process}");
  Watch watch(*policy, worker);
  watch(uss({{1, 0}, {2, 700_MiB}}));
  clock.advance(6s);
  EXPECT_FALSE(watch(uss({{1, 0}}))) << "pid 2 exited";
  clock.advance(1s);
  EXPECT_FALSE(watch(uss({{1, 0}, {2, 700_MiB}}))) << "a new process reusing pid 2";
  clock.advance(9s);
  EXPECT_FALSE(watch(uss({{1, 0}, {2, 700_MiB}}))) << "16s since the first one, 9s for this one";
  clock.advance(1s);
  EXPECT_EQ(watch(uss({{1, 0}, {2, 700_MiB}})).reason, "uss 700 MiB > 600 MiB for 10s");
}

TEST_F(MemoryPolicy, ProcessScopeKeepsStateWhileThePidStaysListed) {
  auto policy = make("memory", "{limit: 600MiB, for: 10s, scope: process}");
  Watch watch(*policy, worker);
  for (int i = 0; i < 10; ++i) {
    watch(uss({{1, 0}, {2, 700_MiB}}));
    clock.advance(1s);
  }
  EXPECT_TRUE(watch(uss({{1, 0}, {2, 700_MiB}})));
}

TEST_F(MemoryPolicy, NeedsTheCgroupForCgroupMetrics) {
  EXPECT_EQ(make("memory", "{limit: 1GiB}")->needs(), kNeedsCgroupMemory);
  EXPECT_EQ(make("memory", "{metric: current, limit: 1GiB}")->needs(), kNeedsCgroupMemory);
}

TEST_F(MemoryPolicy, NeedsProcessesForProcessMetrics) {
  unsigned expected = kNeedsProcessMemory | kNeedsProcesses;
  EXPECT_EQ(make("memory", "{metric: rss, limit: 1GiB}")->needs(), expected);
  EXPECT_EQ(make("memory", "{limit: 1GiB, scope: process}")->needs(), expected);
}

TEST_F(MemoryPolicy, MayLoop) {
  EXPECT_TRUE(make("memory", "{limit: 1GiB}")->may_loop());
}

TEST_F(MemoryPolicy, FastThresholdIsTheLimitWhenThereIsNoFor) {
  EXPECT_EQ(make("memory", "{limit: 1GiB}")->fast_threshold(worker), 1_GiB);
  EXPECT_EQ(make("memory", "{metric: uss, limit: 600MiB, scope: process}")->fast_threshold(worker),
            600_MiB);
}

TEST_F(MemoryPolicy, FastThresholdOfAPercentageResolvesAgainstTheWorker) {
  auto policy = make("memory", "{metric: current, limit: 50%}");
  EXPECT_EQ(policy->fast_threshold(worker), std::nullopt) << "no memory_max, no threshold";
  worker.memory_max = 2_GiB;
  EXPECT_EQ(policy->fast_threshold(worker), 1_GiB);
}

TEST_F(MemoryPolicy, NoFastThresholdWithFor) {
  EXPECT_EQ(make("memory", "{limit: 1GiB, for: 5s}")->fast_threshold(worker), std::nullopt);
}

TEST_F(MemoryPolicy, CheckpointActionAsksTheWorkerToCheckpointFirst) {
  auto policy = make("memory", "{limit: 300MiB, action: checkpoint}");
  Watch watch(*policy, worker);
  Decision d = watch(anon(301_MiB));
  EXPECT_EQ(d.action, Decision::Action::Checkpoint);
  EXPECT_EQ(d.reason, "anon 301 MiB > 300 MiB");
}

TEST_F(MemoryPolicy, RestartActionIsTheDefault) {
  auto policy = make("memory", "{limit: 300MiB, action: restart}");
  Watch watch(*policy, worker);
  EXPECT_EQ(watch(anon(301_MiB)).action, Decision::Action::Restart);
}

TEST_F(MemoryPolicy, CheckpointWithProcessScopeIsRejected) {
  EXPECT_THAT(errors_of("memory", "{limit: 1GiB, scope: process, action: checkpoint}"),
              ElementsAre("action: checkpoint applies to the whole worker; scope: process "
                          "signals one process"));
}

TEST_F(MemoryPolicy, UnknownActionIsRejected) {
  EXPECT_THAT(errors_of("memory", "{limit: 1GiB, action: kill}"),
              ElementsAre("action: invalid value \"kill\"; expected restart or checkpoint"));
}

TEST_F(MemoryPolicy, DeviceMetricReadsTheBytesTheWorkerReports) {
  auto policy = make("memory", "{metric: device, limit: 28GiB}");
  EXPECT_EQ(policy->needs(), policies::kNeedsDevice);
  Watch watch(*policy, worker);
  Sample s = anon(1_GiB);
  s.device = 28_GiB;
  EXPECT_FALSE(watch(s));
  s.device = 29_GiB;
  EXPECT_EQ(watch(s).reason, "device 29 GiB > 28 GiB");
}

TEST_F(MemoryPolicy, DeviceMetricHasNoFastThreshold) {
  // The cgroup's current says nothing about accelerator memory.
  EXPECT_EQ(make("memory", "{metric: device, limit: 1GiB}")->fast_threshold(worker), std::nullopt);
}

TEST_F(MemoryPolicy, DeviceMetricIsForTheWholeWorker) {
  EXPECT_THAT(errors_of("memory", "{metric: device, limit: 1GiB, scope: process}"),
              ElementsAre("metric: device is measured for the whole worker; scope: process "
                          "takes rss, pss, uss or gpu"));
}

TEST_F(MemoryPolicy, LimitIsRequired) {
  EXPECT_THAT(errors_of("memory", ""), ElementsAre("missing required key \"limit\""));
  EXPECT_THAT(errors_of("memory", "{metric: anon}"), ElementsAre("missing required key \"limit\""));
}

TEST_F(MemoryPolicy, UnknownMetricListsTheAllowedOnes) {
  EXPECT_THAT(errors_of("memory", "{metric: file, limit: 1GiB}"),
              ElementsAre("metric: invalid value \"file\"; expected anon, current, rss, pss, uss, "
                          "device, gpu or gpu_total"));
}

TEST_F(MemoryPolicy, ProcessScopeRejectsCgroupMetrics) {
  EXPECT_THAT(errors_of("memory", "{metric: anon, limit: 1GiB, scope: process}"),
              ElementsAre("metric: anon is measured for the whole worker; scope: process takes "
                          "rss, pss, uss or gpu"));
}

TEST_F(MemoryPolicy, SignalWithWorkerScopeIsRejected) {
  EXPECT_THAT(errors_of("memory", "{limit: 1GiB, signal: HUP}"),
              ElementsAre("signal: only applies with scope: process; scope: worker restarts the "
                          "whole worker"));
}

TEST_F(MemoryPolicy, BadValuesAreEachReported) {
  EXPECT_THAT(errors_of("memory", "{limit: 12XB, for: 10, scope: proc}"),
              ElementsAre("scope: invalid value \"proc\"; expected worker or process",
                          "limit: invalid size \"12XB\": unknown unit \"XB\"; use B, K, M, G, T, "
                          "KiB, MiB, GiB or TiB",
                          "for: invalid duration \"10\": missing unit, e.g. \"10s\""));
}

TEST_F(MemoryPolicy, PercentageOverAHundredIsRejected) {
  EXPECT_THAT(errors_of("memory", "{limit: 120%}"),
              ElementsAre("limit: 120% is out of range; expected a percentage above 0 and at most "
                          "100"));
}

TEST_F(MemoryPolicy, MisspelledKeyGetsASuggestion) {
  EXPECT_THAT(errors_of("memory", "{limt: 1GiB}"),
              ElementsAre("unknown key \"limt\"; did you mean \"limit\"?",
                          "missing required key \"limit\""));
}

TEST_F(MemoryPolicy, ErrorsPointAtTheOffendingValue) {
  Built b = build("memory", "limit: 1GiB\nfor: soon\n");
  EXPECT_EQ(b.policy, nullptr);
  ASSERT_EQ(b.errors.reported.size(), 1u);
  EXPECT_EQ(b.errors.reported[0].at.line, 1);
  EXPECT_EQ(b.errors.reported[0].at.column, 5);
}

TEST_F(MemoryPolicy, NonMapArgumentsAreRejected) {
  EXPECT_THAT(errors_of("memory", "1GiB"), ElementsAre("must be a map of settings"))
      << "no second error about its missing keys";
}

// The measuring helpers memory (and the leak-slope policy) build on.

using policies::Metric;

TEST(Metric, NamesReadBackAsTheSameMetric) {
  for (Metric m : {Metric::Current, Metric::Anon, Metric::File, Metric::Rss, Metric::Pss,
                   Metric::Uss, Metric::Device})
    EXPECT_EQ(policies::parse_metric(policies::to_string(m)), m) << policies::to_string(m);
  EXPECT_EQ(policies::to_string(Metric::Uss), "uss");
  EXPECT_EQ(policies::parse_metric("USS"), std::nullopt) << "names are lowercase, as written";
}

TEST(Metric, CgroupAndDeviceFiguresComeFromTheSample) {
  Sample s;
  s.current = 5;
  s.anon = 3;
  s.file = 2;
  s.device = 7;
  EXPECT_EQ(policies::value(s, Metric::Current), 5u);
  EXPECT_EQ(policies::value(s, Metric::Anon), 3u);
  EXPECT_EQ(policies::value(s, Metric::File), 2u);
  EXPECT_EQ(policies::value(s, Metric::Device), 7u);
  EXPECT_EQ(policies::value(s, Metric::Rss), std::nullopt) << "no processes, no sum";
}

TEST(Metric, ProcessFiguresAreRssPssAndUssOnly) {
  ProcessSample p = proc(1);
  p.rss = 30;
  p.pss = 20;
  p.uss = 10;
  EXPECT_EQ(policies::value(p, Metric::Rss), 30u);
  EXPECT_EQ(policies::value(p, Metric::Pss), 20u);
  EXPECT_EQ(policies::value(p, Metric::Uss), 10u);
  EXPECT_EQ(policies::value(p, Metric::Anon), std::nullopt);
}

TEST(Metric, NeedsMatchWhereTheFigureComesFrom) {
  EXPECT_EQ(policies::needs(Metric::File), kNeedsCgroupMemory);
  EXPECT_EQ(policies::needs(Metric::Pss), kNeedsProcessMemory | kNeedsProcesses);
  EXPECT_EQ(policies::needs(Metric::Device), policies::kNeedsDevice);
  EXPECT_TRUE(policies::per_process(Metric::Rss));
  EXPECT_FALSE(policies::per_process(Metric::Current));
}

TEST(ProcessTable, TracksTheListedProcessesButNotTheMainOne) {
  policies::ProcessTable<int> table;
  int made = 0;
  Sample s;
  s.processes = {proc(1, true), proc(2), proc(3)};
  table.sync(s, [&](const ProcessSample& p) { return ++made * 100 + p.pid; });
  EXPECT_EQ(table.size(), 2u);
  EXPECT_EQ(table.at(2), 102);
  EXPECT_EQ(table.at(3), 203);
  s.processes = {proc(1, true), proc(3), proc(4)};
  table.sync(s, [&](const ProcessSample& p) { return ++made * 100 + p.pid; });
  EXPECT_EQ(table.size(), 2u) << "pid 2 is gone";
  EXPECT_EQ(table.at(3), 203) << "pid 3 kept its state";
  EXPECT_EQ(table.at(4), 304);
}

TEST_F(MemoryPolicy, GpuIsTheWorkersFullestDeviceAndAPercentageIsOfThatDevice) {
  auto policy = make("memory", "{metric: gpu, limit: 90%}");
  EXPECT_FALSE(policy->needs_memory_max()) << "a share of the GPU, not of memory_max";
  EXPECT_EQ(policy->needs(), policies::kNeedsGpu);
  EXPECT_EQ(policy->fast_threshold(worker), std::nullopt) << "GPU memory is not in the cgroup";
  Watch watch(*policy, worker);
  Sample s;
  s.t = clock.now();
  s.gpu = 14_GiB;
  s.gpu_capacity = 16_GiB;
  EXPECT_FALSE(watch(s));
  clock.advance(1s);
  s.t = clock.now();
  s.gpu = 15_GiB;
  EXPECT_EQ(watch(s).reason, "gpu 15 GiB > 14.4 GiB (90% of 16 GiB)");
}

TEST_F(MemoryPolicy, APercentageOfGpuWithoutADeviceOrAFigureHasNoOpinion) {
  auto policy = make("memory", "{metric: gpu, limit: 50%}");
  Watch watch(*policy, worker);
  Sample s;
  s.t = clock.now();
  s.gpu = 0;  // holds no GPU memory: no device to be a share of
  EXPECT_FALSE(watch(s));
  s.gpu.reset();  // NVML could not tell
  s.gpu_capacity = 16_GiB;
  EXPECT_FALSE(watch(s));
}

TEST_F(MemoryPolicy, GpuTotalSumsTheDevicesAgainstASizeLimit) {
  auto policy = make("memory", "{metric: gpu_total, limit: 20GiB}");
  Watch watch(*policy, worker);
  Sample s;
  s.t = clock.now();
  s.gpu = 12_GiB;
  s.gpu_total = 21_GiB;
  EXPECT_EQ(watch(s).reason, "gpu_total 21 GiB > 20 GiB");
}

TEST_F(MemoryPolicy, ScopeProcessOnGpuSignalsTheProcessOverItsDevicesShare) {
  auto policy = make("memory", "{metric: gpu, limit: 50%, scope: process}");
  Watch watch(*policy, worker);
  Sample s;
  s.t = clock.now();
  ProcessSample main = proc(10, true);
  main.gpu = 70_GiB;  // the master is never signalled
  main.gpu_capacity = 80_GiB;
  ProcessSample small = proc(11), big = proc(12);
  small.gpu = 30_GiB, small.gpu_capacity = 80_GiB;
  big.gpu = 10_GiB, big.gpu_capacity = 16_GiB;  // on a smaller GPU: 62 %
  s.processes = {main, small, big};
  Decision d = watch(s);
  EXPECT_EQ(d.pid, 12);
  EXPECT_EQ(d.reason, "gpu 10 GiB > 8 GiB (50% of 16 GiB)");
}

}  // namespace
}  // namespace recycler::testing
