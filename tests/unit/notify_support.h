// What the notify tests share (notify_*_test.cpp): a sender like sd_notify's,
// a NotifySocket on a real libuv loop, and starting the Python helper.
#pragma once

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

namespace recycler::notify::test {

using namespace std::chrono_literals;

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

inline std::size_t open_fd_count() {
  std::size_t n = 0;
  DIR* d = ::opendir("/proc/self/fd");
  if (!d) return 0;
  while (dirent* e = ::readdir(d))
    if (e->d_name[0] != '.') ++n;
  ::closedir(d);
  return n;
}

// Runs `child` in a forked process that exits with its result (0 = true).
inline pid_t fork_child(const std::function<bool()>& child) {
  pid_t pid = ::fork();
  if (pid == 0) ::_exit(child() ? 0 : 1);
  return pid;
}

inline int wait_exit_code(pid_t pid) {
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

// Starts `argv` with `env` (and `stdout_fd` as its stdout, when given); the pid, or -1.
inline pid_t spawn(const std::vector<std::string>& argv, const std::vector<std::string>& env,
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
inline std::string read_line(int fd, std::chrono::milliseconds timeout = 10s) {
  std::string line;
  char c;
  pollfd p{fd, POLLIN, 0};
  while (::poll(&p, 1, static_cast<int>(timeout.count())) == 1 && ::read(fd, &c, 1) == 1) {
    if (c == '\n') break;
    line += c;
  }
  return line;
}

inline const char* const kPython = "/usr/bin/python3";
inline const std::string kHelperDir = std::string(RECYCLER_FIXTURES_DIR) + "/../../python";

// Runs `script` with python/ (the recycler_notify package) as its argv[1]: its exit status (-1 when
// it could not start) and the first line it printed.
inline std::pair<int, std::string> run_python(const char* script) {
  int out[2];
  if (::pipe2(out, O_CLOEXEC) != 0) return {-1, ""};
  pid_t python = spawn({kPython, "-c", script, kHelperDir}, {}, out[1]);
  ::close(out[1]);
  std::string printed = python > 0 ? read_line(out[0]) : "";
  ::close(out[0]);
  return {python > 0 ? wait_exit_code(python) : -1, printed};
}

}  // namespace recycler::notify::test
