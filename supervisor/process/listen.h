// A program's `listen:` sockets: bound once by recycler (as root, before any
// worker runs) and handed to every start of its workers the systemd way
// (sd_listen_fds(3)): the sockets become fds 3, 4, ... of the child, which
// finds LISTEN_FDS=N, LISTEN_PID=<its own pid> and LISTEN_FDNAMES=a:b in its
// environment. gunicorn (gunicorn/systemd.py) and uWSGI take them as they are.
// The sockets outlive every restart of a worker, so a connection that arrives
// while no worker accepts waits in the backlog instead of being refused.
//
// recycler itself may be socket-activated: sockets systemd passed to it
// (Inherited) are used for the entries with the same name, or the same
// address, instead of binding.
#pragma once

#include <sys/types.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "supervisor/config/config.h"
#include "supervisor/util/fd.h"
#include "supervisor/util/result.h"

namespace recycler::listen {

// One listening socket and the entry it was bound (or adopted) for.
struct Socket {
  config::ListenSocket spec;
  UniqueFd fd;
  bool inherited = false;  // from recycler's own socket activation
  // A unix socket recycler created: removed when the socket is closed, if it
  // is still the same file (device and inode).
  std::optional<std::pair<dev_t, ino_t>> created;
  UniqueFd dir;  // the directory it was created in (O_PATH)
  ~Socket();
  Socket() = default;
  Socket(Socket&&) = default;
  Socket& operator=(Socket&&) = default;
};

// A program's sockets, in `listen:` order (fd 3 is the first).
class Set {
 public:
  const std::vector<std::shared_ptr<Socket>>& sockets() const { return sockets_; }
  std::vector<int> fds() const;
  // "http:admin", the LISTEN_FDNAMES value.
  std::string names() const;
  // What a worker's environment gets: LISTEN_FDS and LISTEN_FDNAMES (spawn
  // adds LISTEN_PID, which only the child knows). Empty for an empty set.
  std::vector<std::pair<std::string, std::string>> environment() const;

 private:
  friend class Binder;
  std::vector<std::shared_ptr<Socket>> sockets_;
};

// The sockets systemd passed to recycler itself (LISTEN_PID = our pid),
// taken once at start-up and marked close-on-exec; each used at most once.
class Inherited {
 public:
  // Reads and checks LISTEN_FDS, LISTEN_PID and LISTEN_FDNAMES; empty when
  // they are absent or meant for another process.
  static Inherited from_environment();
  // For tests: these fds (owned from now on) under these names.
  static Inherited of(std::vector<std::pair<std::string, int>> named_fds);
  // The socket systemd bound for `spec`: the same name, else the same
  // address (getsockname). Null when none matches.
  UniqueFd take(const config::ListenSocket& spec);
  // Those no `listen:` entry asked for, closed (their names, for a warning).
  std::vector<std::string> close_unused();

 private:
  struct Entry {
    std::string name;
    UniqueFd fd;
  };
  std::vector<Entry> fds_;
};

class Binder {
 public:
  explicit Binder(Inherited& inherited) : inherited_(inherited) {}
  // The sockets for `wanted`: those of `keep` with the same endpoint are kept
  // (the same open socket, renamed or with a new backlog as `wanted` says);
  // the others are adopted from the inherited ones or bound. An error names
  // the address and why (EADDRINUSE: "already in use"); nothing new stays
  // bound then.
  Result<std::shared_ptr<const Set>> bind(const std::vector<config::ListenSocket>& wanted,
                                          const Set* keep);

 private:
  Inherited& inherited_;
};

// The backlog a socket gets when `listen:` names none: net.core.somaxconn
// (read from `proc_sys`), else 4096, the kernel's default since 5.4.
int default_backlog(const std::string& somaxconn = "/proc/sys/net/core/somaxconn");

}  // namespace recycler::listen
