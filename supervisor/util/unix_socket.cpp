#include "supervisor/util/unix_socket.h"

#include <cerrno>
#include <cstddef>
#include <cstring>

#include "supervisor/util/fd.h"

namespace recycler {

std::optional<sockaddr_un> unix_address_at(int dirfd, const std::string& name, socklen_t* len) {
  std::string via = "/proc/self/fd/" + std::to_string(dirfd) + "/" + name;
  sockaddr_un a{};
  if (via.size() >= sizeof(a.sun_path)) return std::nullopt;
  a.sun_family = AF_UNIX;
  std::memcpy(a.sun_path, via.data(), via.size());
  *len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + via.size() + 1);
  return a;
}

bool unix_socket_answers(int dirfd, const std::string& name) {
  socklen_t len = 0;
  auto a = unix_address_at(dirfd, name, &len);
  UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!a || !fd) return false;
  if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&*a), len) == 0) return true;
  return errno == EAGAIN || errno == EINPROGRESS;
}

}  // namespace recycler
