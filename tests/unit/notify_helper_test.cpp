// python/recycler_notify, the helper workers use, against a real notify
// socket: pids, batching, answers at the request limit, failures.
#include "tests/unit/notify_support.h"

namespace recycler::notify {
namespace {

using namespace test;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

TEST_F(NotifySocketTest, ThePythonHelperReachesTheSocketWithItsPid) {
  if (::access(kPython, X_OK) != 0) GTEST_SKIP() << kPython << " is not installed";
  open();
  pid_t python = spawn({kPython, "-m", "recycler_notify", "RECYCLER_REQUESTS=3"},
                       {"PYTHONPATH=" + kHelperDir, "NOTIFY_SOCKET=" + socket_->address()});
  ASSERT_GT(python, 0);
  EXPECT_TRUE(run_until_received(1));
  EXPECT_EQ(wait_exit_code(python), 0);
  ASSERT_EQ(received_.size(), 1u);
  EXPECT_EQ(received_[0].pid, python);
  EXPECT_EQ(received_[0].data, "RECYCLER_REQUESTS=3");
}

TEST_F(NotifySocketTest, ThePythonHelperMarksAnIterationWithItsDeviceBytesInOneMessage) {
  if (::access(kPython, X_OK) != 0) GTEST_SKIP() << kPython << " is not installed";
  open();
  const char* script = R"(
import sys
sys.path.insert(0, sys.argv[1])
import recycler_notify as rn
sys.exit(0 if rn.iteration(3, device_bytes=13019119616.0) and rn.iteration(4) else 1)
)";
  pid_t python =
      spawn({kPython, "-c", script, kHelperDir}, {"NOTIFY_SOCKET=" + socket_->address()});
  ASSERT_GT(python, 0);
  EXPECT_TRUE(run_until_received(2));
  EXPECT_EQ(wait_exit_code(python), 0);
  ASSERT_EQ(received_.size(), 2u);
  NotifyMessage m = parse_message(received_[0].data);
  EXPECT_EQ(m.iteration, 3u);
  EXPECT_EQ(m.device_bytes, 13019119616u);
  EXPECT_THAT(m.problems, IsEmpty());
  EXPECT_EQ(received_[1].data, "RECYCLER_ITERATION=4");
}

TEST_F(NotifySocketTest, ThePythonHelperReportsFromAForkedChildWithTheChildsPid) {
  if (::access(kPython, X_OK) != 0) GTEST_SKIP() << kPython << " is not installed";
  open();
  // A pre-fork server in miniature: the parent reports, forks, the child reports.
  const char* script = R"(
import os, sys
sys.path.insert(0, sys.argv[1])
import recycler_notify as rn
assert rn.ready()
pid = os.fork()
if pid == 0:
    os._exit(0 if rn.requests(2) and rn.status(str(os.getpid())) else 1)
_, status = os.waitpid(pid, 0)
sys.exit(os.waitstatus_to_exitcode(status))
)";
  pid_t python =
      spawn({kPython, "-c", script, kHelperDir}, {"NOTIFY_SOCKET=" + socket_->address()});
  ASSERT_GT(python, 0);
  EXPECT_TRUE(run_until_received(3));
  EXPECT_EQ(wait_exit_code(python), 0);
  ASSERT_EQ(received_.size(), 3u);
  EXPECT_EQ(received_[0].pid, python);
  EXPECT_EQ(received_[0].data, "READY=1");
  EXPECT_EQ(received_[1].data, "RECYCLER_REQUESTS=2");
  EXPECT_EQ(received_[2].data, "STATUS=" + std::to_string(received_[2].pid))
      << "the child's datagrams must carry the child's pid";
  EXPECT_EQ(received_[1].pid, received_[2].pid);
  EXPECT_NE(received_[1].pid, python);
}

TEST_F(NotifySocketTest, ThePythonHelperKeepsCountsItCouldNotSendForItsNextMessage) {
  if (::access(kPython, X_OK) != 0) GTEST_SKIP() << kPython << " is not installed";
  open();
  // More requests than any kernel's queue for one socket holds (net.unix.max_dgram_qlen)
  // while the loop does not read; then a lifecycle message waits for room, and
  // the next count carries everything that could not go before.
  // ready() waits up to a second for room; on a loaded machine the test's loop
  // may take longer to start reading, so both sends are retried until a
  // deadline instead of asserted once.
  const char* script = R"(
import sys, time
sys.path.insert(0, sys.argv[1])
import recycler_notify as rn
unsent = sum(not rn.requests(1) for _ in range(1000))
print("filled", unsent, flush=True)
deadline = time.monotonic() + 30
while not rn.ready():
    assert time.monotonic() < deadline
while not rn.requests(0):
    assert time.monotonic() < deadline
)";
  int out[2];
  ASSERT_EQ(::pipe2(out, O_CLOEXEC), 0);
  UniqueFd out_read(out[0]), out_write(out[1]);
  pid_t python = spawn({kPython, "-c", script, kHelperDir}, {"NOTIFY_SOCKET=" + socket_->address()},
                       out_write.get());
  ASSERT_GT(python, 0);
  out_write.reset();
  std::string filled = read_line(out_read.get());
  ASSERT_EQ(filled.rfind("filled ", 0), 0u) << filled;
  EXPECT_GT(std::stoi(filled.substr(7)), 0) << "the queue never filled: nothing was carried over";

  auto total = [&] {
    uint64_t n = 0;
    for (const auto& r : received_) n += parse_message(r.data).requests.value_or(0);
    return n;
  };
  EXPECT_TRUE(run_until([&] { return total() >= 1000; }));
  EXPECT_EQ(wait_exit_code(python), 0);
  EXPECT_EQ(total(), 1000u) << "every request counted exactly once";
  ASSERT_FALSE(received_.empty());
  EXPECT_GT(parse_message(received_.back().data).requests, 1u) << "the carried-over count";
}

// The helper's request batching: `script` runs with
// RECYCLER_REQUESTS_BATCH_BELOW=`below` and exits 0; what reached the socket,
// in order, once `n` datagrams have.
class HelperBatchingTest : public NotifySocketTest {
 protected:
  std::vector<std::string> run_helper(const char* script, const std::string& below, size_t n) {
    open();
    pid_t python =
        spawn({kPython, "-c", script, kHelperDir},
              {"NOTIFY_SOCKET=" + socket_->address(), "RECYCLER_REQUESTS_BATCH_BELOW=" + below});
    EXPECT_GT(python, 0);
    if (python > 0) {
      EXPECT_EQ(wait_exit_code(python), 0);
    }
    EXPECT_TRUE(run_until_received(n));
    std::vector<std::string> data;
    for (const auto& r : received_) data.push_back(r.data);
    return data;
  }
};

// RECYCLER_REQUESTS_BATCH_BELOW=5 (the smallest per-process limit): the first
// request goes at once, the next ones wait, the 5th carries them, and each
// one from there on goes as it is served.
TEST_F(HelperBatchingTest, RequestsAreHeldBelowTheLimitAndEachIsSentFromIt) {
  if (::access(kPython, X_OK) != 0) GTEST_SKIP() << kPython << " is not installed";
  const char* script = R"(
import sys
sys.path.insert(0, sys.argv[1])
import recycler_notify as rn
rn._clock = lambda: 100.0  # no time passes: only the count decides
sys.exit(0 if all(rn.requests() for _ in range(7)) else 1)
)";
  EXPECT_THAT(run_helper(script, "5", 4),
              ElementsAre("RECYCLER_REQUESTS=1", "RECYCLER_REQUESTS=4", "RECYCLER_REQUESTS=1",
                          "RECYCLER_REQUESTS=1"));
}

// recycler's answers, played by the test: the process's limit (4) after its
// first report; at it, SIGTERM, then the count seen. The helper holds its
// counts until its limit, sends them in one report and returns from that
// requests() call only once recycler has acted on it: its SIGTERM handler has
// run by then. Past its limit it reports each request without waiting.
class HelperAnswersTest : public NotifySocketTest {
 protected:
  // Runs `script` while the loop answers as recycler does, until it exits;
  // its exit code, and what reached the socket in order once `datagrams` have.
  std::pair<int, std::vector<std::string>> run_answered(const char* script, bool answer_seen,
                                                        size_t datagrams) {
    std::map<pid_t, uint64_t> counted;
    on_datagram_ = [&, answer_seen](const NotifySocket::Datagram& d) {
      NotifyMessage m = parse_message(d.data);
      if (!m.requests || !d.from) return;
      uint64_t before = counted[d.pid];
      uint64_t now = counted[d.pid] += *m.requests;
      Answer a;
      if (before == 0) a.request_limit = 4;
      // Once, as recycler does (to the first report that reaches the limit):
      // a second SIGTERM for the report past it could land while the
      // interpreter exits, its handler gone, and end it with 143.
      if (now >= 4 && before < 4 && answer_seen) {
        ::kill(d.pid, SIGTERM);  // the recycle, before the answer
        a.requests_seen = now;
      }
      if (a) socket_->answer(*d.from, format_answer(a));
    };
    open();
    pid_t python =
        spawn({kPython, "-c", script, kHelperDir},
              {"NOTIFY_SOCKET=" + socket_->address(), "RECYCLER_REQUESTS_BATCH_BELOW=3"});
    EXPECT_GT(python, 0);
    int status = -1;
    // The child's exit is no event of the loop: a timer wakes it to look.
    auto* ticker = new uv_timer_t;
    uv_timer_init(&loop_, ticker);
    uv::Handle<uv_timer_t> ticking(ticker);
    uv_timer_start(
        ticker, [](uv_timer_t*) {}, 5, 5);
    run_until([&] {
      int st = 0;
      if (python > 0 && ::waitpid(python, &st, WNOHANG) == python) {
        status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
        return true;
      }
      return false;
    });
    EXPECT_TRUE(run_until_received(datagrams));
    std::vector<std::string> data;
    for (const auto& r : received_) data.push_back(r.data);
    return {status, data};
  }
};

TEST_F(HelperAnswersTest, AtItsLimitAProcessReportsOnceAndWaitsUntilRecyclerActed) {
  if (::access(kPython, X_OK) != 0) GTEST_SKIP() << kPython << " is not installed";
  const char* script = R"(
import signal, sys, time
sys.path.insert(0, sys.argv[1])
import recycler_notify as rn
stopped = []
signal.signal(signal.SIGTERM, lambda *_: stopped.append(1))
ok = rn.requests()                      # the first: sent at once, answered with the limit
rn._read_answers(rn._sock, 10)          # (the test waits for that answer)
ok &= rn._limit == 4
ok &= rn.requests() and rn.requests()   # held: 3 served, under the limit of 4
ok &= not stopped
ok &= rn.requests()                     # the 4th: 3 in one report, then the wait
ok &= stopped == [1]                    # SIGTERM came, and was handled, before it returned
ok &= rn.requests()                     # past the limit: sent at once
sys.exit(0 if ok else 1)
)";
  auto [status, data] = run_answered(script, true, 3);
  EXPECT_EQ(status, 0);
  EXPECT_THAT(data,
              ElementsAre("RECYCLER_REQUESTS=1", "RECYCLER_REQUESTS=3", "RECYCLER_REQUESTS=1"));
}

// A recycler that says the limit but never acts on the report at it: the
// wait ends after LIMIT_WAIT_SECONDS, and the process serves on.
TEST_F(HelperAnswersTest, TheWaitAtTheLimitIsBounded) {
  if (::access(kPython, X_OK) != 0) GTEST_SKIP() << kPython << " is not installed";
  const char* script = R"(
import sys, time
sys.path.insert(0, sys.argv[1])
import recycler_notify as rn
rn.LIMIT_WAIT_SECONDS = 0.2
ok = rn.requests()
rn._read_answers(rn._sock, 10)
ok &= rn._limit == 4
ok &= rn.requests(2)
start = time.monotonic()
ok &= rn.requests()
waited = time.monotonic() - start
sys.exit(0 if ok and 0.15 < waited < 5 else 1)
)";
  auto [status, data] = run_answered(script, false, 2);
  EXPECT_EQ(status, 0);
  EXPECT_THAT(data, ElementsAre("RECYCLER_REQUESTS=1", "RECYCLER_REQUESTS=3"));
}

// With no per-process limit ("unlimited") counts wait at most BATCH_SECONDS,
// checked at the next request; STOPPING=1 and flush() take what is held.
TEST_F(HelperBatchingTest, HeldRequestsGoAfterASecondAndWhenTheProcessStops) {
  if (::access(kPython, X_OK) != 0) GTEST_SKIP() << kPython << " is not installed";
  const char* script = R"(
import sys
sys.path.insert(0, sys.argv[1])
import recycler_notify as rn
now = [0.0]
rn._clock = lambda: now[0]
ok = rn.requests()            # sent: the first
now[0] = 0.5
ok &= rn.requests(3)          # held
now[0] = 1.0
ok &= rn.requests()           # a second since the last: 4 go
ok &= rn.requests(2)          # held
ok &= rn.stopping()           # with the 2
ok &= rn.flush()              # nothing held: nothing sent
ok &= rn.requests()           # held (0.0 s since the last)
ok &= rn.flush()
sys.exit(0 if ok else 1)
)";
  EXPECT_THAT(run_helper(script, "unlimited", 4),
              ElementsAre("RECYCLER_REQUESTS=1", "RECYCLER_REQUESTS=4",
                          "STOPPING=1\nRECYCLER_REQUESTS=2", "RECYCLER_REQUESTS=1"));
}

TEST_F(NotifySocketTest, ThePythonHelperIsANoOpWithoutNotifySocket) {
  if (::access(kPython, X_OK) != 0) GTEST_SKIP() << kPython << " is not installed";
  pid_t python = spawn({kPython, "-m", "recycler_notify", "READY=1"}, {"PYTHONPATH=" + kHelperDir});
  ASSERT_GT(python, 0);
  EXPECT_EQ(wait_exit_code(python), 0) << "unsupervised, the helper must not fail its caller";
}

TEST_F(NotifySocketTest, ThePythonHelperFailsWhenTheSocketIsGone) {
  if (::access(kPython, X_OK) != 0) GTEST_SKIP() << kPython << " is not installed";
  pid_t python = spawn({kPython, "-m", "recycler_notify", "READY=1"},
                       {"PYTHONPATH=" + kHelperDir, "NOTIFY_SOCKET=@recycler-test-nobody-listens"});
  ASSERT_GT(python, 0);
  EXPECT_EQ(wait_exit_code(python), 1);
}

}  // namespace
}  // namespace recycler::notify
