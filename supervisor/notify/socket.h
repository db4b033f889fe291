// The socket workers find in NOTIFY_SOCKET: programs that already call
// sd_notify(3) talk to recycler unchanged. One per program, in a directory
// only its workers (and root) can reach (runtime_dir.h). The kernel stamps
// every datagram with the sender's pid and uid (SCM_CREDENTIALS), which is
// what the handler uses to attribute it; nothing a sender does can stall the
// loop or leak a descriptor into the supervisor.
#pragma once

#include <sys/socket.h>
#include <sys/types.h>
#include <sys/un.h>
#include <uv.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "supervisor/notify/read_pacer.h"
#include "supervisor/notify/runtime_dir.h"
#include "supervisor/util/fd.h"
#include "supervisor/util/result.h"
#include "supervisor/util/uv.h"

namespace recycler::notify {

// A NOTIFY_SOCKET address ("/run/x.sock", or "@name" in the abstract
// namespace) as a sockaddr; nullopt when it is empty or too long.
struct UnixAddress {
  sockaddr_un addr{};
  socklen_t len = 0;
  const sockaddr* get() const { return reinterpret_cast<const sockaddr*>(&addr); }
};
std::optional<UnixAddress> unix_address(std::string_view address);

// One datagram to `address`, as sd_notify(3) sends it; false if it did not go.
bool send_datagram(std::string_view address, std::string_view data);

// How many datagrams the kernel queues on a notify socket before senders get
// EAGAIN (net.unix.max_dgram_qlen, read when a socket is made); nullopt when
// unknown. The kernel's default is 10, which systemd raises to 512 at boot.
std::optional<unsigned> kernel_queue_limit();
// The warning for a program counting requests over its notify socket when
// that queue is short (under kShortQueue, read_pacer.h), or nullopt.
std::optional<std::string> short_queue_warning(std::optional<unsigned> limit);

class NotifySocket {
 public:
  struct Datagram {
    pid_t pid;  // the sender, as the kernel saw it
    uid_t uid;
    std::string_view data;  // valid during the handler call only
    // The sender's socket address when it has one in the abstract namespace
    // (an autobound socket's is "\0" and five hex digits), which answer() can
    // reach; else null (an unbound sender, the usual sd_notify(3), or one
    // bound to a path, which recycler, root, does not write to). Valid
    // during the handler call only.
    const UnixAddress* from = nullptr;
  };
  using Handler = std::function<void(const Datagram&)>;

  // A unix datagram socket, non-blocking, close-on-exec, SO_PASSCRED on,
  // polled on `loop`. The handler must not destroy the socket.
  //
  // open: in the abstract namespace, "@recycler-<pid>-<random hex>"
  // (NOTIFY_SOCKET's "@"): any local process can send to it. The fallback
  // when there is no runtime directory (runtime_dir.h).
  static Result<std::unique_ptr<NotifySocket>> open(uv_loop_t* loop, Handler handler);
  // open_in: the socket file `name` in the directory `dirfd` (whose path is
  // `dir`), bound through the fd, then made the workers' own: owned by
  // access.uid and access.gid with mode 0660, or 0600 for recycler's user.
  // Only those who may write it can send (root always can).
  static Result<std::unique_ptr<NotifySocket>> open_in(uv_loop_t* loop, int dirfd,
                                                       const std::string& dir,
                                                       const std::string& name,
                                                       const RuntimeDir::Access& access,
                                                       Handler handler);

  const std::string& address() const { return address_; }  // the NOTIFY_SOCKET value

  // One datagram back to a sender (Datagram::from), never waiting: dropped
  // when it is gone, or when this socket's send buffer is full (the answers
  // a connected sender has not read yet are charged to this socket, not to
  // the sender's queue length). A sender's socket connected to this one takes
  // datagrams from this one only, so an answer is all it hears. False when
  // it did not go.
  bool answer(const UnixAddress& to, std::string_view data);

  // What one drain read, for the pacing function.
  struct Drained {
    unsigned datagrams = 0;
    bool emptied = true;  // false when it stopped at kMaxPerWakeup with more queued
  };
  // Returns how long to leave the socket unread after a drain (read_pacer.h);
  // what arrives meanwhile is read in one batch when the hold ends, from a
  // timerfd of its own. Without pacing (or with zero holds) the socket is read
  // on every wake-up. False, with pacing off, when no timerfd can be had.
  using Pacing = std::function<std::chrono::microseconds(const Drained&)>;
  bool set_pacing(uv_loop_t* loop, Pacing pacing);

  struct Stats {
    uint64_t received = 0;             // handed to the handler
    uint64_t oversized = 0;            // longer than kMaxDatagram: dropped
    uint64_t without_credentials = 0;  // no sender pid: dropped
    uint64_t fds_closed = 0;           // SCM_RIGHTS descriptors closed on arrival
    uint64_t reads = 0;                // recvmmsg calls that returned datagrams
    uint64_t holds = 0;                // times the pacing left the socket unread a while
    uint64_t answers = 0;              // answer() datagrams sent
    uint64_t answers_dropped = 0;      // answer() datagrams that could not go
  };
  const Stats& stats() const { return stats_; }

  // systemd's limit too: longer datagrams are dropped whole.
  static constexpr std::size_t kMaxDatagram = 4096;
  // Datagrams read per wake-up before the loop gets its turn again.
  static constexpr int kMaxPerWakeup = 256;
  // Datagrams one recvmmsg(2) reads at most. A request count arrives per
  // request served, each on a wake-up of its own when the loop is idle: one
  // call then reads it and sees that the queue is empty (fewer than asked
  // for), with no second call to meet EAGAIN.
  static constexpr unsigned kBatch = 16;

  NotifySocket(const NotifySocket&) = delete;
  NotifySocket& operator=(const NotifySocket&) = delete;
  // Stops polling; like every uv handle here, the loop must run once more to
  // finish closing.
  ~NotifySocket();

 private:
  NotifySocket(UniqueFd fd, std::string address, Handler handler);
  static Result<std::unique_ptr<NotifySocket>> start(uv_loop_t* loop, UniqueFd fd,
                                                     std::string address, Handler handler);
  Drained drain();
  // After a drain: asks the pacing, then either arms the hold timer (and
  // stops polling the socket) or polls the socket again.
  void pace(const Drained& drained);
  void on_hold_ended();
  // Checks one received datagram (closes passed descriptors, drops what has
  // no credentials or is too long) and hands it to the handler.
  void deliver(msghdr& msg, std::size_t length);
  // A Datagram::from for the sender's address `msg` carries, or null.
  static const UnixAddress* answerable(const msghdr& msg, UnixAddress& storage);

  UniqueFd fd_;  // declared before poll_: the poll handle is closed first
  std::string address_;
  Handler handler_;
  Stats stats_;
  uv::Handle<uv_poll_t> poll_;
  Pacing pacing_;
  UniqueFd hold_fd_;  // a timerfd; declared before hold_poll_, closed after it
  uv::Handle<uv_poll_t> hold_poll_;
  bool holding_ = false;
};

}  // namespace recycler::notify
