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

#include "supervisor/log/log.h"
#include "supervisor/util/safe_dir.h"
#include "supervisor/util/unix_socket.h"

namespace recycler::control {
namespace {

constexpr int kBacklog = 64;
constexpr int kMaxPeerGroups = 256;

}  // namespace

struct Server::Client {
  Server* server = nullptr;
  uint64_t id = 0;  // grows with each connection: a smaller one is older
  UniqueFd fd;
  uv::Handle<uv_poll_t> poll;  // after fd: closed first
  std::string in;
  std::string out;
  size_t out_offset = 0;
  bool following = false;
  bool follows_output = false;      // `logs -f` (else `events -f`), of log_targets
  std::vector<Target> log_targets;  // empty: every slot
  bool awaiting_reload = false;     // its reload's answer is coming (run_reload)
  bool lines_ready = false;         // `in` holds a whole request not handled yet
  bool eof = false;                 // the client has shut down its side (read to the end)
  bool hangup = false;              // it has, and recycler has not read to the end yet
  bool closing = false;             // close once the output is written
  TimePoint partial_since{};        // the first byte of the request in `in`
  TimePoint last_progress{};
  std::unique_ptr<Timer> deadline;
  int events = 0;  // polled for

  size_t unsent() const { return out.size() - out_offset; }
  // Whether its next request may be handled now: its last answer is out.
  bool ready() const { return !closing && !following && !awaiting_reload && unsent() == 0; }
  // Neither a request nor an answer in flight: evicting it loses nothing.
  bool idle() const { return !following && !awaiting_reload && !lines_ready && unsent() == 0; }
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
  auto opened = open_private_dir(dir, 0755, Shared::Never);
  if (!opened) return Error{"control socket " + path + ": " + opened.error().message};
  s->dir_ = std::move(*opened);
  int dirfd = s->dir_.get();
  socklen_t len = 0;
  auto address = unix_address_at(dirfd, s->name_, &len);
  if (!address) return Error{"control socket " + path + ": name too long"};

  struct stat st {};
  if (::fstatat(dirfd, s->name_.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0) {
    if (!S_ISSOCK(st.st_mode))
      return Error{"control socket " + path + " exists and is not a socket; remove it"};
    if (unix_socket_answers(dirfd, s->name_))
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
  auto* idle = new uv_idle_t;
  uv_idle_init(loop, idle);
  idle->data = s.get();
  s->idle_ = uv::Handle<uv_idle_t>(idle);
  return s;
}

Server::Server(uv_loop_t* loop, Timers& timers, ServerOptions options, Handler handler)
    : loop_(loop), timers_(timers), options_(std::move(options)), handler_(std::move(handler)) {}

Server::~Server() {
  reload_timer_.reset();
  idle_.reset();
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

// Who goes when every place is taken: the oldest client with nothing in
// flight (idle, or still sending its request), else the oldest follower;
// null when each one is being answered (those are bounded by kWriteTimeout).
Server::Client* Server::evictable() const {
  Client* follower = nullptr;
  for (const auto& [id, c] : clients_) {
    if (c->idle()) return c.get();
    if (c->following && !follower) follower = c.get();
  }
  return follower;
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
    if (admitted(fd.get(), why) && clients_.size() >= kMaxClients) {
      if (Client* old = evictable())
        drop(*old, "a new client needed its place");
      else
        why = "too many clients (at most " + std::to_string(kMaxClients) +
              ", each being answered); try again";
    }
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
    auto poll = uv::poll(loop_, c->fd.get(), c.get());
    if (!poll) continue;
    c->poll = std::move(*poll);
    Client& ref = *c;
    clients_.emplace(ref.id, std::move(c));
    update_poll(ref);
    arm(ref);
  }
}

void Server::on_client(Client& c, int events) {
  uint64_t id = c.id;
  if (events & UV_WRITABLE) {
    flush(c);
    if (!clients_.count(id)) return;
  }
  if (events & UV_READABLE) return read_from(c);
  if (events & UV_DISCONNECT) {
    // It shut down its side while recycler does not read from it (an answer
    // unsent): what it sent before is read in its turn, as is the end.
    c.hangup = true;
    settle(c);
  }
}

// One read a turn, however much the client has sent: the rest waits in the
// socket (and the loop turns) until these requests are answered.
void Server::read_from(Client& c) {
  char buf[kReadChunk];
  ssize_t n;
  do {
    n = ::read(c.fd.get(), buf, sizeof(buf));
  } while (n < 0 && errno == EINTR);
  if (n < 0) {
    if (errno != EAGAIN && errno != EWOULDBLOCK) drop(c, nullptr);
    return;
  }
  if (n == 0) {  // the client is done sending: answer what it asked, then close
    c.eof = true;
    return serve(c);
  }
  if (c.following) return drop(c, "a follower sent data");
  if (c.closing) return;  // its connection ends once the error line is out
  if (c.in.empty()) c.partial_since = timers_.now();
  c.in.append(buf, static_cast<size_t>(n));
  serve(c);
}

// Handles the client's next requests: at most kRequestsPerTurn, and only
// while each answer went out whole; the rest waits for the next turn (or
// for the client to read).
void Server::serve(Client& c) {
  uint64_t id = c.id;
  size_t start = 0;
  for (int budget = kRequestsPerTurn; budget > 0 && c.ready(); --budget) {
    size_t nl = c.in.find('\n', start);
    if (nl == std::string::npos) break;
    std::string_view line = std::string_view(c.in).substr(start, nl - start);
    start = nl + 1;
    handle_line(c, line);  // the view is not used past this: it may drop the client
    if (!clients_.count(id)) return;
  }
  if (c.following) {
    c.in.clear();  // a follower's connection carries nothing more
  } else if (start > 0) {
    c.in.erase(0, start);
    c.partial_since = timers_.now();  // what is left was sent since
  }
  c.lines_ready = c.in.find('\n') != std::string::npos;
  if (!c.lines_ready && c.in.size() > kMaxRequestBytes) {
    c.in.clear();
    send(c, error_line("request too long (at most " + std::to_string(kMaxRequestBytes) +
                       " bytes per line)"));
    if (!clients_.count(id)) return;
    c.closing = true;
  }
  if (c.lines_ready && c.ready()) later(c);
  settle(c);
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
  switch (request->command) {
    case Command::Events:
      return answer_events(c, request->follow, request->lines);
    case Command::Logs:
      return answer_logs(c, *request);
    case Command::Reload:
      return ask_reload(c);
    default:
      return send(c, handler_(*request));
  }
}

void Server::answer_events(Client& c, bool follow, std::optional<size_t> last) {
  std::string out = "{\"ok\":true,\"events\":[";
  bool first = true;
  const auto& all = ring_.lines();
  size_t skip = last && all.size() > *last ? all.size() - *last : 0;
  for (auto it = all.begin() + static_cast<std::ptrdiff_t>(skip); it != all.end(); ++it) {
    const std::string& e = *it;
    if (!first) out += ',';
    out += e;
    first = false;
  }
  out += "]}";
  c.following = follow;
  send(c, std::move(out));
}

// The last `lines` of each slot named, merged by time (oldest first).
void Server::answer_logs(Client& c, const Request& request) {
  std::string refused = handler_(request);
  if (!refused.empty()) {
    c.closing = true;
    return send(c, std::move(refused));
  }
  auto named = [&](const std::pair<std::string, unsigned>& slot) {
    if (request.targets.empty()) return true;
    for (const Target& t : request.targets)
      if (matches(t, slot.first, slot.second)) return true;
    return false;
  };
  std::vector<const std::string*> lines;
  for (const auto& [slot, ring] : output_) {
    if (!named(slot)) continue;
    const auto& all = ring.lines();
    size_t want = request.lines.value_or(kDefaultLogLines);
    size_t skip = all.size() > want ? all.size() - want : 0;
    for (auto it = all.begin() + static_cast<std::ptrdiff_t>(skip); it != all.end(); ++it)
      lines.push_back(&*it);
  }
  // By time alone (a slot's lines of one millisecond stay in their order).
  auto time_of = [](const std::string* line) {
    return std::string_view(*line).substr(0, kOutputTimePrefix);
  };
  std::stable_sort(lines.begin(), lines.end(), [&](const std::string* a, const std::string* b) {
    return time_of(a) < time_of(b);
  });
  // The newest that fit in one answer (many slots' full rings would pass a
  // client's kMaxPendingOutput, and it would be dropped unanswered).
  size_t first = lines.size(), bytes = 0;
  while (first > 0 && bytes + lines[first - 1]->size() + 1 <= kMaxLogAnswerBytes)
    bytes += lines[--first]->size() + 1;
  std::string out = "{\"ok\":true,\"lines\":[";
  for (size_t i = first; i < lines.size(); ++i) {
    if (i > first) out += ',';
    out += *lines[i];
  }
  out += "]";
  if (first > 0) out += ",\"left_out\":" + std::to_string(first);
  out += "}";
  c.following = request.follow;
  c.follows_output = request.follow;
  c.log_targets = request.targets;
  send(c, std::move(out));
}

// A reload reads and compiles the config and may restart programs: clients
// that ask while one waits share its answer, and one runs at most every
// kReloadInterval, however many clients ask how often.
void Server::ask_reload(Client& c) {
  c.awaiting_reload = true;
  reload_waiters_.push_back(c.id);
  if (reload_timer_) return;
  TimePoint now = timers_.now();
  Duration delay{0};
  if (last_reload_ && *last_reload_ + kReloadInterval > now)
    delay = std::chrono::ceil<Duration>(*last_reload_ + kReloadInterval - now);
  reload_timer_ = timers_.after(delay, [this] { run_reload(); });
}

void Server::run_reload() {
  reload_timer_.reset();
  std::vector<uint64_t> waiters = std::move(reload_waiters_);
  reload_waiters_.clear();
  Request request;
  request.command = Command::Reload;
  std::string answer = handler_(request);
  last_reload_ = timers_.now();
  for (uint64_t id : waiters) {
    auto it = clients_.find(id);
    if (it == clients_.end()) continue;
    Client& c = *it->second;
    c.awaiting_reload = false;
    send(c, answer);
    if (clients_.count(id)) serve(c);
  }
}

// The client's requests go on in the next turn of the loop.
void Server::later(Client& c) {
  if (std::find(next_turn_.begin(), next_turn_.end(), c.id) != next_turn_.end()) return;
  next_turn_.push_back(c.id);
  uv_idle_start(idle_.get(), [](uv_idle_t* h) {
    if (auto* self = static_cast<Server*>(h->data)) self->on_idle();
  });
}

void Server::on_idle() {
  std::vector<uint64_t> turn = std::move(next_turn_);
  next_turn_.clear();
  for (uint64_t id : turn)
    if (auto it = clients_.find(id); it != clients_.end()) serve(*it->second);
  if (next_turn_.empty()) uv_idle_stop(idle_.get());
}

void Server::publish(std::string line) {
  std::vector<uint64_t> followers;
  for (const auto& [id, c] : clients_)
    if (c->following && !c->follows_output && !c->closing) followers.push_back(id);
  for (uint64_t id : followers)  // send() may drop any client
    if (auto it = clients_.find(id); it != clients_.end()) send(*it->second, line);
  ring_.push(std::move(line));
}

void Server::publish_output(const std::string& program, unsigned slot, std::string line) {
  std::vector<uint64_t> followers;
  for (const auto& [id, c] : clients_) {
    if (!c->follows_output || c->closing) continue;
    bool named = c->log_targets.empty();
    for (const Target& t : c->log_targets) named = named || matches(t, program, slot);
    if (named) followers.push_back(id);
  }
  for (uint64_t id : followers)  // send() may drop any client
    if (auto it = clients_.find(id); it != clients_.end()) send(*it->second, line);
  auto [ring, added] =
      output_.try_emplace({program, slot}, EventRing(kLogRingLines, kLogRingBytes));
  if (added) {
    // All rings together stay within kLogTotalBytes: past 256 slots, each
    // keeps its share.
    size_t share = std::min(kLogRingBytes, kLogTotalBytes / output_.size());
    for (auto& [key, r] : output_) r.set_max_bytes(share);
  }
  ring->second.push(std::move(line));
}

void Server::send(Client& c, std::string line) {
  if (c.unsent() + line.size() + 1 > kMaxPendingOutput)
    return drop(c, "its unread output passed the limit");
  if (c.unsent() == 0) {
    c.out.clear();
    c.out_offset = 0;
    c.last_progress = timers_.now();
  }
  c.out += line;
  c.out += '\n';
  uint64_t id = c.id;
  flush(c);
  if (clients_.count(id) && c.unsent() > 0) cap_total_output();
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
  if (c.unsent() == 0) {
    c.out.clear();
    c.out_offset = 0;
    if (c.lines_ready && c.ready()) later(c);
  } else if (c.out_offset > (1u << 20)) {  // keep the buffer from growing at its front
    c.out.erase(0, c.out_offset);
    c.out_offset = 0;
  }
  settle(c);
}

// All clients' unsent output together stays under kMaxTotalPendingOutput:
// past it, whoever holds the most (the slowest reader) goes.
void Server::cap_total_output() {
  for (;;) {
    size_t total = 0;
    Client* largest = nullptr;
    for (const auto& [id, c] : clients_) {
      total += c->unsent();
      if (!largest || c->unsent() > largest->unsent()) largest = c.get();
    }
    if (total <= kMaxTotalPendingOutput || !largest) return;
    drop(*largest, "the unread output of all clients passed its limit, and its share was largest");
  }
}

// After anything happened to a client: closed if it is done, else polled
// and timed for what it waits on.
void Server::settle(Client& c) {
  bool done_sending = c.eof && !c.lines_ready && !c.awaiting_reload;
  if ((c.closing || done_sending) && c.unsent() == 0) return drop(c, nullptr);
  update_poll(c);
  arm(c);
}

// Readable only while its next request may be handled (or, for a follower,
// to notice that it sends anything); writable while output waits.
void Server::update_poll(Client& c) {
  bool reading = !c.eof && !c.closing &&
                 (c.following || (c.ready() && !c.lines_ready && c.in.size() <= kMaxRequestBytes));
  int events = (reading ? UV_READABLE : 0) | (c.eof || c.hangup ? 0 : UV_DISCONNECT) |
               (c.unsent() > 0 ? UV_WRITABLE : 0);
  if (events == c.events) return;
  c.events = events;
  if (events == 0) {
    uv_poll_stop(c.poll.get());
    return;
  }
  uv_poll_start(c.poll.get(), events, [](uv_poll_t* h, int status, int ev) {
    auto* client = static_cast<Client*>(h->data);
    if (!client) return;
    if (status < 0) return client->server->drop(*client, nullptr);
    client->server->on_client(*client, ev);
  });
}

// One deadline per client, whichever applies: its output must make progress,
// a request begun must end, an idle connection (not following) goes. A
// client waiting for its reload or for its turn has none: the server owes it.
void Server::arm(Client& c) {
  std::optional<TimePoint> at;
  if (c.unsent() > 0)
    at = c.last_progress + kWriteTimeout;
  else if (c.awaiting_reload || c.lines_ready)
    at = std::nullopt;
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
    if (client.unsent() > 0)
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
