// listen: sockets (supervisor/process/listen.h) and how a child gets them
// (supervisor/process/spawn.h): real sockets on 127.0.0.1 and in a temporary
// directory, a real child that reports its fds and environment.
#include "supervisor/process/listen.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <map>
#include <sstream>

#include "supervisor/process/spawn.h"
#include "supervisor/worker/worker.h"

namespace recycler {
namespace {

namespace fs = std::filesystem;

config::ListenSocket tcp(const std::string& name, uint16_t port = 0) {
  config::ListenSocket s;
  s.name = name;
  s.tcp = config::ListenAddress{"127.0.0.1", port, false};
  return s;
}

config::ListenSocket unix_socket(const std::string& name, const std::string& path) {
  config::ListenSocket s;
  s.name = name;
  s.path = path;
  return s;
}

uint16_t port_of(int fd) {
  sockaddr_in in{};
  socklen_t len = sizeof in;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&in), &len);
  return ntohs(in.sin_port);
}

ino_t inode(int fd) {
  struct stat st {};
  ::fstat(fd, &st);
  return st.st_ino;
}

bool accepting(int fd) {
  int on = 0;
  socklen_t len = sizeof on;
  return ::getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &on, &len) == 0 && on;
}

// A unix stream socket bound at `path` (a file left there once it closes);
// empty when bind fails.
UniqueFd bound_at(const std::string& path) {
  UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_un un{};
  un.sun_family = AF_UNIX;
  std::snprintf(un.sun_path, sizeof un.sun_path, "%s", path.c_str());
  if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&un), sizeof un) != 0) return UniqueFd();
  return fd;
}

class ListenTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/recycler-listen-test.XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir = tmpl;
  }
  void TearDown() override { fs::remove_all(dir); }
  std::string dir;
  listen::Inherited inherited;
};

TEST_F(ListenTest, BindsTcpAndUnixSocketsThatListen) {
  listen::Binder binder(inherited);
  config::ListenSocket u = unix_socket("admin", dir + "/app.sock");
  u.mode = 0660;
  auto set = binder.bind({tcp("http"), u}, nullptr);
  ASSERT_TRUE(set) << set.error().message;
  ASSERT_EQ((*set)->sockets().size(), 2u);
  for (int fd : (*set)->fds()) {
    EXPECT_TRUE(accepting(fd));
    EXPECT_TRUE(::fcntl(fd, F_GETFD) & FD_CLOEXEC) << "recycler's own copy never leaks";
  }
  EXPECT_GT(port_of((*set)->fds()[0]), 0);
  struct stat st {};
  ASSERT_EQ(::lstat((dir + "/app.sock").c_str(), &st), 0);
  EXPECT_TRUE(S_ISSOCK(st.st_mode));
  EXPECT_EQ(st.st_mode & 07777, 0660u);
  EXPECT_EQ((*set)->names(), "http:admin");
  auto env = (*set)->environment();
  ASSERT_EQ(env.size(), 2u);
  EXPECT_EQ(env[0], (std::pair<std::string, std::string>{"LISTEN_FDS", "2"}));
  EXPECT_EQ(env[1], (std::pair<std::string, std::string>{"LISTEN_FDNAMES", "http:admin"}));
  set->reset();  // the last owner closes it and removes the file it created
  EXPECT_FALSE(fs::exists(fs::symlink_status(dir + "/app.sock")));
}

TEST_F(ListenTest, AStaleSocketFileIsReplacedAnythingElseIsRefused) {
  listen::Binder binder(inherited);
  std::string path = dir + "/app.sock";
  ASSERT_TRUE(bound_at(path)) << "a socket file an earlier run left behind";
  auto replaced = binder.bind({unix_socket("a", path)}, nullptr);
  EXPECT_TRUE(replaced) << replaced.error().message;
  replaced->reset();

  fs::create_symlink("/etc/passwd", path);
  auto refused = binder.bind({unix_socket("a", path)}, nullptr);
  ASSERT_FALSE(refused);
  EXPECT_NE(refused.error().message.find("is not a socket"), std::string::npos)
      << refused.error().message;
  EXPECT_TRUE(fs::is_symlink(path)) << "left alone";
}

// Another program's live socket is never taken from it, and a directory
// other users may write to (or that is theirs) is refused before anything
// is removed or bound there.
TEST_F(ListenTest, ALiveSocketOrADirectoryOthersControlIsRefused) {
  listen::Binder binder(inherited);
  std::string path = dir + "/live.sock";
  UniqueFd live = bound_at(path);
  ASSERT_TRUE(live);
  ASSERT_EQ(::listen(live.get(), 8), 0);
  auto taken = binder.bind({unix_socket("a", path)}, nullptr);
  ASSERT_FALSE(taken);
  EXPECT_EQ(taken.error().message, "listen unix:" + path + ": a program listens on " + path +
                                       " already; recycler will not replace its socket");

  std::string open = dir + "/open";
  ASSERT_EQ(::mkdir(open.c_str(), 0700), 0);
  ASSERT_EQ(::chmod(open.c_str(), 01777), 0);
  auto shared = binder.bind({unix_socket("a", open + "/app.sock")}, nullptr);
  ASSERT_FALSE(shared);
  EXPECT_EQ(shared.error().message, "listen unix:" + open + "/app.sock: " + open +
                                        ": writable by other users (mode 1777): any of them "
                                        "could take a name there first; refusing to write there");
  EXPECT_FALSE(fs::exists(open + "/app.sock"));
}

TEST_F(ListenTest, AnAddressInUseIsAClearError) {
  listen::Binder binder(inherited);
  auto first = binder.bind({tcp("a")}, nullptr);
  ASSERT_TRUE(first);
  uint16_t port = port_of((*first)->fds()[0]);
  listen::Inherited none;
  listen::Binder other(none);
  auto second = other.bind({tcp("a", port)}, nullptr);
  ASSERT_FALSE(second);
  EXPECT_NE(second.error().message.find("127.0.0.1:" + std::to_string(port)), std::string::npos);
  EXPECT_NE(second.error().message.find("already in use"), std::string::npos)
      << second.error().message;
}

TEST_F(ListenTest, AReloadKeepsTheSameEndpointsOpenAndBindsOnlyNewOnes) {
  listen::Binder binder(inherited);
  uint16_t port = 0;
  {
    auto any = binder.bind({tcp("probe")}, nullptr);  // a free port (listen: names one)
    ASSERT_TRUE(any);
    port = port_of((*any)->fds()[0]);
  }
  auto first = binder.bind({tcp("http", port), unix_socket("admin", dir + "/a.sock")}, nullptr);
  ASSERT_TRUE(first) << first.error().message;
  ino_t tcp_inode = inode((*first)->fds()[0]);
  // The same TCP endpoint under another name, and a new unix socket.
  auto second = binder.bind({tcp("web", port), unix_socket("b", dir + "/b.sock")}, first->get());
  ASSERT_TRUE(second) << second.error().message;
  EXPECT_EQ(inode((*second)->fds()[0]), tcp_inode) << "the same socket, and its queue";
  EXPECT_EQ((*second)->names(), "web:b");
  first->reset();  // the old set goes: a.sock with it, the kept socket stays open
  EXPECT_FALSE(fs::exists(fs::symlink_status(dir + "/a.sock")));
  EXPECT_TRUE(fs::exists(fs::symlink_status(dir + "/b.sock")));
  EXPECT_TRUE(accepting((*second)->fds()[0]));
}

TEST_F(ListenTest, SocketsFromSystemdAreTakenByNameThenByAddress) {
  listen::Binder own(inherited);
  auto bound = own.bind({tcp("x"), tcp("y")}, nullptr);
  ASSERT_TRUE(bound);
  int by_name = ::dup((*bound)->fds()[0]);
  int by_address = ::dup((*bound)->fds()[1]);
  uint16_t port_b = port_of(by_address);
  auto activated = listen::Inherited::of({{"http", by_name}, {"other", by_address}});
  listen::Binder binder(activated);
  auto set = binder.bind({tcp("http", 1), tcp("metrics", port_b)}, nullptr);
  ASSERT_TRUE(set) << set.error().message;
  EXPECT_TRUE((*set)->sockets()[0]->inherited);
  EXPECT_EQ(inode((*set)->fds()[0]), inode((*bound)->fds()[0]));
  EXPECT_TRUE((*set)->sockets()[1]->inherited);
  EXPECT_EQ(port_of((*set)->fds()[1]), port_b);
  EXPECT_TRUE(activated.close_unused().empty());
}

TEST_F(ListenTest, UnusedSocketsFromSystemdAreClosedAndNamed) {
  listen::Binder own(inherited);
  auto bound = own.bind({tcp("x")}, nullptr);
  ASSERT_TRUE(bound);
  int fd = ::dup((*bound)->fds()[0]);
  auto activated = listen::Inherited::of({{"stray", fd}});
  EXPECT_EQ(activated.close_unused(), std::vector<std::string>{"stray"});
  EXPECT_EQ(::fcntl(fd, F_GETFD), -1) << "closed";
}

TEST(ListenBacklog, DefaultsToSomaxconnElse4096) {
  EXPECT_EQ(listen::default_backlog("/nonexistent"), 4096);
  EXPECT_GT(listen::default_backlog(), 0);
}

// What the child saw: its fds 3.. (socket inodes), its pid and LISTEN_*.
struct ChildView {
  std::map<int, std::string> fds;  // fd -> readlink target
  std::map<std::string, std::string> env;
  std::string pid;
};

ChildView run_child(const LaunchSpec& base) {
  int out[2];
  EXPECT_EQ(::pipe2(out, O_CLOEXEC), 0);
  LaunchSpec spec;
  spec.argv = {"/bin/sh", "-c",
               "echo pid=$$; for f in 3 4 5 6; do [ -e /proc/$$/fd/$f ] && "
               "echo fd$f=$(readlink /proc/$$/fd/$f); done; "
               "echo LISTEN_PID=$LISTEN_PID; echo LISTEN_FDS=$LISTEN_FDS; "
               "echo LISTEN_FDNAMES=$LISTEN_FDNAMES"};
  spec.env = base.env;
  spec.listen_fds = base.listen_fds;
  spec.stdout_fd = out[1];
  auto pid = spawn_process(spec);
  ::close(out[1]);
  EXPECT_TRUE(pid) << pid.error().message;
  std::string text;
  char buf[512];
  for (ssize_t n; (n = ::read(out[0], buf, sizeof buf)) > 0;) text.append(buf, n);
  ::close(out[0]);
  int status = 0;
  if (pid) ::waitpid(*pid, &status, 0);
  ChildView v;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    size_t eq = line.find('=');
    if (eq == std::string::npos) continue;
    std::string k = line.substr(0, eq), val = line.substr(eq + 1);
    if (k == "pid")
      v.pid = val;
    else if (k.rfind("fd", 0) == 0)
      v.fds[std::stoi(k.substr(2))] = val;
    else
      v.env[k] = val;
  }
  return v;
}

TEST_F(ListenTest, AChildGetsTheSocketsAsFd3OnwardWithItsOwnPidInListenPid) {
  listen::Binder binder(inherited);
  auto set = binder.bind({tcp("http"), unix_socket("admin", dir + "/s.sock")}, nullptr);
  ASSERT_TRUE(set);
  config::ProgramConfig program;
  program.name = "web";
  LaunchSpec spec;
  // recycler's own LISTEN_* (its socket activation) never reach a worker.
  spec.env = worker_environment({"PATH=/bin:/usr/bin", "LISTEN_PID=1", "LISTEN_FDS=9"}, program, 0,
                                1, "", std::nullopt, set->get());
  spec.listen_fds = (*set)->fds();
  ChildView v = run_child(spec);
  EXPECT_EQ(v.env["LISTEN_PID"], v.pid) << "the child's own pid, as sd_listen_fds() checks";
  EXPECT_EQ(v.env["LISTEN_FDS"], "2");
  EXPECT_EQ(v.env["LISTEN_FDNAMES"], "http:admin");
  ASSERT_TRUE(v.fds.count(3) && v.fds.count(4));
  EXPECT_EQ(v.fds[3], "socket:[" + std::to_string(inode((*set)->fds()[0])) + "]");
  EXPECT_EQ(v.fds[4], "socket:[" + std::to_string(inode((*set)->fds()[1])) + "]");
  EXPECT_FALSE(v.fds.count(5)) << "nothing else leaks past the sockets: " << v.fds[5];
}

TEST_F(ListenTest, SocketsAlreadyOnTheTargetFdsAreShuffledIntoOrder) {
  listen::Binder binder(inherited);
  auto set = binder.bind({tcp("a"), tcp("b")}, nullptr);
  ASSERT_TRUE(set);
  // The second socket is handed over first: each source sits where the
  // other must go whenever they are fds 3 and 4 here.
  LaunchSpec spec;
  spec.env = {"PATH=/bin:/usr/bin"};
  spec.listen_fds = {(*set)->fds()[1], (*set)->fds()[0]};
  ChildView v = run_child(spec);
  EXPECT_EQ(v.fds[3], "socket:[" + std::to_string(inode((*set)->fds()[1])) + "]");
  EXPECT_EQ(v.fds[4], "socket:[" + std::to_string(inode((*set)->fds()[0])) + "]");
  EXPECT_FALSE(v.env["LISTEN_PID"].empty());
}

TEST(ListenEnvironment, AWorkerWithoutListenNeverSeesListenVariables) {
  config::ProgramConfig program;
  program.name = "web";
  auto env =
      worker_environment({"LISTEN_PID=1", "LISTEN_FDS=2", "LISTEN_FDNAMES=x"}, program, 0, 1);
  for (const std::string& kv : env) EXPECT_NE(kv.rfind("LISTEN_", 0), 0u) << kv;
  LaunchSpec spec;
  spec.env = {"PATH=/bin:/usr/bin"};
  ChildView v = run_child(spec);
  EXPECT_TRUE(v.env["LISTEN_PID"].empty());
  EXPECT_FALSE(v.fds.count(3)) << v.fds[3];
}

}  // namespace
}  // namespace recycler
