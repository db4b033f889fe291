#include "supervisor/util/fd.h"

#include <fcntl.h>
#include <sys/stat.h>

#include <cerrno>
#include <charconv>
#include <cstring>

namespace recycler {

Error errno_error(const std::string& what, int err) {
  return Error{what + ": " + std::strerror(err), err};
}
Error errno_error(const std::string& what) {
  return errno_error(what, errno);
}

namespace {

std::string too_large(const std::string& path, uint64_t max_bytes) {
  return path + ": larger than " + std::to_string(max_bytes >> 20) + " MiB";
}

// The rest of an open file, at most `max_bytes`; `size` (from fstat, where
// known) is reserved up front.
Result<std::string> read_all(int fd, const std::string& path, uint64_t max_bytes, size_t size = 0) {
  std::string out;
  out.reserve(size);
  // cgroup and /proc files fit: one read() and the one that says EOF. Only
  // what read() fills is touched, so a large buffer costs them nothing.
  char buf[65536];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno_error(path);
    }
    if (n == 0) break;
    out.append(buf, static_cast<size_t>(n));
    if (out.size() > max_bytes) return Error{too_large(path, max_bytes), EFBIG};
  }
  return out;
}

const char* file_type(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a plain file";
}

}  // namespace

Result<std::string> read_file_at(int dirfd, const std::string& path) {
  UniqueFd fd(::openat(dirfd, path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) return errno_error(path);
  return read_all(fd.get(), path, UINT64_MAX);
}

Result<std::string> read_regular_file(const std::string& path, uint64_t max_bytes) {
  // O_NONBLOCK: opening a FIFO must not wait for a writer.
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC));
  if (!fd) return errno_error(path);
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return errno_error(path);
  if (!S_ISREG(st.st_mode))
    return Error{path + ": not a regular file: " + file_type(st.st_mode), EINVAL};
  if (static_cast<uint64_t>(st.st_size) > max_bytes)
    return Error{too_large(path, max_bytes), EFBIG};
  // A file that grows while it is read (or a /proc file, size 0) is bounded too.
  return read_all(fd.get(), path, max_bytes, static_cast<size_t>(st.st_size));
}

Status write_file_at(int dirfd, const std::string& path, std::string_view data) {
  UniqueFd fd(::openat(dirfd, path.c_str(), O_WRONLY | O_CLOEXEC));
  if (!fd) return errno_error(path);
  ssize_t n;
  do n = ::write(fd.get(), data.data(), data.size());
  while (n < 0 && errno == EINTR);
  if (n < 0) return errno_error("write " + path);
  return Ok{};
}

std::optional<uint64_t> find_keyed_value(std::string_view text, std::string_view key) {
  size_t pos = 0;
  while (pos < text.size()) {
    size_t eol = text.find('\n', pos);
    if (eol == std::string_view::npos) eol = text.size();
    std::string_view line = text.substr(pos, eol - pos);
    if (line.size() > key.size() && line.substr(0, key.size()) == key && line[key.size()] == ' ') {
      std::string_view num = line.substr(key.size() + 1);
      uint64_t v = 0;
      auto [p, ec] = std::from_chars(num.data(), num.data() + num.size(), v);
      if (ec == std::errc()) return v;
      return std::nullopt;
    }
    pos = eol + 1;
  }
  return std::nullopt;
}

}  // namespace recycler
