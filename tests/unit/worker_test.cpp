// The worker-slot lifecycle against a fake clock, a fake launcher and a fake
// cgroup: every transition, the backoff sequence, the crash-loop guard, stop
// timeouts and the exit messages, in microseconds of real time.
#include "supervisor/worker/worker.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstring>

#include "supervisor/worker/worker_checkpoints.h"
#include "tests/support/fakes.h"
#include "tests/support/log_capture.h"
#include "tests/support/policy_harness.h"

namespace recycler {
namespace {

using namespace std::chrono_literals;
using ::testing::Contains;
using ::testing::ElementsAre;
using testing::FakeCgroup;
using testing::FakeCgroupState;
using testing::FakeLauncher;
using testing::FakeTimers;
using ::testing::HasSubstr;
using testing::LogCapture;

ExitStatus exited(int code) {
  return ExitStatus{code};
}
ExitStatus killed(int sig) {
  return ExitStatus{0, sig, true};
}

class WorkerTest : public ::testing::Test {
 protected:
  WorkerTest() {
    program.name = "api";
    program.command = {"/bin/app", "--serve"};
    program.cwd = "/srv";
    program.restart.backoff = {1s, 8s, 60s};
    program.restart.crash_loop = {5, 60s};
  }

  Worker& make(unsigned slot = 0, std::string notify_socket = "") {
    worker =
        std::make_unique<Worker>(context, std::make_shared<config::ProgramConfig>(program), slot,
                                 std::make_unique<FakeCgroup>(cg), std::move(notify_socket));
    return *worker;
  }
  Duration backoff_delay() { return timers.pending_delay().value_or(Duration{-1}); }

  LogCapture log;
  config::ProgramConfig program;
  FakeTimers timers;
  FakeLauncher launcher;
  std::mt19937_64 rng{42};
  std::vector<std::string> base_env{"PATH=/usr/bin:/bin", "HOME=/root", "OMP_NUM_THREADS=64"};
  std::vector<WorkerState> states;
  WorkerServices context{timers, launcher, rng, base_env,
                         [this](Worker& w) { states.push_back(w.state()); }};
  std::shared_ptr<FakeCgroupState> cg = std::make_shared<FakeCgroupState>();
  std::unique_ptr<Worker> worker;
};

TEST_F(WorkerTest, StartLaunchesTheCommandAndRuns) {
  Worker& w = make(1);
  w.start();
  EXPECT_EQ(w.state(), WorkerState::Running);
  EXPECT_THAT(states, ElementsAre(WorkerState::Starting, WorkerState::Running));
  ASSERT_EQ(launcher.launched.size(), 1u);
  const LaunchSpec& spec = launcher.last().spec;
  EXPECT_THAT(spec.argv, ElementsAre("/bin/app", "--serve"));
  EXPECT_EQ(spec.cwd, "/srv");
  EXPECT_THAT(spec.env, Contains("RECYCLER_PROGRAM=api"));
  EXPECT_THAT(spec.env, Contains("RECYCLER_SLOT=1"));
  EXPECT_THAT(spec.env, Contains("RECYCLER_GENERATION=1"));
  EXPECT_EQ(w.generation(), 1u);
  EXPECT_EQ(w.pid(), launcher.last().pid);
  EXPECT_EQ(cg->adopted, launcher.last().pid);
  EXPECT_TRUE(log.contains("api[1] started: pid 1000, generation 1"));
}

TEST_F(WorkerTest, FailureRestartsAfterAJitteredBackoffWithTheNextGeneration) {
  Worker& w = make();
  w.start();
  timers.advance(3s);
  launcher.exit_last(exited(1));
  EXPECT_EQ(w.state(), WorkerState::Backoff);
  EXPECT_TRUE(log.contains("api[0] exited with status 1 after 3s")) << log.all();
  Duration delay = backoff_delay();
  EXPECT_GE(delay, 800ms);
  EXPECT_LE(delay, 1s);
  timers.advance(delay - 1ms);
  EXPECT_EQ(launcher.launched.size(), 1u) << "not before the backoff is over";
  timers.advance(1ms);
  ASSERT_EQ(launcher.launched.size(), 2u);
  EXPECT_EQ(w.state(), WorkerState::Running);
  EXPECT_THAT(launcher.last().spec.env, Contains("RECYCLER_GENERATION=2"));
}

TEST_F(WorkerTest, BackoffDoublesUpToItsCapWhileTheProgramKeepsFailing) {
  program.restart.crash_loop.max = 100;
  Worker& w = make();
  w.start();
  std::vector<Duration> upper{1s, 2s, 4s, 8s, 8s};
  for (Duration max : upper) {
    launcher.exit_last(exited(2));
    Duration d = backoff_delay();
    EXPECT_GE(d, max * 8 / 10);
    EXPECT_LE(d, max);
    timers.advance(d);
    ASSERT_EQ(w.state(), WorkerState::Running);
  }
}

TEST_F(WorkerTest, ARunLongerThanResetAfterStartsTheBackoffOver) {
  Worker& w = make();
  w.start();
  launcher.exit_last(exited(1));
  timers.advance(backoff_delay());
  launcher.exit_last(exited(1));
  EXPECT_GT(backoff_delay(), 1s) << "second failure in a row backs off longer";
  timers.advance(backoff_delay());
  timers.advance(61s);  // stable for longer than reset_after
  launcher.exit_last(exited(1));
  EXPECT_LE(backoff_delay(), 1s);
}

TEST_F(WorkerTest, OnFailureDoesNotRestartACleanExit) {
  Worker& w = make();
  w.start();
  launcher.exit_last(exited(0));
  EXPECT_EQ(w.state(), WorkerState::Stopped);
  EXPECT_EQ(timers.pending(), 0u);
  EXPECT_TRUE(log.contains("api[0] will not be restarted (restart.mode: on-failure)"));
}

TEST_F(WorkerTest, AlwaysRestartsACleanExit) {
  program.restart.mode = config::RestartMode::Always;
  Worker& w = make();
  w.start();
  launcher.exit_last(exited(0));
  EXPECT_EQ(w.state(), WorkerState::Backoff);
  timers.advance(1s);
  EXPECT_EQ(launcher.launched.size(), 2u);
}

TEST_F(WorkerTest, NeverRestartsNotEvenAFailure) {
  program.restart.mode = config::RestartMode::Never;
  Worker& w = make();
  w.start();
  launcher.exit_last(killed(SIGSEGV));
  EXPECT_EQ(w.state(), WorkerState::Stopped);
  EXPECT_TRUE(log.contains("api[0] killed by SIGSEGV after 0ms"));
  EXPECT_EQ(w.record().last_exit()->shell_code(), 128 + SIGSEGV);
}

TEST_F(WorkerTest, CrashLoopMarksTheSlotFailedAndStopsRestarting) {
  program.restart.crash_loop = {3, 60s};
  Worker& w = make();
  w.start();
  for (int i = 0; i < 2; ++i) {
    launcher.exit_last(exited(1));
    timers.advance(backoff_delay());
  }
  launcher.exit_last(exited(1));
  EXPECT_EQ(w.state(), WorkerState::Failed);
  EXPECT_EQ(timers.pending(), 0u);
  timers.advance(10min);
  EXPECT_EQ(launcher.launched.size(), 3u);
  auto loud = log.matching("FAILED");
  ASSERT_EQ(loud.size(), 1u);
  EXPECT_THAT(loud[0], HasSubstr("error"));
  EXPECT_THAT(loud[0], HasSubstr("api[0] FAILED: it exited 3 times within 1m"));
}

TEST_F(WorkerTest, ExitsSpreadWiderThanTheWindowAreNotACrashLoop) {
  program.restart.crash_loop = {3, 10s};
  program.restart.backoff = {1s, 1s, 1h};
  Worker& w = make();
  w.start();
  for (int i = 0; i < 6; ++i) {
    timers.advance(5s);  // each run lasts 5s: only two exits fit in 10s
    launcher.exit_last(exited(1));
    ASSERT_EQ(w.state(), WorkerState::Backoff) << "exit " << i;
    timers.advance(backoff_delay());
  }
}

TEST_F(WorkerTest, StartAfterFailedGivesTheSlotAFreshChance) {
  program.restart.crash_loop = {1, 60s};
  Worker& w = make();
  w.start();
  launcher.exit_last(exited(1));
  ASSERT_EQ(w.state(), WorkerState::Failed);
  w.start();
  EXPECT_EQ(w.state(), WorkerState::Running);
}

TEST_F(WorkerTest, StopSendsTheStopSignalAndCompletesWhenTheProcessExits) {
  program.stop = {SIGINT, 30s};
  Worker& w = make();
  w.start();
  bool done = false;
  w.stop([&] { done = true; });
  EXPECT_EQ(w.state(), WorkerState::Stopping);
  EXPECT_THAT(launcher.last().signals, ElementsAre(SIGINT));
  EXPECT_FALSE(done);
  launcher.exit_last(exited(0));
  EXPECT_TRUE(done);
  EXPECT_EQ(w.state(), WorkerState::Stopped);
  EXPECT_EQ(cg->kill_all_calls, 0) << "a clean stop kills nothing";
  EXPECT_EQ(timers.pending(), 0u) << "no restart after a requested stop";
}

TEST_F(WorkerTest, StopTimeoutKillsTheWholeCgroup) {
  program.stop = {SIGTERM, 10s};
  Worker& w = make();
  w.start();
  cg->pids = {1000, 1001, 1002};
  bool done = false;
  w.stop([&] { done = true; });
  timers.advance(10s - 1ms);
  EXPECT_EQ(cg->kill_all_calls, 0);
  timers.advance(1ms);
  EXPECT_EQ(cg->kill_all_calls, 1);
  EXPECT_THAT(launcher.last().signals, ElementsAre(SIGTERM, SIGKILL));
  EXPECT_TRUE(log.contains("api[0] still running 10s after SIGTERM"));
  launcher.exit_last(killed(SIGKILL));
  EXPECT_TRUE(done);
}

TEST_F(WorkerTest, LeftoverProcessesAreKilledBeforeTheRestart) {
  Worker& w = make();
  w.start();
  cg->pids = {1200, 1201};  // grandchildren outliving the main process
  launcher.exit_last(exited(1));
  EXPECT_EQ(cg->kill_all_calls, 1);
  EXPECT_TRUE(log.contains("api[0]: killed 2 leftover processes in its cgroup"));
  EXPECT_EQ(w.state(), WorkerState::Backoff);
}

TEST_F(WorkerTest, WaitsForTheCgroupToDrainBeforeRestarting) {
  Worker& w = make();
  w.start();
  cg->pids = {1200};
  cg->kill_empties = false;  // dying processes take a while to leave
  launcher.exit_last(exited(1));
  EXPECT_EQ(w.state(), WorkerState::Exited);
  timers.advance(kCgroupDrainPoll * 3);
  EXPECT_EQ(w.state(), WorkerState::Exited);
  cg->pids.clear();
  timers.advance(kCgroupDrainPoll);
  EXPECT_EQ(w.state(), WorkerState::Backoff);
}

TEST_F(WorkerTest, GivesUpWaitingForAStuckCgroupAfterTheDrainTimeout) {
  Worker& w = make();
  w.start();
  cg->pids = {1200};
  cg->kill_empties = false;
  launcher.exit_last(exited(1));
  timers.advance(kCgroupDrainTimeout + kCgroupDrainPoll);
  EXPECT_EQ(w.state(), WorkerState::Backoff);
  EXPECT_TRUE(log.contains("1 process(es) still in /fake/cgroup"));
}

TEST_F(WorkerTest, RecognisesAnOomKillFromTheCgroupCounter) {
  program.limits.memory_max = 2ull << 30;
  Worker& w = make();
  w.start();
  timers.advance(3200ms);
  cg->oom_kills = 1;
  launcher.exit_last(killed(SIGKILL));
  EXPECT_TRUE(
      log.contains("api[0] was OOM-killed by the kernel (cgroup memory limit 2 GiB) after 3.2s"))
      << log.all();
  EXPECT_EQ(w.state(), WorkerState::Backoff);
}

// A worker that ignored its checkpoint signal was OOM-killed while recycler
// waited, and the kill was logged at info: recycler had asked it to exit.
TEST_F(WorkerTest, AnOomKillIsAWarningEvenWhileACheckpointWasAskedFor) {
  program.limits.memory_max = 2ull << 30;
  Worker& w = make();
  w.start();
  ASSERT_EQ(w.checkpoints().ask(SIGUSR1, {"leak (leak policy)", true}), 0);
  cg->oom_kills = 1;
  launcher.exit_last(killed(SIGKILL));
  auto lines = log.matching("api[0] was OOM-killed by the kernel");
  ASSERT_EQ(lines.size(), 1u) << log.all();
  EXPECT_THAT(lines[0], HasSubstr("warn")) << lines[0];
  EXPECT_EQ(w.record().crashes(), 0u) << "asked to exit: not a crash, though not clean either";
}

TEST_F(WorkerTest, AnOomCounterThatMovedBeforeTheStartIsNotThisRunsOom) {
  cg->oom_kills = 4;  // a previous generation's
  Worker& w = make();
  w.start();
  launcher.exit_last(killed(SIGKILL));
  EXPECT_TRUE(log.contains("api[0] killed by SIGKILL after"));
  EXPECT_FALSE(log.contains("OOM"));
}

TEST_F(WorkerTest, AnOomKilledChildIsMentionedWhenTheMainProcessSurvivedIt) {
  program.limits.memory_max = 512ull << 20;
  Worker& w = make();
  w.start();
  cg->oom_kills = 1;
  launcher.exit_last(exited(1));
  EXPECT_TRUE(
      log.contains("api[0] exited with status 1 after 0ms; the kernel OOM-killed a process "
                   "in its cgroup (cgroup memory limit 512 MiB)"))
      << log.all();
}

TEST_F(WorkerTest, AFailedStartIsReportedAndRetriedWithBackoff) {
  launcher.fail_next = true;
  Worker& w = make();
  w.start();
  EXPECT_EQ(w.state(), WorkerState::Backoff);
  EXPECT_TRUE(log.contains("api[0] failed to start: fake: exec failed"));
  timers.advance(backoff_delay());
  EXPECT_EQ(w.state(), WorkerState::Running);
}

TEST_F(WorkerTest, AFailedStartWithRestartNeverMarksTheSlotFailed) {
  program.restart.mode = config::RestartMode::Never;
  launcher.fail_next = true;
  Worker& w = make();
  w.start();
  EXPECT_EQ(w.state(), WorkerState::Failed);
}

TEST_F(WorkerTest, ACommandThatCannotBeRunFailsAtOnceWithTheShellsStatus) {
  struct Case {
    int err;
    int status;
  };
  for (Case c : {Case{ENOENT, 127}, Case{EACCES, 126}, Case{ENOEXEC, 126}}) {
    launcher.fail_next = true;
    launcher.fail_error = Error{"/opt/app/srv: " + std::string(std::strerror(c.err)), c.err, true};
    Worker& w = make();
    w.start();
    EXPECT_EQ(w.state(), WorkerState::Failed) << c.err;
    ASSERT_TRUE(w.record().last_exit());
    EXPECT_EQ(w.record().last_exit()->shell_code(), c.status);
    EXPECT_TRUE(log.contains("api[0] FAILED: its command cannot be run (/opt/app/srv: " +
                             std::string(std::strerror(c.err)) +
                             "); recycler will not retry it. Fix the program, then reload "
                             "(SIGHUP) or restart recycler."))
        << log.all();
    timers.advance(1h);  // no restart was scheduled
    EXPECT_EQ(w.state(), WorkerState::Failed);
    EXPECT_TRUE(launcher.launched.empty());
  }
}

TEST_F(WorkerTest, ATransientStartFailureIsStillRetried) {
  launcher.fail_next = true;
  launcher.fail_error = Error{"fork: Resource temporarily unavailable", EAGAIN};
  Worker& w = make();
  w.start();
  EXPECT_EQ(w.state(), WorkerState::Backoff);
  timers.advance(backoff_delay());
  EXPECT_EQ(w.state(), WorkerState::Running);
}

TEST_F(WorkerTest, StopDuringBackoffCancelsTheRestart) {
  Worker& w = make();
  w.start();
  launcher.exit_last(exited(1));
  bool done = false;
  w.stop([&] { done = true; });
  EXPECT_TRUE(done);
  EXPECT_EQ(w.state(), WorkerState::Stopped);
  timers.advance(1h);
  EXPECT_EQ(launcher.launched.size(), 1u);
}

TEST_F(WorkerTest, KillSignalsAtOnceWithoutWaitingForTheStopTimeout) {
  Worker& w = make();
  w.start();
  bool done = false;
  w.kill([&] { done = true; });
  EXPECT_EQ(cg->kill_all_calls, 1);
  EXPECT_THAT(launcher.last().signals, ElementsAre(SIGKILL));
  launcher.exit_last(killed(SIGKILL));
  EXPECT_TRUE(done);
}

TEST_F(WorkerTest, KillEscalatesAGracefulStopUnderWay) {
  Worker& w = make();
  w.start();
  int done = 0;
  w.stop([&] { ++done; });
  w.kill(nullptr);
  EXPECT_THAT(launcher.last().signals, ElementsAre(SIGTERM, SIGKILL));
  launcher.exit_last(killed(SIGKILL));
  EXPECT_EQ(done, 1) << "the first stop's callback runs exactly once";
}

TEST_F(WorkerTest, StoppingAStoppedWorkerCompletesAtOnce) {
  Worker& w = make();
  bool done = false;
  w.stop([&] { done = true; });
  EXPECT_TRUE(done);
}

TEST_F(WorkerTest, DestroyingTheWorkerRemovesItsCgroup) {
  make();
  worker.reset();
  EXPECT_TRUE(cg->removed);
}

TEST(WorkerEnvironment, ThreadsSetsTheUsualVariablesUnlessTheProgramEnvSetsThem) {
  config::ProgramConfig p;
  p.name = "train";
  p.threads = 2;
  p.env = {{"MKL_NUM_THREADS", "1"}, {"PYTHONUNBUFFERED", "1"}};
  auto env = worker_environment({"OMP_NUM_THREADS=64", "HOME=/root"}, p, 3, 7);
  EXPECT_THAT(env, Contains("OMP_NUM_THREADS=2")) << "threads wins over the inherited value";
  EXPECT_THAT(env, Contains("MKL_NUM_THREADS=1")) << "the program's env wins over threads";
  EXPECT_THAT(env, Contains("OPENBLAS_NUM_THREADS=2"));
  EXPECT_THAT(env, Contains("NUMEXPR_NUM_THREADS=2"));
  EXPECT_THAT(env, Contains("VECLIB_MAXIMUM_THREADS=2"));
  EXPECT_THAT(env, Contains("PYTHONUNBUFFERED=1"));
  EXPECT_THAT(env, Contains("HOME=/root"));
  EXPECT_THAT(env, Contains("RECYCLER_PROGRAM=train"));
  EXPECT_THAT(env, Contains("RECYCLER_SLOT=3"));
  EXPECT_THAT(env, Contains("RECYCLER_GENERATION=7"));
}

TEST(WorkerEnvironment, AWatchdogTimeoutIsGivenAsSystemdGivesIt) {
  config::ProgramConfig p;
  p.name = "train";
  p.watchdog_timeout = std::chrono::seconds(30);
  // recycler's own (from its unit) never reaches a worker; spawn writes
  // WATCHDOG_PID in the child.
  auto env = worker_environment({"WATCHDOG_USEC=5000000", "WATCHDOG_PID=1"}, p, 0, 1);
  EXPECT_THAT(env, Contains("WATCHDOG_USEC=30000000"));
  for (const std::string& kv : env) EXPECT_FALSE(kv.starts_with("WATCHDOG_PID=")) << kv;
  p.watchdog_timeout.reset();
  for (const std::string& kv : worker_environment({}, p, 0, 1))
    EXPECT_FALSE(kv.starts_with("WATCHDOG_")) << kv;
}

TEST(WorkerEnvironment, WithoutThreadsTheInheritedValuesStay) {
  config::ProgramConfig p;
  p.name = "x";
  auto env = worker_environment({"OMP_NUM_THREADS=64"}, p, 0, 1);
  EXPECT_THAT(env, Contains("OMP_NUM_THREADS=64"));
  for (const std::string& kv : env) EXPECT_NE(kv.rfind("MKL_NUM_THREADS=", 0), 0u);
}

TEST(WorkerEnvironment, AllocatorAddsExactlyItsVariablesAndTheProgramsEnvWins) {
  config::ProgramConfig p;
  p.name = "x";
  p.allocator.arena_max = 2;
  p.allocator.top_pad = 0;
  p.allocator.preload = "jemalloc";
  p.allocator.preload_path = "/usr/lib/libjemalloc.so.2";
  p.allocator.jemalloc_conf = "narenas:1";
  p.env = {{"MALLOC_CONF", "narenas:4"}, {"LD_PRELOAD", "/opt/libprof.so"}};
  auto env = worker_environment({"PATH=/bin", "MALLOC_ARENA_MAX=8"}, p, 0, 1);
  EXPECT_THAT(env, ElementsAre("GLIBC_TUNABLES=glibc.malloc.top_pad=0",
                               "LD_PRELOAD=/opt/libprof.so:/usr/lib/libjemalloc.so.2",
                               "MALLOC_ARENA_MAX=2", "MALLOC_CONF=narenas:4", "PATH=/bin",
                               "RECYCLER_GENERATION=1", "RECYCLER_PROGRAM=x",
                               "RECYCLER_REQUESTS_BATCH_BELOW=unlimited", "RECYCLER_SLOT=0"));
}

TEST(WorkerEnvironment, DevicesGiveEachSlotItsGpusAndTheProgramsEnvWins) {
  config::ProgramConfig p;
  p.name = "train";
  p.devices.gpus_auto = true;
  p.devices.xla_preallocate = false;
  p.env = {{"XLA_PYTHON_CLIENT_PREALLOCATE", "true"}};
  std::vector<std::string> pool{"0", "1", "2"};
  auto env = worker_environment({"CUDA_VISIBLE_DEVICES=0,1,2"}, p, 4, 1, "", {}, nullptr, pool);
  EXPECT_THAT(env, Contains("CUDA_VISIBLE_DEVICES=1")) << "slot 4 of 3 GPUs, round-robin";
  EXPECT_THAT(env, Contains("CUDA_DEVICE_ORDER=PCI_BUS_ID"));
  EXPECT_THAT(env, Contains("XLA_PYTHON_CLIENT_PREALLOCATE=true"));
  p.env["CUDA_VISIBLE_DEVICES"] = "3";
  EXPECT_THAT(worker_environment({}, p, 4, 1, "", {}, nullptr, pool),
              Contains("CUDA_VISIBLE_DEVICES=3"));
}

// How many requests each process may report in batches (python/recycler_notify):
// the smallest per-process limit; 1 once a whole worker's limit counts them all.
TEST(WorkerEnvironment, RequestsMayComeInBatchesBelowTheSmallestProcessLimit) {
  auto batch_below = [](const config::ProgramConfig& p,
                        const std::vector<std::string>& base = {}) -> std::string {
    for (const std::string& kv : worker_environment(base, p, 0, 1))
      if (kv.rfind("RECYCLER_REQUESTS_BATCH_BELOW=", 0) == 0) return kv.substr(kv.find('=') + 1);
    return "<unset>";
  };
  auto policy = [](const std::string& yaml) {
    return config::PolicyConfig{"max_requests", yaml,
                                recycler::testing::make("max_requests", yaml)};
  };
  config::ProgramConfig p;
  p.name = "web";
  EXPECT_EQ(batch_below(p, {"RECYCLER_REQUESTS_BATCH_BELOW=5"}), "unlimited")
      << "no policy counts a process's requests; nothing inherited is passed on";
  p.policies.push_back(
      {"max_lifetime", "{after: 1h}", recycler::testing::make("max_lifetime", "{after: 1h}")});
  EXPECT_EQ(batch_below(p), "unlimited");
  p.policies.push_back(policy("{limit: 200, jitter: 50, scope: process}"));
  EXPECT_EQ(batch_below(p), "200");
  p.policies.push_back(policy("{limit: 150, scope: process}"));
  EXPECT_EQ(batch_below(p), "150");
  p.policies.push_back(policy("{limit: 1000}"));
  EXPECT_EQ(batch_below(p), "1") << "a whole worker's limit counts every request";
  p.env = {{"RECYCLER_REQUESTS_BATCH_BELOW", "1000"}};
  EXPECT_EQ(batch_below(p), "1000") << "the program's env wins";
  // What the engine takes it for, read as python/recycler_notify reads it.
  EXPECT_EQ(p.requests_held_below(), 1000u);
  for (auto [value, held] : std::vector<std::pair<std::string, std::optional<uint64_t>>>{
           {"unlimited", std::nullopt}, {" 7 ", 7}, {"0", 1}, {"many", 1}, {"-3", 1}}) {
    p.env = {{"RECYCLER_REQUESTS_BATCH_BELOW", value}};
    EXPECT_EQ(p.requests_held_below(), held) << value;
  }
  p.env.clear();
  EXPECT_EQ(p.requests_held_below(), 1u) << "without env: requests_batch_below()";
}

class RecycleTest : public WorkerTest {};

TEST_F(RecycleTest, ARecycleStopsGracefullyAndStartsTheNextGenerationAtOnce) {
  program.stop = {SIGINT, 30s};
  program.restart.mode = config::RestartMode::Never;  // a recycle is not a restart
  Worker& w = make();
  w.start();
  ASSERT_TRUE(w.recycle(Duration{0}));
  EXPECT_TRUE(w.recycling());
  EXPECT_EQ(w.state(), WorkerState::Stopping);
  EXPECT_THAT(launcher.last().signals, ElementsAre(SIGINT));
  launcher.exit_last(exited(0));
  ASSERT_EQ(launcher.launched.size(), 2u);
  EXPECT_EQ(w.state(), WorkerState::Running);
  EXPECT_FALSE(w.recycling());
  EXPECT_EQ(w.generation(), 2u);
  EXPECT_THAT(launcher.last().spec.env, Contains("RECYCLER_GENERATION=2"));
}

TEST_F(RecycleTest, ADelayedRecycleWaitsInBackoffAndCountsNoCrash) {
  program.restart.crash_loop = {2, 60s};
  Worker& w = make();
  w.start();
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(w.recycle(2s));
    launcher.exit_last(exited(0));
    EXPECT_EQ(w.state(), WorkerState::Backoff);
    EXPECT_EQ(backoff_delay(), 2s);
    timers.advance(2s);
    EXPECT_EQ(w.state(), WorkerState::Running) << "recycles never count as a crash loop";
  }
  EXPECT_EQ(launcher.launched.size(), 4u);
}

TEST_F(RecycleTest, AStopDuringARecycleWins) {
  Worker& w = make();
  w.start();
  ASSERT_TRUE(w.recycle(Duration{0}));
  bool done = false;
  w.stop([&] { done = true; });
  launcher.exit_last(exited(0));
  EXPECT_TRUE(done);
  EXPECT_EQ(w.state(), WorkerState::Stopped);
  EXPECT_EQ(launcher.launched.size(), 1u);
  EXPECT_FALSE(w.recycle(Duration{0})) << "only a running worker can be recycled";
}

// Whether any "NAME=..." entry is in `env`.
bool has_var(const std::vector<std::string>& env, const std::string& name) {
  return std::any_of(env.begin(), env.end(),
                     [&](const std::string& kv) { return kv.rfind(name + "=", 0) == 0; });
}

TEST_F(RecycleTest, TheReplacementIsToldWhyAndWhetherToResume) {
  Worker& w = make();
  w.start();
  EXPECT_FALSE(has_var(launcher.last().spec.env, "RECYCLER_RECYCLE_REASON"));
  ASSERT_TRUE(w.recycle(Duration{0}, {"anon 612 MiB > 600 MiB (memory policy)", true}));
  launcher.exit_last(exited(0));
  ASSERT_EQ(launcher.launched.size(), 2u);
  EXPECT_THAT(launcher.last().spec.env,
              Contains("RECYCLER_RECYCLE_REASON=anon 612 MiB > 600 MiB (memory policy)"));
  EXPECT_THAT(launcher.last().spec.env, Contains("RECYCLER_RESUME=1"));
  // Only the start right after the recycle: a crash later starts plainly.
  launcher.exit_last(exited(1));
  timers.advance(backoff_delay());
  ASSERT_EQ(launcher.launched.size(), 3u);
  EXPECT_FALSE(has_var(launcher.last().spec.env, "RECYCLER_RECYCLE_REASON"));
  EXPECT_FALSE(has_var(launcher.last().spec.env, "RECYCLER_RESUME"));
}

TEST_F(RecycleTest, AStopDuringADelayedRecyclesWaitLeavesTheNextStartAPlainOne) {
  Worker& w = make();
  w.start();
  ASSERT_TRUE(w.recycle(2s, {"anon 612 MiB > 600 MiB (memory policy)", true}));
  launcher.exit_last(exited(0));
  ASSERT_EQ(w.state(), WorkerState::Backoff);
  bool done = false;
  w.stop([&] { done = true; });
  ASSERT_TRUE(done);
  w.start();
  ASSERT_EQ(launcher.launched.size(), 2u);
  EXPECT_FALSE(has_var(launcher.last().spec.env, "RECYCLER_RECYCLE_REASON"))
      << "the recycle never came: this start follows the operator's stop";
  EXPECT_FALSE(has_var(launcher.last().spec.env, "RECYCLER_RESUME"));
  EXPECT_EQ(w.record().recycles(), 0u);
  EXPECT_EQ(w.record().last_recycle_reason(), "");
}

TEST_F(RecycleTest, ARecycleWithoutACheckpointDoesNotAskToResume) {
  Worker& w = make();
  w.start();
  ASSERT_TRUE(w.recycle(Duration{0}, {"threads 300 > 256 (threads policy)", false}));
  launcher.exit_last(exited(0));
  EXPECT_THAT(launcher.last().spec.env,
              Contains("RECYCLER_RECYCLE_REASON=threads 300 > 256 (threads policy)"));
  EXPECT_FALSE(has_var(launcher.last().spec.env, "RECYCLER_RESUME"));
}

TEST_F(RecycleTest, RecyclerNeverPassesOnItsOwnResumeVariables) {
  base_env.push_back("RECYCLER_RESUME=1");
  base_env.push_back("RECYCLER_RECYCLE_REASON=of the recycler above");
  Worker& w = make();
  w.start();
  EXPECT_FALSE(has_var(launcher.last().spec.env, "RECYCLER_RESUME"));
  EXPECT_FALSE(has_var(launcher.last().spec.env, "RECYCLER_RECYCLE_REASON"));
}

TEST_F(RecycleTest, ACleanExitWhileCheckpointingIsARecycleEvenWithRestartOnFailure) {
  program.restart.mode = config::RestartMode::OnFailure;
  Worker& w = make();
  w.start();
  w.checkpoints().expect_clean_exit({"leak (leak policy)", true});
  launcher.exit_last(exited(0));
  ASSERT_EQ(launcher.launched.size(), 2u) << "restarted at once, no backoff";
  EXPECT_EQ(w.state(), WorkerState::Running);
  EXPECT_THAT(launcher.last().spec.env, Contains("RECYCLER_RESUME=1"));
  // The expectation was for that run only: this one's clean exit ends it.
  launcher.exit_last(exited(0));
  EXPECT_EQ(w.state(), WorkerState::Stopped);
}

TEST_F(RecycleTest, AFailureWhileCheckpointingIsACrashNotAResume) {
  Worker& w = make();
  w.start();
  w.checkpoints().expect_clean_exit({"leak (leak policy)", true});
  launcher.exit_last(exited(3));
  EXPECT_EQ(w.state(), WorkerState::Backoff);
  timers.advance(backoff_delay());
  ASSERT_EQ(launcher.launched.size(), 2u);
  EXPECT_FALSE(has_var(launcher.last().spec.env, "RECYCLER_RESUME"));
}

TEST_F(RecycleTest, WorkersGetTheirProgramsNotifySocket) {
  Worker& w = make(0, "/run/recycler/42/api/notify");
  w.start();
  EXPECT_THAT(launcher.last().spec.env, Contains("NOTIFY_SOCKET=/run/recycler/42/api/notify"));
}

// What the worker asked of its processes, as explicit phases.
class StopPhaseTest : public WorkerTest {};

TEST_F(StopPhaseTest, ACheckpointSignalsTheMainProcessAndExpectsItsCleanExit) {
  Worker& w = make();
  w.start();
  EXPECT_EQ(w.checkpoints().ask(SIGUSR1, {"leak (leak policy)", true}), 0);
  EXPECT_EQ(w.phase(), StopPhase::Checkpointing);
  EXPECT_THAT(launcher.last().signals, ElementsAre(SIGUSR1));
  launcher.exit_last(exited(0));
  ASSERT_EQ(launcher.launched.size(), 2u) << "its clean exit ends the recycle";
  EXPECT_THAT(launcher.last().spec.env, Contains("RECYCLER_RESUME=1"));
  EXPECT_EQ(w.phase(), StopPhase::None);
}

// The checkpoint signal came as the worker was exiting (a Python trainer that
// has just finished has the default action back) or it has no handler: its
// death by that signal is recycler's doing, not a crash; it resumes from its
// latest checkpoint. Another signal is still a crash.
TEST_F(StopPhaseTest, DyingOfTheCheckpointSignalEndsTheRecycleAndResumes) {
  program.restart.mode = config::RestartMode::OnFailure;
  Worker& w = make();
  w.start();
  ASSERT_EQ(w.checkpoints().ask(SIGUSR1, {"leak (leak policy)", true}), 0);
  launcher.exit_last(killed(SIGUSR1));
  ASSERT_EQ(launcher.launched.size(), 2u) << "restarted at once, no backoff";
  EXPECT_EQ(w.state(), WorkerState::Running);
  EXPECT_THAT(launcher.last().spec.env, Contains("RECYCLER_RESUME=1"));
  EXPECT_THAT(launcher.last().spec.env, Contains("RECYCLER_RECYCLE_REASON=leak (leak policy)"));
  EXPECT_EQ(w.record().crashes(), 0u);
  // Only while a checkpoint is asked for: the same signal later is a crash.
  launcher.exit_last(killed(SIGUSR1));
  EXPECT_EQ(w.state(), WorkerState::Backoff);
  timers.advance(backoff_delay());
  ASSERT_EQ(launcher.launched.size(), 3u);
  ASSERT_EQ(w.checkpoints().ask(SIGUSR1, {"leak (leak policy)", true}), 0);
  launcher.exit_last(killed(SIGSEGV));
  EXPECT_EQ(w.state(), WorkerState::Backoff) << "another signal is a crash";
  timers.advance(backoff_delay());
  ASSERT_EQ(launcher.launched.size(), 4u);
  EXPECT_FALSE(has_var(launcher.last().spec.env, "RECYCLER_RESUME"));
}

// A program that checkpoints is asked to before any stop an operator or a
// scheduler gives (recycler's SIGTERM, `recycler stop`, a preemption): the
// checkpoint signal, the stop signal once it confirms, and a start after it
// resumes.
TEST_F(StopPhaseTest, AStopOfAProgramThatCheckpointsAsksForOneFirst) {
  program.checkpoint.given = true;
  program.checkpoint.timeout = 30s;
  Worker& w = make();
  w.start();
  bool stopped = false;
  w.stop([&] { stopped = true; });
  EXPECT_EQ(w.state(), WorkerState::Stopping);
  EXPECT_EQ(w.phase(), StopPhase::StopCheckpoint);
  EXPECT_THAT(launcher.last().signals, ElementsAre(SIGUSR1));
  EXPECT_TRUE(
      log.contains("api[0] stopping: asked to checkpoint first (SIGUSR1 to pid 1000); "
                   "SIGTERM once it confirms (RECYCLER_CHECKPOINTED=1), at most 30s"))
      << log.all();
  timers.advance(10s);
  EXPECT_THAT(launcher.last().signals, ElementsAre(SIGUSR1)) << "it waits for the checkpoint";
  w.checkpoints().confirmed();
  EXPECT_EQ(w.phase(), StopPhase::StopSigterm);
  EXPECT_THAT(launcher.last().signals, ElementsAre(SIGUSR1, SIGTERM));
  launcher.exit_last(killed(SIGTERM));
  EXPECT_TRUE(stopped);
  EXPECT_EQ(w.state(), WorkerState::Stopped);
  EXPECT_EQ(w.record().crashes(), 0u);
  w.start();
  ASSERT_EQ(launcher.launched.size(), 2u);
  EXPECT_THAT(launcher.last().spec.env, Contains("RECYCLER_RESUME=1"));
  EXPECT_EQ(w.record().recycles(), 0u) << "a stop and a start are not a recycle";
}

// A checkpoint that does not come within the window never holds the stop:
// the stop signal at its end, then SIGKILL after stop.timeout as ever; no
// resume.
TEST_F(StopPhaseTest, AStopCheckpointThatDoesNotComeEndsWithTheWindow) {
  program.checkpoint.given = true;
  program.checkpoint.timeout = 30s;
  program.stop.timeout = 5s;
  Worker& w = make();
  w.start();
  w.stop(nullptr, 4s);
  timers.advance(4s - 1ms);
  EXPECT_THAT(launcher.last().signals, ElementsAre(SIGUSR1));
  timers.advance(1ms);
  EXPECT_THAT(launcher.last().signals, ElementsAre(SIGUSR1, SIGTERM));
  EXPECT_TRUE(
      log.contains("api[0] has not confirmed its checkpoint after 4s; stopping it "
                   "without one"));
  timers.advance(5s);
  EXPECT_EQ(cg->kill_all_calls, 1);
  launcher.exit_last(killed(SIGKILL));
  EXPECT_EQ(w.state(), WorkerState::Stopped);
  w.start();
  EXPECT_FALSE(has_var(launcher.last().spec.env, "RECYCLER_RESUME"));
}

// A trainer that saves and exits on the checkpoint signal (the usual Slurm
// handler) has checkpointed; its exit ends the stop, not a crash.
TEST_F(StopPhaseTest, ACleanExitDuringAStopCheckpointIsTheCheckpoint) {
  program.checkpoint.given = true;
  program.restart.mode = config::RestartMode::Always;
  Worker& w = make();
  w.start();
  w.stop(nullptr);
  launcher.exit_last(exited(0));
  EXPECT_EQ(w.state(), WorkerState::Stopped) << "while stopping, an exit is not restarted";
  EXPECT_EQ(launcher.launched.size(), 1u);
  w.start();
  EXPECT_THAT(launcher.last().spec.env, Contains("RECYCLER_RESUME=1"));
}

TEST_F(StopPhaseTest, NoCheckpointBeforeAStopWithoutOneOrWithAZeroWindowOrAKill) {
  Worker& w = make();
  w.start();
  w.stop(nullptr);
  EXPECT_THAT(launcher.last().signals, ElementsAre(SIGTERM)) << "the program does not checkpoint";
  launcher.exit_last(killed(SIGTERM));

  program.checkpoint.given = true;
  Worker& c = make();
  c.start();
  c.stop(nullptr, Duration{0});
  EXPECT_THAT(launcher.last().signals, ElementsAre(SIGTERM));
  launcher.exit_last(killed(SIGTERM));

  Worker& k = make();
  k.start();
  k.stop(nullptr);
  k.kill(nullptr);
  EXPECT_EQ(k.phase(), StopPhase::StopSigkill);
  EXPECT_EQ(timers.pending(), 0u) << "the checkpoint window is over too";
}

TEST_F(StopPhaseTest, ACheckpointOfAWorkerNotRunningFails) {
  Worker& w = make();
  EXPECT_EQ(w.checkpoints().ask(SIGUSR1, {}), ESRCH);
  w.start();
  launcher.last().exited = true;  // reaped: its pidfd says so
  EXPECT_NE(w.checkpoints().ask(SIGUSR1, {}), 0);
  EXPECT_EQ(w.phase(), StopPhase::None);
}

TEST_F(StopPhaseTest, ARecycleIsRecyclingUntilAStopTurnsItIntoStopSigterm) {
  Worker& w = make();
  w.start();
  ASSERT_TRUE(w.recycle(Duration{0}));
  EXPECT_EQ(w.phase(), StopPhase::Recycling);
  w.stop(nullptr);
  EXPECT_EQ(w.phase(), StopPhase::StopSigterm);
  EXPECT_THAT(launcher.last().signals, ElementsAre(SIGTERM)) << "the signal is out already";
}

TEST_F(StopPhaseTest, TheStopTimeoutMovesToStopSigkill) {
  program.stop = {SIGTERM, 10s};
  Worker& w = make();
  w.start();
  w.stop(nullptr);
  EXPECT_EQ(w.phase(), StopPhase::StopSigterm);
  timers.advance(10s);
  EXPECT_EQ(w.phase(), StopPhase::StopSigkill);
  EXPECT_THAT(launcher.last().signals, ElementsAre(SIGTERM, SIGKILL));
}

class SignalProcessTest : public WorkerTest {
 protected:
  Worker& running() {
    Worker& w = make();
    w.start();
    cg->pids = {launcher.last().pid, 2001, 2002};
    launcher.alive = {2001, 2002, 3003};
    return w;
  }
};

TEST_F(SignalProcessTest, AProcessOfTheWorkerIsSignalledThroughItsPidfd) {
  Worker& w = running();
  bool exited_seen = false;
  EXPECT_EQ(w.signal_process(2001, SIGTERM, [&] { exited_seen = true; }), engine::Signalled::Sent);
  EXPECT_THAT(launcher.attached.at(2001)->signals, ElementsAre(SIGTERM));
  EXPECT_TRUE(launcher.last().signals.empty()) << "the main process is left alone";
  EXPECT_EQ(w.signalled_processes(), 1u);
  launcher.attached.at(2001)->exit();
  EXPECT_TRUE(exited_seen);
  EXPECT_EQ(w.signalled_processes(), 0u);
  timers.advance(program.stop.timeout);
  EXPECT_THAT(launcher.attached.at(2001)->signals, ElementsAre(SIGTERM)) << "no SIGKILL after";
}

TEST_F(SignalProcessTest, AProcessOutsideTheWorkersCgroupIsNotSignalled) {
  Worker& w = running();
  EXPECT_EQ(w.signal_process(3003, SIGTERM, nullptr), engine::Signalled::NotMember)
      << "a reused pid that belongs to someone else";
  EXPECT_TRUE(launcher.attached.at(3003)->signals.empty());
  EXPECT_EQ(w.signal_process(4004, SIGTERM, nullptr), engine::Signalled::NotMember) << "gone";
  EXPECT_EQ(w.signalled_processes(), 0u);
}

TEST_F(SignalProcessTest, AProcessThatIgnoresItsSignalIsKilledAfterTheStopTimeout) {
  program.stop = {SIGTERM, 10s};
  Worker& w = running();
  ASSERT_EQ(w.signal_process(2002, SIGINT, nullptr), engine::Signalled::Sent);
  timers.advance(9s);
  EXPECT_THAT(launcher.attached.at(2002)->signals, ElementsAre(SIGINT));
  timers.advance(1s);
  EXPECT_THAT(launcher.attached.at(2002)->signals, ElementsAre(SIGINT, SIGKILL));
  EXPECT_TRUE(log.contains("api[0] pid 2002 still running 10s after it was signalled; killing it"))
      << log.all();
}

TEST_F(SignalProcessTest, SignalledProcessesAreForgottenWhenTheWorkerStops) {
  Worker& w = running();
  bool exited_seen = false;
  ASSERT_EQ(w.signal_process(2001, SIGTERM, [&] { exited_seen = true; }), engine::Signalled::Sent);
  w.stop(nullptr);
  launcher.exit_last(exited(0));
  EXPECT_EQ(w.state(), WorkerState::Stopped);
  EXPECT_EQ(w.signalled_processes(), 0u);
  launcher.attached.at(2001)->exit();
  EXPECT_FALSE(exited_seen);
}

// recycle.mode: surge, against the fakes: the next generation in the slot's
// other cgroup, the swap on readiness, a replacement that fails or is never
// ready, and a stop in the middle.
class SurgeTest : public WorkerTest {
 protected:
  SurgeTest() {
    program.recycle.mode = config::RecycleMode::Surge;
    program.recycle.ready_timeout = 30s;
    program.stop = {SIGTERM, 10s};
  }
  Worker& running() {
    worker = std::make_unique<Worker>(
        context, std::make_shared<config::ProgramConfig>(program), 0,
        std::make_unique<FakeCgroup>(cg), "", nullptr, [this](unsigned variant) {
          variants.push_back(variant);
          auto state = std::make_shared<FakeCgroupState>();
          others.push_back(state);
          return Result<std::unique_ptr<cgroup::WorkerCgroup>>(std::make_unique<FakeCgroup>(state));
        });
    worker->start();
    return *worker;
  }
  std::string env_of(const FakeLauncher::Launched& l, const std::string& name) {
    for (const std::string& kv : l.spec.env)
      if (kv.rfind(name + "=", 0) == 0) return kv.substr(name.size() + 1);
    return "";
  }
  void exit_launched(size_t i, ExitStatus status) {
    FakeLauncher::Launched& l = *launcher.launched.at(i);
    l.exited = true;
    auto cb = std::move(l.on_exit);
    cb(status);
  }
  std::vector<unsigned> variants;
  std::vector<std::shared_ptr<FakeCgroupState>> others;
};

TEST_F(SurgeTest, TheNextGenerationStartsBesideTheRunningOneInTheOtherCgroup) {
  Worker& w = running();
  pid_t old = *w.pid();
  states.clear();
  ASSERT_TRUE(w.recycle(Duration{0}, {"up 10s >= max lifetime 10s"}));
  ASSERT_EQ(launcher.launched.size(), 2u);
  EXPECT_THAT(variants, ElementsAre(1u));
  EXPECT_EQ(w.state(), WorkerState::Running) << "the old generation serves on";
  EXPECT_EQ(w.phase(), StopPhase::Surging);
  EXPECT_EQ(w.pid(), old);
  EXPECT_EQ(w.surge().next_pid(), launcher.last().pid);
  EXPECT_TRUE(launcher.launched[0]->signals.empty()) << "nothing stops before the next is ready";
  EXPECT_EQ(env_of(launcher.last(), "RECYCLER_GENERATION"), "2");
  EXPECT_EQ(env_of(launcher.last(), "RECYCLER_RECYCLE_REASON"), "up 10s >= max lifetime 10s");
  EXPECT_TRUE(states.empty()) << "no state change until the swap";
  EXPECT_TRUE(w.recycle(Duration{0})) << "a second ask joins the surge under way";
  EXPECT_EQ(launcher.launched.size(), 2u);
}

TEST_F(SurgeTest, ReadyFromTheNextGenerationSwapsAndStopsTheOldOneGracefully) {
  Worker& w = running();
  pid_t old = *w.pid();
  ASSERT_TRUE(w.recycle(Duration{0}));
  pid_t next = launcher.last().pid;
  states.clear();
  w.notified_ready(old);  // the old one's READY=1 means nothing here
  EXPECT_EQ(w.pid(), old);
  timers.advance(2s);
  w.notified_ready(next);
  EXPECT_EQ(w.pid(), next);
  EXPECT_EQ(w.generation(), 2u);
  EXPECT_EQ(w.record().recycles(), 1u);
  EXPECT_EQ(w.phase(), StopPhase::None);
  EXPECT_THAT(states, ElementsAre(WorkerState::Running)) << "a new run";
  EXPECT_THAT(launcher.launched[0]->signals, ElementsAre(SIGTERM));
  EXPECT_EQ(w.surge().retiring_pid(), old);
  EXPECT_THAT(log.all(), HasSubstr("api[0] generation 2 (pid " + std::to_string(next) +
                                   ") ready after 2s (READY=1); stopping generation 1"));
  // The old one exits: its cgroup is emptied and removed, the slot serves on.
  cg->pids = {old + 100};  // something it left behind
  exit_launched(0, exited(0));
  timers.advance(100ms);
  EXPECT_TRUE(cg->removed);
  EXPECT_EQ(w.surge().retiring_pid(), std::nullopt);
  EXPECT_EQ(w.state(), WorkerState::Running);
  EXPECT_EQ(w.pid(), next);
  // The next surge goes back to the first variant.
  ASSERT_TRUE(w.recycle(Duration{0}));
  EXPECT_THAT(variants, ElementsAre(1u, 0u));
}

TEST_F(SurgeTest, AnOldGenerationThatIgnoresItsSignalIsKilledAfterTheStopTimeout) {
  Worker& w = running();
  ASSERT_TRUE(w.recycle(Duration{0}));
  w.notified_ready(launcher.last().pid);
  timers.advance(10s);
  EXPECT_THAT(launcher.launched[0]->signals, ElementsAre(SIGTERM, SIGKILL));
  EXPECT_GE(cg->kill_all_calls, 1);
}

TEST_F(SurgeTest, ANextGenerationNeverReadyIsStoppedAndTheOldOneServesOn) {
  Worker& w = running();
  pid_t old = *w.pid();
  ASSERT_TRUE(w.recycle(Duration{0}));
  timers.advance(30s);
  EXPECT_THAT(launcher.launched[1]->signals, ElementsAre(SIGTERM));
  EXPECT_THAT(log.all(), HasSubstr("surge: generation 2 sent no READY=1 within 30s"));
  EXPECT_THAT(log.all(), HasSubstr("generation 1 (pid " + std::to_string(old) + ") serves on"));
  exit_launched(1, exited(0));
  timers.advance(100ms);
  EXPECT_TRUE(others[0]->removed);
  EXPECT_EQ(w.pid(), old);
  EXPECT_EQ(w.generation(), 1u);
  EXPECT_TRUE(launcher.launched[0]->signals.empty());
  // Tried again after the restart backoff.
  timers.advance(program.restart.backoff.max);
  EXPECT_EQ(launcher.launched.size(), 3u);
}

TEST_F(SurgeTest, ANextGenerationThatExitsIsAFailedSurgeNotACrashOfTheSlot) {
  Worker& w = running();
  ASSERT_TRUE(w.recycle(Duration{0}));
  exit_launched(1, exited(3));
  EXPECT_THAT(log.all(), HasSubstr("surge: generation 2 exited with status 3 before it was ready"));
  EXPECT_EQ(w.state(), WorkerState::Running);
  EXPECT_EQ(w.record().crashes(), 0u);
  EXPECT_TRUE(launcher.launched[0]->signals.empty());
}

TEST_F(SurgeTest, RepeatedFailuresFallBackToARestart) {
  program.restart.crash_loop = {2, 600s};
  Worker& w = running();
  ASSERT_TRUE(w.recycle(Duration{0}));
  exit_launched(1, exited(1));
  timers.advance(program.restart.backoff.max);
  ASSERT_EQ(launcher.launched.size(), 3u);
  exit_launched(2, exited(1));
  EXPECT_THAT(log.all(), HasSubstr("recycling it by restart instead"));
  EXPECT_EQ(w.phase(), StopPhase::Recycling);
  EXPECT_THAT(launcher.launched[0]->signals, ElementsAre(SIGTERM));
}

TEST_F(SurgeTest, ReadyFromChildIgnoresTheMainProcessAndWaitsForOneOfItsChildren) {
  program.recycle.ready_from_child = true;
  Worker& w = running();
  pid_t old = *w.pid();
  ASSERT_TRUE(w.recycle(Duration{0}));
  pid_t next = launcher.last().pid;
  w.notified_ready(next);  // gunicorn's arbiter, before it forks a worker
  EXPECT_EQ(w.pid(), old);
  w.notified_ready(next + 50);  // not in the next generation's cgroup
  EXPECT_EQ(w.pid(), old);
  others[0]->pids = {next, next + 1};
  w.notified_ready(next + 1);  // its first worker has loaded the app
  EXPECT_EQ(w.pid(), next);
}

TEST_F(SurgeTest, ReadyAfterIsADelayForProgramsThatNeverSendReady) {
  program.recycle.ready_after = 3s;
  Worker& w = running();
  ASSERT_TRUE(w.recycle(Duration{0}));
  pid_t next = launcher.last().pid;
  timers.advance(2900ms);
  EXPECT_NE(w.pid(), next);
  timers.advance(100ms);
  EXPECT_EQ(w.pid(), next);
}

TEST_F(SurgeTest, AStopDuringASurgeKillsTheNextGenerationAndWaitsForIt) {
  Worker& w = running();
  ASSERT_TRUE(w.recycle(Duration{0}));
  bool done = false;
  w.stop([&] { done = true; });
  EXPECT_THAT(launcher.launched[1]->signals, ElementsAre(SIGKILL));
  EXPECT_THAT(launcher.launched[0]->signals, ElementsAre(SIGTERM));
  exit_launched(0, exited(0));
  timers.advance(100ms);
  EXPECT_FALSE(done) << "the next generation has not exited yet";
  exit_launched(1, killed(SIGKILL));
  timers.advance(100ms);
  EXPECT_TRUE(done);
  EXPECT_EQ(w.state(), WorkerState::Stopped);
  EXPECT_TRUE(others[0]->removed);
}

TEST_F(SurgeTest, WithoutACgroupForTheNextGenerationItRecyclesByRestart) {
  Worker& w = running();
  worker = std::make_unique<Worker>(
      context, std::make_shared<config::ProgramConfig>(program), 1,
      std::make_unique<FakeCgroup>(cg), "", nullptr,
      [](unsigned) { return Result<std::unique_ptr<cgroup::WorkerCgroup>>(Error{"no room"}); });
  (void)w;
  worker->start();
  ASSERT_TRUE(worker->recycle(Duration{0}));
  EXPECT_EQ(worker->phase(), StopPhase::Recycling);
  EXPECT_THAT(log.all(), HasSubstr("recycling it by restart"));
}

}  // namespace
}  // namespace recycler
