// The notify socket on a real libuv loop with real senders: this process,
// forked children, passed descriptors, bursts and read pacing.
#include "tests/unit/notify_support.h"

namespace recycler::notify {
namespace {

using namespace test;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

TEST_F(NotifySocketTest, TheAddressIsAbstractAndNamedAfterThisProcess) {
  open();
  const std::string& a = socket_->address();
  std::string prefix = "@recycler-" + std::to_string(::getpid()) + "-";
  ASSERT_EQ(a.rfind(prefix, 0), 0u) << a;
  EXPECT_EQ(a.size(), prefix.size() + 16) << a;
  EXPECT_EQ(a.find_first_not_of("0123456789abcdef", prefix.size()), std::string::npos) << a;

  auto other = NotifySocket::open(&loop_, [](const NotifySocket::Datagram&) {});
  ASSERT_TRUE(other);
  EXPECT_NE((*other)->address(), a) << "two supervisors on one host must not collide";
}

TEST_F(NotifySocketTest, ADatagramArrivesWithTheSendersPidAndUid) {
  open();
  Sender sender(socket_->address());
  ASSERT_TRUE(sender.connected());
  ASSERT_TRUE(sender.send("READY=1\nSTATUS=up"));
  ASSERT_TRUE(run_until_received(1));
  EXPECT_EQ(received_[0].pid, ::getpid());
  EXPECT_EQ(received_[0].uid, ::getuid());
  EXPECT_EQ(received_[0].data, "READY=1\nSTATUS=up");
  EXPECT_EQ(socket_->stats().received, 1u);
}

TEST_F(NotifySocketTest, ADatagramFromAForkedChildCarriesTheChildsPid) {
  open();
  std::string address = socket_->address();
  pid_t child = fork_child([&] {
    Sender sender(address);
    return sender.connected() && sender.send("RECYCLER_REQUESTS=1");
  });
  ASSERT_GT(child, 0);
  EXPECT_TRUE(run_until_received(1));
  EXPECT_EQ(wait_exit_code(child), 0);
  ASSERT_EQ(received_.size(), 1u);
  EXPECT_EQ(received_[0].pid, child);
  EXPECT_EQ(received_[0].data, "RECYCLER_REQUESTS=1");
}

// recycler answers a sender with an abstract address of its own: the socket
// that sent is the one that hears it.
TEST_F(NotifySocketTest, AnAutoboundSenderIsAnsweredOnItsOwnSocket) {
  open();
  answer_with_ = "RECYCLER_REQUEST_LIMIT=7";
  Sender sender(socket_->address(), Sender::Bound::kAutobind);
  ASSERT_TRUE(sender.bound());
  ASSERT_TRUE(sender.connected());
  ASSERT_TRUE(sender.send("RECYCLER_REQUESTS=1"));
  ASSERT_TRUE(run_until_received(1));
  EXPECT_TRUE(received_[0].answerable);
  EXPECT_EQ(sender.receive(5s), "RECYCLER_REQUEST_LIMIT=7");
  EXPECT_EQ(socket_->stats().answers, 1u);
  EXPECT_EQ(socket_->stats().answers_dropped, 0u);
}

// sd_notify's unbound sender has no address to answer; a path is not
// written to (recycler is root: whatever holds that path by then would get it).
TEST_F(NotifySocketTest, UnboundAndPathBoundSendersAreNotAnswerable) {
  open();
  answer_with_ = "RECYCLER_REQUEST_LIMIT=7";
  char dir[] = "/tmp/recycler-notify-test.XXXXXX";
  ASSERT_NE(::mkdtemp(dir), nullptr);
  std::string path = std::string(dir) + "/sender";
  {
    Sender unbound(socket_->address());
    Sender at_path(socket_->address(), Sender::Bound::kPath, path);
    ASSERT_TRUE(at_path.bound());
    ASSERT_TRUE(unbound.send("RECYCLER_REQUESTS=1"));
    ASSERT_TRUE(at_path.send("RECYCLER_REQUESTS=1"));
    ASSERT_TRUE(run_until_received(2));
    EXPECT_FALSE(received_[0].answerable);
    EXPECT_FALSE(received_[1].answerable);
    EXPECT_EQ(unbound.receive(0ms), std::nullopt);
    EXPECT_EQ(at_path.receive(0ms), std::nullopt);
    EXPECT_EQ(socket_->stats().answers, 0u);
  }
  ::unlink(path.c_str());
  ::rmdir(dir);
}

// A sender that never reads its answers cannot make recycler wait. Its
// queue of unread answers is charged to recycler's socket (a sender connected
// to the receiver is past the kernel's queue-length check): once recycler's
// send buffer is full, answers are dropped, each at once. The controller
// answers each process at most twice (RecycleController::answer), so this
// takes a program's own processes by the hundred.
TEST_F(NotifySocketTest, AnswersToASenderThatNeverReadsAreDroppedNotWaitedFor) {
  open();
  answer_with_ = "RECYCLER_REQUESTS_SEEN=1";
  Sender sender(socket_->address(), Sender::Bound::kAutobind);
  ASSERT_TRUE(sender.bound());
  std::size_t reports = 0;
  while (socket_->stats().answers_dropped == 0 && reports < 20000) {
    ASSERT_TRUE(sender.send("RECYCLER_REQUESTS=1"));
    ASSERT_TRUE(run_until_received(++reports));
  }
  EXPECT_GT(socket_->stats().answers, 0u);
  EXPECT_EQ(socket_->stats().answers_dropped, 1u) << "after " << reports << " reports";
  EXPECT_EQ(socket_->stats().answers + socket_->stats().answers_dropped, reports);
  // Once it reads, answers go again.
  while (sender.receive(0ms)) {
  }
  ASSERT_TRUE(sender.send("RECYCLER_REQUESTS=1"));
  ASSERT_TRUE(run_until_received(++reports));
  EXPECT_EQ(socket_->stats().answers_dropped, 1u);
}

TEST_F(NotifySocketTest, ALoneDatagramCostsOneRead) {
  // A request count arrives on a wake-up of its own: one recvmmsg reads it and,
  // returning fewer than it asked for, shows the queue empty without a second
  // call to meet EAGAIN.
  open();
  Sender sender(socket_->address());
  for (int i = 1; i <= 3; ++i) {
    ASSERT_TRUE(sender.send("RECYCLER_REQUESTS=1"));
    ASSERT_TRUE(run_until_received(static_cast<std::size_t>(i)));
    EXPECT_EQ(socket_->stats().reads, static_cast<uint64_t>(i));
  }
}

TEST_F(NotifySocketTest, QueuedDatagramsAreReadInOneCallInOrder) {
  open();
  Sender sender(socket_->address());
  // All queued before the loop runs; fewer than net.unix.max_dgram_qlen (10 by
  // default), or this blocking sender would wait for the reader.
  constexpr int kQueued = 8;
  static_assert(kQueued < NotifySocket::kBatch);
  for (int i = 0; i < kQueued; ++i) ASSERT_TRUE(sender.send("SEQ=" + std::to_string(i)));
  ASSERT_TRUE(run_until_received(kQueued));
  for (int i = 0; i < kQueued; ++i) ASSERT_EQ(received_[i].data, "SEQ=" + std::to_string(i));
  EXPECT_EQ(socket_->stats().reads, 1u);
}

TEST_F(NotifySocketTest, WhileHeldDatagramsWaitAndArriveInOneReadWhenTheHoldEnds) {
  open();
  using Clock = std::chrono::steady_clock;
  Clock::time_point held_at{};
  std::vector<NotifySocket::Drained> drains;
  ASSERT_TRUE(socket_->set_pacing(&loop_, [&](const NotifySocket::Drained& d) {
    drains.push_back(d);
    if (drains.size() > 1) return std::chrono::microseconds{0};
    held_at = Clock::now();
    return std::chrono::microseconds{20ms};
  }));
  std::vector<Clock::time_point> arrived;
  Sender sender(socket_->address());
  ASSERT_TRUE(sender.send("SEQ=0"));
  ASSERT_TRUE(run_until_received(1));
  ASSERT_EQ(drains.size(), 1u);
  EXPECT_EQ(drains[0].datagrams, 1u);
  EXPECT_TRUE(drains[0].emptied);
  EXPECT_EQ(socket_->stats().holds, 1u);
  ASSERT_TRUE(sender.send("SEQ=1"));
  ASSERT_TRUE(sender.send("SEQ=2"));
  ASSERT_TRUE(run_until_received(3));
  Clock::time_point read_at = Clock::now();
  EXPECT_GE(read_at - held_at, 20ms) << "read before the hold ended";
  EXPECT_EQ(received_[1].data, "SEQ=1");
  EXPECT_EQ(received_[2].data, "SEQ=2");
  EXPECT_EQ(socket_->stats().reads, 2u) << "the two held datagrams come in one read";
  ASSERT_EQ(drains.size(), 2u);
  EXPECT_EQ(drains[1].datagrams, 2u);

  // The pacing said 0: the socket is polled again, and a lone datagram comes on its own wake-up.
  ASSERT_TRUE(sender.send("SEQ=3"));
  ASSERT_TRUE(run_until_received(4));
  EXPECT_EQ(received_[3].data, "SEQ=3");
  EXPECT_EQ(socket_->stats().holds, 1u);
}

TEST_F(NotifySocketTest, AHoldThatEndsOnAnEmptyQueueGoesBackToPollingTheSocket) {
  open();
  int calls = 0;
  ASSERT_TRUE(socket_->set_pacing(&loop_, [&](const NotifySocket::Drained& d) {
    ++calls;
    // Held once; the drain at the hold's end finds nothing and says 0.
    return calls == 1 ? std::chrono::microseconds{1ms} : std::chrono::microseconds{d.datagrams};
  }));
  Sender sender(socket_->address());
  ASSERT_TRUE(sender.send("SEQ=0"));
  ASSERT_TRUE(run_until_received(1));
  ASSERT_TRUE(run_until([&] { return calls >= 2; }));
  ASSERT_TRUE(sender.send("SEQ=1"));
  ASSERT_TRUE(run_until_received(2)) << "the socket was not polled again after the hold";
  EXPECT_EQ(received_[1].data, "SEQ=1");
}

TEST_F(NotifySocketTest, ASocketDestroyedWhileHeldLeavesNoHandleOpen) {
  open();
  ASSERT_TRUE(socket_->set_pacing(
      &loop_, [](const NotifySocket::Drained&) { return std::chrono::microseconds{10s}; }));
  Sender sender(socket_->address());
  ASSERT_TRUE(sender.send("READY=1"));
  ASSERT_TRUE(run_until_received(1));
  EXPECT_EQ(socket_->stats().holds, 1u);
  // TearDown destroys it mid-hold and checks that the loop closes.
}

TEST_F(NotifySocketTest, AnOversizedDatagramIsDroppedAndTheNextOneArrives) {
  open();
  Sender sender(socket_->address());
  ASSERT_TRUE(sender.send("STATUS=" + std::string(NotifySocket::kMaxDatagram, 'x')));
  ASSERT_TRUE(sender.send("READY=1"));
  ASSERT_TRUE(run_until_received(1));
  EXPECT_EQ(received_[0].data, "READY=1");
  EXPECT_EQ(socket_->stats().oversized, 1u);
  EXPECT_EQ(socket_->stats().received, 1u);
}

TEST_F(NotifySocketTest, ADatagramOfExactlyTheLimitArrives) {
  open();
  Sender sender(socket_->address());
  std::string full = "STATUS=" + std::string(NotifySocket::kMaxDatagram - 7, 'x');
  ASSERT_TRUE(sender.send(full));
  ASSERT_TRUE(run_until_received(1));
  EXPECT_EQ(received_[0].data, full);
  EXPECT_EQ(socket_->stats().oversized, 0u);
}

TEST_F(NotifySocketTest, PassedDescriptorsAreClosedOnArrival) {
  open();
  Sender sender(socket_->address());
  UniqueFd passed(::open("/dev/null", O_RDONLY | O_CLOEXEC));
  ASSERT_TRUE(passed);
  std::size_t before = open_fd_count();
  ASSERT_TRUE(sender.send("READY=1", {passed.get(), passed.get(), passed.get()}));
  ASSERT_TRUE(run_until_received(1));
  EXPECT_EQ(received_[0].data, "READY=1") << "the datagram itself still counts";
  EXPECT_EQ(socket_->stats().fds_closed, 3u);
  EXPECT_EQ(open_fd_count(), before) << "a descriptor leaked into the supervisor";
}

TEST_F(NotifySocketTest, DescriptorsOnAnOversizedDatagramAreClosedToo) {
  open();
  Sender sender(socket_->address());
  UniqueFd passed(::open("/dev/null", O_RDONLY | O_CLOEXEC));
  std::size_t before = open_fd_count();
  ASSERT_TRUE(sender.send(std::string(2 * NotifySocket::kMaxDatagram, 'x'), {passed.get()}));
  ASSERT_TRUE(sender.send("READY=1"));
  ASSERT_TRUE(run_until_received(1));
  EXPECT_EQ(socket_->stats().oversized, 1u);
  EXPECT_EQ(socket_->stats().fds_closed, 1u);
  EXPECT_EQ(open_fd_count(), before);
}

TEST_F(NotifySocketTest, ABurstOf2000ArrivesInOrderWithoutStarvingTheLoop) {
  open();
  constexpr int kBurst = 2000;
  // Counts loop iterations and the most datagrams handled within one.
  int iterations = 0, largest_batch = 0;
  auto* check = new uv_check_t;
  uv_check_init(&loop_, check);
  uv::Handle<uv_check_t> check_owner(check);
  struct Counters {
    int* iterations;
    int* largest;
    int* batch;
  } counters{&iterations, &largest_batch, &batch_};
  check->data = &counters;
  uv_check_start(check, [](uv_check_t* h) {
    auto* c = static_cast<Counters*>(h->data);
    ++*c->iterations;
    *c->largest = std::max(*c->largest, *c->batch);
    *c->batch = 0;
  });

  std::string address = socket_->address();
  pid_t child = fork_child([&] {
    Sender sender(address);
    for (int i = 0; i < kBurst; ++i)
      if (!sender.send("RECYCLER_REQUESTS=1\nSEQ=" + std::to_string(i))) return false;
    return true;
  });
  ASSERT_GT(child, 0);
  EXPECT_TRUE(run_until_received(kBurst));
  EXPECT_EQ(wait_exit_code(child), 0);
  ASSERT_EQ(received_.size(), static_cast<std::size_t>(kBurst));
  for (int i = 0; i < kBurst; ++i) {
    EXPECT_EQ(received_[i].pid, child);
    ASSERT_EQ(received_[i].data, "RECYCLER_REQUESTS=1\nSEQ=" + std::to_string(i));
  }
  EXPECT_LE(largest_batch, NotifySocket::kMaxPerWakeup);
  EXPECT_GE(iterations, kBurst / NotifySocket::kMaxPerWakeup);
}

}  // namespace
}  // namespace recycler::notify
