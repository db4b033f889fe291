// Where a notify datagram goes. Every program's workers have a socket of
// their own (socket.h) in recycler's runtime directory (runtime_dir.h); the
// router opens them, finds which worker slot, run and cgroup a sender is (a
// lookup it is handed: the cgroup manager's owner_of, one read of
// /proc/PID/cgroup, then remembered while that run lasts), parses what it
// sent (message.h) and hands it, READY=1 included, to the program's
// Receiver (runtime/monitor.h), whose answer (the request limit) it sends
// back. What a stranger or a malformed sender costs is bounded: a map lookup
// per datagram, one warning every 10 s.
#pragma once

#include <sys/types.h>
#include <uv.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>

#include "supervisor/notify/message.h"
#include "supervisor/notify/runtime_dir.h"
#include "supervisor/notify/socket.h"
#include "supervisor/util/timers.h"

namespace recycler::notify {

// A process's place: a worker slot of a program, and which of the slot's two
// cgroups it is in (cgroup::WorkerId's variant: a surge's two generations).
struct Place {
  std::string program;
  unsigned slot = 0;
  unsigned variant = 0;
};

// A sender as the router knows it: its place during one run of the slot.
struct Origin {
  Place place;
  unsigned generation = 0;  // the slot's run when it was found
};

// A program's side: runtime/monitor.h's ProgramMonitor.
class Receiver {
 public:
  virtual ~Receiver() = default;
  // The run of `slot` that can send (running or stopping), or nullopt.
  virtual std::optional<unsigned> live_generation(unsigned slot) const = 0;
  virtual std::string worker_name(unsigned slot) const = 0;
  virtual unsigned slot_count() const = 0;
  // A well-formed message from `pid`: what to answer it when `answer_wanted`
  // (it can hear answers and reported requests); an empty Answer for none.
  virtual Answer receive(const Origin& origin, pid_t pid, const NotifyMessage& message,
                         bool answer_wanted) = 0;
  // For the socket's read pacing (read_pacer.h).
  virtual uint64_t requests_counted() const = 0;
  virtual std::optional<uint64_t> requests_left() const = 0;
};

class Router {
 public:
  struct Lookup {
    // The worker slot `pid` is a process of (its cgroup); nullopt for none.
    std::function<std::optional<Place>(pid_t)> place;
    // The program's receiver; null while it has none (being replaced).
    std::function<Receiver*(const std::string& program)> receiver;
    std::function<TimePoint()> now;
  };
  // `proc`: the /proc to read senders' network namespaces from.
  Router(uv_loop_t* loop, Lookup lookup, std::string proc);

  // recycler's runtime directory, where the sockets go; without one (not
  // root and no XDG_RUNTIME_DIR) they are abstract sockets any local process
  // can reach, which is said once.
  void open_runtime_dir();
  // Closes every socket and removes the runtime directory (recycler stops).
  void close() {
    sockets_.clear();
    runtime_.reset();
  }

  struct SocketSpec {
    std::string program;
    RuntimeDir::Access access;  // its workers' uid and gid
    bool counts_requests = false;
  };
  // Opens a program's socket, read on the loop and routed here: its address
  // (NOTIFY_SOCKET), or "" with a warning when none can be had.
  std::string open_socket(const SocketSpec& spec);
  // Closes the program's socket (its workers are gone); its directory goes.
  void remove(const std::string& program);
  // The program's socket (for its figures), or null.
  const NotifySocket* socket(const std::string& program) const;

  // A datagram on `program`'s socket.
  void route(const std::string& program, const NotifySocket::Datagram& d, NotifySocket& socket);

 private:
  std::optional<Origin> origin_of(pid_t pid);
  std::optional<Origin> origin_of_gone(const std::string& program, pid_t pid,
                                       std::string_view data);
  void warn(const std::string& program, const NotifySocket::Datagram& d, bool foreign,
            const NotifyMessage& message, Receiver* receiver, const Origin* origin);
  // An abstract address means something in one network namespace only.
  bool same_network_namespace(pid_t pid) const;

  uv_loop_t* loop_;
  Lookup lookup_;
  std::string proc_;
  // recycler's own network namespace (it never changes namespaces).
  std::optional<std::pair<dev_t, ino_t>> own_net_;
  std::optional<RuntimeDir> runtime_;
  std::map<std::string, std::unique_ptr<NotifySocket>> sockets_;
  std::map<pid_t, Origin> senders_;
  // Senders found to be no worker, until when they are not looked up again.
  std::map<pid_t, TimePoint> strangers_;
  uint64_t foreign_ = 0;
  uint64_t malformed_ = 0;
  TimePoint warned_{};
  std::set<std::string> warned_unknown_key_;  // programs, once each
  bool warned_short_queue_ = false;           // net.unix.max_dgram_qlen is host-wide
};

}  // namespace recycler::notify
