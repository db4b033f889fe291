// A program's listen: sockets, opened by recycler and handed to every
// worker. The owner and group of a unix socket are names here; check.cpp
// resolves them (and gives a socket without a group the program's).
#include "supervisor/config/parse_util.h"

namespace recycler::config::detail {
namespace {

constexpr size_t kMaxListen = 64;           // sockets per program
constexpr unsigned kMaxBacklog = 1u << 20;  // listen() caps it at somaxconn anyway
constexpr size_t kMaxSocketPath = 107;      // sizeof(sockaddr_un::sun_path) - 1

// "unix:PATH" or HOST:PORT into `socket`; false, reported, when it is neither.
bool parse_address(const Field& address, const std::string& text, const fs::path& base,
                   ListenSocket& socket, Report& r) {
  if (text.rfind("unix:", 0) == 0) {
    std::string path = text.substr(5);
    if (path.empty() || path.find('\0') != std::string::npos) {
      r.error(address.mark(), address.path + ": expected unix:/path, got " + quote(text));
      return false;
    }
    std::error_code ec;
    socket.path = fs::absolute(base / path, ec).lexically_normal().string();
    if (socket.path.size() > kMaxSocketPath) {
      r.error(address.mark(), address.path + ": " + quote(socket.path) + " is " +
                                  std::to_string(socket.path.size()) +
                                  " bytes long; a unix socket's path has at most " +
                                  std::to_string(kMaxSocketPath));
      return false;
    }
    return true;
  }
  std::string why;
  socket.tcp = parse_listen_address(text, &why);
  if (!socket.tcp) {
    r.error(address.mark(), address.path + ": " + why + " (or unix:/path)");
    return false;
  }
  if (socket.tcp->port == 0) {
    r.error(address.mark(),
            address.path + ": port 0 would give every start another port; name one");
    return false;
  }
  return true;
}

void parse_socket_name(const Field& v, ListenSocket& socket, Report& r) {
  auto name = read_scalar(v, "a name", r);
  // LISTEN_FDNAMES is colon-separated; systemd allows at most 255 characters.
  if (name && (name->empty() || name->size() > 255 ||
               name->find_first_not_of("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
                                       "0123456789_.-") != std::string::npos))
    r.error(v.mark(), v.path + ": " + quote(*name) +
                          " is not a valid name: use 1 to 255 letters, digits, _ . or -");
  else if (name)
    socket.name = *name;
}

// A map entry's keys besides address.
void parse_socket_options(const MapView& map, bool is_unix, ListenSocket& socket, ListenSite& site,
                          Report& r) {
  if (auto* v = map.get("name")) parse_socket_name(*v, socket, r);
  if (auto* v = map.get("backlog")) set(socket.backlog, read_integer(*v, 1, kMaxBacklog, r));
  for (const char* key : {"mode", "owner", "group"})
    if (const Field* v = map.get(key); v && !is_unix)
      r.error(v->mark(), v->path + ": only a unix socket has a " + key);
  if (auto* v = map.get("mode"); v && is_unix) {
    auto mode = read_scalar(*v, "an octal mode such as 0660", r);
    if (mode && !octal_mode(*mode))
      r.error(v->mark(), v->path + ": expected an octal mode such as 0660, got " + quote(*mode));
    else if (mode)
      socket.mode = static_cast<mode_t>(std::stoul(*mode, nullptr, 8));
  }
  if (auto* v = map.get("owner"); v && is_unix) {
    if (auto name = read_scalar(*v, "a user name", r))
      site.owner = Site{v->path, v->mark(), r.reserve(), *name};
  }
  if (auto* v = map.get("group"); v && is_unix) {
    if (auto name = read_scalar(*v, "a group name", r))
      site.group = Site{v->path, v->mark(), r.reserve(), *name};
  }
}

// listen: ["127.0.0.1:8000", "unix:/run/app.sock",
//          {name: http, address: "[::1]:8000", backlog: 1024},
//          {address: "unix:app.sock", mode: 0660, owner: app, group: www-data}]
// A relative unix path is relative to the config file, like cwd.
void parse_listen_entry(const Field& f, const fs::path& base, ProgramConfig& p, ProgramSites& sites,
                        Report& r) {
  ListenSocket socket;
  socket.name = p.name;
  const Field* address = &f;
  std::optional<MapView> map;
  if (f.value.IsMap()) {
    map = read_map(f, r, kListenKeys);
    if (!map) return;
    address = map->get("address");
    if (!address) return r.error(f.mark(), f.path + ".address is required");
  }
  auto text = read_scalar(*address, "HOST:PORT, [IPV6]:PORT or unix:/path", r);
  if (!text) return;
  if (!parse_address(*address, *text, base, socket, r)) return;
  bool is_unix = !socket.tcp;
  ListenSite site;
  if (map) parse_socket_options(*map, is_unix, socket, site, r);
  bool named = site.owner || site.group;
  for (const ListenSocket& other : p.listen) {
    if (other.same_endpoint(socket)) {
      if (named) sites.listen.push_back(std::move(site));
      return r.error(address->mark(), address->path + ": " + socket.address() + " is listed twice");
    }
  }
  site.socket = p.listen.size();
  if (named) sites.listen.push_back(std::move(site));
  p.listen.push_back(std::move(socket));
}

}  // namespace

void parse_listen(const Field& f, const fs::path& base, ProgramConfig& p, ProgramSites& sites,
                  Report& r) {
  if (f.null()) return;
  if (f.value.IsScalar() || f.value.IsMap()) return parse_listen_entry(f, base, p, sites, r);
  if (!f.value.IsSequence()) return r.error(f.mark(), f.path + " must be a list of addresses");
  if (f.value.size() > kMaxListen)
    return r.error(f.mark(), f.path + ": at most " + std::to_string(kMaxListen) + " sockets");
  for (size_t i = 0; i < f.value.size(); ++i)
    parse_listen_entry(f.item(i, f.value[i]), base, p, sites, r);
}

// One socket, one program: the second bind would fail at start-up.
void check_listen_taken(const Field& program, const std::vector<ProgramConfig>& programs,
                        Report& r) {
  const ProgramConfig& added = programs.back();
  for (const ListenSocket& socket : added.listen)
    for (size_t i = 0; i + 1 < programs.size(); ++i)
      for (const ListenSocket& other : programs[i].listen)
        if (other.same_endpoint(socket))
          r.error(program.key_mark, "programs." + added.name + ".listen: " + socket.address() +
                                        " is already a socket of " + programs[i].name);
}

}  // namespace recycler::config::detail
