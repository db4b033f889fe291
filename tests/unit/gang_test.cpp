// A gang's ranks (worker/gang.h) against a fake clock, launcher and cgroups:
// every rank checkpoints, none stops before all have confirmed (or the
// window passed), none starts before all have drained; a crash takes the
// others; a stop during the gang's recycle leaves them stopped.
#include "supervisor/worker/gang.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <csignal>
#include <stdexcept>

#include "supervisor/worker/worker_checkpoints.h"
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

bool has_var(const std::vector<std::string>& env, const std::string& name) {
  return std::any_of(env.begin(), env.end(),
                     [&](const std::string& kv) { return kv.rfind(name + "=", 0) == 0; });
}
bool has_var(const std::vector<std::string>& env, const std::string& name,
             const std::string& value) {
  return std::find(env.begin(), env.end(), name + "=" + value) != env.end();
}

class GangTest : public ::testing::Test {
 protected:
  GangTest() {
    program.name = "ddp";
    program.command = {"/usr/bin/python3", "ddp_train.py"};
    program.instances = 2;
    program.gang.emplace();
    program.gang->master = config::ListenAddress{"127.0.0.1", 29500, false};
    program.checkpoint.given = true;
    program.checkpoint.timeout = 30s;
    program.restart.mode = config::RestartMode::OnFailure;
  }

  void make() {
    auto cfg = std::make_shared<config::ProgramConfig>(program);
    std::vector<Worker*> ranks;
    for (unsigned i = 0; i < program.instances; ++i) {
      cgs.push_back(std::make_shared<FakeCgroupState>());
      workers.push_back(
          std::make_unique<Worker>(context, cfg, i, std::make_unique<FakeCgroup>(cgs.back())));
      ranks.push_back(workers.back().get());
    }
    gang = std::make_unique<Gang>(timers, ranks);
    for (auto& w : workers) w->start();
  }
  // The last launch of `slot`'s worker.
  FakeLauncher::Launched& run_of(unsigned slot) {
    for (auto it = launcher.launched.rbegin(); it != launcher.launched.rend(); ++it)
      if (has_var((*it)->spec.env, "RECYCLER_SLOT", std::to_string(slot))) return **it;
    throw std::logic_error("no run of that slot");
  }
  void exit_run(unsigned slot, ExitStatus status) {
    FakeLauncher::Launched& l = run_of(slot);
    l.exited = true;
    auto cb = std::move(l.on_exit);
    cb(status);
  }
  size_t starts_of(unsigned slot) {
    size_t n = 0;
    for (auto& l : launcher.launched)
      if (has_var(l->spec.env, "RECYCLER_SLOT", std::to_string(slot))) ++n;
    return n;
  }

  LogCapture log;
  config::ProgramConfig program;
  FakeTimers timers;
  FakeLauncher launcher;
  std::mt19937_64 rng{42};
  std::vector<std::string> base_env{"PATH=/usr/bin:/bin", "RANK=7"};
  WorkerServices context{timers, launcher, rng, base_env, [this](Worker& w) {
                           if (gang) gang->on_state_change(w);
                         }};
  std::vector<std::shared_ptr<FakeCgroupState>> cgs;
  std::vector<std::unique_ptr<Worker>> workers;
  std::unique_ptr<Gang> gang;
};

TEST_F(GangTest, EachRankGetsItsRankTheWorldSizeAndTheMaster) {
  program.env["LOCAL_RANK"] = "mine";
  make();
  for (unsigned slot : {0u, 1u}) {
    const auto& env = run_of(slot).spec.env;
    EXPECT_THAT(env, Contains("RANK=" + std::to_string(slot))) << "not recycler's own RANK=7";
    EXPECT_THAT(env, Contains("WORLD_SIZE=2"));
    EXPECT_THAT(env, Contains("LOCAL_WORLD_SIZE=2"));
    EXPECT_THAT(env, Contains("LOCAL_RANK=mine")) << "the program's env: wins";
    EXPECT_THAT(env, Contains("MASTER_ADDR=127.0.0.1"));
    EXPECT_THAT(env, Contains("MASTER_PORT=29500"));
  }
}

TEST_F(GangTest, EveryRankCheckpointsStopsWhenAllConfirmedAndStartsWhenAllDrained) {
  make();
  ASSERT_TRUE(gang->recycle(1, {"anon 409 MiB > 400 MiB (memory policy)", false}, true));
  EXPECT_TRUE(gang->busy());
  EXPECT_THAT(run_of(0).signals, ElementsAre(SIGUSR1));
  EXPECT_THAT(run_of(1).signals, ElementsAre(SIGUSR1));
  EXPECT_TRUE(
      log.contains("ddp gang recycle: ddp[1]: anon 409 MiB > 400 MiB (memory policy); "
                   "2 ranks checkpoint, then stop and start together"))
      << log.all();

  workers[1]->checkpoints().confirmed();
  EXPECT_THAT(run_of(1).signals, ElementsAre(SIGUSR1)) << "not stopped before rank 0 confirms";
  workers[0]->checkpoints().confirmed();
  EXPECT_THAT(run_of(0).signals, ElementsAre(SIGUSR1, SIGTERM));
  EXPECT_THAT(run_of(1).signals, ElementsAre(SIGUSR1, SIGTERM));

  exit_run(0, ExitStatus{0});
  EXPECT_TRUE(workers[0]->checkpoints().parked());
  EXPECT_EQ(starts_of(0), 1u) << "rank 0 waits for rank 1 to drain";
  exit_run(1, ExitStatus{0, SIGTERM, true});
  ASSERT_EQ(starts_of(0), 2u);
  ASSERT_EQ(starts_of(1), 2u);
  for (unsigned slot : {0u, 1u}) {
    EXPECT_EQ(workers[slot]->state(), WorkerState::Running);
    EXPECT_THAT(run_of(slot).spec.env, Contains("RECYCLER_RESUME=1"));
    EXPECT_EQ(workers[slot]->record().recycles(), 1u);
    EXPECT_EQ(workers[slot]->record().crashes(), 0u);
  }
  EXPECT_THAT(run_of(0).spec.env,
              Contains("RECYCLER_RECYCLE_REASON=gang recycle: ddp[1] anon 409 MiB > 400 MiB "
                       "(memory policy)"));
  EXPECT_FALSE(gang->busy());
  EXPECT_EQ(gang->recycles(), 1u);
  EXPECT_TRUE(log.contains("ddp gang restarted: 2 of 2 ranks running")) << log.all();
}

TEST_F(GangTest, ARankThatNeverConfirmsHoldsTheOthersOnlyUntilTheCheckpointTimeout) {
  make();
  ASSERT_TRUE(gang->recycle(0, {"leak (leak policy)", false}, true));
  workers[0]->checkpoints().confirmed();
  timers.advance(29s);
  EXPECT_THAT(run_of(0).signals, ElementsAre(SIGUSR1)) << "rank 1 may still confirm";
  timers.advance(1s);
  EXPECT_THAT(run_of(0).signals, ElementsAre(SIGUSR1, SIGTERM));
  EXPECT_THAT(run_of(1).signals, ElementsAre(SIGUSR1, SIGTERM));
  EXPECT_TRUE(
      log.contains("ddp[1] has not confirmed its checkpoint after 30s; stopping it without one"))
      << log.all();
  exit_run(0, ExitStatus{0});
  exit_run(1, ExitStatus{0});
  EXPECT_THAT(run_of(0).spec.env, Contains("RECYCLER_RESUME=1"));
  EXPECT_FALSE(has_var(run_of(1).spec.env, "RECYCLER_RESUME")) << "it saved nothing";
}

// A hang's or a restart action's rank cannot checkpoint: it is stopped at
// once; the others are asked, and their own exit (a peer gone mid-collective)
// ends their wait.
TEST_F(GangTest, ARestartDecisionStopsItsRankAtOnceAndAsksTheOthers) {
  make();
  ASSERT_TRUE(gang->recycle(1, {"no WATCHDOG=1 for 30s (watchdog policy)", true}, false));
  EXPECT_THAT(run_of(1).signals, ElementsAre(SIGTERM));
  EXPECT_THAT(run_of(0).signals, ElementsAre(SIGUSR1));
  exit_run(1, ExitStatus{0, SIGTERM, true});
  EXPECT_EQ(starts_of(1), 1u);
  exit_run(0, ExitStatus{1});  // its all-reduce failed: the peer is gone
  ASSERT_EQ(starts_of(0), 2u);
  ASSERT_EQ(starts_of(1), 2u);
  EXPECT_THAT(run_of(1).spec.env, Contains("RECYCLER_RESUME=1")) << "the hang's own cause";
  EXPECT_EQ(workers[0]->record().crashes(), 0u) << "its end was asked for";
}

TEST_F(GangTest, WithoutACheckpointEveryRankStopsAtOnce) {
  program.checkpoint = {};
  make();
  ASSERT_TRUE(gang->recycle(0, {"max_requests", false}, false));
  EXPECT_THAT(run_of(0).signals, ElementsAre(SIGTERM));
  EXPECT_THAT(run_of(1).signals, ElementsAre(SIGTERM));
  EXPECT_TRUE(log.contains("2 ranks stop and start together")) << log.all();
}

TEST_F(GangTest, ACrashedRankTakesTheRunningOnesWithItAndRestartsAfterItsBackoff) {
  make();
  exit_run(0, ExitStatus{1});
  EXPECT_TRUE(log.contains("ddp gang recycle: ddp[0]: a rank crashed: ddp[0] exited with status 1"))
      << log.all();
  EXPECT_THAT(run_of(1).signals, ElementsAre(SIGTERM)) << "no checkpoint: its peer is gone";
  EXPECT_EQ(workers[0]->state(), WorkerState::Backoff);
  exit_run(1, ExitStatus{0, SIGTERM, true});
  EXPECT_EQ(starts_of(1), 2u) << "every member of the gang's recycle has drained";
  timers.advance(1s);
  EXPECT_EQ(starts_of(0), 2u) << "the crashed one, after its backoff";
  EXPECT_EQ(workers[0]->record().crashes(), 1u);
}

TEST_F(GangTest, ACleanExitOfOneRankIsNotACrash) {
  make();
  exit_run(0, ExitStatus{0});  // training done
  EXPECT_THAT(run_of(1).signals, IsEmpty());
  EXPECT_FALSE(gang->busy());
}

TEST_F(GangTest, AStopDuringTheRecycleLeavesEveryRankStopped) {
  make();
  ASSERT_TRUE(gang->recycle(1, {"leak", false}, true));
  workers[0]->checkpoints().confirmed();
  workers[1]->checkpoints().confirmed();
  exit_run(1, ExitStatus{0});
  ASSERT_TRUE(workers[1]->checkpoints().parked());
  bool stopped = false;
  workers[0]->stop([&] { stopped = true; });
  exit_run(0, ExitStatus{0});
  EXPECT_TRUE(stopped);
  EXPECT_EQ(workers[0]->state(), WorkerState::Stopped);
  EXPECT_EQ(workers[1]->state(), WorkerState::Stopped) << "it would wait for rank 0 forever";
  EXPECT_EQ(starts_of(0), 1u);
  EXPECT_EQ(starts_of(1), 1u);
  EXPECT_FALSE(gang->busy());
}

TEST_F(GangTest, ASecondDecisionDuringTheRecycleIsPartOfIt) {
  make();
  ASSERT_TRUE(gang->recycle(1, {"leak", false}, true));
  EXPECT_TRUE(gang->recycle(0, {"memory", false}, true));
  EXPECT_THAT(run_of(0).signals, ElementsAre(SIGUSR1)) << "asked once";
  EXPECT_EQ(gang->recycles(), 1u);
}

TEST_F(GangTest, ARankThatIsNotRunningIsNotRecycled) {
  make();
  workers[0]->stop(nullptr);
  exit_run(0, ExitStatus{0, SIGTERM, true});
  EXPECT_FALSE(gang->recycle(0, {"leak", false}, true));
  EXPECT_FALSE(gang->busy());
}

// A recycle loop's delay (RecycleLoopGuard) holds every rank's start.
TEST_F(GangTest, ARecycleLoopsDelayHoldsTheWholeGang) {
  program.checkpoint = {};
  make();
  ASSERT_TRUE(gang->recycle(0, {"memory", false}, false, 4s));
  exit_run(0, ExitStatus{0, SIGTERM, true});
  exit_run(1, ExitStatus{0, SIGTERM, true});
  timers.advance(3999ms);
  EXPECT_EQ(starts_of(0), 1u);
  EXPECT_EQ(starts_of(1), 1u);
  timers.advance(1ms);
  EXPECT_EQ(starts_of(0), 2u);
  EXPECT_EQ(starts_of(1), 2u);
  EXPECT_FALSE(gang->busy());
}

}  // namespace
}  // namespace recycler
