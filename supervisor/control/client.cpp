#include "supervisor/control/client.h"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <termios.h>
#include <unistd.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <thread>
#include <vector>

#include "policies/base/escape.h"
#include "policies/base/units.h"
#include "supervisor/control/client_internal.h"
#include "supervisor/control/format.h"
#include "supervisor/util/fd.h"
#include "supervisor/util/unix_socket.h"

namespace recycler::control {
namespace {

using detail::budget_line;
using detail::container_line;
using detail::event_text;
using detail::gang_lines;
using detail::log_time;

constexpr int kTimeoutSeconds = 30;
constexpr size_t kMaxResponseBytes = 64u << 20;

std::optional<std::string> configured_socket(const std::string& config_file) {
  try {
    YAML::Node root = YAML::LoadFile(config_file);
    YAML::Node socket =
        root.IsMap() && root["control"].IsMap() ? root["control"]["socket"] : YAML::Node();
    if (!socket.IsScalar() || socket.Scalar().empty()) return std::nullopt;
    std::filesystem::path path(socket.Scalar());
    if (path.is_absolute()) return path.string();
    return (std::filesystem::path(config_file).parent_path() / path).lexically_normal().string();
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

// Without -c or --socket: the one recycler that answers in the default
// socket directory. With several, none is chosen: each is listed.
std::string running_socket(std::string& why) {
  auto probe = default_socket_path("probe", ::geteuid(), std::getenv("XDG_RUNTIME_DIR"));
  const std::string ask = "give -c FILE (its config) or --socket PATH";
  if (!probe) {
    why = "which recycler? " + ask;
    return {};
  }
  std::string dir = probe->substr(0, probe->rfind('/'));
  UniqueFd dirfd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  std::vector<std::string> live;
  if (dirfd) {
    if (DIR* d = ::fdopendir(::dup(dirfd.get()))) {
      while (dirent* e = ::readdir(d)) {
        std::string name = e->d_name;
        struct stat st {};
        if (name.size() <= 5 || name.compare(name.size() - 5, 5, ".sock") != 0) continue;
        if (::fstatat(dirfd.get(), name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0 ||
            !S_ISSOCK(st.st_mode))
          continue;
        if (unix_socket_answers(dirfd.get(), name)) live.push_back(dir + "/" + name);
      }
      ::closedir(d);
    }
  }
  if (live.size() == 1) return live.front();
  if (live.empty()) {
    why = "no recycler answers in " + dir + " (one whose config sets control.socket is not " +
          "looked for there): " + ask;
    return {};
  }
  std::sort(live.begin(), live.end());
  why = std::to_string(live.size()) + " recyclers are running; " + ask + ":";
  for (const std::string& path : live) why += "\n  --socket " + path;
  return {};
}

std::string socket_path(const ClientOptions& o, std::string& why) {
  if (!o.socket.empty()) return o.socket;
  if (o.config_file.empty()) return running_socket(why);
  // The config's own control.socket, when it sets one: read alone, so that a
  // config with errors elsewhere (a reload to come) still names it.
  if (auto socket = configured_socket(o.config_file)) return *socket;
  auto path =
      default_socket_path(config_name(o.config_file), ::geteuid(), std::getenv("XDG_RUNTIME_DIR"));
  if (!path) why = "no runtime directory (not root and XDG_RUNTIME_DIR unset); give --socket PATH";
  return path.value_or("");
}

class Connection {
 public:
  // nullopt (and `why`) when no supervisor answers.
  static std::optional<Connection> open(const ClientOptions& o, std::string& why) {
    std::string path = socket_path(o, why);
    if (path.empty()) return std::nullopt;
    sockaddr_un a{};
    if (path.size() >= sizeof(a.sun_path)) {
      why = path + ": path too long for a unix socket";
      return std::nullopt;
    }
    a.sun_family = AF_UNIX;
    std::memcpy(a.sun_path, path.data(), path.size());
    UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (!fd || ::connect(fd.get(), reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
      why = "cannot reach recycler at " + path + ": " + std::strerror(errno);
      return std::nullopt;
    }
    if (!trusted_server(fd.get(), path, o, why)) return std::nullopt;
    timeval tv{kTimeoutSeconds, 0};
    ::setsockopt(fd.get(), SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    ::setsockopt(fd.get(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    return Connection(std::move(fd));
  }

  // Whoever listens there must be root, this user, or the config file's
  // owner: anyone else could have bound the path first (a socket in a
  // directory they may write to) and would forge every answer.
  static bool trusted_server(int fd, const std::string& path, const ClientOptions& o,
                             std::string& why) {
    ucred cred{};
    socklen_t len = sizeof(cred);
    if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) {
      why = "cannot tell who listens on " + path + ": " + std::strerror(errno);
      return false;
    }
    if (cred.uid == 0 || cred.uid == ::geteuid()) return true;
    struct stat st {};
    bool has_config = !o.config_file.empty() && ::stat(o.config_file.c_str(), &st) == 0;
    if (has_config && cred.uid == st.st_uid) return true;
    why = path + " is served by uid " + std::to_string(cred.uid) + ", which is neither root" +
          (has_config ? ", you, nor the owner of " + o.config_file : std::string(" nor you")) +
          ": not a recycler to trust; nothing was sent to it";
    return false;
  }

  void wait_forever() {
    timeval tv{0, 0};
    ::setsockopt(fd_.get(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  }

  bool send(const std::string& line) {
    std::string data = line + "\n";
    for (size_t done = 0; done < data.size();) {
      ssize_t n = ::send(fd_.get(), data.data() + done, data.size() - done, MSG_NOSIGNAL);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return false;
      done += static_cast<size_t>(n);
    }
    return true;
  }

  // The next line, or nullopt at the end (or a timeout).
  std::optional<std::string> line() {
    for (;;) {
      size_t nl = buf_.find('\n');
      if (nl != std::string::npos) {
        std::string out = buf_.substr(0, nl);
        buf_.erase(0, nl + 1);
        return out;
      }
      if (buf_.size() > kMaxResponseBytes) return std::nullopt;
      char chunk[65536];
      ssize_t n = ::read(fd_.get(), chunk, sizeof(chunk));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return std::nullopt;
      buf_.append(chunk, static_cast<size_t>(n));
    }
  }

 private:
  explicit Connection(UniqueFd fd) : fd_(std::move(fd)) {}
  UniqueFd fd_;
  std::string buf_;
};

// One request, one response; nullopt (and a message on stderr) when no
// supervisor answers.
std::optional<Json> ask(const ClientOptions& o, const Request& r,
                        std::optional<Connection>* keep = nullptr) {
  std::string why;
  auto c = Connection::open(o, why);
  if (!c) {
    std::cerr << "recycler: " << escape_text(why) << "\n";
    return std::nullopt;
  }
  // Read even when the request could not go: a server that refuses a client
  // ("too many clients") says why, then closes before reading.
  bool sent = c->send(request_line(r));
  std::optional<std::string> line = c->line();
  if (!line) {
    std::cerr << "recycler: "
              << (sent ? "no answer from recycler" : "recycler closed the connection") << "\n";
    return std::nullopt;
  }
  Json j = Json::parse(*line, nullptr, false);
  if (!j.is_object()) {
    std::cerr << "recycler: not a response: " << escape_text(line->substr(0, 200)) << "\n";
    return std::nullopt;
  }
  if (keep) *keep = std::move(c);
  return j;
}

// An error response: its message (and each error) on stderr.
int failed(const Json& j, bool json) {
  if (json) {
    std::cout << j.dump(-1, ' ', false, Json::error_handler_t::replace) << "\n";
    return kExitFailed;
  }
  std::cerr << "recycler: " << escape_text(j.value("error", std::string("failed"))) << "\n";
  if (auto e = j.find("errors"); e != j.end() && e->is_array())
    for (const Json& line : *e)
      if (line.is_string()) std::cerr << escape_text(line.get<std::string>()) << "\n";
  return kExitFailed;
}

bool ok(const Json& j) {
  auto it = j.find("ok");
  return it != j.end() && it->is_boolean() && it->get<bool>();
}

std::vector<WorkerStatus> workers_of(const Json& j) {
  std::vector<WorkerStatus> out;
  if (auto w = j.find("workers"); w != j.end() && w->is_array())
    for (const Json& one : *w) out.push_back(worker_from_json(one));
  return out;
}

Result<std::vector<Target>> targets_of(const std::vector<std::string>& names) {
  std::vector<Target> out;
  for (const std::string& n : names) {
    auto t = parse_target(n);
    if (!t) return t.error();
    out.push_back(std::move(*t));
  }
  return out;
}

std::string dump(const Json& j) {
  return j.dump(-1, ' ', false, Json::error_handler_t::replace);
}

}  // namespace

int status_command(const ClientOptions& o, const std::vector<std::string>& programs) {
  Request r;
  r.command = Command::Status;
  auto targets = targets_of(programs);
  if (!targets) {
    std::cerr << "recycler: " << escape_text(targets.error().message) << "\n";
    return 2;
  }
  r.targets = std::move(*targets);
  auto j = ask(o, r);
  if (!j) return kExitUnreachable;
  if (!ok(*j)) return failed(*j, o.json);
  std::vector<WorkerStatus> workers = workers_of(*j);
  if (o.json)
    std::cout << dump(j->value("workers", Json::array())) << "\n";
  else
    std::cout << status_table(workers, !programs.empty()) << gang_lines(*j) << budget_line(*j)
              << container_line(*j);
  return status_exit_code(workers);
}

int action_command(const ClientOptions& o, Command command, const std::vector<std::string>& names,
                   const std::string& signal) {
  Request r;
  r.command = command;
  auto targets = targets_of(names);
  if (!targets) {
    std::cerr << "recycler: " << escape_text(targets.error().message) << "\n";
    return 2;
  }
  r.targets = std::move(*targets);
  if (command == Command::Signal) {
    std::string why;
    auto sig = units::parse_signal(signal, &why);
    if (!sig) {
      std::cerr << "recycler: " << escape_text(why) << "\n";
      return 2;
    }
    r.signal = *sig;
  }
  auto j = ask(o, r);
  if (!j) return kExitUnreachable;
  if (o.json) {
    std::cout << dump(*j) << "\n";
    return ok(*j) ? 0 : kExitFailed;
  }
  if (auto results = j->find("results"); results != j->end() && results->is_array())
    for (const Json& one : *results)
      if (one.is_object())
        (one.value("ok", false) ? std::cout : std::cerr)
            << escape_text(one.value("target", std::string("?"))) << ": "
            << escape_text(one.value("message", std::string())) << "\n";
  if (!ok(*j)) return failed(*j, false);
  return 0;
}

int reload_command(const ClientOptions& o) {
  Request r;
  r.command = Command::Reload;
  auto j = ask(o, r);
  if (!j) return kExitUnreachable;
  if (o.json) {
    std::cout << dump(*j) << "\n";
    return ok(*j) ? 0 : kExitFailed;
  }
  if (auto w = j->find("warnings"); w != j->end() && w->is_array())
    for (const Json& line : *w)
      if (line.is_string()) std::cerr << escape_text(line.get<std::string>()) << "\n";
  if (!ok(*j)) return failed(*j, false);
  const Json changes = j->value("changes", Json::object());
  for (const char* kind : {"restarted", "stopped", "started", "unchanged"}) {
    auto list = changes.find(kind);
    if (list == changes.end() || !list->is_array() || list->empty()) continue;
    std::cout << kind << ":";
    for (const Json& name : *list)
      if (name.is_string()) std::cout << " " << escape_text(name.get<std::string>());
    std::cout << "\n";
  }
  std::cout << escape_text(j->value("message", std::string("reloaded"))) << "\n";
  return 0;
}

namespace {
void print_event(const Json& e, bool json) {
  std::cout << (json ? dump(e) : event_text(e)) << "\n";
  std::cout.flush();
}

// The answer's array `key`, each object printed; then, with `follow`, each
// object the supervisor sends until it closes the connection.
int print_then_follow(const Json& answer, const char* key, Connection* follow, bool json,
                      void (*print)(const Json&, bool)) {
  if (auto items = answer.find(key); items != answer.end() && items->is_array())
    for (const Json& e : *items) print(e, json);
  if (!follow) return 0;
  follow->wait_forever();
  while (auto line = follow->line()) {
    Json e = Json::parse(*line, nullptr, false);
    if (e.is_object()) print(e, json);
  }
  std::cerr << "recycler: the supervisor closed the connection\n";
  return kExitUnreachable;
}

// As the log writes a worker's line: time, api[0] out | the line.
void print_output(const Json& e, bool json) {
  if (json) {
    std::cout << dump(e) << "\n";
  } else {
    std::string stream = e.value("stream", std::string()) == "stdout" ? "out" : "err";
    std::cout << log_time(e) << " " << escape_text(e.value("program", std::string())) << "["
              << e.value("slot", 0u) << "] " << stream << " | "
              << escape_text(e.value("line", std::string()))
              << (e.value("partial", false) ? " ..." : "") << "\n";
  }
  std::cout.flush();
}
}  // namespace

int events_command(const ClientOptions& o, bool follow, std::optional<size_t> lines) {
  Request r;
  r.command = Command::Events;
  r.follow = follow;
  r.lines = lines;
  std::optional<Connection> c;
  auto j = ask(o, r, &c);
  if (!j) return kExitUnreachable;
  if (!ok(*j)) return failed(*j, o.json);
  return print_then_follow(*j, "events", follow ? &*c : nullptr, o.json, print_event);
}

int logs_command(const ClientOptions& o, const std::vector<std::string>& names, size_t lines,
                 bool follow) {
  Request r;
  r.command = Command::Logs;
  auto targets = targets_of(names);
  if (!targets) {
    std::cerr << "recycler: " << escape_text(targets.error().message) << "\n";
    return 2;
  }
  r.targets = std::move(*targets);
  r.lines = lines;
  r.follow = follow;
  std::optional<Connection> c;
  auto j = ask(o, r, &c);
  if (!j) return kExitUnreachable;
  if (!ok(*j)) return failed(*j, o.json);
  if (uint64_t left_out = j->value("left_out", uint64_t{0}); left_out > 0 && !o.json)
    std::cerr << "recycler: the " << left_out << " oldest lines left out (one answer holds "
              << (kMaxLogAnswerBytes >> 20) << " MiB): name a slot, or ask for fewer with -n\n";
  return print_then_follow(*j, "lines", follow ? &*c : nullptr, o.json, print_output);
}

namespace {

// top's keyboard: stdin a terminal, read a key at a time without echo, for
// as long as top runs (also when a signal ends it).
struct termios top_saved_termios {};
void restore_terminal() {
  ::tcsetattr(STDIN_FILENO, TCSANOW, &top_saved_termios);
}
void restore_and_die(int sig) {
  restore_terminal();
  std::signal(sig, SIG_DFL);
  std::raise(sig);
}

class RawKeys {
 public:
  RawKeys() {
    if (::isatty(STDIN_FILENO) != 1 || ::tcgetattr(STDIN_FILENO, &top_saved_termios) != 0) return;
    struct termios raw = top_saved_termios;
    raw.c_lflag &= ~static_cast<tcflag_t>(ICANON | ECHO);
    raw.c_cc[VMIN] = 1;
    raw.c_cc[VTIME] = 0;
    for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGQUIT}) std::signal(sig, restore_and_die);
    active_ = ::tcsetattr(STDIN_FILENO, TCSANOW, &raw) == 0;
  }
  ~RawKeys() {
    if (active_) restore_terminal();
  }
  RawKeys(const RawKeys&) = delete;
  RawKeys& operator=(const RawKeys&) = delete;

  // Waits up to `seconds` for a key; true when it was q (or the input ended).
  bool quit_within(double seconds) const {
    auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    for (;;) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) return false;
      if (!active_) {
        std::this_thread::sleep_for(left);  // the refresh rate; no keyboard to read
        return false;
      }
      struct pollfd in {
        STDIN_FILENO, POLLIN, 0
      };
      int n = ::poll(&in, 1, static_cast<int>(left.count()));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return false;
      char key = 0;
      ssize_t got = ::read(STDIN_FILENO, &key, 1);
      if (got == 0) return true;
      if (got == 1 && (key == 'q' || key == 'Q')) return true;
    }
  }

 private:
  bool active_ = false;
};

// Each line cut to the terminal's width (without splitting a UTF-8
// character): a long reason would wrap and push the view off the screen.
std::string fit_width(const std::string& text) {
  struct winsize ws {};
  if (::ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) != 0 || ws.ws_col == 0) return text;
  std::string out;
  size_t at = 0;
  while (at < text.size()) {
    size_t nl = text.find('\n', at);
    std::string line = text.substr(at, nl == std::string::npos ? std::string::npos : nl - at);
    if (line.size() > ws.ws_col) {
      size_t cut = ws.ws_col;
      while (cut > 0 && (static_cast<unsigned char>(line[cut]) & 0xc0) == 0x80) --cut;
      line.resize(cut);
    }
    out += line;
    if (nl == std::string::npos) break;
    out += '\n';
    at = nl + 1;
  }
  return out;
}

}  // namespace

// The events under top's table.
constexpr size_t kTopEvents = 5;

int top_command(const ClientOptions& o, double interval_s, unsigned count) {
  bool terminal = ::isatty(STDOUT_FILENO) == 1;
  RawKeys keys;
  for (unsigned i = 0; count == 0 || i < count; ++i) {
    if (i > 0 && keys.quit_within(interval_s)) break;
    Request r;
    r.command = Command::Status;
    auto j = ask(o, r);
    if (!j) return kExitUnreachable;
    if (!ok(*j)) return failed(*j, o.json);
    std::vector<WorkerStatus> workers = by_memory(workers_of(*j));
    std::string summary = j->value("supervisor", Json::object()).value("summary", std::string());
    if (o.json) {
      std::cout << dump(j->value("workers", Json::array())) << "\n";
    } else {
      // Home and clear to the end: the view is redrawn in place.
      std::string view = "recycler: " + escape_text(summary) + "\n" + budget_line(*j) +
                         container_line(*j) + status_table(workers, true);
      Request recent;
      recent.command = Command::Events;
      recent.lines = kTopEvents;
      if (auto events = ask(o, recent); events && ok(*events)) {
        view += "\nlast events:\n";
        for (const Json& e : events->value("events", Json::array())) view += event_text(e) + "\n";
      }
      if (terminal)
        std::cout << "\x1b[H\x1b[2J" << fit_width(view) << "(q quits)\n";
      else
        std::cout << view;
      if (!terminal) std::cout << "\n";
    }
    std::cout.flush();
  }
  return 0;
}

}  // namespace recycler::control
