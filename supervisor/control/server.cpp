#include "supervisor/control/server.h"

#include <fcntl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <vector>

#include "supervisor/log.h"
#include "supervisor/util/safe_dir.h"

namespace recycler::control {
namespace {

constexpr int kBacklog = 64;
constexpr size_t kReadChunk = 16 * 1024;
constexpr int kMaxPeerGroups = 256;

// A unix address naming `name` in the directory `dirfd` through /proc, so
// that the path is resolved from the checked directory and not walked again.
std::optional<sockaddr_un> address_at(int dirfd, const std::string& name, socklen_t* len) {
  std::string via = "/proc/self/fd/" + std::to_string(dirfd) + "/" + name;
  sockaddr_un a{};
  if (via.size() >= sizeof(a.sun_path)) return std::nullopt;
  a.sun_family = AF_UNIX;
  std::memcpy(a.sun_path, via.data(), via.size());
  *len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + via.size() + 1);
  return a;
}

// Whether a recycler listens on the socket `name` in `dirfd` (it accepts a
// connection, or its backlog is full).
bool answers(int dirfd, const std::string& name) {
  socklen_t len = 0;
  auto a = address_at(dirfd, name, &len);
  UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!a || !fd) return false;
  if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&*a), len) == 0) return true;
  return errno == EAGAIN || errno == EINPROGRESS;
}

}  // namespace

struct Server::Client {
  Server* server = nullptr;
  uint64_t id = 0;
  UniqueFd fd;
  uv::Handle<uv_poll_t> poll;  // after fd: closed first
  std::string in;
  std::string out;
  size_t out_offset = 0;
  bool following = false;
  bool closing = false;  // close once the output is written
  TimePoint partial_since{};
  TimePoint last_progress{};
  std::unique_ptr<Timer> deadline;
  int events = 0;  // polled for
};

Result<std::unique_ptr<Server>> Server::open(uv_loop_t* loop, Timers& timers, ServerOptions options,
                                             Handler handler) {
  std::unique_ptr<Server> s(new Server(loop, timers, std::move(options), std::move(handler)));
  const std::string& path = s->options_.path;
  size_t slash = path.rfind('/');
  std::string dir = slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
  s->name_ = path.substr(slash == std::string::npos ? 0 : slash + 1);
  if (s->name_.empty() || s->name_ == "." || s->name_ == "..")
    return Error{"control socket " + path + ": not a file name"};
  auto opened = open_private_dir(dir, 0755);
  if (!opened) return Error{"control socket " + path + ": " + opened.error().message};
  s->dir_ = std::move(*opened);
  int dirfd = s->dir_.get();
  socklen_t len = 0;
  auto address = address_at(dirfd, s->name_, &len);
  if (!address) return Error{"control socket " + path + ": name too long"};

  struct stat st {};
  if (::fstatat(dirfd, s->name_.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0) {
    if (!S_ISSOCK(st.st_mode))
      return Error{"control socket " + path + " exists and is not a socket; remove it"};
    if (answers(dirfd, s->name_))
      return Error{"another recycler is running this config: its control socket " + path +
                       " answers (set control.socket to run a second one)",
                   EADDRINUSE};
    // A stale socket of a recycler that is gone.
    if (::unlinkat(dirfd, s->name_.c_str(), 0) != 0 && errno != ENOENT)
      return errno_error("control socket: remove the stale " + path);
  }
  s->listen_fd_ = UniqueFd(::socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!s->listen_fd_) return errno_error("control socket: socket");
  if (::bind(s->listen_fd_.get(), reinterpret_cast<sockaddr*>(&*address), len) != 0)
    return errno_error("control socket: bind " + path);
  // Who may connect is checked again per connection (admitted()).
  if (s->options_.gid && ::fchownat(dirfd, s->name_.c_str(), static_cast<uid_t>(-1),
                                    *s->options_.gid, AT_SYMLINK_NOFOLLOW) != 0)
    return errno_error("control socket: chown " + path);
  if (::fchmodat(dirfd, s->name_.c_str(), s->options_.mode, 0) != 0)
    return errno_error("control socket: chmod " + path);
  if (::fstatat(dirfd, s->name_.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0) s->inode_ = st.st_ino;
  if (::listen(s->listen_fd_.get(), kBacklog) != 0)
    return errno_error("control socket: listen " + path);
  auto poll =
      uv::poll(loop, s->listen_fd_.get(), s.get(), UV_READABLE, [](uv_poll_t* h, int status, int) {
        auto* self = static_cast<Server*>(h->data);
        if (self && status == 0) self->on_accept();
      });
  if (!poll) return Error{"control socket: " + poll.error().message};
  s->listen_poll_ = std::move(*poll);
  return s;
}

Server::Server(uv_loop_t* loop, Timers& timers, ServerOptions options, Handler handler)
    : loop_(loop), timers_(timers), options_(std::move(options)), handler_(std::move(handler)) {}

Server::~Server() {
  clients_.clear();
  listen_poll_.reset();
  listen_fd_.reset();
  // Only the socket this recycler bound: a later one is another's.
  struct stat st {};
  if (dir_ && inode_ != 0 && ::fstatat(dir_.get(), name_.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 &&
      st.st_ino == inode_)
    ::unlinkat(dir_.get(), name_.c_str(), 0);
}

bool Server::admitted(int fd, std::string& why) const {
  ucred cred{};
  socklen_t len = sizeof(cred);
  if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) {
    why = "cannot read the client's credentials";
    return false;
  }
  if (cred.uid == 0 || cred.uid == ::geteuid()) return true;
  if (options_.gid) {
    if (cred.gid == *options_.gid) return true;
    std::vector<gid_t> groups(kMaxPeerGroups);
    socklen_t size = static_cast<socklen_t>(groups.size() * sizeof(gid_t));
    if (::getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, groups.data(), &size) == 0) {
      groups.resize(size / sizeof(gid_t));
      if (std::find(groups.begin(), groups.end(), *options_.gid) != groups.end()) return true;
    }
  }
  why = "permission denied: uid " + std::to_string(cred.uid) +
        " is neither root, recycler's user nor a member of control.group";
  return false;
}

void Server::on_accept() {
  for (;;) {
    UniqueFd fd(::accept4(listen_fd_.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC));
    if (!fd) {
      if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR && errno != ECONNABORTED)
        log::warn("control socket: accept: {}", std::strerror(errno));
      return;
    }
    std::string why;
    if (clients_.size() >= kMaxClients)
      why = "too many clients (at most " + std::to_string(kMaxClients) + ")";
    else
      admitted(fd.get(), why);
    if (!why.empty()) {
      // One try, never waiting: a refused client gets the reason if it reads.
      std::string line = error_line(why) + "\n";
      [[maybe_unused]] ssize_t n = ::send(fd.get(), line.data(), line.size(), MSG_NOSIGNAL);
      log::debug("control socket: refused a client: {}", why);
      continue;
    }
    auto c = std::make_unique<Client>();
    c->server = this;
    c->id = next_id_++;
    c->fd = std::move(fd);
    c->last_progress = timers_.now();
    auto poll = uv::poll(loop_, c->fd.get(), c.get(), UV_READABLE,
                         [](uv_poll_t* h, int status, int events) {
                           auto* client = static_cast<Client*>(h->data);
                           if (!client) return;
                           client->server->on_client(*client, status < 0 ? UV_DISCONNECT : events);
                         });
    if (!poll) continue;
    c->poll = std::move(*poll);
    c->events = UV_READABLE;
    Client& ref = *c;
    clients_.emplace(ref.id, std::move(c));
    arm(ref);
  }
}

void Server::on_client(Client& c, int events) {
  uint64_t id = c.id;
  if (events & UV_WRITABLE) {
    flush(c);
    if (!clients_.count(id)) return;
  }
  if (events & (UV_READABLE | UV_DISCONNECT)) read_from(c);
}

void Server::read_from(Client& c) {
  uint64_t id = c.id;
  char buf[kReadChunk];
  for (;;) {
    ssize_t n = ::read(c.fd.get(), buf, sizeof(buf));
    if (n == 0) return drop(c, nullptr);  // the client is done
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) break;
      return drop(c, nullptr);
    }
    if (c.closing || c.following) continue;  // what a follower says is not read
    if (c.in.empty()) c.partial_since = timers_.now();
    c.in.append(buf, static_cast<size_t>(n));
    size_t start = 0;
    for (size_t nl; (nl = c.in.find('\n', start)) != std::string::npos; start = nl + 1) {
      handle_line(c, std::string_view(c.in).substr(start, nl - start));
      if (!clients_.count(id)) return;
      if (c.closing || c.following) {
        start = c.in.size();
        break;
      }
    }
    c.in.erase(0, start);
    if (!c.in.empty()) c.partial_since = timers_.now();
    if (c.in.size() > kMaxRequestBytes) {
      c.in.clear();
      send(c, error_line("request too long (at most " + std::to_string(kMaxRequestBytes) +
                         " bytes per line)"));
      if (!clients_.count(id)) return;
      c.closing = true;
      flush(c);
      return;
    }
  }
  arm(c);
}

void Server::handle_line(Client& c, std::string_view line) {
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  if (line.empty()) return;
  auto request = parse_request(line);
  if (!request) {
    c.closing = true;
    send(c, error_line(request.error().message));
    return;
  }
  if (request->command == Command::Events) {
    std::string out = "{\"ok\":true,\"events\":[";
    bool first = true;
    for (const std::string& e : ring_.lines()) {
      if (!first) out += ',';
      out += e;
      first = false;
    }
    out += "]}";
    c.following = request->follow;
    send(c, std::move(out));
    return;
  }
  send(c, handler_(*request));
}

void Server::publish(std::string line) {
  for (auto it = clients_.begin(); it != clients_.end();) {
    Client& c = *(it++)->second;  // send() may drop it
    if (c.following && !c.closing) send(c, line);
  }
  ring_.push(std::move(line));
}

void Server::send(Client& c, std::string line) {
  if (c.out.size() - c.out_offset + line.size() + 1 > kMaxPendingOutput)
    return drop(c, "its unread output passed the limit");
  if (c.out_offset == c.out.size()) {
    c.out.clear();
    c.out_offset = 0;
    c.last_progress = timers_.now();
  }
  c.out += line;
  c.out += '\n';
  flush(c);
}

void Server::flush(Client& c) {
  while (c.out_offset < c.out.size()) {
    ssize_t n = ::send(c.fd.get(), c.out.data() + c.out_offset, c.out.size() - c.out_offset,
                       MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) break;
      return drop(c, nullptr);
    }
    c.out_offset += static_cast<size_t>(n);
    c.last_progress = timers_.now();
  }
  if (c.out_offset == c.out.size()) {
    c.out.clear();
    c.out_offset = 0;
    if (c.closing) return drop(c, nullptr);
  } else if (c.out_offset > (1u << 20)) {  // keep the buffer from growing at its front
    c.out.erase(0, c.out_offset);
    c.out_offset = 0;
  }
  update_poll(c);
  arm(c);
}

void Server::update_poll(Client& c) {
  int events = (c.closing ? 0 : UV_READABLE) | UV_DISCONNECT |
               (c.out_offset < c.out.size() ? UV_WRITABLE : 0);
  if (events == c.events) return;
  c.events = events;
  uv_poll_start(c.poll.get(), events, [](uv_poll_t* h, int status, int ev) {
    auto* client = static_cast<Client*>(h->data);
    if (!client) return;
    client->server->on_client(*client, status < 0 ? UV_DISCONNECT : ev);
  });
}

// One deadline per client, whichever applies: its output must make progress,
// a request begun must end, an idle connection (not following) goes.
void Server::arm(Client& c) {
  std::optional<TimePoint> at;
  if (c.out_offset < c.out.size())
    at = c.last_progress + kWriteTimeout;
  else if (!c.in.empty())
    at = c.partial_since + kRequestTimeout;
  else if (!c.following)
    at = c.last_progress + kIdleTimeout;
  if (!at) {
    c.deadline.reset();
    return;
  }
  TimePoint now = timers_.now();
  Duration delay = *at > now ? std::chrono::ceil<Duration>(*at - now) : Duration{0};
  uint64_t id = c.id;
  c.deadline = timers_.after(delay, [this, id] {
    auto it = clients_.find(id);
    if (it == clients_.end()) return;
    Client& client = *it->second;
    if (client.out_offset < client.out.size())
      drop(client, "it does not read its output");
    else if (!client.in.empty())
      drop(client, "its request did not end in time");
    else
      drop(client, nullptr);  // idle
  });
}

void Server::drop(Client& c, const char* why) {
  if (why) log::debug("control socket: dropped a client: {}", why);
  clients_.erase(c.id);  // closes its poll handle, then its fd
}

}  // namespace recycler::control
