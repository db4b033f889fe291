#include "supervisor/process/listen.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string_view>

#include "supervisor/util/safe_dir.h"
#include "supervisor/util/unix_socket.h"

namespace recycler::listen {
namespace {

constexpr int kFirstFd = 3;  // SD_LISTEN_FDS_START

std::string describe_errno(int err) {
  if (err == EADDRINUSE) return "address already in use";
  if (err == EADDRNOTAVAIL) return "no such address on this host";
  return std::strerror(err);
}

Error bind_error(const config::ListenSocket& spec, const std::string& what, int err) {
  return Error{"listen " + spec.address() + ": " + what + ": " + describe_errno(err), err};
}

// The socket's own address, as `listen:` would write it; "" when unknown.
std::string local_address(int fd) {
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0) return "";
  char host[INET6_ADDRSTRLEN] = {};
  if (ss.ss_family == AF_INET) {
    auto* in = reinterpret_cast<sockaddr_in*>(&ss);
    ::inet_ntop(AF_INET, &in->sin_addr, host, sizeof host);
    return fmt::format("{}:{}", host, ntohs(in->sin_port));
  }
  if (ss.ss_family == AF_INET6) {
    auto* in6 = reinterpret_cast<sockaddr_in6*>(&ss);
    ::inet_ntop(AF_INET6, &in6->sin6_addr, host, sizeof host);
    return fmt::format("[{}]:{}", host, ntohs(in6->sin6_port));
  }
  if (ss.ss_family == AF_UNIX) {
    auto* un = reinterpret_cast<sockaddr_un*>(&ss);
    size_t n = len > offsetof(sockaddr_un, sun_path) ? len - offsetof(sockaddr_un, sun_path) : 0;
    std::string_view path(un->sun_path, ::strnlen(un->sun_path, n));
    return path.empty() ? std::string() : fmt::format("unix:{}", path);
  }
  return "";
}

// A listening stream socket?
bool listening_stream(int fd) {
  int type = 0, accepting = 0;
  socklen_t len = sizeof type;
  if (::getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &len) != 0 || type != SOCK_STREAM) return false;
  len = sizeof accepting;
  return ::getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &accepting, &len) == 0 && accepting;
}

Result<UniqueFd> bind_tcp(const config::ListenSocket& spec) {
  const config::ListenAddress& a = *spec.tcp;
  sockaddr_storage ss{};
  socklen_t len = 0;
  if (a.v6) {
    auto* in6 = reinterpret_cast<sockaddr_in6*>(&ss);
    in6->sin6_family = AF_INET6;
    in6->sin6_port = htons(a.port);
    if (::inet_pton(AF_INET6, a.host.c_str(), &in6->sin6_addr) != 1)
      return Error{"listen " + spec.address() + ": not an IPv6 address"};
    len = sizeof *in6;
  } else {
    auto* in = reinterpret_cast<sockaddr_in*>(&ss);
    in->sin_family = AF_INET;
    in->sin_port = htons(a.port);
    if (::inet_pton(AF_INET, a.host.c_str(), &in->sin_addr) != 1)
      return Error{"listen " + spec.address() + ": not an IPv4 address"};
    len = sizeof *in;
  }
  UniqueFd fd(::socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd) return bind_error(spec, "socket", errno);
  int on = 1;
  // A restarted recycler rebinds at once, past connections in TIME_WAIT.
  if (::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &on, sizeof on) != 0)
    return bind_error(spec, "SO_REUSEADDR", errno);
  if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&ss), len) != 0)
    return bind_error(spec, "bind", errno);
  return fd;
}

// unix:/path. Its directory is found and checked as util/safe_dir.h says
// (no directory another user controls on the way, none they may write to at
// the end, only trusted symlinks followed), created 0755 when missing, and
// everything after happens relative to its fd. A socket file there may be
// left over from an earlier run (replaced) unless a program listens on it;
// anything else is refused. Mode and owner are set through an O_PATH
// descriptor of the socket file, so a symlink swapped in meanwhile is never
// followed.
Result<UniqueFd> bind_unix(const config::ListenSocket& spec, Socket& out, const Set* keep) {
  namespace fs = std::filesystem;
  fs::path path(spec.path);
  std::string dir = path.parent_path().string(), name = path.filename().string();
  auto opened = open_private_dir(dir.empty() ? "/" : dir, 0755, Shared::Never);
  if (!opened) return Error{"listen " + spec.address() + ": " + opened.error().message};
  UniqueFd dirfd = std::move(*opened);
  struct stat st {};
  if (::fstatat(dirfd.get(), name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0) {
    if (!S_ISSOCK(st.st_mode))
      return Error{"listen " + spec.address() + ": " + spec.path +
                   " exists and is not a socket; recycler will not replace it"};
    // A socket this recycler bound itself (a reload that changes its mode)
    // is replaced even though it listens.
    bool ours =
        keep && std::any_of(keep->sockets().begin(), keep->sockets().end(), [&](const auto& s) {
          return s->created == std::make_pair(st.st_dev, st.st_ino);
        });
    if (!ours && unix_socket_answers(dirfd.get(), name))
      return Error{"listen " + spec.address() + ": a program listens on " + spec.path +
                       " already; recycler will not replace its socket",
                   EADDRINUSE};
    if (::unlinkat(dirfd.get(), name.c_str(), 0) != 0)
      return bind_error(spec, "removing the old socket file", errno);
  }
  UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd) return bind_error(spec, "socket", errno);
  socklen_t len = 0;
  auto un = unix_address_at(dirfd.get(), name, &len);
  if (!un || spec.path.size() >= sizeof un->sun_path)
    return Error{"listen " + spec.address() + ": too long"};
  // Created owner-only; opened up below once it is ours.
  mode_t old = ::umask(0177);
  int bound = ::bind(fd.get(), reinterpret_cast<sockaddr*>(&*un), len);
  int err = errno;
  ::umask(old);
  if (bound != 0) return bind_error(spec, "bind", err);
  UniqueFd file(::openat(dirfd.get(), name.c_str(), O_PATH | O_NOFOLLOW | O_CLOEXEC));
  if (!file || ::fstat(file.get(), &st) != 0 || !S_ISSOCK(st.st_mode))
    return Error{"listen " + spec.address() + ": the socket file changed under recycler"};
  out.created = std::make_pair(st.st_dev, st.st_ino);
  out.dir = std::move(dirfd);
  uid_t uid = spec.uid.value_or(static_cast<uid_t>(-1));
  gid_t gid = spec.gid.value_or(static_cast<gid_t>(-1));
  if ((spec.uid || spec.gid) && ::fchownat(file.get(), "", uid, gid, AT_EMPTY_PATH) != 0)
    return bind_error(spec, "chown", errno);
  std::string self = "/proc/self/fd/" + std::to_string(file.get());
  if (::chmod(self.c_str(), spec.mode) != 0) return bind_error(spec, "chmod", errno);
  return fd;
}

}  // namespace

// Only the file this socket was bound to, found in the directory it was
// bound in: a later file there is another's.
Socket::~Socket() {
  if (!created || !dir || spec.path.empty()) return;
  std::string name = std::filesystem::path(spec.path).filename().string();
  struct stat st {};
  if (::fstatat(dir.get(), name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISSOCK(st.st_mode) &&
      std::make_pair(st.st_dev, st.st_ino) == *created)
    ::unlinkat(dir.get(), name.c_str(), 0);
}

std::vector<int> Set::fds() const {
  std::vector<int> out;
  for (const auto& s : sockets_) out.push_back(s->fd.get());
  return out;
}

std::string Set::names() const {
  std::string out;
  for (const auto& s : sockets_) out += (out.empty() ? "" : ":") + s->spec.name;
  return out;
}

std::vector<std::pair<std::string, std::string>> Set::environment() const {
  if (sockets_.empty()) return {};
  return {{"LISTEN_FDS", std::to_string(sockets_.size())}, {"LISTEN_FDNAMES", names()}};
}

Inherited Inherited::from_environment() {
  Inherited out;
  const char* pid = std::getenv("LISTEN_PID");
  const char* fds = std::getenv("LISTEN_FDS");
  if (!pid || !fds) return out;
  char* end = nullptr;
  long want_pid = std::strtol(pid, &end, 10);
  if (*end != '\0' || want_pid != ::getpid()) return out;
  long n = std::strtol(fds, &end, 10);
  if (*end != '\0' || n <= 0 || n > 1024) return out;
  std::vector<std::string> names;
  if (const char* text = std::getenv("LISTEN_FDNAMES")) {
    std::string all = text;
    for (size_t start = 0;;) {
      size_t colon = all.find(':', start);
      names.push_back(all.substr(start, colon - start));
      if (colon == std::string::npos) break;
      start = colon + 1;
    }
  }
  for (long i = 0; i < n; ++i) {
    int fd = kFirstFd + static_cast<int>(i);
    if (::fcntl(fd, F_SETFD, FD_CLOEXEC) != 0) continue;  // not open after all
    out.fds_.push_back({i < static_cast<long>(names.size()) ? names[i] : "", UniqueFd(fd)});
  }
  return out;
}

Inherited Inherited::of(std::vector<std::pair<std::string, int>> named_fds) {
  Inherited out;
  for (auto& [name, fd] : named_fds) out.fds_.push_back({name, UniqueFd(fd)});
  return out;
}

UniqueFd Inherited::take(const config::ListenSocket& spec) {
  auto usable = [](const Entry& e) { return e.fd && listening_stream(e.fd.get()); };
  for (Entry& e : fds_)
    if (usable(e) && e.name == spec.name) return std::move(e.fd);
  for (Entry& e : fds_)
    if (usable(e) && local_address(e.fd.get()) == spec.address()) return std::move(e.fd);
  return UniqueFd();
}

std::vector<std::string> Inherited::close_unused() {
  std::vector<std::string> names;
  for (Entry& e : fds_)
    if (e.fd) {
      names.push_back(e.name.empty() ? "fd " + std::to_string(e.fd.get()) : e.name);
      e.fd.reset();
    }
  fds_.clear();
  return names;
}

int default_backlog(const std::string& somaxconn) {
  auto text = read_file(somaxconn);
  if (text) {
    char* end = nullptr;
    long n = std::strtol(text->c_str(), &end, 10);
    if (end != text->c_str() && n > 0 && n <= INT_MAX) return static_cast<int>(n);
  }
  return 4096;
}

Result<std::shared_ptr<const Set>> Binder::bind(const std::vector<config::ListenSocket>& wanted,
                                                const Set* keep) {
  auto set = std::make_shared<Set>();
  for (const config::ListenSocket& spec : wanted) {
    std::shared_ptr<Socket> kept;
    if (keep)
      for (const auto& s : keep->sockets())
        if (s->spec.same_endpoint(spec)) kept = s;
    if (kept) {
      bool same = kept->spec == spec;
      if (!same && !kept->spec.tcp &&
          (kept->spec.mode != spec.mode || kept->spec.uid != spec.uid ||
           kept->spec.gid != spec.gid))
        kept.reset();  // a unix socket's file changes: bind it afresh
    }
    if (kept) {
      if (kept->spec.backlog != spec.backlog)
        ::listen(kept->fd.get(), spec.backlog ? static_cast<int>(spec.backlog) : default_backlog());
      // The name is the entry's; the open socket (and its queue) is the same.
      if (!(kept->spec == spec)) {
        auto renamed = std::make_shared<Socket>();
        renamed->spec = spec;
        renamed->fd = UniqueFd(::fcntl(kept->fd.get(), F_DUPFD_CLOEXEC, kFirstFd));
        if (!renamed->fd) return bind_error(spec, "dup", errno);
        renamed->inherited = kept->inherited;
        renamed->created = std::exchange(kept->created, std::nullopt);
        renamed->dir = std::move(kept->dir);
        kept = renamed;
      }
      set->sockets_.push_back(std::move(kept));
      continue;
    }
    auto socket = std::make_shared<Socket>();
    socket->spec = spec;
    if (UniqueFd from_systemd = inherited_.take(spec)) {
      socket->fd = std::move(from_systemd);
      socket->inherited = true;
      set->sockets_.push_back(std::move(socket));
      continue;
    }
    Result<UniqueFd> bound = spec.tcp ? bind_tcp(spec) : bind_unix(spec, *socket, keep);
    if (!bound) return bound.error();
    socket->fd = std::move(bound.value());
    int backlog = spec.backlog ? static_cast<int>(spec.backlog) : default_backlog();
    if (::listen(socket->fd.get(), backlog) != 0) return bind_error(spec, "listen", errno);
    set->sockets_.push_back(std::move(socket));
  }
  return std::shared_ptr<const Set>(std::move(set));
}

}  // namespace recycler::listen
