#include "supervisor/util/fd.h"

#include <fcntl.h>

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

Result<std::string> read_file_at(int dirfd, const std::string& path) {
  UniqueFd fd(::openat(dirfd, path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) return errno_error(path);
  std::string out;
  char buf[4096];
  for (;;) {
    ssize_t n = ::read(fd.get(), buf, sizeof buf);
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno_error(path);
    }
    if (n == 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  return out;
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
