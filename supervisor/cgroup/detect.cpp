#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <sstream>

#include "policies/base/enums.h"
#include "supervisor/cgroup/cgroup.h"

namespace recycler::cgroup {
namespace {

// mountinfo escapes space, tab, newline and backslash as \ooo.
std::string unescape_octal(const std::string& s) {
  auto oct = [](char c) { return c >= '0' && c <= '7'; };
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\' && i + 3 < s.size() && oct(s[i + 1]) && oct(s[i + 2]) && oct(s[i + 3])) {
      out += static_cast<char>((s[i + 1] - '0') * 64 + (s[i + 2] - '0') * 8 + (s[i + 3] - '0'));
      i += 3;
    } else {
      out += s[i];
    }
  }
  return out;
}

bool has_option(const std::string& options, const std::string& name) {
  std::stringstream ss(options);
  std::string item;
  while (std::getline(ss, item, ','))
    if (item == name) return true;
  return false;
}

std::string join_path(const std::string& a, const std::string& b) {
  if (a.empty() || a == "/") return "/" + b;
  return a + "/" + b;
}

// The nearest directory at or above `dir` that exists: where mkdir -p starts.
std::string nearest_existing(std::string dir) {
  while (!dir.empty() && ::access(dir.c_str(), F_OK) != 0) {
    size_t slash = dir.rfind('/');
    if (slash == std::string::npos || slash == 0) return "/";
    dir.resize(slash);
  }
  return dir;
}

std::vector<std::string> words(const std::string& text) {
  std::vector<std::string> out;
  std::stringstream ss(text);
  std::string w;
  while (ss >> w) out.push_back(w);
  return out;
}

void check_writable(Layout& layout) {
  for (const Hierarchy& h : layout.hierarchies) {
    std::string start = nearest_existing(layout.dir(h));
    if (::access(start.c_str(), W_OK) != 0) {
      layout.not_enforced =
          errno == EROFS
              ? "the cgroup filesystem is mounted read-only at " + start +
                    " (an unprivileged container: run it privileged, or with a writable cgroup "
                    "namespace, for worker cgroups)"
              : "no permission to create cgroups under " + start +
                    " (run recycler as root, or give it a delegated cgroup)";
      return;
    }
  }
}

// v2: a process may not live in a cgroup whose controllers are enabled for its
// children. We can move ourselves into a leaf, but anyone else in our cgroup
// (the shell that started us) blocks delegation.
void check_v2_delegation(Layout& layout, const Hierarchy& h) {
  std::string own_dir = h.mount + (layout.own == "/" ? "" : layout.own);
  auto procs = read_file(own_dir + "/cgroup.procs");
  if (!procs) {
    layout.not_enforced = "cannot read " + own_dir + "/cgroup.procs: " + procs.error().message;
    return;
  }
  std::string self = std::to_string(::getpid());
  std::vector<std::string> others;
  for (const std::string& pid : words(*procs))
    if (pid != self) others.push_back(pid);
  if (!others.empty()) {
    layout.not_enforced =
        "cgroup v2: recycler's cgroup " + layout.own + " also holds other processes (pid " +
        others.front() + (others.size() > 1 ? ", ..." : "") +
        "), so no worker cgroups can be created below it; run recycler in a cgroup of its own "
        "(a systemd service with Delegate=yes, or systemd-run --scope -p Delegate=yes recycler "
        "...), or set an absolute cgroup_root";
    return;
  }
  if (::access((own_dir + "/cgroup.subtree_control").c_str(), W_OK) != 0)
    layout.not_enforced = "no permission to delegate controllers in " + own_dir +
                          " (run recycler as root, or with Delegate=yes)";
}

// The optional memory files (files.h) the memory cgroup `dir` lacks: judged
// only where `dir` has the hard limit's file (not a v2 root, which has none
// of them; not a cgroup without the memory controller).
void find_absent_files(Layout& layout, const std::string& dir) {
  const Files& f = layout.files();
  auto has = [&](const char* file) { return ::access((dir + "/" + file).c_str(), F_OK) == 0; };
  if (!has(f.memory_max)) return;
  for (const char* file : {f.memory_low, f.oom_group, f.swap_max})
    if (file && !has(file)) layout.absent_files.push_back(file);
}

// The cgroup filesystems mountinfo lists: the unified hierarchy, and the v1
// hierarchies of the controllers recycler uses (the first mount of each).
struct Mounts {
  std::optional<std::string> v2;
  std::vector<Hierarchy> v1;
};

Mounts find_mounts(const std::vector<MountEntry>& entries, const Paths& paths) {
  Mounts found;
  for (const MountEntry& m : entries) {
    if (m.fstype == "cgroup2") {
      // The unified hierarchy at the usual place wins over stray extra mounts.
      if (!found.v2 || m.mount_point == "/sys/fs/cgroup") found.v2 = m.mount_point;
    } else if (m.fstype == "cgroup") {
      for (const char* c : {"memory", "pids", "cpu", "freezer"})
        if (has_option(m.super_options, c) &&
            std::none_of(found.v1.begin(), found.v1.end(),
                         [&](auto& h) { return h.controller == c; }))
          found.v1.push_back({c, paths.prefix + m.mount_point});
    }
  }
  return found;
}

// v1 or hybrid: every hierarchy found, memory first; a relative root starts
// at the top of each.
void detect_v1(Layout& layout, const std::string& root, const std::vector<Hierarchy>& v1) {
  layout.hierarchies = v1;
  for (const char* c : kControllers)
    if (std::none_of(v1.begin(), v1.end(), [&](auto& h) { return h.controller == c; }))
      layout.missing.push_back(c);
  // Keep memory first: it is where recycler reads procs and OOM counters.
  std::stable_partition(layout.hierarchies.begin(), layout.hierarchies.end(),
                        [](auto& h) { return h.controller == "memory"; });
  layout.root = root.front() == '/' ? root : "/" + root;
  // v1's top memory cgroup has every file its children get.
  if (layout.hierarchies.front().controller == "memory")
    find_absent_files(layout, layout.hierarchies.front().mount);
}

// v2: a relative root starts at recycler's own cgroup; layout.not_enforced
// says so when that cannot be told.
void detect_v2(Layout& layout, const std::string& root, const std::string& mount,
               const Paths& paths) {
  Hierarchy h{"", paths.prefix + mount};
  layout.hierarchies.push_back(h);
  auto self = read_file(paths.self_cgroup);
  auto own = self ? parse_v2_self_cgroup(*self) : std::nullopt;
  if (!own) {
    layout.not_enforced = "cannot tell recycler's own cgroup from " + paths.self_cgroup;
    return;
  }
  layout.own = *own;
  layout.root = root.front() == '/' ? root : join_path(layout.own, root);
  // The real root cgroup has no cgroup.type; a namespace or delegated root does
  // and, like any non-root cgroup, may not hold processes and enable controllers.
  std::string own_dir = h.mount + (layout.own == "/" ? "" : layout.own);
  bool under_own = layout.root.rfind(layout.own == "/" ? "/" : layout.own + "/", 0) == 0;
  layout.needs_leaf = under_own && ::access((own_dir + "/cgroup.type").c_str(), F_OK) == 0;
  auto available = read_file(own_dir + "/cgroup.controllers");
  std::vector<std::string> have = available ? words(*available) : std::vector<std::string>{};
  for (const char* c : kControllers)
    if (std::find(have.begin(), have.end(), c) == have.end()) layout.missing.push_back(c);
  find_absent_files(layout, own_dir);
  if (layout.needs_leaf) check_v2_delegation(layout, h);
}

}  // namespace

const char* to_string(Mode mode) {
  static constexpr EnumName<Mode> kModes[] = {
      {Mode::None, "none"}, {Mode::V1, "v1"}, {Mode::Hybrid, "hybrid"}, {Mode::V2, "v2"}};
  return enum_name(kModes, mode);
}

std::vector<MountEntry> parse_mountinfo(const std::string& text) {
  std::vector<MountEntry> out;
  std::stringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) {
    std::vector<std::string> f = words(line);
    auto sep = std::find(f.begin(), f.end(), "-");
    if (f.size() < 5 || sep == f.end() || f.end() - sep < 4) continue;
    out.push_back({unescape_octal(f[4]), *(sep + 1), *(sep + 3)});
  }
  return out;
}

std::optional<std::string> parse_v2_self_cgroup(const std::string& text) {
  std::stringstream lines(text);
  std::string line;
  while (std::getline(lines, line))
    if (line.rfind("0::", 0) == 0) return line.substr(3);
  return std::nullopt;
}

std::optional<std::string_view> parse_cgroup_of(std::string_view text,
                                                std::string_view controller) {
  while (!text.empty()) {
    size_t eol = text.find('\n');
    std::string_view line = text.substr(0, eol);
    text = eol == std::string_view::npos ? std::string_view() : text.substr(eol + 1);
    size_t first = line.find(':');
    size_t second = first == std::string_view::npos ? first : line.find(':', first + 1);
    if (second == std::string_view::npos) continue;
    std::string_view controllers = line.substr(first + 1, second - first - 1);
    bool found = false;
    if (controller.empty()) {
      found = line.substr(0, first) == "0" && controllers.empty();
    } else {
      for (size_t pos = 0; pos <= controllers.size() && !found;) {
        size_t comma = controllers.find(',', pos);
        if (comma == std::string_view::npos) comma = controllers.size();
        found = controllers.substr(pos, comma - pos) == controller;
        pos = comma + 1;
      }
    }
    if (found) return line.substr(second + 1);
  }
  return std::nullopt;
}

std::optional<WorkerId> parse_worker_of(std::string_view text, const Layout& layout) {
  if (layout.hierarchies.empty()) return std::nullopt;
  // The hierarchy of the first controller, "" on v2.
  auto found = parse_cgroup_of(text, layout.hierarchies.front().controller);
  if (!found) return std::nullopt;
  std::string_view path = *found;
  if (path.size() <= layout.root.size() + 1 || !path.starts_with(layout.root) ||
      path[layout.root.size()] != '/')
    return std::nullopt;
  path.remove_prefix(layout.root.size() + 1);  // "program/slot[/...]"
  size_t slash = path.find('/');
  if (slash == 0 || slash == std::string_view::npos) return std::nullopt;
  std::string_view slot = path.substr(slash + 1, path.find('/', slash + 1) - slash - 1);
  unsigned variant = 0;
  if (slot.ends_with(".b")) {  // a surge's other cgroup
    slot.remove_suffix(2);
    variant = 1;
  }
  unsigned n = 0;
  if (slot.empty() || slot.size() > 9) return std::nullopt;
  for (char c : slot) {
    if (c < '0' || c > '9') return std::nullopt;
    n = n * 10 + static_cast<unsigned>(c - '0');
  }
  return WorkerId{std::string(path.substr(0, slash)), n, variant};
}

std::string Layout::display_root() const {
  if (hierarchies.empty()) return root;
  return dir(hierarchies.front());
}

Layout detect(const std::string& root, const Paths& paths) {
  Layout layout;
  auto mountinfo = read_file(paths.mountinfo);
  if (!mountinfo) {
    layout.not_enforced = "cannot read " + paths.mountinfo + ": " + mountinfo.error().message;
    return layout;
  }
  Mounts mounts = find_mounts(parse_mountinfo(*mountinfo), paths);
  bool v1_useful = std::any_of(mounts.v1.begin(), mounts.v1.end(),
                               [](auto& h) { return h.controller != "freezer"; });
  if (v1_useful) {
    layout.mode = mounts.v2 ? Mode::Hybrid : Mode::V1;
    detect_v1(layout, root, mounts.v1);
  } else if (mounts.v2) {
    layout.mode = Mode::V2;
    detect_v2(layout, root, *mounts.v2, paths);
  } else {
    layout.not_enforced = "no cgroup filesystem is mounted";
    return layout;
  }
  if (!layout.not_enforced) check_writable(layout);
  return layout;
}

}  // namespace recycler::cgroup
