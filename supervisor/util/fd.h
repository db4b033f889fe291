// Owning file descriptor and the few whole-file reads and writes the
// supervisor needs. Cgroup and /proc files are small: one read() each.
#pragma once

#include <fcntl.h>
#include <sys/types.h>
#include <unistd.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "supervisor/util/result.h"

namespace recycler {

class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  UniqueFd(UniqueFd&& o) noexcept : fd_(o.release()) {}
  UniqueFd& operator=(UniqueFd&& o) noexcept {
    reset(o.release());
    return *this;
  }
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  ~UniqueFd() { reset(); }

  int get() const { return fd_; }
  explicit operator bool() const { return fd_ >= 0; }
  int release() { return std::exchange(fd_, -1); }
  void reset(int fd = -1) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = fd;
  }

 private:
  int fd_ = -1;
};

// Reads a whole (small, pseudo-) file. `dirfd` may be AT_FDCWD.
Result<std::string> read_file_at(int dirfd, const std::string& path);
inline Result<std::string> read_file(const std::string& path) {
  return read_file_at(AT_FDCWD, path);
}
// A whole file that must be a regular file of at most `max_bytes` (a config,
// a trace): a FIFO, a device (/dev/zero) or a directory is refused without
// blocking, and so is a larger file; the errors say which ("not a regular
// file: a FIFO", "larger than 16 MiB").
Result<std::string> read_regular_file(const std::string& path, uint64_t max_bytes);

// One write() of `data` to an existing file (cgroup control files want exactly that).
Status write_file_at(int dirfd, const std::string& path, std::string_view data);
inline Status write_file(const std::string& path, std::string_view data) {
  return write_file_at(AT_FDCWD, path, data);
}

// "key value" lines (memory.stat, memory.events): the value of `key`, if present.
std::optional<uint64_t> find_keyed_value(std::string_view text, std::string_view key);

}  // namespace recycler
