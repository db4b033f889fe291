#include "supervisor/notify/socket.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstring>
#include <random>

#include "supervisor/log.h"

namespace recycler::notify {
namespace {

// The kernel's SCM_MAX_FD: room for every descriptor one datagram can carry,
// so that each one is seen, closed and counted.
constexpr std::size_t kMaxFdsPerDatagram = 253;

std::string random_address() {
  std::random_device rd;
  uint64_t r = (uint64_t{rd()} << 32) | rd();
  return fmt::format("@recycler-{}-{:016x}", ::getpid(), r);
}

}  // namespace

std::optional<UnixAddress> unix_address(std::string_view address) {
  UnixAddress a;
  if (address.empty() || address.size() >= sizeof a.addr.sun_path) return std::nullopt;
  a.addr.sun_family = AF_UNIX;
  std::memcpy(a.addr.sun_path, address.data(), address.size());
  // Abstract namespace: sun_path starts with NUL, the name is not NUL-terminated.
  if (address[0] == '@') a.addr.sun_path[0] = '\0';
  a.len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + address.size());
  return a;
}

bool send_datagram(std::string_view address, std::string_view data) {
  auto addr = unix_address(address);
  if (!addr) return false;
  UniqueFd fd(::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  return fd && ::sendto(fd.get(), data.data(), data.size(), MSG_NOSIGNAL, addr->get(), addr->len) ==
                   static_cast<ssize_t>(data.size());
}

namespace {

Result<UniqueFd> datagram_socket() {
  UniqueFd fd(::socket(AF_UNIX, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!fd) return errno_error("notify socket");
  // Before bind: no datagram may arrive without its sender's credentials.
  int on = 1;
  if (::setsockopt(fd.get(), SOL_SOCKET, SO_PASSCRED, &on, sizeof on) != 0)
    return errno_error("notify socket: SO_PASSCRED");
  return fd;
}

}  // namespace

Result<std::unique_ptr<NotifySocket>> NotifySocket::open(uv_loop_t* loop, Handler handler) {
  auto fd = datagram_socket();
  if (!fd) return fd.error();
  std::string address;
  for (int attempt = 0;; ++attempt) {
    address = random_address();
    auto addr = unix_address(address);
    if (addr && ::bind(fd->get(), addr->get(), addr->len) == 0) break;
    if (errno != EADDRINUSE || attempt == 3) return errno_error("notify socket: bind " + address);
  }
  return start(loop, std::move(*fd), std::move(address), std::move(handler));
}

Result<std::unique_ptr<NotifySocket>> NotifySocket::open_in(uv_loop_t* loop, int dirfd,
                                                            const std::string& dir,
                                                            const std::string& name,
                                                            const RuntimeDir::Access& access,
                                                            Handler handler) {
  std::string address = dir + "/" + name;
  if (!unix_address(address))
    return Error{"notify socket: " + address + " is too long for a socket address", ENAMETOOLONG};
  auto fd = datagram_socket();
  if (!fd) return fd.error();
  // Through the directory's fd: whatever happened to the path since it was
  // checked, the socket lands in that directory.
  auto via = unix_address(fmt::format("/proc/self/fd/{}/{}", dirfd, name));
  if (!via || ::bind(fd->get(), via->get(), via->len) != 0)
    return errno_error("notify socket: bind " + address);
  bool others = access.others();
  if (others && ::fchownat(dirfd, name.c_str(), access.uid.value_or(::geteuid()),
                           access.gid.value_or(::getegid()), AT_SYMLINK_NOFOLLOW) != 0)
    return errno_error("notify socket: chown " + address);
  if (::fchmodat(dirfd, name.c_str(), others ? 0660 : 0600, 0) != 0)
    return errno_error("notify socket: chmod " + address);
  return start(loop, std::move(*fd), std::move(address), std::move(handler));
}

Result<std::unique_ptr<NotifySocket>> NotifySocket::start(uv_loop_t* loop, UniqueFd fd,
                                                          std::string address, Handler handler) {
  std::unique_ptr<NotifySocket> self(
      new NotifySocket(std::move(fd), std::move(address), std::move(handler)));
  auto poll =
      uv::poll(loop, self->fd_.get(), self.get(), UV_READABLE, [](uv_poll_t* h, int status, int) {
        auto* socket = static_cast<NotifySocket*>(h->data);
        if (!socket) return;
        if (status < 0) {
          // libuv has stopped polling the socket; it cannot be resumed.
          log::error("notify socket {}: {}; notifications from workers stop", socket->address_,
                     uv_strerror(status));
          return;
        }
        socket->drain();
      });
  if (!poll) return Error{"notify socket: " + poll.error().message, poll.error().code};
  self->poll_ = std::move(*poll);
  return self;
}

NotifySocket::NotifySocket(UniqueFd fd, std::string address, Handler handler)
    : fd_(std::move(fd)), address_(std::move(address)), handler_(std::move(handler)) {}

NotifySocket::~NotifySocket() = default;

void NotifySocket::drain() {
  // Bounded, so that a flood cannot starve timers and other sockets: the poll
  // is level-triggered and wakes us again on the next loop iteration.
  for (int i = 0; i < kMaxPerWakeup && receive_one(); ++i) {
  }
}

bool NotifySocket::receive_one() {
  char data[kMaxDatagram];
  alignas(cmsghdr) char
      control[CMSG_SPACE(sizeof(ucred)) + CMSG_SPACE(sizeof(int) * kMaxFdsPerDatagram)];
  iovec iov{data, sizeof data};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof control;
  // MSG_TRUNC: the datagram's real length, so that a longer one is recognised.
  ssize_t n = ::recvmsg(fd_.get(), &msg, MSG_DONTWAIT | MSG_CMSG_CLOEXEC | MSG_TRUNC);
  if (n < 0) return false;  // EAGAIN: drained; anything else: retried on the next wake-up

  ucred cred{};
  bool has_cred = false;
  for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level != SOL_SOCKET) continue;
    if (c->cmsg_type == SCM_RIGHTS) {
      // Whatever the datagram says, a sender must not leak descriptors into us.
      std::size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
      for (std::size_t i = 0; i < count; ++i) {
        int passed;
        std::memcpy(&passed, CMSG_DATA(c) + i * sizeof(int), sizeof passed);
        ::close(passed);
        ++stats_.fds_closed;
      }
    } else if (c->cmsg_type == SCM_CREDENTIALS && c->cmsg_len == CMSG_LEN(sizeof(ucred))) {
      std::memcpy(&cred, CMSG_DATA(c), sizeof cred);
      has_cred = true;
    }
  }

  if (static_cast<std::size_t>(n) > sizeof data) {
    ++stats_.oversized;
    return true;
  }
  // pid 0: a sender in a pid namespace we cannot see; it cannot be attributed.
  if (!has_cred || cred.pid <= 0) {
    ++stats_.without_credentials;
    return true;
  }
  ++stats_.received;
  handler_(Datagram{cred.pid, cred.uid, std::string_view(data, static_cast<std::size_t>(n))});
  return true;
}

}  // namespace recycler::notify
