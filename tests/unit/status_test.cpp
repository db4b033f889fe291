// The status snapshot's pure parts: how exits are classified and counted
// from the log events, the recycle counters, and systemd's summary line.
#include "supervisor/control/status.h"

#include <gtest/gtest.h>

namespace recycler {
namespace {

TEST(StatusTest, ExitsAreClassifiedByWhatEndedThem) {
  EXPECT_EQ(classify_exit(true, false, true, 0), ExitReason::OomKill);
  EXPECT_EQ(classify_exit(true, true, true, 0), ExitReason::OomKill) << "even during a stop";
  EXPECT_EQ(classify_exit(false, true, true, 0), ExitReason::Clean) << "a stop by SIGTERM";
  EXPECT_EQ(classify_exit(false, false, false, 0), ExitReason::Clean);
  EXPECT_EQ(classify_exit(false, false, false, 3), ExitReason::Crash);
  EXPECT_EQ(classify_exit(false, false, true, 0), ExitReason::Signal);
  EXPECT_STREQ(to_string(ExitReason::OomKill), "oom_kill");
}

TEST(StatusTest, CountersComeFromTheEventsThatReportExitsAndRecycles) {
  StatusCounters counters;
  counters.observe("exit", {{"program", "api"}, {"requested", false}, {"status", 1}});
  counters.observe("exit", {{"program", "api"}, {"requested", true}, {"signal", "SIGTERM"}});
  counters.observe("oom_kill", {{"program", "api"}, {"oom_kill", true}, {"signal", "SIGKILL"}});
  counters.observe("exit", {{"program", "api"}, {"requested", false}, {"signal", "SIGSEGV"}});
  counters.observe("recycle", {{"program", "api"}, {"policy", "memory"}, {"action", "restart"}});
  counters.observe("recycle", {{"program", "api"}, {"policy", "memory"}, {"action", "restart"}});
  counters.observe("recycle", {{"program", "web"}, {"policy", "control"}, {"action", "restart"}});
  counters.observe("start", {{"program", "api"}});  // not counted

  SupervisorStatus s;
  counters.fill(s);
  EXPECT_EQ(s.exits[ExitReason::Crash], 1u);
  EXPECT_EQ(s.exits[ExitReason::Clean], 1u);
  EXPECT_EQ(s.exits[ExitReason::OomKill], 1u);
  EXPECT_EQ(s.exits[ExitReason::Signal], 1u);
  EXPECT_EQ(s.oom_kills, 1u);
  EXPECT_EQ(s.recycles, 3u);
  EXPECT_EQ((s.recycles_by[{"api", "memory", "restart"}]), 2u);
  EXPECT_EQ((s.recycles_by[{"web", "control", "restart"}]), 1u);
  // By program too (the metrics endpoint's recycler_exits_total{program,reason}).
  EXPECT_EQ((s.exits_by[{"api", ExitReason::Crash}]), 1u);
  EXPECT_EQ((s.exits_by[{"api", ExitReason::OomKill}]), 1u);
  EXPECT_EQ(s.exits_by.size(), 4u);
}

// A gang's recycle (config gang:) counts once for the program, whatever its
// ranks, with the worker that decided it; a program without gang: shows none.
TEST(StatusTest, AGangsRecycleCountsOnceWithItsTrigger) {
  StatusCounters counters;
  counters.observe("gang_recycle",
                   {{"program", "ddp"}, {"worker", "ddp[1]"}, {"reason", "leak"}, {"ranks", 4}});
  counters.observe("gang_recycle", {{"program", "ddp"},
                                    {"worker", "ddp[0]"},
                                    {"reason", "anon 401 MiB > 400 MiB (memory policy)"}});
  counters.observe("gang_recycle", {{"program", "api"}, {"worker", "api[0]"}, {"reason", "x"}});
  SupervisorStatus s;
  s.programs.resize(2);
  s.programs[0].name = "ddp";
  s.programs[0].gang = true;
  s.programs[1].name = "api";
  counters.fill(s);
  EXPECT_EQ(s.programs[0].gang_recycles, 2u);
  EXPECT_EQ(s.programs[0].gang_last_reason, "ddp[0]: anon 401 MiB > 400 MiB (memory policy)");
  EXPECT_EQ(s.programs[1].gang_recycles, 0u) << "not a gang (any more: a reload)";
  EXPECT_EQ(s.recycles, 0u) << "the trigger's own recycle event counts the recycle";
}

// A pre-fork server's processes recycled one by one (scope: process) are its
// slot's recycles: status showed RECYCLES 0 after 277 of them.
TEST(StatusTest, ProcessRecyclesAreCountedPerSlotWithTheLastOnesReason) {
  StatusCounters counters;
  EXPECT_EQ(counters.slot("web", 0), nullptr);
  auto signal = [&](int pid) {
    counters.observe("recycle", {{"program", "web"},
                                 {"slot", 0u},
                                 {"pid", pid},
                                 {"policy", "max_requests"},
                                 {"action", "signal"},
                                 {"reason", "20 requests >= limit 20"}});
  };
  signal(101);
  signal(102);
  const StatusCounters::SlotRecycles* r = counters.slot("web", 0);
  ASSERT_NE(r, nullptr);
  EXPECT_EQ(r->processes, 2u);
  EXPECT_TRUE(r->last_was_process);
  EXPECT_EQ(r->last_process_reason, "pid 102: 20 requests >= limit 20 (max_requests policy)");
  // Then the whole worker: its own reason is the last one now.
  counters.observe("recycle", {{"program", "web"},
                               {"slot", 0u},
                               {"pid", 100},
                               {"policy", "memory"},
                               {"action", "restart"},
                               {"reason", "anon 1 GiB > 900 MiB"}});
  EXPECT_EQ(r->processes, 2u);
  EXPECT_FALSE(r->last_was_process);
  EXPECT_EQ(counters.slot("web", 1), nullptr) << "another slot";
}

TEST(StatusTest, EveryExitReasonIsThereEvenWhenNoneHappened) {
  SupervisorStatus s;
  StatusCounters().fill(s);
  EXPECT_EQ(s.exits.size(), 4u);
  EXPECT_EQ(s.recycles, 0u);
}

TEST(StatusTest, TheSummaryLineSaysWhatSystemdShows) {
  SupervisorStatus s;
  s.programs.resize(3);
  s.workers_running = 7;
  s.recycles = 12;
  EXPECT_EQ(summary_line(s), "3 programs, 7 workers running, 12 recycles, 0 OOM kills");
  s.programs.resize(1);
  s.workers_running = 1;
  s.recycles = 1;
  s.oom_kills = 1;
  EXPECT_EQ(summary_line(s), "1 program, 1 worker running, 1 recycle, 1 OOM kill");
}

}  // namespace
}  // namespace recycler
