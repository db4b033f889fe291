// The notify protocol: the sd_notify(3) parser on good and hostile input, and
// the socket on a real libuv loop with real senders (this process, forked
// children, the Python helper).
#include <dirent.h>
#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstring>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "supervisor/notify/message.h"
#include "supervisor/notify/socket.h"
#include "supervisor/util/uv.h"

namespace recycler::notify {
namespace {

using namespace std::chrono_literals;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

// ---------------------------------------------------------------------------
// parse_message

TEST(KernelQueue, AShortQueueIsWarnedAboutWithTheFix) {
  auto warning = short_queue_warning(10);
  ASSERT_TRUE(warning);
  EXPECT_THAT(*warning, ::testing::HasSubstr("at most 10 datagrams"));
  EXPECT_THAT(*warning, ::testing::HasSubstr("sysctl -w net.unix.max_dgram_qlen=512"));
  EXPECT_FALSE(short_queue_warning(512)) << "systemd's setting";
  EXPECT_FALSE(short_queue_warning(kShortQueue));
  EXPECT_FALSE(short_queue_warning(std::nullopt)) << "unknown: nothing to say";
}

TEST(KernelQueue, TheLimitIsReadFromProc) {
  auto limit = kernel_queue_limit();
  ASSERT_TRUE(limit) << "Linux has /proc/sys/net/unix/max_dgram_qlen";
  EXPECT_GT(*limit, 0u);
}

TEST(ParseMessage, ReadsEveryField) {
  auto m = parse_message(
      "READY=1\nSTOPPING=1\nWATCHDOG=1\nSTATUS=serving 3 models\nMAINPID=4242\n"
      "RECYCLER_REQUESTS=17\nRECYCLER_CHECKPOINTED=1\nRECYCLER_DEVICE_BYTES=8589934592\n"
      "RECYCLER_ITERATION=3\n");
  EXPECT_TRUE(m.ready);
  EXPECT_TRUE(m.stopping);
  EXPECT_TRUE(m.watchdog);
  EXPECT_EQ(m.status, "serving 3 models");
  EXPECT_EQ(m.mainpid, 4242);
  EXPECT_EQ(m.requests, 17u);
  EXPECT_TRUE(m.checkpointed);
  EXPECT_EQ(m.device_bytes, 8589934592u);
  EXPECT_EQ(m.iteration, 3u);
  EXPECT_THAT(m.problems, IsEmpty());
}

TEST(ParseMessage, AnEmptyDatagramSaysNothing) {
  auto m = parse_message("");
  EXPECT_FALSE(m.ready || m.stopping || m.watchdog || m.checkpointed);
  EXPECT_FALSE(m.status || m.mainpid || m.requests || m.device_bytes || m.iteration);
  EXPECT_THAT(m.problems, IsEmpty());
}

TEST(ParseMessage, FieldsNotSentStayUnset) {
  auto m = parse_message("READY=1");
  EXPECT_TRUE(m.ready);
  EXPECT_FALSE(m.stopping || m.watchdog || m.checkpointed);
  EXPECT_FALSE(m.status || m.mainpid || m.requests || m.device_bytes || m.iteration);
}

TEST(ParseMessage, UnknownKeysAreIgnoredSilently) {
  auto m = parse_message("EXTEND_TIMEOUT_USEC=5000000\nERRNO=2\nFDSTORE=1\nX-CUSTOM=y\nREADY=1");
  EXPECT_TRUE(m.ready);
  EXPECT_THAT(m.problems, IsEmpty());
}

TEST(ParseMessage, AnUnknownKeyInRecyclersNamespaceIsKeptForAWarning) {
  auto m = parse_message("ERRNO=2\nRECYCLER_REQUEST=1\nRECYCLER_ITER=3\nRECYCLER_REQUESTS=2");
  EXPECT_EQ(m.unknown_key, "\"RECYCLER_REQUEST\"") << "the first one";
  EXPECT_EQ(m.requests, 2u) << "the known keys still count";
  EXPECT_THAT(m.problems, IsEmpty()) << "not malformed: a key recycler does not know";
  EXPECT_FALSE(parse_message("RECYCLER_REQUESTS=1\nX_RECYCLER_Y=1").unknown_key);
}

TEST(ParseMessage, EmptyLinesAreFine) {
  auto m = parse_message("\nREADY=1\n\n\n");
  EXPECT_TRUE(m.ready);
  EXPECT_THAT(m.problems, IsEmpty());
}

TEST(ParseMessage, ALineWithoutEqualsIsSkippedAndTheOthersCount) {
  auto m = parse_message("READY=1\nhello\nRECYCLER_REQUESTS=2");
  EXPECT_TRUE(m.ready);
  EXPECT_EQ(m.requests, 2u);
  EXPECT_THAT(m.problems, ElementsAre(R"(line without '=': "hello")"));
}

TEST(ParseMessage, AnEmptyKeyIsAProblem) {
  auto m = parse_message("=1\nWATCHDOG=1");
  EXPECT_TRUE(m.watchdog);
  EXPECT_THAT(m.problems, ElementsAre(R"(line with an empty key: "=1")"));
}

TEST(ParseMessage, ALineWithANulByteIsSkippedAndTheOthersCount) {
  auto m = parse_message(std::string("READY=1\nSTATUS=a\0b\nRECYCLER_REQUESTS=1", 38));
  EXPECT_TRUE(m.ready);
  EXPECT_FALSE(m.status) << "the NUL line is skipped whole";
  EXPECT_EQ(m.requests, 1u);
  EXPECT_THAT(m.problems, ElementsAre(R"(line with a NUL byte: "STATUS=a\x00b")"));
}

TEST(ParseMessage, BadNumbersAreProblems) {
  const std::pair<const char*, const char*> cases[] = {
      {"RECYCLER_REQUESTS=abc", R"(RECYCLER_REQUESTS: "abc" is not a number)"},
      {"RECYCLER_REQUESTS=", R"(RECYCLER_REQUESTS: "" is not a number)"},
      {"RECYCLER_REQUESTS=-1", R"(RECYCLER_REQUESTS: "-1" is not a number)"},
      {"RECYCLER_REQUESTS=+1", R"(RECYCLER_REQUESTS: "+1" is not a number)"},
      {"RECYCLER_REQUESTS= 1", R"(RECYCLER_REQUESTS: " 1" is not a number)"},
      {"RECYCLER_REQUESTS=0x10", R"(RECYCLER_REQUESTS: "0x10" is not a number)"},
      {"RECYCLER_DEVICE_BYTES=1.5e9", R"(RECYCLER_DEVICE_BYTES: "1.5e9" is not a number)"},
      {"RECYCLER_DEVICE_BYTES=18446744073709551616",
       R"(RECYCLER_DEVICE_BYTES: "18446744073709551616" is out of range)"},
      {"RECYCLER_ITERATION=-1", R"(RECYCLER_ITERATION: "-1" is not a number)"},
      {"RECYCLER_ITERATION=2\r", R"(RECYCLER_ITERATION: "2\x0d" is not a number)"},
      {"RECYCLER_ITERATION=99999999999999999999",
       R"(RECYCLER_ITERATION: "99999999999999999999" is out of range)"},
      {"MAINPID=abc", R"(MAINPID: "abc" is not a number)"},
      {"MAINPID=0", R"(MAINPID: "0" is not a valid pid)"},
      {"MAINPID=2147483648", R"(MAINPID: "2147483648" is not a valid pid)"},
  };
  for (const auto& [line, problem] : cases) {
    auto m = parse_message(line);
    EXPECT_FALSE(m.requests || m.device_bytes || m.iteration || m.mainpid) << line;
    EXPECT_THAT(m.problems, ElementsAre(problem)) << line;
  }
}

TEST(ParseMessage, NumbersAtTheirLimitsAreAccepted) {
  auto m = parse_message(
      "RECYCLER_REQUESTS=1000000\nRECYCLER_DEVICE_BYTES=18446744073709551615\n"
      "MAINPID=2147483647\nRECYCLER_ITERATION=9007199254740992");
  EXPECT_EQ(m.requests, kMaxRequestsPerMessage);
  EXPECT_EQ(m.device_bytes, UINT64_MAX);
  EXPECT_EQ(m.iteration, kMaxIteration);
  EXPECT_EQ(m.mainpid, 2147483647);
  EXPECT_THAT(m.problems, IsEmpty());
  EXPECT_EQ(parse_message("RECYCLER_REQUESTS=0").requests, 0u) << "zero is a valid count";
  EXPECT_EQ(parse_message("RECYCLER_ITERATION=0").iteration, 0u) << "counting from zero is fine";
}

TEST(ParseMessage, AnIterationOverTheLimitIsRejectedAndTheLastValidOneCounts) {
  auto m = parse_message("RECYCLER_ITERATION=7\nRECYCLER_ITERATION=9007199254740993");
  EXPECT_EQ(m.iteration, 7u);
  EXPECT_THAT(m.problems, ElementsAre("RECYCLER_ITERATION: 9007199254740993 is over the limit of "
                                      "9007199254740992"));
}

TEST(ParseMessage, ARequestCountOverTheLimitIsRejected) {
  auto m = parse_message("RECYCLER_REQUESTS=1000001");
  EXPECT_FALSE(m.requests);
  EXPECT_THAT(m.problems, ElementsAre("RECYCLER_REQUESTS: 1000001 is over the limit of 1000000"));
}

TEST(ParseMessage, FlagsOtherThanOneAreProblems) {
  auto m = parse_message("READY=0\nSTOPPING=true\nWATCHDOG=trigger\nRECYCLER_CHECKPOINTED=");
  EXPECT_FALSE(m.ready || m.stopping || m.watchdog || m.checkpointed);
  EXPECT_THAT(m.problems,
              ElementsAre(R"(READY: expected 1, got "0")", R"(STOPPING: expected 1, got "true")",
                          R"(WATCHDOG: expected 1, got "trigger")",
                          R"(RECYCLER_CHECKPOINTED: expected 1, got "")"));
}

TEST(ParseMessage, ACarriageReturnIsPartOfTheValue) {
  auto m = parse_message("STATUS=dos\r\nREADY=1\r\nRECYCLER_REQUESTS=5\r\n");
  EXPECT_EQ(m.status, "dos\r");
  EXPECT_FALSE(m.ready);
  EXPECT_FALSE(m.requests);
  EXPECT_THAT(m.problems, ElementsAre(R"(READY: expected 1, got "1\x0d")",
                                      R"(RECYCLER_REQUESTS: "5\x0d" is not a number)"));
}

TEST(ParseMessage, StatusKeepsEqualsSignsAndMayBeEmpty) {
  EXPECT_EQ(parse_message("STATUS=a=b").status, "a=b");
  EXPECT_EQ(parse_message("STATUS=").status, "") << "systemd reads this as clearing the status";
}

TEST(ParseMessage, AnOversizedStatusIsCutToTheLimit) {
  auto m = parse_message("STATUS=" + std::string(3000, 's') + "\nREADY=1");
  ASSERT_TRUE(m.status);
  EXPECT_EQ(m.status->size(), kMaxStatusBytes);
  EXPECT_TRUE(m.ready) << "lines after the long one still count";
}

TEST(ParseMessage, TheStatusCutDoesNotSplitAUtf8Character) {
  // "é" is two bytes and would straddle the limit.
  auto m = parse_message("STATUS=" + std::string(kMaxStatusBytes - 1, 's') + "\xc3\xa9");
  ASSERT_TRUE(m.status);
  EXPECT_EQ(*m.status, std::string(kMaxStatusBytes - 1, 's'));
}

TEST(ParseMessage, ALaterValueReplacesAnEarlierOne) {
  auto m = parse_message("RECYCLER_REQUESTS=1\nSTATUS=a\nRECYCLER_REQUESTS=2\nSTATUS=b");
  EXPECT_EQ(m.requests, 2u);
  EXPECT_EQ(m.status, "b");
}

TEST(ParseMessage, ProblemsAreCappedPerDatagram) {
  std::string datagram;
  for (int i = 0; i < 100; ++i) datagram += "junk\n";
  datagram += "READY=1";
  auto m = parse_message(datagram);
  EXPECT_TRUE(m.ready);
  ASSERT_EQ(m.problems.size(), kMaxProblems + 1);
  EXPECT_EQ(m.problems.back(), "92 more problems");
}

TEST(FormatAnswer, EachFieldOnItsLineAndNothingForAnEmptyAnswer) {
  EXPECT_EQ(format_answer({}), "");
  EXPECT_FALSE(Answer{});
  Answer a;
  a.request_limit = 237;
  EXPECT_EQ(format_answer(a), "RECYCLER_REQUEST_LIMIT=237");
  a.requests_seen = 240;
  EXPECT_EQ(format_answer(a), "RECYCLER_REQUEST_LIMIT=237\nRECYCLER_REQUESTS_SEEN=240");
  a.request_limit.reset();
  EXPECT_EQ(format_answer(a), "RECYCLER_REQUESTS_SEEN=240");
}

TEST(ParseMessage, ProblemTextsAreShortAndPrintable) {
  auto m = parse_message("RECYCLER_REQUESTS=" + std::string(500, '\x1b'));
  ASSERT_EQ(m.problems.size(), 1u);
  EXPECT_LT(m.problems[0].size(), 250u);
  EXPECT_THAT(m.problems[0], HasSubstr(R"("\x1b\x1b)"));
  EXPECT_THAT(m.problems[0], HasSubstr(R"(..." is not a number)"));
}

// ---------------------------------------------------------------------------
// NotifySocket

struct Received {
  pid_t pid;
  uid_t uid;
  std::string data;
  bool answerable = false;  // Datagram::from was set
};

// A sender connected to the socket's abstract address; blocking, like
// sd_notify. Unbound like sd_notify's, or with an address of its own: an
// abstract one the kernel picks (as recycler_notify binds), or a path.
class Sender {
 public:
  enum class Bound { kNone, kAutobind, kPath };
  explicit Sender(const std::string& address, Bound bound = Bound::kNone,
                  const std::string& path = "")
      : fd_(::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0)) {
    if (bound == Bound::kAutobind) {
      sockaddr_un own{};
      own.sun_family = AF_UNIX;
      bound_ = ::bind(fd_.get(), reinterpret_cast<sockaddr*>(&own), sizeof(sa_family_t)) == 0;
    } else if (bound == Bound::kPath) {
      auto own = unix_address(path);
      bound_ = own && ::bind(fd_.get(), own->get(), own->len) == 0;
    }
    auto addr = unix_address(address);
    connected_ = addr && ::connect(fd_.get(), addr->get(), addr->len) == 0;
  }
  bool connected() const { return connected_; }
  bool bound() const { return bound_; }

  // The next datagram that came back, waiting up to `timeout`; nullopt if none.
  std::optional<std::string> receive(std::chrono::milliseconds timeout) {
    pollfd p{fd_.get(), POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(timeout.count())) != 1) return std::nullopt;
    char buf[512];
    ssize_t n = ::recv(fd_.get(), buf, sizeof buf, MSG_DONTWAIT);
    if (n < 0) return std::nullopt;
    return std::string(buf, static_cast<size_t>(n));
  }

  // Sends `data`, and `fds` as SCM_RIGHTS when there are any.
  bool send(std::string_view data, const std::vector<int>& fds = {}) {
    iovec iov{const_cast<char*>(data.data()), data.size()};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    std::vector<char> control;
    if (!fds.empty()) {
      control.resize(CMSG_SPACE(sizeof(int) * fds.size()));
      msg.msg_control = control.data();
      msg.msg_controllen = control.size();
      cmsghdr* c = CMSG_FIRSTHDR(&msg);
      c->cmsg_level = SOL_SOCKET;
      c->cmsg_type = SCM_RIGHTS;
      c->cmsg_len = CMSG_LEN(sizeof(int) * fds.size());
      std::memcpy(CMSG_DATA(c), fds.data(), sizeof(int) * fds.size());
    }
    return ::sendmsg(fd_.get(), &msg, MSG_NOSIGNAL) == static_cast<ssize_t>(data.size());
  }

  int fd() const { return fd_.get(); }

 private:
  UniqueFd fd_;
  bool connected_ = false;
  bool bound_ = false;
};

std::size_t open_fd_count() {
  std::size_t n = 0;
  DIR* d = ::opendir("/proc/self/fd");
  if (!d) return 0;
  while (dirent* e = ::readdir(d))
    if (e->d_name[0] != '.') ++n;
  ::closedir(d);
  return n;
}

// Runs `child` in a forked process that exits with its result (0 = true).
pid_t fork_child(const std::function<bool()>& child) {
  pid_t pid = ::fork();
  if (pid == 0) ::_exit(child() ? 0 : 1);
  return pid;
}

int wait_exit_code(pid_t pid) {
  int status = 0;
  if (::waitpid(pid, &status, 0) != pid) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

class NotifySocketTest : public ::testing::Test {
 protected:
  void SetUp() override { uv_loop_init(&loop_); }
  void TearDown() override {
    socket_.reset();
    uv_run(&loop_, UV_RUN_DEFAULT);  // lets the closed handles finish closing
    EXPECT_EQ(uv_loop_close(&loop_), 0) << "a libuv handle was left open";
  }

  void open() {
    auto s = NotifySocket::open(&loop_, [this](const NotifySocket::Datagram& d) {
      received_.push_back({d.pid, d.uid, std::string(d.data), d.from != nullptr});
      ++batch_;
      if (!answer_with_.empty() && d.from) socket_->answer(*d.from, answer_with_);
      if (on_datagram_) on_datagram_(d);
    });
    ASSERT_TRUE(s) << s.error().message;
    socket_ = std::move(*s);
  }

  // Runs the loop until `done()` holds or `deadline` passes; returns done().
  bool run_until(const std::function<bool()>& done, std::chrono::milliseconds deadline = 10s) {
    bool expired = false;
    auto* timer = new uv_timer_t;
    uv_timer_init(&loop_, timer);
    timer->data = &expired;
    uv::Handle<uv_timer_t> owner(timer);
    uv_timer_start(
        timer, [](uv_timer_t* t) { *static_cast<bool*>(t->data) = true; },
        static_cast<uint64_t>(deadline.count()), 0);
    while (!done() && !expired) uv_run(&loop_, UV_RUN_ONCE);
    return done();
  }
  bool run_until_received(std::size_t n) {
    return run_until([&] { return received_.size() >= n; });
  }

  uv_loop_t loop_{};
  std::unique_ptr<NotifySocket> socket_;
  std::vector<Received> received_;
  int batch_ = 0;            // datagrams handled since the loop last ran its check handles
  std::string answer_with_;  // what the handler answers each answerable datagram
  std::function<void(const NotifySocket::Datagram&)> on_datagram_;  // then this, if set
};

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

// Starts `argv` with `env` (and `stdout_fd` as its stdout, when given); the pid, or -1.
pid_t spawn(const std::vector<std::string>& argv, const std::vector<std::string>& env,
            int stdout_fd = -1) {
  std::vector<char*> a, e;
  for (const auto& s : argv) a.push_back(const_cast<char*>(s.c_str()));
  for (const auto& s : env) e.push_back(const_cast<char*>(s.c_str()));
  a.push_back(nullptr);
  e.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  if (stdout_fd >= 0) posix_spawn_file_actions_adddup2(&actions, stdout_fd, STDOUT_FILENO);
  pid_t pid = -1;
  int rc = ::posix_spawn(&pid, a[0], &actions, nullptr, a.data(), e.data());
  posix_spawn_file_actions_destroy(&actions);
  return rc == 0 ? pid : -1;
}

// One line from `fd`, waiting at most `timeout` for each piece of it.
std::string read_line(int fd, std::chrono::milliseconds timeout = 10s) {
  std::string line;
  char c;
  pollfd p{fd, POLLIN, 0};
  while (::poll(&p, 1, static_cast<int>(timeout.count())) == 1 && ::read(fd, &c, 1) == 1) {
    if (c == '\n') break;
    line += c;
  }
  return line;
}

const char* const kPython = "/usr/bin/python3";
const std::string kHelperDir = std::string(RECYCLER_FIXTURES_DIR) + "/../../python";

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

// Runs `script` with python/ (the recycler_notify package) as its argv[1]: its exit status (-1 when
// it could not start) and the first line it printed.
std::pair<int, std::string> run_python(const char* script) {
  int out[2];
  if (::pipe2(out, O_CLOEXEC) != 0) return {-1, ""};
  pid_t python = spawn({kPython, "-c", script, kHelperDir}, {}, out[1]);
  ::close(out[1]);
  std::string printed = python > 0 ? read_line(out[0]) : "";
  ::close(out[0]);
  return {python > 0 ? wait_exit_code(python) : -1, printed};
}

// python/recycler_notify/gunicorn.py, the gunicorn hooks that go with the
// helper: a worker that leaves does so at once, with its status.
TEST(GunicornHelper, ALeavingWorkerEndsAtOnceWithItsStatusAndItsOutputFlushed) {
  if (::access(kPython, X_OK) != 0) GTEST_SKIP() << kPython << " is not installed";
  const char* script = R"(
import sys, atexit
sys.path.insert(0, sys.argv[1])
import recycler_notify.gunicorn as recycler_gunicorn
atexit.register(lambda: print(" atexit ran", flush=True))
print("buffered", end="")
try:
    sys.exit(3)  # gunicorn's "worker failed to boot": its master stops on it
finally:
    recycler_gunicorn.leave_now()  # as from gunicorn's worker_exit hook
)";
  auto [status, printed] = run_python(script);
  EXPECT_EQ(status, 3) << "the status it was leaving with";
  EXPECT_EQ(printed, "buffered") << "flushed, and no atexit handler ran";
}

TEST(GunicornHelper, TheMasterForksMissingWorkersWithoutItsPauseAndOnlyGunicornsIsChanged) {
  if (::access(kPython, X_OK) != 0) GTEST_SKIP() << kPython << " is not installed";
  const char* script = R"(
import sys
sys.path.insert(0, sys.argv[1])
import recycler_notify.gunicorn as recycler_gunicorn
class Arbiter:  # the parts of gunicorn's that it uses
    num_workers = 3
    WORKERS = {101: None}
    forked = 0
    def spawn_worker(self):
        Arbiter.forked += 1
    def spawn_workers(self):
        raise SystemExit("gunicorn's own spawn_workers ran")
arbiter = Arbiter()
assert recycler_gunicorn.no_spawn_pause(arbiter)
arbiter.spawn_workers()
assert Arbiter.forked == 2, Arbiter.forked
assert not recycler_gunicorn.no_spawn_pause(object())
assert recycler_gunicorn.leave_now() is False, "not leaving: nothing to do"
print("ok")
)";
  auto [status, printed] = run_python(script);
  EXPECT_EQ(status, 0);
  EXPECT_EQ(printed, "ok");
}

// A worker sent SIGTERM before it set its own handlers runs the master's
// (gunicorn's real Arbiter.signal): the signal waits in its copy of the
// master's queue, where honour_early_stop() finds it and the worker leaves.
TEST(GunicornHelper, AWorkerSignalledBeforeItsHandlersLeavesAndOtherSignalsAreLeftAlone) {
  if (::access(kPython, X_OK) != 0) GTEST_SKIP() << kPython << " is not installed";
  const char* script = R"(
import os, signal, sys, types
sys.path.insert(0, sys.argv[1])
import recycler_notify.gunicorn as recycler_gunicorn
try:
    from gunicorn.arbiter import Arbiter
except ImportError:
    print("no gunicorn")
    sys.exit(0)
master = Arbiter.__new__(Arbiter)  # its handler, as a freshly forked worker has it
master.PIPE = os.pipe()
for sig in (signal.SIGTERM, signal.SIGTTIN):
    signal.signal(sig, master.signal)
worker = types.SimpleNamespace(alive=True)
os.kill(os.getpid(), signal.SIGTTIN)
assert not recycler_gunicorn.honour_early_stop(worker), "TTIN is the master's business"
assert worker.alive
os.kill(os.getpid(), signal.SIGTERM)
assert Arbiter.SIG_QUEUE == [signal.SIGTTIN, signal.SIGTERM], Arbiter.SIG_QUEUE
assert recycler_gunicorn.honour_early_stop(worker)
assert worker.alive is False, "it leaves its loop before serving"
assert Arbiter.SIG_QUEUE == []
print("ok")
)";
  auto [status, printed] = run_python(script);
  EXPECT_EQ(status, 0);
  if (printed == "no gunicorn") GTEST_SKIP() << "Debian's python3-gunicorn is not installed";
  EXPECT_EQ(printed, "ok");
}

}  // namespace
}  // namespace recycler::notify
