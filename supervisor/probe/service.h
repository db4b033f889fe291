// Whether a process of a pre-fork server still serves: the listening sockets
// it shares with its parent (its master) are what it accepts connections
// from. A process asked to go (gunicorn's sync worker, uWSGI, ...) closes
// them within a request, then may take much longer to exit (a Python
// interpreter's teardown: about 50-120 ms of copy-on-write faults). Seen
// through /proc/PID/fd: which socket inodes a process holds (readlink names
// them "socket:[INODE]"); the kernel writes those names, so a worker cannot
// forge them. Bounded: a table over kMaxFds entries is not read (the answer
// is then "unknown", and only the exit counts).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace recycler::probe {

class ServiceProbe {
 public:
  virtual ~ServiceProbe() = default;
  // The sockets `pid` holds that its parent holds too, sorted; empty when
  // there are none or they cannot be read.
  virtual std::vector<uint64_t> shared_sockets(pid_t pid) const = 0;
  // Whether `pid` still holds any of `inodes` (false once it is gone; true
  // when its table cannot be read, so that only its exit counts then).
  virtual bool holds_any(pid_t pid, const std::vector<uint64_t>& inodes) const = 0;
};

class ProcServiceProbe final : public ServiceProbe {
 public:
  explicit ProcServiceProbe(std::string proc = "/proc") : proc_(std::move(proc)) {}
  std::vector<uint64_t> shared_sockets(pid_t pid) const override;
  bool holds_any(pid_t pid, const std::vector<uint64_t>& inodes) const override;

  static constexpr size_t kMaxFds = 4096;

 private:
  std::string proc_;
};

// The socket inodes in /proc/PID/fd, sorted; nullopt when the table cannot
// be read or holds more than `max_fds` entries. `pid` 0 is not read.
std::optional<std::vector<uint64_t>> socket_inodes(const std::string& proc, pid_t pid,
                                                   size_t max_fds);
// "socket:[12345]" -> 12345.
std::optional<uint64_t> parse_socket_link(std::string_view link);

}  // namespace recycler::probe
