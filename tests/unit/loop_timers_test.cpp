// LoopTimers (supervisor/util/uv.h) on a real libuv loop: timers aligned to
// the same instant share one libuv timer, fire in the order they were set,
// and each can still be cancelled alone, from outside or from a callback of
// its own batch.
#include <gtest/gtest.h>
#include <uv.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "supervisor/util/uv.h"

namespace recycler {
namespace {

using namespace std::chrono_literals;

class LoopTimersTest : public ::testing::Test {
 protected:
  LoopTimersTest() { uv_loop_init(&loop_); }
  ~LoopTimersTest() override {
    uv_run(&loop_, UV_RUN_NOWAIT);  // the closed handles' callbacks
    uv_loop_close(&loop_);
  }
  // The libuv timers the loop holds (active ones), which batching keeps to one.
  int active_timers() {
    int n = 0;
    uv_walk(
        &loop_,
        [](uv_handle_t* h, void* arg) {
          if (h->type == UV_TIMER && uv_is_active(h)) ++*static_cast<int*>(arg);
        },
        &n);
    return n;
  }
  // Runs the loop until `fired` has `n` entries; false after 5 s.
  bool run_until(const std::vector<std::string>& fired, size_t n) {
    TimePoint give_up = timers_.now() + 5s;
    while (fired.size() < n) {
      if (timers_.now() > give_up) return false;
      uv_run(&loop_, UV_RUN_ONCE);
    }
    return true;
  }

  uv_loop_t loop_{};
  uv::LoopTimers timers_{&loop_};
  std::vector<std::string> fired_;
};

TEST_F(LoopTimersTest, TimersDueAtOneInstantShareOneLibuvTimerAndFireInOrder) {
  std::vector<std::unique_ptr<Timer>> handles;
  for (const char* name : {"a", "b", "c"})
    handles.push_back(timers_.aligned(50ms, 50ms, [this, name] { fired_.push_back(name); }));
  EXPECT_EQ(active_timers(), 1) << "one libuv timer for the three";
  ASSERT_TRUE(run_until(fired_, 3));
  EXPECT_EQ(fired_, (std::vector<std::string>{"a", "b", "c"}));
  EXPECT_EQ(active_timers(), 0);
}

TEST_F(LoopTimersTest, ADestroyedHandleIsCancelledAloneEvenFromItsBatchsOwnCallback) {
  std::unique_ptr<Timer> a, b, c;
  a = timers_.aligned(50ms, 50ms, [&] {
    fired_.push_back("a");
    b.reset();  // due in the same pass, not yet fired: it must not fire now
  });
  b = timers_.aligned(50ms, 50ms, [&] { fired_.push_back("b"); });
  c = timers_.aligned(50ms, 50ms, [&] {
    fired_.push_back("c");
    c.reset();  // its own handle, from its own callback
  });
  auto cancelled = timers_.aligned(50ms, 50ms, [&] { fired_.push_back("cancelled"); });
  cancelled.reset();
  ASSERT_TRUE(run_until(fired_, 2));
  // One more pass at the instant after: nothing else was left to fire.
  auto after = timers_.after(60ms, [&] { fired_.push_back("after"); });
  ASSERT_TRUE(run_until(fired_, 3));
  EXPECT_EQ(fired_, (std::vector<std::string>{"a", "c", "after"}));
}

TEST_F(LoopTimersTest, ACallbackThatSetsItsNextTickJoinsTheNextBatch) {
  std::unique_ptr<Timer> tick, other;
  int ticks = 0;
  std::function<void()> on_tick = [&] {
    fired_.push_back("tick" + std::to_string(++ticks));
    if (ticks < 3) tick = timers_.aligned(40ms, 40ms, on_tick);
    // Set in the same pass as the second tick: due at the same instant.
    if (ticks == 1) other = timers_.aligned(40ms, 40ms, [&] { fired_.push_back("other"); });
  };
  tick = timers_.aligned(40ms, 40ms, on_tick);
  ASSERT_TRUE(run_until(fired_, 1));
  EXPECT_EQ(active_timers(), 1) << "the second tick and `other` share one";
  ASSERT_TRUE(run_until(fired_, 4));
  EXPECT_EQ(fired_, (std::vector<std::string>{"tick1", "tick2", "other", "tick3"}));
}

TEST_F(LoopTimersTest, ABatchWhoseTimersAreAllCancelledLeavesNoLibuvTimerBehind) {
  auto a = timers_.aligned(1000ms, 1000ms, [&] { fired_.push_back("a"); });
  auto b = timers_.aligned(1000ms, 1000ms, [&] { fired_.push_back("b"); });
  EXPECT_EQ(active_timers(), 1);
  a.reset();
  EXPECT_EQ(active_timers(), 1) << "b still waits";
  b.reset();
  EXPECT_EQ(active_timers(), 0) << "closed with its last timer, not when LoopTimers goes";
  auto c = timers_.aligned(1000ms, 1000ms, [&] { fired_.push_back("c"); });
  EXPECT_EQ(active_timers(), 1) << "the same instant: a batch of its own again";
  c.reset();
  EXPECT_EQ(active_timers(), 0);
  EXPECT_TRUE(fired_.empty());
}

TEST_F(LoopTimersTest, ShorterThanItsGrainOrWithoutOneIsAPlainTimer) {
  auto early = timers_.aligned(10ms, 1000ms, [&] { fired_.push_back("early"); });
  auto exact = timers_.aligned(20ms, Duration{0}, [&] { fired_.push_back("exact"); });
  EXPECT_EQ(active_timers(), 2);
  ASSERT_TRUE(run_until(fired_, 2));
  EXPECT_EQ(fired_, (std::vector<std::string>{"early", "exact"}));
}

TEST_F(LoopTimersTest, HandlesMayOutliveTheirBatchesAndTheTimersThemselves) {
  auto pending = std::make_unique<uv::LoopTimers>(&loop_);
  std::unique_ptr<Timer> a = pending->aligned(1000ms, 1000ms, [&] { fired_.push_back("a"); });
  std::unique_ptr<Timer> b = pending->aligned(1000ms, 1000ms, [&] { fired_.push_back("b"); });
  pending.reset();  // its batches go; the handles stay valid to destroy
  a.reset();
  b.reset();
  EXPECT_TRUE(fired_.empty());
}

}  // namespace
}  // namespace recycler
