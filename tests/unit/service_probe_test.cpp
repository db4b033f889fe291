// probe/service.h against real processes: a parent's listening socket shared
// with its child, seen until the child closes it.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "supervisor/probe/service.h"
#include "supervisor/util/fd.h"

namespace recycler::probe {
namespace {

uint64_t inode_of(int fd) {
  struct stat st {};
  EXPECT_EQ(::fstat(fd, &st), 0);
  return st.st_ino;
}

TEST(SocketLink, ParsesOnlyWhatTheKernelWrites) {
  EXPECT_EQ(parse_socket_link("socket:[12345]"), 12345u);
  EXPECT_FALSE(parse_socket_link("pipe:[12345]"));
  EXPECT_FALSE(parse_socket_link("socket:[]"));
  EXPECT_FALSE(parse_socket_link("socket:[12x]"));
  EXPECT_FALSE(parse_socket_link("socket:[99999999999999999999999]"));
  EXPECT_FALSE(parse_socket_link("/tmp/socket:[1]"));
}

TEST(ServiceProbe, SeesTheListenerAChildSharesWithItsParentUntilItClosesIt) {
  UniqueFd listener(::socket(AF_INET, SOCK_STREAM, 0));
  ASSERT_TRUE(listener);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(listener.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  ASSERT_EQ(::listen(listener.get(), 4), 0);
  int go[2], done[2];
  ASSERT_EQ(::pipe(go), 0);
  ASSERT_EQ(::pipe(done), 0);
  pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    UniqueFd own(::socket(AF_INET, SOCK_DGRAM, 0));  // its own: not shared
    char c;
    (void)!::write(done[1], "r", 1);
    (void)!::read(go[0], &c, 1);
    ::close(listener.get());
    (void)!::write(done[1], "c", 1);
    (void)!::read(go[0], &c, 1);
    ::_exit(0);
  }
  char c;
  ASSERT_EQ(::read(done[0], &c, 1), 1);
  ProcServiceProbe probe;
  std::vector<uint64_t> shared = probe.shared_sockets(child);
  ASSERT_EQ(shared, std::vector<uint64_t>{inode_of(listener.get())});
  EXPECT_TRUE(probe.holds_any(child, shared));
  ASSERT_EQ(::write(go[1], "x", 1), 1);
  ASSERT_EQ(::read(done[0], &c, 1), 1);
  EXPECT_FALSE(probe.holds_any(child, shared)) << "closed: it has left service";
  ASSERT_EQ(::write(go[1], "x", 1), 1);
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  EXPECT_FALSE(probe.holds_any(child, shared)) << "gone";
  EXPECT_TRUE(probe.shared_sockets(child).empty());
  for (int fd : {go[0], go[1], done[0], done[1]}) ::close(fd);
}

}  // namespace
}  // namespace recycler::probe
