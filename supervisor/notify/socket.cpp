#include "supervisor/notify/socket.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/timerfd.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstddef>
#include <cstring>
#include <memory>
#include <random>

#include "supervisor/log/log.h"

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

std::optional<unsigned> kernel_queue_limit() {
  UniqueFd fd(::open("/proc/sys/net/unix/max_dgram_qlen", O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
  if (!fd) return std::nullopt;
  char buf[32];
  ssize_t n = ::read(fd.get(), buf, sizeof buf - 1);
  if (n <= 0) return std::nullopt;
  unsigned value = 0;
  auto [end, ec] = std::from_chars(buf, buf + n, value);
  if (ec != std::errc() || end == buf) return std::nullopt;
  return value;
}

std::optional<std::string> short_queue_warning(std::optional<unsigned> limit) {
  if (!limit || *limit >= kShortQueue) return std::nullopt;
  return fmt::format(
      "net.unix.max_dgram_qlen queues at most {} datagrams per notify socket: request counts "
      "may lag and a process serve past max_requests; systemd sets 512: "
      "sysctl -w net.unix.max_dgram_qlen=512 before recycler starts",
      *limit);
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
        socket->pace(socket->drain());
      });
  if (!poll) return Error{"notify socket: " + poll.error().message, poll.error().code};
  self->poll_ = std::move(*poll);
  return self;
}

NotifySocket::NotifySocket(UniqueFd fd, std::string address, Handler handler)
    : fd_(std::move(fd)), address_(std::move(address)), handler_(std::move(handler)) {}

NotifySocket::~NotifySocket() = default;

namespace {

constexpr std::size_t kControlSpace =
    CMSG_SPACE(sizeof(ucred)) + CMSG_SPACE(sizeof(int) * kMaxFdsPerDatagram);

// What one recvmmsg fills: NotifySocket::kBatch datagrams with their control
// data, about 80 KiB. One per thread (the loop's), shared by every socket that
// thread drains: a handler runs after its datagram was read and never drains.
struct Batch {
  char data[NotifySocket::kBatch][NotifySocket::kMaxDatagram];
  // Each row is a multiple of CMSG_ALIGN, so every row stays aligned.
  alignas(cmsghdr) char control[NotifySocket::kBatch][kControlSpace];
  sockaddr_un names[NotifySocket::kBatch];  // each sender's address, if it has one
  iovec iov[NotifySocket::kBatch];
  mmsghdr msgs[NotifySocket::kBatch];
};

Batch& batch() {
  thread_local std::unique_ptr<Batch> b;
  if (!b) b = std::make_unique<Batch>();
  return *b;
}

}  // namespace

bool NotifySocket::set_pacing(uv_loop_t* loop, Pacing pacing) {
  if (!hold_fd_) {
    UniqueFd fd(::timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC));
    if (!fd) return false;
    auto poll = uv::poll(loop, fd.get(), this);
    if (!poll) return false;
    hold_fd_ = std::move(fd);
    hold_poll_ = std::move(*poll);
  }
  pacing_ = std::move(pacing);
  return true;
}

void NotifySocket::pace(const Drained& drained) {
  std::chrono::microseconds hold{0};
  if (pacing_ && hold_poll_) hold = pacing_(drained);
  if (hold.count() <= 0) {
    if (!holding_) return;
    holding_ = false;
    uv_poll_stop(hold_poll_.get());
    uv_poll_start(poll_.get(), UV_READABLE, poll_.get()->poll_cb);
    return;
  }
  // Setting the timer also clears an expiry not yet read: the timerfd reads
  // as ready only when this hold has passed.
  itimerspec when{};
  when.it_value.tv_sec = hold.count() / 1'000'000;
  when.it_value.tv_nsec = (hold.count() % 1'000'000) * 1000;
  if (::timerfd_settime(hold_fd_.get(), 0, &when, nullptr) != 0) {
    pacing_ = nullptr;  // cannot hold: read on every wake-up from now on
    return pace(drained);
  }
  ++stats_.holds;
  if (holding_) return;
  holding_ = true;
  uv_poll_stop(poll_.get());
  uv_poll_start(hold_poll_.get(), UV_READABLE, [](uv_poll_t* h, int status, int) {
    auto* socket = static_cast<NotifySocket*>(h->data);
    if (!socket) return;
    if (status < 0) {
      socket->pacing_ = nullptr;  // a timer that failed: read on every wake-up
      socket->pace(Drained{});
      return;
    }
    socket->on_hold_ended();
  });
}

void NotifySocket::on_hold_ended() {
  // The next hold, or polling the socket again, replaces this expiry.
  pace(drain());
}

NotifySocket::Drained NotifySocket::drain() {
  Batch& b = batch();
  Drained drained;
  // Bounded, so that a flood cannot starve timers and other sockets: the poll
  // is level-triggered and wakes us again on the next loop iteration.
  for (unsigned done = 0;;) {
    if (done >= static_cast<unsigned>(kMaxPerWakeup)) {
      drained.emptied = false;
      return drained;
    }
    unsigned want = std::min(kBatch, static_cast<unsigned>(kMaxPerWakeup) - done);
    for (unsigned i = 0; i < want; ++i) {
      b.iov[i] = iovec{b.data[i], sizeof b.data[i]};
      msghdr& m = b.msgs[i].msg_hdr;
      m = msghdr{};
      m.msg_iov = &b.iov[i];
      m.msg_iovlen = 1;
      m.msg_control = b.control[i];
      m.msg_controllen = sizeof b.control[i];
      m.msg_name = &b.names[i];
      m.msg_namelen = sizeof b.names[i];
      b.msgs[i].msg_len = 0;
    }
    // MSG_TRUNC: each datagram's real length, so that a longer one is recognised.
    int n =
        ::recvmmsg(fd_.get(), b.msgs, want, MSG_DONTWAIT | MSG_CMSG_CLOEXEC | MSG_TRUNC, nullptr);
    // EAGAIN: drained; anything else: retried on the next wake-up
    if (n <= 0) return drained;
    ++stats_.reads;
    for (int i = 0; i < n; ++i) deliver(b.msgs[i].msg_hdr, b.msgs[i].msg_len);
    done += static_cast<unsigned>(n);
    drained.datagrams = done;
    if (static_cast<unsigned>(n) < want) return drained;  // the queue is empty
  }
}

void NotifySocket::deliver(msghdr& msg, std::size_t length) {
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

  if (length > kMaxDatagram || (msg.msg_flags & MSG_TRUNC)) {
    ++stats_.oversized;
    return;
  }
  // pid 0: a sender in a pid namespace we cannot see; it cannot be attributed.
  if (!has_cred || cred.pid <= 0) {
    ++stats_.without_credentials;
    return;
  }
  ++stats_.received;
  UnixAddress from;
  handler_(Datagram{cred.pid, cred.uid,
                    std::string_view(static_cast<const char*>(msg.msg_iov[0].iov_base), length),
                    answerable(msg, from)});
}

const UnixAddress* NotifySocket::answerable(const msghdr& msg, UnixAddress& storage) {
  // An unbound sender's address is the family alone; a path (sun_path not
  // starting with NUL) is left alone: recycler, root, would write past the
  // file's permissions to whatever socket holds that path by then.
  constexpr socklen_t kPath = offsetof(sockaddr_un, sun_path);
  if (msg.msg_name == nullptr || msg.msg_namelen <= kPath + 1 ||
      msg.msg_namelen > sizeof(sockaddr_un))
    return nullptr;
  const auto* name = static_cast<const sockaddr_un*>(msg.msg_name);
  if (name->sun_family != AF_UNIX || name->sun_path[0] != '\0') return nullptr;
  std::memcpy(&storage.addr, name, msg.msg_namelen);
  storage.len = msg.msg_namelen;
  return &storage;
}

bool NotifySocket::answer(const UnixAddress& to, std::string_view data) {
  ssize_t n =
      ::sendto(fd_.get(), data.data(), data.size(), MSG_DONTWAIT | MSG_NOSIGNAL, to.get(), to.len);
  bool sent = n == static_cast<ssize_t>(data.size());
  ++(sent ? stats_.answers : stats_.answers_dropped);
  return sent;
}

}  // namespace recycler::notify
