// The decision engine against fake time: events in, commands out. Each rule
// the runtime follows (precedence, the recycle queue, the loop guard, the
// checkpoint protocol, process-scope recycles, request counts, outlooks) has
// a test here, with real policies built from a config.
#include "supervisor/engine/recycle_controller.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <csignal>

#include "supervisor/config/parse.h"

namespace recycler::engine {
namespace {

using namespace std::chrono_literals;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr uint64_t kMiB = 1 << 20;

class ControllerTest : public ::testing::Test {
 protected:
  // The one program of a config whose `programs.app` is `app_yaml`, with
  // `slots` workers.
  void make(const std::string& app_yaml, unsigned slots = 1) {
    config::LoadResult loaded =
        config::parse_string("programs:\n  app:\n    command: [\"true\"]\n" + app_yaml, "c.yaml");
    for (const auto& e : loaded.errors) ADD_FAILURE() << e.str();
    ASSERT_TRUE(loaded.config);
    program = std::make_shared<config::ProgramConfig>(loaded.config->programs.front());
    controller = std::make_unique<RecycleController>(program, slots, [this] { return now; });
    controller->observe([this](unsigned, size_t policy, const Decision& d) {
      if (d) fired.push_back(policy);
    });
  }

  void start(unsigned slot = 0, unsigned generation = 1, pid_t pid = 100) {
    controller->run_started(slot, generation, now, pid, 0);
  }

  policies::Sample sample(std::optional<uint64_t> anon_mib = std::nullopt) {
    policies::Sample s;
    s.t = now;
    if (anon_mib) s.anon = *anon_mib * kMiB;
    return s;
  }
  // A process of the worker, `uss_mib` of its own.
  static policies::ProcessSample process(pid_t pid, uint64_t uss_mib, bool main = false) {
    policies::ProcessSample p;
    p.pid = pid;
    p.main = main;
    p.uss = uss_mib * kMiB;
    return p;
  }
  void sampled(policies::Sample s, unsigned slot = 0) {
    controller->sampled(slot, std::move(s));
    take();
  }
  void take() {
    for (Command& c : controller->take()) commands.push_back(std::move(c));
  }

  template <typename T>
  std::vector<T> all() const {
    std::vector<T> out;
    for (const Command& c : commands)
      if (auto* t = std::get_if<T>(&c)) out.push_back(*t);
    return out;
  }
  bool logged(const std::string& needle) const {
    for (const Log& l : all<Log>())
      if (l.message.find(needle) != std::string::npos) return true;
    return false;
  }

  policies::TimePoint now{std::chrono::hours(1)};
  std::shared_ptr<config::ProgramConfig> program;
  std::unique_ptr<RecycleController> controller;
  std::vector<Command> commands;
  std::vector<size_t> fired;
};

TEST_F(ControllerTest, AMemoryLimitRecyclesTheWorkerAndLogsWhy) {
  make("    policies:\n      - memory: {limit: 600MiB}\n");
  start();
  sampled(sample(700));
  auto recycles = all<RecycleWorker>();
  ASSERT_EQ(recycles.size(), 1u);
  EXPECT_EQ(recycles[0].slot, 0u);
  EXPECT_EQ(recycles[0].delay, Duration{0});
  EXPECT_EQ(recycles[0].reason, "anon 700 MiB > 600 MiB (memory policy)");
  EXPECT_FALSE(recycles[0].resume);
  EXPECT_TRUE(logged("app[0] recycle: anon 700 MiB > 600 MiB (memory policy)"));
  EXPECT_FALSE(controller->running(0)) << "no decision while the recycle is under way";
}

TEST_F(ControllerTest, NothingIsDecidedWhileARecycleIsUnderWay) {
  make("    policies:\n      - memory: {limit: 600MiB}\n");
  start();
  sampled(sample(700));
  sampled(sample(800));
  EXPECT_EQ(all<RecycleWorker>().size(), 1u);
}

TEST_F(ControllerTest, EveryPolicySeesEverySampleThenTheWholeWorkerDecisionWins) {
  make(
      "    policies:\n"
      "      - memory: {metric: uss, limit: 100MiB, scope: process}\n"
      "      - memory: {limit: 600MiB}\n");
  start();
  auto s = sample(700);
  s.processes = {process(100, 50, true), process(101, 200)};
  sampled(s);
  EXPECT_THAT(fired, ElementsAre(0u, 1u));
  EXPECT_TRUE(all<SignalProcess>().empty());
  ASSERT_EQ(all<RecycleWorker>().size(), 1u);
}

TEST_F(ControllerTest, ProcessScopeRecyclesAreNotCappedByDefault) {
  // Each process goes at its limit, as with gunicorn's own max_requests:
  // holding one back while another leaves makes it serve on past its limit.
  make("    policies:\n      - memory: {metric: uss, limit: 100MiB, scope: process}\n");
  start();
  auto s = sample();
  s.processes = {process(101, 300), process(102, 200), process(103, 150)};
  // One process per policy and sample; the next sample finds the next one.
  for (int i = 0; i < 3; ++i) {
    sampled(s);
    now += 1s;
  }
  auto signals = all<SignalProcess>();
  ASSERT_EQ(signals.size(), 3u);
  EXPECT_EQ(signals[0].pid, 101);
  EXPECT_EQ(signals[1].pid, 102);
  EXPECT_EQ(signals[2].pid, 103);
  EXPECT_EQ(signals[0].signal, SIGTERM);
  EXPECT_FALSE(logged("waits its turn"));
}

TEST_F(ControllerTest, ProcessScopeRecyclesGoUpToTheirCapAtOnce) {
  make(
      "    max_concurrent_process_recycles: 2\n"
      "    policies:\n      - memory: {metric: uss, limit: 100MiB, scope: process}\n");
  start();
  auto s = sample();
  s.processes = {process(101, 300), process(102, 200), process(103, 150)};
  for (int i = 0; i < 3; ++i) {
    sampled(s);
    now += 1s;
  }
  controller->process_signalled(0, 101, Signalled::Sent);
  controller->process_signalled(0, 102, Signalled::Sent);
  take();
  auto signals = all<SignalProcess>();
  ASSERT_EQ(signals.size(), 2u);
  EXPECT_EQ(signals[0].pid, 101);
  EXPECT_EQ(signals[1].pid, 102);
  EXPECT_TRUE(logged("app[0] recycle pid 103 waits its turn (2 of at most 2 under way)"));
  controller->process_left(0, 102);
  take();
  signals = all<SignalProcess>();
  ASSERT_EQ(signals.size(), 3u);
  EXPECT_EQ(signals[2].pid, 103);
}

TEST_F(ControllerTest, WholeWorkerAndProcessRecyclesAreCappedApart) {
  // A process recycle under way holds no whole-worker restart back (and the
  // other way round): each cap counts its own kind.
  make(
      "    max_concurrent_process_recycles: 1\n"
      "    policies:\n"
      "      - memory: {metric: uss, limit: 100MiB, scope: process}\n"
      "      - memory: {limit: 600MiB}\n",
      2);
  start(0, 1, 100);
  start(1, 1, 200);
  auto s = sample();
  s.processes = {process(101, 300)};
  sampled(s, 0);
  controller->process_signalled(0, 101, Signalled::Sent);
  take();
  ASSERT_EQ(all<SignalProcess>().size(), 1u);
  sampled(sample(700), 1);
  EXPECT_EQ(all<RecycleWorker>().size(), 1u);
  EXPECT_FALSE(logged("waits its turn"));
}

TEST_F(ControllerTest, AProcessScopeRecycleIsLoggedOnlyOnceTheProcessIsKnownToBeTheWorkers) {
  make("    policies:\n      - memory: {metric: uss, limit: 100MiB, scope: process}\n");
  start();
  auto s = sample();
  s.processes = {process(101, 200)};
  sampled(s);
  ASSERT_EQ(all<SignalProcess>().size(), 1u);
  EXPECT_FALSE(logged("recycle pid 101")) << "not before the worker looked";
  controller->process_signalled(0, 101, Signalled::Sent);
  take();
  EXPECT_TRUE(logged("app[0] recycle pid 101: uss 200 MiB > 100 MiB (memory policy)"));
  ASSERT_EQ(all<Record>().size(), 0u) << "no timeline configured";
}

TEST_F(ControllerTest, AProcessGoneBeforeItsRecycleIsDroppedQuietlyAndFreesItsPlace) {
  make(
      "    max_concurrent_process_recycles: 1\n"
      "    policies:\n      - memory: {metric: uss, limit: 100MiB, scope: process}\n");
  start();
  auto s = sample();
  s.processes = {process(101, 300), process(102, 200)};
  sampled(s);
  controller->process_signalled(0, 101, Signalled::NotMember);
  take();
  EXPECT_FALSE(logged("recycle pid 101"));
  EXPECT_TRUE(logged("pid 101 exited before its recycle"));
  now += 1s;
  s.processes = {process(102, 200)};
  sampled(s);
  auto signals = all<SignalProcess>();
  ASSERT_EQ(signals.size(), 2u) << "its place was free again";
  EXPECT_EQ(signals[1].pid, 102);
}

TEST_F(ControllerTest, AProcessScopeRecycleHoldsItsPlaceUntilTheProcessExits) {
  make(
      "    max_concurrent_process_recycles: 1\n"
      "    policies:\n      - memory: {metric: uss, limit: 100MiB, scope: process}\n");
  start();
  auto s = sample();
  s.processes = {process(101, 300), process(102, 200)};
  sampled(s);
  controller->process_signalled(0, 101, Signalled::Sent);
  take();
  now += 1s;
  sampled(s);
  EXPECT_TRUE(logged("app[0] recycle pid 102 waits its turn (1 of at most 1 under way)"));
  EXPECT_EQ(all<SignalProcess>().size(), 1u);
  controller->process_exited(0, 101);
  take();
  auto signals = all<SignalProcess>();
  ASSERT_EQ(signals.size(), 2u);
  EXPECT_EQ(signals[1].pid, 102);
}

TEST_F(ControllerTest, AProcessThatLeftServiceGivesItsPlaceToTheNextBeforeItExits) {
  make(
      "    max_concurrent_process_recycles: 1\n"
      "    policies:\n      - memory: {metric: uss, limit: 100MiB, scope: process}\n");
  start();
  auto s = sample();
  s.processes = {process(101, 300), process(102, 200)};
  sampled(s);
  controller->process_signalled(0, 101, Signalled::Sent);
  take();
  now += 1s;
  sampled(s);
  EXPECT_EQ(all<SignalProcess>().size(), 1u) << "102 waits while 101 still serves";
  // 101 says it is going (gunicorn's worker_exit hook), long before it exits.
  notify::NotifyMessage stopping;
  stopping.stopping = true;
  controller->notified(0, 101, stopping);
  take();
  auto signals = all<SignalProcess>();
  ASSERT_EQ(signals.size(), 2u);
  EXPECT_EQ(signals[1].pid, 102);
  EXPECT_TRUE(logged("pid 101 has left service"));
  controller->process_exited(0, 101);
  take();
  EXPECT_TRUE(logged("app[0] pid 101 exited after its recycle: 0 requests served"));
  // Its exit does not free a second place.
  controller->process_left(0, 102);
  take();
  EXPECT_EQ(all<SignalProcess>().size(), 2u);
}

TEST_F(ControllerTest, ARecycleThatWaitedSaysHowManyRequestsTheProcessServedAtTheSignal) {
  make(
      "    max_concurrent_process_recycles: 1\n"
      "    policies:\n      - max_requests: {limit: 10, scope: process}\n");
  start();
  auto s = sample();
  s.processes = {process(101, 1), process(102, 1)};
  sampled(s);
  controller->requests(0, 101, 10);
  controller->requests(0, 102, 10);
  controller->process_signalled(0, 101, Signalled::Sent);
  take();
  controller->requests(0, 102, 5);  // 102 served on while it waited
  controller->process_left(0, 101);
  take();
  controller->process_signalled(0, 102, Signalled::Sent);
  take();
  EXPECT_TRUE(
      logged("app[0] recycle pid 102: 10 requests >= limit 10 (max_requests policy; 15 "
             "requests at the signal)"));
}

TEST_F(ControllerTest, ASignalledProcessIsPassedOverSoTheNextOffenderIsFound) {
  make("    policies:\n      - memory: {metric: uss, limit: 100MiB, scope: process}\n");
  start();
  auto s = sample();
  s.processes = {process(101, 300)};
  sampled(s);
  controller->process_signalled(0, 101, Signalled::Sent);
  take();
  now += 1s;
  s = sample();
  s.processes = {process(101, 300), process(102, 200)};
  sampled(s);
  auto signals = all<SignalProcess>();
  ASSERT_EQ(signals.size(), 2u);
  EXPECT_EQ(signals[1].pid, 102);
}

TEST_F(ControllerTest, AtMostMaxConcurrentRecyclesAreUnderWayAndTheRestWaitInTurn) {
  make("    policies:\n      - memory: {limit: 600MiB}\n", 2);
  start(0);
  start(1, 1, 200);
  sampled(sample(700), 0);
  sampled(sample(700), 1);
  ASSERT_EQ(all<RecycleWorker>().size(), 1u);
  EXPECT_TRUE(logged("app[1] recycle waits its turn (1 of at most 1 under way)"));
  // Slot 0's replacement runs: slot 1 goes.
  controller->run_ended(0, RunEnd::Stopping);
  controller->run_started(0, 2, now, 101, 0);
  take();
  auto recycles = all<RecycleWorker>();
  ASSERT_EQ(recycles.size(), 2u);
  EXPECT_EQ(recycles[1].slot, 1u);
}

TEST_F(ControllerTest, AWaitingRecycleOfARunThatEndedMeanwhileIsDropped) {
  make("    policies:\n      - memory: {limit: 600MiB}\n", 2);
  start(0);
  start(1, 1, 200);
  sampled(sample(700), 0);
  sampled(sample(700), 1);
  controller->run_ended(1, RunEnd::Exited, false, "exited with status 1");  // crashed
  controller->run_started(1, 2, now, 201, 0);
  controller->run_ended(0, RunEnd::Stopping);
  controller->run_started(0, 2, now, 101, 0);
  take();
  EXPECT_EQ(all<RecycleWorker>().size(), 1u) << "the new run of slot 1 has not decided yet";
}

TEST_F(ControllerTest, ARefusedRecycleFreesItsPlace) {
  make("    policies:\n      - memory: {limit: 600MiB}\n", 2);
  start(0);
  start(1, 1, 200);
  sampled(sample(700), 0);
  sampled(sample(700), 1);
  controller->recycle_refused(0);
  take();
  auto recycles = all<RecycleWorker>();
  ASSERT_EQ(recycles.size(), 2u);
  EXPECT_EQ(recycles[1].slot, 1u);
}

TEST_F(ControllerTest, AStoppedSlotGivesUpItsPlaceAndWhatItWaitedFor) {
  make("    policies:\n      - memory: {limit: 600MiB}\n", 2);
  start(0);
  start(1, 1, 200);
  sampled(sample(700), 0);
  sampled(sample(700), 1);
  controller->run_ended(1, RunEnd::Finished);
  controller->run_ended(0, RunEnd::Finished);
  take();
  EXPECT_EQ(all<RecycleWorker>().size(), 1u);
  start(1, 2, 201);
  sampled(sample(700), 1);
  EXPECT_EQ(all<RecycleWorker>().size(), 2u) << "nothing left under way";
}

TEST_F(ControllerTest, AReplacementTrippingTheSamePolicyWithinMinUptimeStartsAfterABackoff) {
  make("    min_uptime: 10s\n    policies:\n      - memory: {limit: 600MiB}\n");
  start();
  now += 60s;
  sampled(sample(700));
  controller->run_ended(0, RunEnd::Stopping);
  controller->run_ended(0, RunEnd::Exited, true, "killed by SIGTERM");
  start(0, 2);
  now += 2s;
  sampled(sample(700));
  auto recycles = all<RecycleWorker>();
  ASSERT_EQ(recycles.size(), 2u);
  EXPECT_EQ(recycles[0].delay, Duration{0});
  EXPECT_EQ(recycles[1].delay, program->restart.backoff.initial);
  EXPECT_TRUE(logged("app[0] tripped the memory policy again 2s after it started"));
}

TEST_F(ControllerTest, ACrashStartsTheLoopGuardOver) {
  make("    min_uptime: 10s\n    policies:\n      - memory: {limit: 600MiB}\n");
  start();
  sampled(sample(700));
  controller->run_ended(0, RunEnd::Exited, false, "exited with status 1");
  start(0, 2);
  now += 2s;
  sampled(sample(700));
  auto recycles = all<RecycleWorker>();
  ASSERT_EQ(recycles.size(), 2u);
  EXPECT_EQ(recycles[1].delay, Duration{0});
}

TEST_F(ControllerTest, TheExitOfARunIsRecordedInItsTimeline) {
  make("    timeline: {dir: /nonexistent}\n");
  start();
  controller->run_ended(0, RunEnd::Exited, false, "exited with status 3");
  take();
  auto records = all<Record>();
  ASSERT_EQ(records.size(), 1u);
  EXPECT_EQ(records[0].event, "exit");
  EXPECT_EQ(records[0].detail, "exited with status 3");
}

class CheckpointTest : public ControllerTest {
 protected:
  void SetUp() override {
    make(
        "    limits: {memory_max: 1GiB}\n"
        "    checkpoint: {signal: USR1, timeout: 60s, on_timeout: " +
        on_timeout +
        "}\n"
        "    policies:\n"
        "      - memory: {limit: 500MiB, action: checkpoint}\n"
        "      - memory: {limit: 900MiB}\n");
    start();
    sampled(sample(600));
  }
  std::string on_timeout = "restart";
};

TEST_F(CheckpointTest, ACheckpointActionAsksTheWorkerFirst) {
  auto asks = all<AskCheckpoint>();
  ASSERT_EQ(asks.size(), 1u);
  EXPECT_EQ(asks[0].signal, SIGUSR1);
  EXPECT_EQ(asks[0].reason, "anon 600 MiB > 500 MiB (memory policy)");
  EXPECT_TRUE(all<RecycleWorker>().empty());
  controller->checkpoint_sent(0, 100);
  take();
  EXPECT_TRUE(logged("app[0] asked to checkpoint: SIGUSR1 to pid 100"));
  auto timers = all<ArmCheckpointTimer>();
  ASSERT_EQ(timers.size(), 1u);
  EXPECT_EQ(timers[0].delay, 60s);
}

TEST_F(CheckpointTest, AConfirmedCheckpointRestartsTheWorkerToResume) {
  controller->checkpoint_sent(0, 100);
  now += 3s;
  notify::NotifyMessage m;
  m.checkpointed = true;
  controller->notified(0, 100, m);
  take();
  EXPECT_TRUE(logged("app[0] checkpointed in 3s (pid 100); restarting it to resume"));
  auto recycles = all<RecycleWorker>();
  ASSERT_EQ(recycles.size(), 1u);
  EXPECT_TRUE(recycles[0].resume);
  EXPECT_EQ(recycles[0].reason, "anon 600 MiB > 500 MiB (memory policy)");
  EXPECT_EQ(all<CancelCheckpointTimer>().size(), 1u);
}

TEST_F(CheckpointTest, OnlyARestartOvertakesACheckpointUnderWay) {
  controller->checkpoint_sent(0, 100);
  now += 1s;
  sampled(sample(700));
  EXPECT_TRUE(all<RecycleWorker>().empty()) << "another checkpoint decision changes nothing";
  EXPECT_EQ(all<AskCheckpoint>().size(), 1u);
  now += 1s;
  sampled(sample(950));
  auto recycles = all<RecycleWorker>();
  ASSERT_EQ(recycles.size(), 1u);
  EXPECT_FALSE(recycles[0].resume);
  EXPECT_EQ(recycles[0].reason, "anon 950 MiB > 900 MiB (memory policy)");
  EXPECT_TRUE(logged("while it checkpoints; restarting it now"));
}

TEST_F(CheckpointTest, ACheckpointNotConfirmedInTimeRestartsWithoutOne) {
  controller->checkpoint_sent(0, 100);
  now += 60s;
  controller->checkpoint_timer_fired(0);
  take();
  EXPECT_TRUE(logged("has not confirmed its checkpoint after 1m; restarting it without one"));
  auto recycles = all<RecycleWorker>();
  ASSERT_EQ(recycles.size(), 1u);
  EXPECT_FALSE(recycles[0].resume);
}

TEST_F(CheckpointTest, ACheckpointThatCannotBeAskedForRestartsWithoutOne) {
  controller->checkpoint_failed(0, 100, "No such process");
  take();
  EXPECT_TRUE(logged("cannot ask pid 100 to checkpoint (No such process)"));
  auto recycles = all<RecycleWorker>();
  ASSERT_EQ(recycles.size(), 1u);
  EXPECT_FALSE(recycles[0].resume);
}

class WatchdogTest : public ControllerTest {
 protected:
  void alive() {
    notify::NotifyMessage m;
    m.watchdog = true;
    controller->notified(0, 100, m);
  }
  void tick() {
    policies::Sample s = sample(600);
    controller->prepare(0, s, nullptr);
    sampled(std::move(s));
  }
};

TEST_F(WatchdogTest, ARunSilentPastItsTimeoutIsRestartedWithoutACheckpoint) {
  make("    watchdog: {timeout: 10s}\n");
  start();
  tick();
  now += 1h;
  tick();
  EXPECT_TRUE(all<RecycleWorker>().empty()) << "never said it was alive: not armed";
  alive();
  now += 10s;
  tick();
  EXPECT_TRUE(all<RecycleWorker>().empty());
  now += 1s;
  tick();
  auto recycles = all<RecycleWorker>();
  ASSERT_EQ(recycles.size(), 1u);
  EXPECT_FALSE(recycles[0].resume) << "no checkpoint was ever confirmed";
  EXPECT_EQ(recycles[0].reason,
            "hung: no WATCHDOG=1 or RECYCLER_ITERATION for 11s (watchdog timeout 10s) "
            "(watchdog policy)");
  EXPECT_TRUE(all<AskCheckpoint>().empty());
}

// diagnose: the evidence comes before the recycle it explains, for the
// policies it names (watchdog and leak by default), not for the others.
TEST_F(WatchdogTest, AHangIsDiagnosedBeforeItsRestartWhereTheProgramSaysSo) {
  make(
      "    watchdog: {timeout: 10s}\n    diagnose: {signal: USR2}\n"
      "    limits: {memory_max: 1GiB}\n"
      "    policies:\n      - memory: {limit: 900MiB}\n");
  start();
  alive();
  now += 11s;
  tick();
  take();
  size_t diagnose = commands.size(), recycle = commands.size();
  for (size_t i = 0; i < commands.size(); ++i) {
    if (std::holds_alternative<engine::Diagnose>(commands[i])) diagnose = std::min(diagnose, i);
    if (std::holds_alternative<RecycleWorker>(commands[i])) recycle = std::min(recycle, i);
  }
  ASSERT_LT(diagnose, commands.size());
  ASSERT_LT(recycle, commands.size());
  EXPECT_LT(diagnose, recycle) << "the evidence first";
  const auto& d = std::get<engine::Diagnose>(commands[diagnose]);
  EXPECT_EQ(d.policy, "watchdog");
  EXPECT_EQ(d.pid, 100);
  EXPECT_THAT(d.reason, ::testing::HasSubstr("hung: no WATCHDOG=1"));

  commands.clear();
  controller->run_ended(0, RunEnd::Stopping);
  start(0, 2, 101);
  policies::Sample big = sample(950);
  controller->prepare(0, big, nullptr);
  sampled(std::move(big));
  take();
  EXPECT_EQ(all<RecycleWorker>().size(), 1u);
  EXPECT_TRUE(all<engine::Diagnose>().empty()) << "memory is not in diagnose.policies";
}

TEST_F(WatchdogTest, AnIterationReportCountsAsAlive) {
  make("    watchdog: {timeout: 10s}\n");
  start();
  notify::NotifyMessage m;
  m.iteration = 1;
  controller->notified(0, 100, m);
  now += 8s;
  m.iteration = 2;
  controller->notified(0, 100, m);
  now += 8s;
  tick();
  EXPECT_TRUE(all<RecycleWorker>().empty());
}

TEST_F(WatchdogTest, AHangDuringACheckpointIsLeftToTheCheckpointTimeout) {
  make(
      "    limits: {memory_max: 1GiB}\n"
      "    checkpoint: {signal: USR1, timeout: 60s}\n"
      "    watchdog: {timeout: 10s}\n"
      "    policies:\n"
      "      - memory: {limit: 500MiB, action: checkpoint}\n");
  start();
  alive();
  tick();  // 600 MiB: a checkpoint is asked for
  ASSERT_EQ(all<AskCheckpoint>().size(), 1u);
  controller->checkpoint_sent(0, 100);
  now += 30s;  // busy writing it, no WATCHDOG=1
  tick();
  EXPECT_TRUE(all<RecycleWorker>().empty()) << "the watchdog must not cut the checkpoint short";
  notify::NotifyMessage done;
  done.checkpointed = true;
  controller->notified(0, 100, done);
  take();
  auto recycles = all<RecycleWorker>();
  ASSERT_EQ(recycles.size(), 1u);
  EXPECT_TRUE(recycles[0].resume);
}

TEST_F(WatchdogTest, AHungRunResumesFromTheSlotsLastConfirmedCheckpoint) {
  make(
      "    limits: {memory_max: 1GiB}\n"
      "    checkpoint: {signal: USR1, timeout: 60s}\n"
      "    watchdog: {timeout: 10s}\n"
      "    policies:\n"
      "      - memory: {limit: 500MiB, action: checkpoint}\n");
  start();
  tick();
  controller->checkpoint_sent(0, 100);
  notify::NotifyMessage done;
  done.checkpointed = true;
  controller->notified(0, 100, done);
  take();
  controller->run_ended(0, RunEnd::Stopping, true);
  commands.clear();
  now += 5s;
  controller->run_started(0, 2, now, 101, 0);
  notify::NotifyMessage m;
  m.watchdog = true;
  controller->notified(0, 101, m);
  now += 11s;
  policies::Sample s = sample(100);
  controller->prepare(0, s, nullptr);
  sampled(std::move(s));
  auto recycles = all<RecycleWorker>();
  ASSERT_EQ(recycles.size(), 1u);
  EXPECT_TRUE(recycles[0].resume) << "the checkpoint it confirmed before is on disk";
  EXPECT_THAT(recycles[0].reason, ::testing::StartsWith("hung: "));
}

class CheckpointWaitTest : public CheckpointTest {
 protected:
  CheckpointWaitTest() { on_timeout = "wait"; }
};

TEST_F(CheckpointWaitTest, AnOverdueCheckpointWaitsUntilMemoryNearsMemoryMax) {
  controller->checkpoint_sent(0, 100);
  now += 60s;
  controller->checkpoint_timer_fired(0);
  take();
  EXPECT_TRUE(logged("waiting on (on_timeout: wait) until it nears its 1 GiB memory_max"));
  auto s = sample(600);
  s.current = 900 * kMiB;
  sampled(s);
  EXPECT_TRUE(all<RecycleWorker>().empty());
  s.current = 990 * kMiB;  // >= 95% of 1 GiB
  sampled(s);
  auto recycles = all<RecycleWorker>();
  ASSERT_EQ(recycles.size(), 1u);
  EXPECT_FALSE(recycles[0].resume);
  EXPECT_TRUE(logged("has not confirmed its checkpoint; restarting it without one"));
}

TEST_F(ControllerTest, ARequestLimitIsDecidedOnTheReportNotAtTheNextSample) {
  make("    policies:\n      - max_requests: {limit: 3}\n");
  start();
  sampled(sample());
  controller->requests(0, 100, 2);
  take();
  EXPECT_TRUE(all<RecycleWorker>().empty());
  controller->requests(0, 100, 1);
  take();
  auto recycles = all<RecycleWorker>();
  ASSERT_EQ(recycles.size(), 1u);
  EXPECT_THAT(recycles[0].reason, HasSubstr("3 requests"));
}

TEST_F(ControllerTest, RequestsLeftIsTheNearestLimitOfAllRunningWorkers) {
  make("    policies:\n      - max_requests: {limit: 10}\n", 2);
  EXPECT_EQ(controller->requests_left(), std::nullopt) << "nothing runs";
  start(0, 1, 100);
  start(1, 1, 200);
  EXPECT_EQ(controller->requests_left(), 10u);
  controller->requests(0, 100, 4);
  controller->requests(1, 200, 7);
  EXPECT_EQ(controller->requests_left(), 3u);
  EXPECT_EQ(controller->requests_counted(), 11u);
  controller->run_ended(1, RunEnd::Finished);
  EXPECT_EQ(controller->requests_left(), 6u) << "a worker that ended is not counted";
  EXPECT_EQ(controller->requests_counted(), 11u) << "a running total";
}

// A process's counts may be held back below the smallest process limit
// (RECYCLER_REQUESTS_BATCH_BELOW, recycler's or the program's env:): the
// fewest requests left count from one under it.
TEST_F(ControllerTest, RequestsLeftCountsWhatProcessesMayHoldBack) {
  for (auto [env, left] : std::vector<std::pair<std::string, uint64_t>>{
           {"", 1}, {"    env: {RECYCLER_REQUESTS_BATCH_BELOW: \"1\"}\n", 9}}) {
    make("    policies:\n      - max_requests: {limit: 10, scope: process}\n" + env);
    start();
    controller->requests(0, 101, 1);
    policies::Sample s = sample();
    s.processes = {process(100, 1, true), process(101, 1)};
    std::vector<pid_t> listed{100, 101};
    controller->prepare(0, s, &listed);
    sampled(s);
    EXPECT_EQ(controller->requests_left(), left) << env;
  }
}

// The notify socket's answers (notify/message.h): a process hears its drawn
// limit after its first report, then nothing until a report reaches it; that
// one is answered after its signal was given, with the count seen.
TEST_F(ControllerTest, AProcessHearsItsLimitOnceAndAtItThatItsReportWasActedOn) {
  make("    policies:\n      - max_requests: {limit: 10, jitter: 5, scope: process}\n");
  start();
  controller->requests(0, 101, 1);
  take();
  notify::Answer first = controller->answer(0, 101);
  ASSERT_TRUE(first.request_limit);
  uint64_t limit = *first.request_limit;
  EXPECT_GE(limit, 10u);
  EXPECT_LE(limit, 15u);
  EXPECT_FALSE(first.requests_seen);
  EXPECT_FALSE(controller->answer(0, 101)) << "told once";
  controller->requests(0, 101, limit - 2);
  take();
  EXPECT_FALSE(controller->answer(0, 101)) << "below its limit: nothing to say";
  EXPECT_TRUE(all<SignalProcess>().empty());
  controller->requests(0, 101, 1);
  take();
  // The signal is among the commands of that very report, so the runtime has
  // sent it by the time it answers.
  auto signals = all<SignalProcess>();
  ASSERT_EQ(signals.size(), 1u);
  EXPECT_EQ(signals[0].pid, 101);
  notify::Answer at = controller->answer(0, 101);
  EXPECT_FALSE(at.request_limit);
  EXPECT_EQ(at.requests_seen, limit);
  // Answered once: a process that serves on (held in a queue, say) reports
  // each request and hears nothing more.
  controller->requests(0, 101, 1);
  take();
  EXPECT_FALSE(controller->answer(0, 101));
}

// A surge: the next generation serves before its run starts (ready_after, or
// a READY=1 that comes after its workers accept). Its counts wait apart: the
// run it replaces does not count them, and its own run starts with them.
TEST_F(ControllerTest, WhatTheNextGenerationServedBeforeItsRunCountsInItsRun) {
  make(
      "    policies:\n      - max_requests: {limit: 10, scope: process}\n"
      "      - max_requests: {limit: 1000}\n");
  start(0, 1, 100);
  controller->requests(0, 101, 4);
  controller->next_requests(0, 2, 201, 7);
  controller->next_requests(0, 2, 202, 12);
  take();
  EXPECT_EQ(controller->requests_served(0), 4u) << "not the run being replaced";
  EXPECT_TRUE(all<SignalProcess>().empty()) << "nor its limits";
  EXPECT_EQ(controller->requests_counted(), 23u) << "the program's total counts them all";
  start(0, 2, 200);  // READY=1: generation 2's run
  EXPECT_EQ(controller->requests_served(0), 19u);
  policies::Sample s = sample();
  s.processes = {process(200, 1, true), process(201, 1), process(202, 1)};
  std::vector<pid_t> listed{200, 201, 202};
  controller->prepare(0, s, &listed);
  EXPECT_EQ(s.processes[1].requests, 7u);
  EXPECT_EQ(s.processes[2].requests, 12u);
  sampled(s);
  auto signals = all<SignalProcess>();
  ASSERT_EQ(signals.size(), 1u) << "202 is past its limit, counted from its first request";
  EXPECT_EQ(signals[0].pid, 202);
  controller->requests(0, 201, 2);
  take();
  EXPECT_FALSE(controller->answer(0, 201).requests_seen) << "7 + 2 of 10";
  controller->requests(0, 201, 1);
  take();
  EXPECT_EQ(all<SignalProcess>().size(), 2u);
}

TEST_F(ControllerTest, CountsOfANextGenerationThatNeverRanAreNotAnothersStart) {
  make("    policies:\n      - max_requests: {limit: 1000}\n");
  start(0, 1, 100);
  controller->next_requests(0, 2, 201, 50);  // generation 2 failed to become ready
  controller->next_requests(0, 3, 301, 5);   // the surge tried again
  start(0, 3, 300);
  EXPECT_EQ(controller->requests_served(0), 5u);
  controller->next_requests(0, 4, 401, 9);
  controller->run_ended(0, RunEnd::Stopping);  // a plain restart instead
  start(0, 5, 500);
  EXPECT_EQ(controller->requests_served(0), 0u);
}

// The generation a surge replaced stops beside the new one: what it reports
// counts nowhere, and a process of it waiting at its limit hears once that it
// may go on.
TEST_F(ControllerTest, AProcessOfTheRetiringGenerationHearsOnceAndCountsNowhere) {
  make("    policies:\n      - max_requests: {limit: 10, scope: process}\n");
  start(0, 2, 200);
  notify::Answer a = controller->retiring_report(0, 101, 10);
  EXPECT_EQ(a.requests_seen, 10u);
  EXPECT_FALSE(a.request_limit);
  EXPECT_FALSE(controller->retiring_report(0, 101, 1)) << "once a process";
  EXPECT_EQ(controller->requests_served(0), 0u);
  EXPECT_TRUE(controller->retiring_report(0, 102, 3));
  start(0, 3, 300);  // the next surge's switch: a new generation retires
  EXPECT_TRUE(controller->retiring_report(0, 101, 1));
}

// A process signalled in a run that a surge ended before the process exited:
// its line gives what it served in that run, not 0 from the new one.
TEST_F(ControllerTest, AProcessThatOutlivesItsRunIsLoggedWithItsCountAtTheSignal) {
  make("    policies:\n      - max_requests: {limit: 10, scope: process}\n");
  start(0, 1, 100);
  controller->requests(0, 101, 10);
  take();
  ASSERT_EQ(all<SignalProcess>().size(), 1u);
  controller->process_signalled(0, 101, Signalled::Sent);
  start(0, 2, 200);
  controller->process_exited(0, 101);
  take();
  EXPECT_TRUE(logged("app[0] pid 101 exited after its recycle: 10 requests served"));
}

TEST_F(ControllerTest, OnlyProcessScopeLimitsAreTold) {
  for (const char* policy : {"max_requests: {limit: 10}", "max_lifetime: {after: 1h}"}) {
    make(std::string("    policies:\n      - ") + policy + "\n");
    start();
    controller->requests(0, 101, 1);
    take();
    EXPECT_FALSE(controller->answer(0, 101)) << policy;
  }
  make("    policies:\n      - max_requests: {limit: 10, scope: process}\n");
  start();
  EXPECT_FALSE(controller->answer(0, 101)) << "a process that never reported";
  EXPECT_FALSE(controller->answer(1, 101)) << "no such slot";
}

// The smallest of several policies' limits; told again when it changes.
TEST_F(ControllerTest, AProcessIsToldTheSmallestLimitDrawnForIt) {
  make(
      "    policies:\n"
      "      - max_requests: {limit: 50, scope: process}\n"
      "      - max_requests: {limit: 20, scope: process}\n");
  start();
  controller->requests(0, 101, 1);
  take();
  EXPECT_EQ(controller->answer(0, 101).request_limit, 20u);
}

// A process told its limit may hold back every count below it: the notify
// socket must not rest while its next report may be the one at the limit.
TEST_F(ControllerTest, RequestsLeftCountsWhatAProcessToldItsLimitMayHoldBack) {
  make(
      "    policies:\n      - max_requests: {limit: 100, scope: process}\n"
      "    env: {RECYCLER_REQUESTS_BATCH_BELOW: \"1\"}\n");
  start();
  controller->requests(0, 101, 1);
  take();
  EXPECT_EQ(controller->requests_left(), 99u);
  ASSERT_TRUE(controller->answer(0, 101));
  EXPECT_EQ(controller->requests_left(), 1u);
  // Gone at the next sample: forgotten with its count.
  policies::Sample s = sample();
  std::vector<pid_t> listed{100};
  s.processes = {process(100, 1, true)};
  controller->prepare(0, s, &listed);
  sampled(s);
  EXPECT_EQ(controller->requests_left(), 100u);
}

TEST_F(ControllerTest, WithoutARequestPolicyNothingIsLeftToCount) {
  make("    policies:\n      - max_lifetime: {after: 1h}\n");
  start();
  controller->requests(0, 100, 4);
  EXPECT_EQ(controller->requests_left(), std::nullopt);
  EXPECT_EQ(controller->requests_counted(), 4u);
}

TEST_F(ControllerTest, RequestsCountedPerProcessGoIntoTheSample) {
  make("    policies:\n      - max_requests: {limit: 1000}\n");
  start();
  controller->requests(0, 101, 5);
  controller->requests(0, std::nullopt, 2);
  policies::Sample s = sample();
  s.processes = {process(101, 1), process(102, 1)};
  std::vector<pid_t> listed{101, 102};
  controller->prepare(0, s, &listed);
  EXPECT_EQ(s.requests, 7u);
  EXPECT_EQ(s.processes[0].requests, 5u);
  EXPECT_EQ(s.processes[1].requests, 0u);
  // 101 is gone at the next look: its count goes with it.
  std::vector<pid_t> later{102};
  policies::Sample s2 = sample();
  controller->prepare(0, s2, &later);
  s2.processes = {process(101, 1)};
  controller->prepare(0, s2, &later);
  EXPECT_EQ(s2.processes[0].requests, 0u);
}

TEST_F(ControllerTest, DeviceBytesAWorkerReportsGoIntoTheSample) {
  make("    policies:\n      - memory: {metric: device, limit: 1GiB}\n");
  start();
  notify::NotifyMessage m;
  m.device_bytes = 2048 * kMiB;
  controller->notified(0, 100, m);
  policies::Sample s = sample();
  controller->prepare(0, s, nullptr);
  EXPECT_EQ(s.device, 2048 * kMiB);
  sampled(s);
  EXPECT_EQ(all<RecycleWorker>().size(), 1u);
}

TEST_F(ControllerTest, WhatARunSaysWithStatusIsKeptForItsRunOnly) {
  make("");
  start();
  EXPECT_EQ(controller->status_text(0), "");
  notify::NotifyMessage m;
  m.status = "warming up";
  controller->notified(0, 100, m);
  controller->notified(0, 100, notify::NotifyMessage{});  // a message without one keeps it
  EXPECT_EQ(controller->status_text(0), "warming up");
  EXPECT_EQ(controller->status_text(7), "") << "no such slot";
  controller->run_ended(0, RunEnd::Exited);
  start(0, 2, 101);
  EXPECT_EQ(controller->status_text(0), "") << "the next run has said nothing yet";
}

TEST_F(ControllerTest, TheIterationAWorkerReportsGoesIntoTheSample) {
  make("    policies:\n      - memory: {metric: device, limit: 1GiB}\n");
  start();
  policies::Sample before = sample();
  controller->prepare(0, before, nullptr);
  EXPECT_FALSE(before.iteration) << "none reported yet";
  notify::NotifyMessage m;
  m.iteration = 4;
  controller->notified(0, 100, m);
  controller->notified(0, 100, notify::NotifyMessage{});  // a message without one keeps it
  policies::Sample s = sample();
  controller->prepare(0, s, nullptr);
  EXPECT_EQ(s.iteration, 4u);
}

TEST_F(ControllerTest, ALeakPerIterationIsDecidedAtTheBoundaryNotAtTheNextSample) {
  make(
      "    policies:\n"
      "      - leak: {metric: device, limit: 30GiB, action: checkpoint}\n"
      "    checkpoint: {signal: USR1, timeout: 1m}\n");
  start();
  // Each iteration: its boundary (the level, reported with the number), a
  // sample in its decode (16 GiB above), and its end, 4 GiB higher.
  auto iteration = [&](uint64_t n, uint64_t level_gib) {
    now += 1s;
    notify::NotifyMessage m;
    m.device_bytes = level_gib << 30;
    m.iteration = n;
    controller->notified(0, 100, m);
    take();
    policies::Sample s = sample();
    now += 5s;
    m = {};
    m.device_bytes = (level_gib + 16) << 30;
    controller->notified(0, 100, m);
    s.t = now;
    controller->prepare(0, s, nullptr);
    sampled(s);
  };
  iteration(1, 6);
  iteration(2, 10);
  EXPECT_TRUE(all<AskCheckpoint>().empty()) << "one step is not a trend";
  // The third boundary: 26 GiB (the second's peak) + 4 GiB reaches 30 GiB.
  now += 1s;
  notify::NotifyMessage m;
  m.device_bytes = 14ull << 30;
  m.iteration = 3;
  controller->notified(0, 100, m);
  take();
  auto asks = all<AskCheckpoint>();
  ASSERT_EQ(asks.size(), 1u) << "at the boundary, before the next sample";
  EXPECT_THAT(asks[0].reason, HasSubstr("per iteration would cross limit 30 GiB in iteration 3"));
}

TEST_F(ControllerTest, TheSameIterationAgainIsNoBoundary) {
  make("    policies:\n      - leak: {metric: device, limit: 30GiB}\n");
  start();
  size_t evaluations = 0;
  controller->observe([&](unsigned, size_t, const Decision&) { ++evaluations; });
  notify::NotifyMessage m;
  m.iteration = 1;
  controller->notified(0, 100, m);
  EXPECT_EQ(evaluations, 1u);
  controller->notified(0, 100, m);
  m.iteration.reset();
  m.device_bytes = 1 << 30;
  controller->notified(0, 100, m);
  EXPECT_EQ(evaluations, 1u) << "a repeated number, or none, waits for the next sample";
}

TEST_F(ControllerTest, AnOutlookIsLoggedWhenGrowthIsFirstSeenAndWhenItStops) {
  make(
      "    limits: {memory_max: 4GiB}\n"
      "    policies:\n"
      "      - leak: {window: 60s, warmup: 0s, horizon: 1s, min_slope: 1MiB/min}\n");
  start();
  for (int i = 0; i < 120; ++i) {
    now += 1s;
    sampled(sample(100 + i));
  }
  ASSERT_TRUE(logged("app[0] leak: growing: "));
  size_t growing = 0;
  for (const Log& l : all<Log>())
    if (l.event == "outlook") ++growing;
  EXPECT_EQ(growing, 1u) << "once, not on every sample";
  for (int i = 0; i < 200; ++i) {
    now += 1s;
    sampled(sample(220));
  }
  EXPECT_TRUE(logged("app[0] leak: no longer growing"));
}

TEST_F(ControllerTest, TheOutlookAndLastSampleAreThereForStatus) {
  make(
      "    limits: {memory_max: 4GiB}\n"
      "    policies:\n"
      "      - leak: {window: 60s, warmup: 0s, horizon: 1s, min_slope: 1MiB/min}\n");
  EXPECT_EQ(controller->last_sample(0), nullptr);
  start();
  for (int i = 0; i < 120; ++i) {
    now += 1s;
    sampled(sample(100 + i));
  }
  ASSERT_NE(controller->last_sample(0), nullptr);
  EXPECT_EQ(controller->last_sample(0)->anon, 219 * kMiB);
  auto outlooks = controller->outlooks(0);
  ASSERT_EQ(outlooks.size(), 1u);
  EXPECT_EQ(outlooks[0].first, 0u);
  EXPECT_NEAR(outlooks[0].second->slope, 1.0 * kMiB, 0.1 * kMiB);
  EXPECT_GT(outlooks[0].second->predicted_s, 0);
  controller->run_ended(0, RunEnd::Finished);
  EXPECT_TRUE(controller->outlooks(0).empty());
  EXPECT_EQ(controller->requests_served(0), std::nullopt);
}

TEST_F(ControllerTest, AnOperatorRecycleGoesThroughTheQueueAsPolicyControl) {
  make("    instances: 2\n", 2);
  start(0, 1, 100);
  start(1, 1, 200);
  std::vector<std::string> acted;
  controller->on_acted([&](unsigned, size_t, const Decision& d) { acted.push_back(d.reason); });
  EXPECT_TRUE(controller->recycle_asked(0, "asked by the operator"));
  EXPECT_TRUE(controller->recycle_asked(1, "asked by the operator"));
  take();
  // max_concurrent_recycles 1: the second waits for the first's replacement.
  auto recycles = all<RecycleWorker>();
  ASSERT_EQ(recycles.size(), 1u);
  EXPECT_EQ(recycles[0].slot, 0u);
  EXPECT_EQ(recycles[0].reason, "asked by the operator");
  EXPECT_EQ(recycles[0].delay, 0s);
  EXPECT_TRUE(logged("app[1] recycle waits its turn"));
  bool control_event = false;
  for (const Log& l : all<Log>())
    for (const log::Field& f : l.fields)
      if (l.event == "recycle" && f.key == "policy" && std::get<std::string>(f.value) == "control")
        control_event = true;
  EXPECT_TRUE(control_event);
  EXPECT_FALSE(controller->recycle_asked(0, "again")) << "a recycle is under way";
  controller->run_ended(0, RunEnd::Stopping);
  start(0, 2, 101);
  take();
  recycles = all<RecycleWorker>();
  ASSERT_EQ(recycles.size(), 2u);
  EXPECT_EQ(recycles[1].slot, 1u);
  EXPECT_EQ(acted.size(), 2u);
}

TEST_F(CheckpointTest, AnOperatorRecycleAsksForACheckpointWhereAPolicyWould) {
  commands.clear();
  make(
      "    checkpoint: {signal: USR1, timeout: 60s}\n"
      "    policies:\n"
      "      - memory: {limit: 500MiB, action: checkpoint}\n");
  start();
  EXPECT_TRUE(controller->recycle_asked(0, "asked by the operator"));
  take();
  auto asks = all<AskCheckpoint>();
  ASSERT_EQ(asks.size(), 1u);
  EXPECT_EQ(asks[0].reason, "asked by the operator");
  EXPECT_TRUE(all<RecycleWorker>().empty());
}

// A checkpoint: section alone (a trainer whose policies only restart, or
// none at all) is enough: an operator's recycle is one it must not lose work to.
TEST_F(CheckpointTest, AnOperatorRecycleAsksForACheckpointOfAProgramWithACheckpointSection) {
  commands.clear();
  make("    checkpoint: {signal: USR2, timeout: 60s}\n");
  start();
  EXPECT_TRUE(controller->recycle_asked(0, "asked by recycler recycle"));
  take();
  auto asks = all<AskCheckpoint>();
  ASSERT_EQ(asks.size(), 1u);
  EXPECT_EQ(asks[0].signal, SIGUSR2);
  EXPECT_TRUE(all<RecycleWorker>().empty());
}

TEST_F(CheckpointTest, AnOperatorRecycleOfAProgramWithoutCheckpointsRestartsIt) {
  commands.clear();
  make("    policies:\n      - memory: {limit: 500MiB}\n");
  start();
  EXPECT_TRUE(controller->recycle_asked(0, "asked by recycler recycle"));
  take();
  EXPECT_TRUE(all<AskCheckpoint>().empty());
  EXPECT_EQ(all<RecycleWorker>().size(), 1u);
}

// ---- a request-counting policy that can never see a request ----

class UnseenRequestsTest : public ControllerTest {
 protected:
  // A sample of a worker that has used `cpu_ms` of CPU time.
  policies::Sample busy(uint64_t cpu_ms) {
    policies::Sample s = sample();
    s.cpu_usec = cpu_ms * 1000;
    return s;
  }
  void busy_for(uint64_t cpu_ms, unsigned slot = 0) {
    now += 1s;
    sampled(busy(cpu_ms), slot);
  }
  std::vector<Log> warnings() const {
    std::vector<Log> out;
    for (const Log& l : all<Log>())
      if (l.event == "requests_unseen") out.push_back(l);
    return out;
  }
  bool reads_cpu() const { return controller->needs() & policies::kNeedsCpu; }
  static std::optional<log::Field::Value> field(const Log& l, const std::string& key) {
    for (const log::Field& f : l.fields)
      if (f.key == key) return f.value;
    return std::nullopt;
  }
};

TEST_F(UnseenRequestsTest, WarnsOnceWhenABusyWorkerHasCountedNoRequest) {
  make("    policies:\n      - max_requests: {limit: 1000}\n", 2);
  EXPECT_TRUE(reads_cpu()) << "read only to warn";
  start(0, 1, 100);
  start(1, 1, 200);
  busy_for(500);  // its first sample: CPU time counts from here
  busy_for(2499);
  EXPECT_TRUE(warnings().empty()) << "1.999 s of CPU time is below the threshold";
  busy_for(2500);
  auto w = warnings();
  ASSERT_EQ(w.size(), 1u);
  EXPECT_EQ(w[0].level, config::LogLevel::Warn);
  EXPECT_EQ(w[0].message,
            "app[0] has used 2.0s of CPU time since it started and its max_requests policy has "
            "not counted a single request: it counts only RECYCLER_REQUESTS=N reports on its "
            "notify socket (NOTIFY_SOCKET); a worker that sends none is never recycled by it: "
            "see examples/gunicorn/ (recycler_notify) or set requests.pattern");
  EXPECT_EQ(field(w[0], "program"), log::Field::Value(std::string("app")));
  EXPECT_EQ(field(w[0], "slot"), log::Field::Value(uint64_t{0}));
  EXPECT_EQ(field(w[0], "pid"), log::Field::Value(int64_t{100}));
  EXPECT_EQ(field(w[0], "policy"), log::Field::Value(std::string("max_requests")));
  EXPECT_EQ(field(w[0], "cpu_s"), log::Field::Value(2.0));
  EXPECT_FALSE(reads_cpu()) << "said once: the probes stop reading it";

  // Not again: for another slot, for more CPU time, or for a later run.
  busy_for(0, 1);
  busy_for(9000, 1);
  busy_for(20000);
  controller->run_ended(0, RunEnd::Exited);
  start(0, 2, 300);
  busy_for(0);
  busy_for(9000);
  EXPECT_EQ(warnings().size(), 1u);
  EXPECT_TRUE(all<RecycleWorker>().empty());
}

TEST_F(UnseenRequestsTest, EachRunCountsFromItsOwnFirstSampleAndFromWhereTheSumDropped) {
  make("    policies:\n      - max_requests: {limit: 1000}\n");
  start();
  busy_for(60000);  // v2's cpu.stat spans the cgroup's earlier runs
  busy_for(61900);
  // A process exited: the sum over those alive dropped; growth counts from there.
  busy_for(1000);
  busy_for(2900);
  EXPECT_TRUE(warnings().empty());
  busy_for(3000);
  EXPECT_EQ(warnings().size(), 1u);
}

TEST_F(UnseenRequestsTest, NeverWarnsOnceARequestWasCounted) {
  make("    policies:\n      - max_requests: {limit: 1000}\n");
  start();
  busy_for(0);
  controller->requests(0, 100, 1);
  take();
  EXPECT_FALSE(reads_cpu()) << "nothing left to watch for";
  busy_for(60000);
  EXPECT_TRUE(warnings().empty());
}

TEST_F(UnseenRequestsTest, AReportOfZeroRequestsShowsTheWiringWorks) {
  make("    policies:\n      - max_requests: {limit: 1000}\n");
  start();
  busy_for(0);
  notify::NotifyMessage m;
  m.requests = 0;
  controller->notified(0, 100, m);
  take();
  busy_for(60000);
  EXPECT_TRUE(warnings().empty());
}

TEST_F(UnseenRequestsTest, WithAPatternTheWarningNamesIt) {
  make(
      "    requests: {pattern: 'GET \\S+ 200'}\n"
      "    policies:\n      - max_requests: {limit: 1000}\n");
  start();
  busy_for(0);
  busy_for(2000);
  auto w = warnings();
  ASSERT_EQ(w.size(), 1u);
  EXPECT_THAT(w[0].message,
              HasSubstr("has not counted a single request: it counts requests from output lines "
                        "matching /GET \\S+ 200/ and RECYCLER_REQUESTS=N reports"));
}

TEST_F(UnseenRequestsTest, NeverWarnsWithoutARequestCountingPolicy) {
  make("    policies:\n      - memory: {limit: 600MiB}\n      - max_lifetime: {after: 1h}\n");
  EXPECT_FALSE(reads_cpu()) << "nobody pays for it";
  start();
  busy_for(0);
  busy_for(60000);
  EXPECT_TRUE(warnings().empty());
}

TEST_F(UnseenRequestsTest, NeverWarnsWithoutCpuFigures) {
  make("    policies:\n      - max_requests: {limit: 1000}\n");
  start();
  for (int i = 0; i < 100; ++i) {
    now += 1s;
    sampled(sample());
  }
  EXPECT_TRUE(warnings().empty());
}

}  // namespace
}  // namespace recycler::engine
