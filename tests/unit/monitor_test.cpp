// ProgramMonitor (runtime/monitor.h) on fake time, fake processes and fake
// cgroups: the engine's commands carried out as Worker calls (recycle,
// checkpoint, the checkpoint timer), notify reports received and answered as
// the router hands them over, and the monitor observing its own workers.
#include "supervisor/runtime/monitor.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <csignal>

#include "supervisor/config/parse.h"
#include "tests/support/fakes.h"
#include "tests/support/log_capture.h"

namespace recycler {
namespace {

using namespace std::chrono_literals;
using ::testing::Contains;
using ::testing::ElementsAre;
using testing::FakeCgroup;
using testing::FakeCgroupState;
using testing::FakeLauncher;
using testing::FakeTimers;
using ::testing::IsEmpty;
using testing::LogCapture;
using ::testing::StartsWith;

class MonitorTest : public ::testing::Test {
 protected:
  // The program `app` of a config whose `programs.app` is `app_yaml`, with
  // `slots` workers on fakes and its monitor.
  void make(const std::string& app_yaml, unsigned slots = 1) {
    config::LoadResult loaded =
        config::parse_string("programs:\n  app:\n    command: [\"true\"]\n" + app_yaml, "c.yaml");
    for (const auto& e : loaded.errors) ADD_FAILURE() << e.str();
    ASSERT_TRUE(loaded.config);
    program = std::make_shared<config::ProgramConfig>(loaded.config->programs.front());
    for (unsigned i = 0; i < slots; ++i) {
      cgroups.push_back(std::make_shared<FakeCgroupState>());
      workers.push_back(
          std::make_unique<Worker>(services, program, i, std::make_unique<FakeCgroup>(cgroups[i])));
    }
    monitor = std::make_unique<ProgramMonitor>(ctx, program, workers);
  }

  // A report of `requests` from `pid` (default: the main process) of slot 0,
  // as the router hands it over; what the monitor answers.
  notify::Answer report(uint64_t requests, pid_t pid = 0) {
    notify::NotifyMessage message;
    message.requests = requests;
    notify::Origin origin{{"app", 0, 0}, workers[0]->generation()};
    return monitor->receive(origin, pid ? pid : launcher.last().pid, message, true);
  }

  LogCapture log;
  FakeTimers timers;
  FakeLauncher launcher;
  std::mt19937_64 rng{42};
  std::vector<std::string> base_env{"PATH=/usr/bin:/bin"};
  std::vector<WorkerState> states;  // what the supervisor's hook saw, after the monitor
  WorkerServices services{timers, launcher, rng, base_env,
                          [this](Worker& w) { states.push_back(w.state()); }};
  probe::ProcessReader procs;
  // No loop: only the kernel's memory watch needs one, and fake cgroups have
  // no memory directory to watch.
  MonitorContext ctx{nullptr, timers, procs, rng};
  std::shared_ptr<const config::ProgramConfig> program;
  std::vector<std::shared_ptr<FakeCgroupState>> cgroups;
  std::vector<std::unique_ptr<Worker>> workers;
  std::unique_ptr<ProgramMonitor> monitor;  // after the workers: destroyed first
};

TEST_F(MonitorTest, AnOperatorsRecycleStopsTheWorkerAndStartsItsReplacementWithTheReason) {
  make("");
  workers[0]->start();
  ASSERT_EQ(launcher.launched.size(), 1u);
  EXPECT_FALSE(monitor->recycle(1, "no such slot"));
  ASSERT_TRUE(monitor->recycle(0, "asked by a test"));
  EXPECT_EQ(workers[0]->state(), WorkerState::Stopping);
  EXPECT_THAT(launcher.last().signals, ElementsAre(SIGTERM));
  EXPECT_FALSE(monitor->recycle(0, "again")) << "a recycle is under way";
  launcher.exit_last(ExitStatus{0, SIGTERM, true});
  ASSERT_EQ(launcher.launched.size(), 2u) << log.all();
  EXPECT_EQ(workers[0]->state(), WorkerState::Running);
  EXPECT_THAT(launcher.last().spec.env, Contains(StartsWith("RECYCLER_RECYCLE_REASON=")));
  EXPECT_EQ(workers[0]->record().recycles(), 1u);
  EXPECT_EQ(workers[0]->record().crashes(), 0u);
}

TEST_F(MonitorTest, AProcessReportingItsLimitIsSignalledAndAnsweredAsActedOn) {
  make("    policies:\n      - max_requests: {limit: 3, scope: process}\n");
  workers[0]->start();
  constexpr pid_t kChild = 2001;  // a pre-fork server's worker process
  cgroups[0]->pids = {launcher.last().pid, kChild};
  launcher.alive = {kChild};
  notify::Answer below = report(2, kChild);
  EXPECT_EQ(below.request_limit, 3u) << "its limit, told at its first report";
  EXPECT_FALSE(below.requests_seen);
  EXPECT_TRUE(launcher.attached.empty());
  notify::Answer at = report(1, kChild);
  EXPECT_EQ(at.requests_seen, 3u) << "acted on: the answer says so";
  ASSERT_EQ(launcher.attached.count(kChild), 1u) << log.all();
  EXPECT_THAT(launcher.attached[kChild]->signals, ElementsAre(SIGTERM));
  EXPECT_EQ(workers[0]->state(), WorkerState::Running) << "the worker serves on";
  EXPECT_EQ(workers[0]->signalled_processes(), 1u);
}

TEST_F(MonitorTest, ACheckpointIsAskedThenItsTimerEndsItWithARestart) {
  make(
      "    checkpoint: {signal: USR1, timeout: 60s}\n"
      "    policies:\n      - memory: {limit: 1GiB, action: checkpoint}\n");
  workers[0]->start();
  ASSERT_TRUE(monitor->recycle(0, "asked by a test"));
  EXPECT_EQ(workers[0]->phase(), StopPhase::Checkpointing);
  EXPECT_THAT(launcher.last().signals, ElementsAre(SIGUSR1));
  timers.advance(59s);
  EXPECT_EQ(workers[0]->phase(), StopPhase::Checkpointing) << "the timer runs 60 s";
  timers.advance(1s);
  EXPECT_EQ(workers[0]->state(), WorkerState::Stopping) << log.all();
  EXPECT_THAT(launcher.last().signals, ElementsAre(SIGUSR1, SIGTERM));
  launcher.exit_last(ExitStatus{0, SIGTERM, true});
  ASSERT_EQ(launcher.launched.size(), 2u);
  EXPECT_THAT(launcher.last().spec.env, ::testing::Not(Contains("RECYCLER_RESUME=1")))
      << "no checkpoint was confirmed";
}

TEST_F(MonitorTest, AHangIsActedOnTheMomentTheWatchdogTimeoutPassesNotAtTheNextTick) {
  make("    sample_interval: 1h\n    watchdog: {timeout: 10s}\n");
  workers[0]->start();
  auto ping = [&] {
    notify::NotifyMessage message;
    message.watchdog = true;
    notify::Origin origin{{"app", 0, 0}, workers[0]->generation()};
    monitor->receive(origin, launcher.last().pid, message, true);
  };
  ping();
  timers.advance(5s);
  ping();  // moves the deadline on
  timers.advance(10s);
  EXPECT_EQ(workers[0]->state(), WorkerState::Running) << "silent for 10s exactly";
  timers.advance(1ms);
  EXPECT_EQ(workers[0]->state(), WorkerState::Stopping) << log.all();
  EXPECT_THAT(launcher.last().signals, ElementsAre(SIGTERM));
  EXPECT_THAT(log.all(), ::testing::HasSubstr("app[0] recycle: hung: no WATCHDOG=1"));
}

TEST_F(MonitorTest, ItKnowsWhichRunOfEachSlotCanSendAndHearsOfStatesBeforeTheSupervisor) {
  make("", 2);
  EXPECT_EQ(monitor->live_generation(0), std::nullopt) << "not started";
  EXPECT_EQ(monitor->live_generation(5), std::nullopt) << "no such slot";
  workers[1]->start();
  EXPECT_EQ(monitor->live_generation(1), 1u);
  EXPECT_EQ(monitor->worker_name(1), "app[1]");
  EXPECT_THAT(states, ElementsAre(WorkerState::Starting, WorkerState::Running));
  // The engine heard of the run through the observer: a recycle is accepted.
  EXPECT_TRUE(monitor->recycle(1, "asked"));
}

TEST_F(MonitorTest, WorkersThatOutliveTheirMonitorNoLongerReachIt) {
  make("    policies:\n      - max_requests: {limit: 3}\n");
  workers[0]->start();
  monitor.reset();  // a reload replaces the monitor before the workers
  bool stopped = false;
  workers[0]->stop([&] { stopped = true; });
  launcher.exit_last(ExitStatus{0, SIGTERM, true});
  EXPECT_TRUE(stopped);
  EXPECT_EQ(workers[0]->state(), WorkerState::Stopped);
  EXPECT_THAT(log.matching("recycl"), IsEmpty()) << log.all();
}

// Sampling ticks are aligned (Timers::aligned): two programs whose workers
// started 30 ms apart are sampled in one wake-up of the loop.
TEST(TickAlignment, TicksDueWithinOneGrainFallOnItsLastMultiple) {
  EXPECT_EQ(Timers::align(1000ms, 100ms, 12'345), 955ms) << "due at 13345: fires at 13300";
  EXPECT_EQ(Timers::align(1000ms, 100ms, 12'375), 925ms) << "30 ms later, the same instant";
  EXPECT_EQ(Timers::align(1000ms, 100ms, 12'400), 1000ms) << "already on the grain";
  EXPECT_EQ(Timers::align(1000ms, 1000ms, 12'345), 655ms) << "a grain of the whole delay";
  EXPECT_EQ(Timers::align(1000ms, 1000ms, 12'000), 1000ms);
  EXPECT_EQ(Timers::align(1000ms, Duration{0}, 12'345), 1000ms) << "no grain: exact";
  EXPECT_EQ(Timers::align(50ms, 100ms, 12'345), 50ms) << "shorter than the grain: exact";
}

TEST_F(MonitorTest, WorkersStartedApartAreSampledTogetherAndNeverLate) {
  make("    sample_interval: 1s\n    policies:\n      - memory: {limit: 1GiB}\n", 2);
  auto due = [this] {
    std::optional<Duration> next = timers.pending_delay();
    EXPECT_TRUE(next);
    EXPECT_LE(next.value_or(Duration{0}), 1000ms) << "never later than sample_interval";
    return std::chrono::duration_cast<Duration>(timers.now().time_since_epoch()) +
           next.value_or(Duration{0});
  };
  timers.advance(370ms);
  workers[0]->start();
  Duration first = due();
  timers.advance(240ms);
  workers[1]->start();
  EXPECT_EQ(due(), first) << "one wake-up for both";
  timers.advance(first - std::chrono::duration_cast<Duration>(timers.now().time_since_epoch()));
  EXPECT_EQ(due(), first + 1000ms) << "then every sample_interval, together";
}

}  // namespace
}  // namespace recycler
