// The cgroup manager for v1, hybrid and v2 hosts. libcgroup creates each
// worker cgroup with its limits; the memory settings a kernel may lack
// (memory_settings.h) and the hot and the delicate parts (joining, reading
// counters, killing, removing) use the cgroup files directly through a
// directory fd per hierarchy. Without cgroups: manager_fallback.cpp.
#include <dirent.h>
#include <fcntl.h>
#include <libcgroup.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <fstream>
#include <set>
#include <sstream>

#include "supervisor/cgroup/cgroup.h"
#include "supervisor/cgroup/memory_settings.h"
#include "supervisor/log/log.h"
#include "supervisor/probe/parse.h"
#include "supervisor/probe/probe.h"
#include "supervisor/util/pidfd.h"

namespace recycler::cgroup {
namespace {

// Who holds the flock on the file `fd` is open on: the first holder /proc/locks
// lists for its device and inode ("1: FLOCK  ADVISORY  WRITE 1234 00:2a:5678 0 EOF";
// a waiter's line has "->" after the number). At most 4096 lines are read.
std::optional<pid_t> flock_holder(int fd, const std::string& proc) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) return std::nullopt;
  std::ifstream locks(proc + "/locks");
  std::string line;
  for (int n = 0; n < 4096 && std::getline(locks, line); ++n) {
    std::istringstream words(line);
    std::string id, kind, type, mode, pid, where;
    if (!(words >> id >> kind >> type >> mode >> pid >> where) || kind != "FLOCK") continue;
    unsigned major = 0, minor = 0;
    unsigned long long inode = 0;
    if (std::sscanf(where.c_str(), "%x:%x:%llu", &major, &minor, &inode) != 3) continue;
    if (major != ::major(st.st_dev) || minor != ::minor(st.st_dev) || inode != st.st_ino) continue;
    pid_t holder = 0;
    if (std::from_chars(pid.data(), pid.data() + pid.size(), holder).ec == std::errc() &&
        holder > 0)
      return holder;
  }
  return std::nullopt;
}

constexpr const char* kSupervisorLeaf = "supervisor";
constexpr uint64_t kCpuPeriodUs = 100000;

void sleep_ms(long ms) {
  timespec ts{ms / 1000, (ms % 1000) * 1000000L};
  ::nanosleep(&ts, nullptr);
}

Status mkdir_p(const std::string& dir) {
  std::string path;
  std::stringstream ss(dir);
  std::string part;
  while (std::getline(ss, part, '/')) {
    if (part.empty()) continue;
    path += "/" + part;
    if (::mkdir(path.c_str(), 0755) != 0 && errno != EEXIST) return errno_error("mkdir " + path);
  }
  return Ok{};
}

// cgroup.procs: one pid a line.
std::vector<pid_t> parse_pids(std::string_view text) {
  std::vector<pid_t> out;
  const char* p = text.data();
  const char* end = p + text.size();
  while (p < end) {
    pid_t pid = 0;
    auto [next, ec] = std::from_chars(p, end, pid);
    if (ec != std::errc()) break;
    out.push_back(pid);
    p = next;
    while (p < end && (*p == '\n' || *p == ' ')) ++p;
  }
  return out;
}

std::vector<std::string> subdirectories(const std::string& dir) {
  std::vector<std::string> out;
  DIR* d = ::opendir(dir.c_str());
  if (!d) return out;
  while (dirent* e = ::readdir(d)) {
    if (e->d_type != DT_DIR || e->d_name[0] == '.') continue;
    out.emplace_back(e->d_name);
  }
  ::closedir(d);
  return out;
}

// v2: make `controllers` available to the children of `dir`.
Status enable_subtree(const std::string& dir, const std::vector<std::string>& controllers) {
  for (const std::string& c : controllers) {
    Status s = write_file(dir + "/cgroup.subtree_control", "+" + c);
    if (!s) return s;
  }
  return Ok{};
}

bool is_permission_error(int err) {
  return err == EACCES || err == EPERM || err == EROFS;
}

class CgroupWorker final : public WorkerCgroup {
 public:
  CgroupWorker(const Layout& layout, std::string rel)
      : files_(layout.files()), rel_(std::move(rel)) {
    for (const Hierarchy& h : layout.hierarchies)
      dirs_.push_back({h.controller, h.mount + rel_, {}});
    // A directory fd only where files are read often (the memory hierarchy on
    // v1): fds count against RLIMIT_NOFILE, and the others are rarely used.
    if (!dirs_.empty())
      dirs_.front().fd.reset(::open(dirs_.front().path.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
    // The probes read the memory files through it, held open (probe.h).
    if (auto dir = memory_dir()) held_ = std::make_unique<probe::MemoryFiles>(dir->fd, dir->v2);
  }

  std::string path() const override { return dirs_.empty() ? rel_ : dirs_.front().path; }

  // A file of the memory hierarchy (memory_settings.h): through the memory
  // directory's fd, which the constructor opened. ENODEV without one.
  Status write_memory(const char* file, std::string_view value) const {
    const Dir* memory = find_dir(files_.memory_controller);
    if (!memory) return Error{"no memory cgroup", ENODEV};
    return memory->write(file, value);
  }

  std::vector<UniqueFd> open_join_fds() override {
    // v1: the child moves its one thread through "tasks". Writing "0" there
    // skips the kernel's global threadgroup lock that a cgroup.procs write
    // takes, whose RCU grace period cost every start after a quiet spell ~7 ms
    // (bench/spawn_latency). Right after fork the child has a single thread,
    // so moving it moves the process. v2 forbids moving a lone thread between
    // domain cgroups: cgroup.procs there (Files::join).
    std::vector<UniqueFd> fds;
    for (const Dir& d : dirs_)  // v1's freezer too: kill_all freezes through it
      fds.push_back(d.open(files_.join, O_WRONLY));
    return fds;
  }

  void adopt(pid_t) override {}
  bool enforcing() const override { return true; }

  std::optional<MemoryDir> memory_dir() const override {
    if (dirs_.empty() || !primary().fd) return std::nullopt;
    if (primary().controller != files_.memory_controller) return std::nullopt;
    return MemoryDir{primary().fd.get(), files_.v2};
  }

  // Every process joins every hierarchy of its worker (open_join_fds), so one
  // hierarchy lists them all: the first (memory when there is one), through
  // its directory fd. Sorted, without duplicates.
  std::vector<pid_t> pids() const override {
    if (dirs_.empty()) return {};
    auto text = primary().read(files_.procs);
    if (!text) return {};
    std::vector<pid_t> out = parse_pids(*text);
    std::sort(out.begin(), out.end());
    out.erase(std::unique(out.begin(), out.end()), out.end());
    return out;
  }

  bool populated() const override {
    if (files_.events) {
      auto events = primary().read(files_.events);
      if (events) return find_keyed_value(*events, "populated").value_or(0) != 0;
    }
    return !pids().empty();
  }

  void kill_all() override {
    if (files_.kill && primary().write(files_.kill, "1")) return;
    const Dir* freezer = find_dir(files_.freezer_controller);
    bool frozen = freezer && freeze(*freezer, true);
    // Frozen tasks cannot fork or exit, so this list is complete and every pid
    // in it is still the process it was. Without a freezer, repeat until empty.
    for (int round = 0; round < (frozen ? 1 : 20); ++round) {
      std::vector<pid_t> victims = pids();
      if (victims.empty()) break;
      for (pid_t p : victims) signal_pid(p, SIGKILL);
    }
    if (frozen) freeze(*freezer, false);
  }

  std::optional<uint64_t> oom_kills() const override {
    const Dir* memory = find_dir(files_.memory_controller);
    if (!memory) return std::nullopt;
    auto text = memory->read(files_.memory_events);
    if (!text) return std::nullopt;
    return find_keyed_value(*text, "oom_kill");
  }

  Status remove() override {
    if (held_) held_->close();
    for (Dir& d : dirs_) {
      if (::rmdir(d.path.c_str()) != 0 && errno != ENOENT) return errno_error("rmdir " + d.path);
    }
    return Ok{};
  }

 private:
  struct Dir {
    std::string controller;
    std::string path;
    UniqueFd fd;  // O_PATH, or none: then files are reached by path

    Result<std::string> read(const char* file) const {
      return fd ? read_file_at(fd.get(), file) : read_file(path + "/" + file);
    }
    Status write(const char* file, std::string_view data) const {
      return fd ? write_file_at(fd.get(), file, data) : write_file(path + "/" + file, data);
    }
    UniqueFd open(const char* file, int flags) const {
      return UniqueFd(fd ? ::openat(fd.get(), file, flags | O_CLOEXEC)
                         : ::open((path + "/" + file).c_str(), flags | O_CLOEXEC));
    }
  };

  const Dir& primary() const { return dirs_.front(); }
  const Dir* find_dir(const std::string& controller) const {
    for (const Dir& d : dirs_)
      if (d.controller == controller) return &d;
    return nullptr;
  }

  // Freezing is asynchronous in the kernel; it normally settles in well under
  // a millisecond. Wait a bounded time, then go on regardless.
  bool freeze(const Dir& d, bool on) {
    if (!d.write(files_.freeze, on ? files_.frozen : files_.thawed)) return false;
    if (!on) return true;
    for (int i = 0; i < 100; ++i) {
      auto state = d.read(files_.freeze_state);
      if (!state) return false;
      bool done = files_.v2 ? find_keyed_value(*state, "frozen").value_or(0) == 1
                            : state->rfind(files_.frozen, 0) == 0;
      if (done) return true;
      sleep_ms(1);
    }
    return true;
  }

  const Files& files_;
  std::string rel_;
  std::vector<Dir> dirs_;
  std::unique_ptr<probe::MemoryFiles> held_;  // after dirs_: unregistered before its fd closes
};

class CgroupManager final : public Manager {
 public:
  CgroupManager(Layout layout, UniqueFd lock, bool per_run_root, std::string proc)
      : layout_(std::move(layout)),
        lock_(std::move(lock)),
        per_run_root_(per_run_root),
        proc_(std::move(proc)) {}

  const Layout& layout() const override { return layout_; }
  bool enforcing() const override { return true; }

  Result<std::unique_ptr<WorkerCgroup>> create(const std::string& program, unsigned slot,
                                               const config::Limits& limits,
                                               unsigned variant) override {
    std::string leaf = std::to_string(slot) + (variant ? ".b" : "");
    std::string rel = layout_.root + "/" + program + "/" + leaf;
    ::cgroup* cg = cgroup_new_cgroup(rel.c_str());
    if (!cg) return Error{"libcgroup: cannot allocate cgroup " + rel};
    const Files& files = layout_.files();
    for (const Hierarchy& h : layout_.hierarchies) {
      if (files.v2) {
        for (const char* c : kControllers)
          if (!missing(c)) set_limits(cg, c, limits, files);
      } else {
        set_limits(cg, h.controller, limits, files);
      }
    }
    lift_reused_swap_limit(rel);
    // Ownership as created (recycler's own): libcgroup would otherwise walk
    // every new file to chown it to the same owner (72 chowns a slot on v1).
    int ret = cgroup_create_cgroup(cg, 1);
    int err = cgroup_get_last_errno();
    cgroup_free(&cg);
    if (ret != 0) {
      std::string why = cgroup_strerror(ret);
      if (ret == ECGOTHER && err) why = std::strerror(err);
      return Error{
          "creating cgroup " + layout_.display_root() + "/" + program + "/" + leaf + ": " + why,
          err};
    }
    auto worker = std::make_unique<CgroupWorker>(layout_, rel);
    write_memory_settings(*worker, program, limits);
    return std::unique_ptr<WorkerCgroup>(std::move(worker));
  }

  void remove_program(const std::string& program) override {
    for (const Hierarchy& h : layout_.hierarchies)
      ::rmdir((layout_.dir(h) + "/" + program).c_str());
  }

  void close() override {
    for (const Hierarchy& h : layout_.hierarchies) {
      for (const std::string& program : subdirectories(layout_.dir(h)))
        ::rmdir((layout_.dir(h) + "/" + program).c_str());
      ::rmdir(layout_.dir(h).c_str());
      if (per_run_root_)  // the last wrap-mode run out removes recycler-run/
        ::rmdir((h.mount + layout_.root.substr(0, layout_.root.rfind('/'))).c_str());
    }
    lock_.reset();
  }

  std::optional<WorkerId> owner_of(pid_t pid) const override {
    if (pid <= 0) return std::nullopt;
    auto text = read_file(proc_ + "/" + std::to_string(pid) + "/cgroup");
    if (!text) return std::nullopt;
    return parse_worker_of(*text, layout_);
  }

  // Kills and removes what crashed predecessors left behind: on this root,
  // and with per-run roots on the siblings whose recycler is gone.
  void clean_up_after_predecessors() {
    clean_root(layout_.root);
    if (per_run_root_) clean_abandoned_siblings();
  }

 private:
  // Wrap mode: every run has its own root <parent>/<name>.<pid>. A sibling
  // whose recycler is gone (its lock is free and its pid no longer runs) was
  // left by one that crashed: clean it as its owner would have.
  void clean_abandoned_siblings() {
    size_t slash = layout_.root.rfind('/');
    std::string parent = layout_.root.substr(0, slash);
    std::string ours = layout_.root.substr(slash + 1);
    const Hierarchy& primary = layout_.hierarchies.front();
    for (const std::string& sibling : subdirectories(primary.mount + parent)) {
      if (sibling == ours || !abandoned(primary.mount + parent + "/" + sibling)) continue;
      clean_root(parent + "/" + sibling);
      for (const Hierarchy& h : layout_.hierarchies)
        ::rmdir((h.mount + parent + "/" + sibling).c_str());
    }
  }

  static bool abandoned(const std::string& dir) {
    size_t dot = dir.rfind('.');
    if (dot == std::string::npos) return false;
    std::string pid = dir.substr(dot + 1);
    if (pid.empty() || pid.find_first_not_of("0123456789") != std::string::npos) return false;
    if (process_exists(std::stoi(pid))) return false;  // its recycler runs
    UniqueFd fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    return fd && ::flock(fd.get(), LOCK_EX | LOCK_NB) == 0;
  }

  void clean_root(const std::string& root) {
    Layout layout = layout_;
    layout.root = root;
    const Hierarchy& primary = layout.hierarchies.front();
    std::vector<std::string> found;
    for (const std::string& program : subdirectories(layout.dir(primary))) {
      for (const std::string& slot : subdirectories(layout.dir(primary) + "/" + program)) {
        CgroupWorker w(layout, root + "/" + program + "/" + slot);
        size_t n = w.pids().size();
        w.kill_all();
        Status removed = Ok{};
        for (int i = 0; i < 200; ++i) {  // dying processes take a moment to leave
          removed = w.remove();
          if (removed || removed.error().code != EBUSY) break;
          sleep_ms(10);
        }
        found.push_back(program + "/" + slot + " (" + std::to_string(n) + " process" +
                        (n == 1 ? "" : "es") + (removed ? "" : "; " + removed.error().message) +
                        ")");
      }
      for (const Hierarchy& h : layout.hierarchies)
        ::rmdir((layout.dir(h) + "/" + program).c_str());
    }
    if (!found.empty()) {
      std::string list;
      for (const std::string& f : found) list += (list.empty() ? "" : ", ") + f;
      log::warn(
          "found {} stale worker cgroup{} under {} from a previous run: {}; killed what was "
          "left in them and removed them",
          found.size(), found.size() == 1 ? "" : "s", layout.display_root(), list);
    }
  }

  // v1: the kernel refuses a memory limit above the memory + swap limit, so
  // in a directory left from an earlier run (a removal that failed) the old
  // one is lifted before libcgroup writes the new memory limit.
  void lift_reused_swap_limit(const std::string& rel) const {
    const Files& files = layout_.files();
    if (!files.swap_includes_memory || missing("memory")) return;
    for (const Hierarchy& h : layout_.hierarchies)
      if (h.controller == files.memory_controller) {
        std::string file = h.mount + rel + "/" + files.swap_max;
        if (::access(file.c_str(), F_OK) == 0) (void)write_file(file, files.unlimited);
      }
  }

  // The settings libcgroup is not given (memory_settings.h), written now
  // that the cgroup exists. None fails the creation: one that matters and
  // cannot be written is said once for all worker cgroups, unless detection
  // already knew the file was absent (said at the program's start).
  void write_memory_settings(const CgroupWorker& worker, const std::string& program,
                             const config::Limits& limits) {
    if (missing("memory")) return;
    for (const MemorySetting& s : memory_settings(limits, layout_.files())) {
      if (std::find(layout_.absent_files.begin(), layout_.absent_files.end(), s.file) !=
          layout_.absent_files.end())
        continue;
      Status written = worker.write_memory(s.file, s.value);
      if (written || !s.matters || !unwritable_.insert(s.file).second) continue;
      log::warn(
          "{}: cannot set {}: writing {} into {}/{}: {}; {} (said once for every worker cgroup)",
          program, s.key, s.value, worker.path(), s.file, std::strerror(written.error().code),
          s.otherwise);
    }
  }

  bool missing(const std::string& c) const {
    for (const std::string& m : layout_.missing)
      if (m == c) return true;
    return false;
  }

  // Every limit is written, "unlimited" included, so a reused directory never
  // keeps an old value.
  static void set_limits(::cgroup* cg, const std::string& controller, const config::Limits& l,
                         const Files& files) {
    cgroup_controller* c = cgroup_add_controller(cg, controller.c_str());
    if (!c) return;
    auto bytes = [](const std::optional<uint64_t>& v, const char* unlimited) {
      return v ? std::to_string(*v) : std::string(unlimited);
    };
    if (controller == "memory") {
      cgroup_set_value_string(c, files.memory_max, bytes(l.memory_max, files.unlimited).c_str());
      cgroup_set_value_string(c, files.memory_high, bytes(l.memory_high, files.unlimited).c_str());
    } else if (controller == "pids") {
      cgroup_set_value_string(c, "pids.max", bytes(l.pids_max, "max").c_str());
    } else if (controller == "cpu") {
      std::optional<uint64_t> quota;
      if (l.cpu) quota = static_cast<uint64_t>(*l.cpu * kCpuPeriodUs);
      if (files.cpu_max) {
        cgroup_set_value_string(
            c, files.cpu_max,
            (bytes(quota, files.unlimited) + " " + std::to_string(kCpuPeriodUs)).c_str());
      } else {
        cgroup_set_value_string(c, files.cpu_period, std::to_string(kCpuPeriodUs).c_str());
        cgroup_set_value_string(c, files.cpu_quota, bytes(quota, files.unlimited).c_str());
      }
    }
  }

  Layout layout_;
  UniqueFd lock_;
  bool per_run_root_;
  std::string proc_;
  std::set<std::string> unwritable_;  // memory settings' files already warned about
};

// v2 delegation: leave our own cgroup for a leaf below it, then enable the
// controllers there, as systemd's delegation rules ask of a service manager.
Status delegate_v2(const Layout& layout) {
  const Hierarchy& h = layout.hierarchies.front();
  std::string own_dir = h.mount + (layout.own == "/" ? "" : layout.own);
  std::string leaf = own_dir + "/" + kSupervisorLeaf;
  if (::mkdir(leaf.c_str(), 0755) != 0 && errno != EEXIST) return errno_error("mkdir " + leaf);
  Status moved = write_file(leaf + "/cgroup.procs", std::to_string(::getpid()));
  if (!moved) return moved;
  std::vector<std::string> controllers;
  for (const char* c : kControllers)
    if (std::find(layout.missing.begin(), layout.missing.end(), c) == layout.missing.end())
      controllers.push_back(c);
  return enable_subtree(own_dir, controllers);
}

}  // namespace

Result<std::unique_ptr<Manager>> open(Layout layout, const Paths& paths, OpenOptions options) {
  auto fallback = [&](std::string why) {
    layout.not_enforced = std::move(why);
    return Result<std::unique_ptr<Manager>>(open_fallback(layout, paths));
  };
  if (layout.not_enforced || layout.hierarchies.empty())
    return fallback(layout.not_enforced.value_or("no cgroup hierarchy to use"));
  std::string leaf = (layout.own == "/" ? "" : layout.own) + "/" + kSupervisorLeaf;
  if (layout.needs_leaf && (layout.root == leaf || layout.root.rfind(leaf + "/", 0) == 0))
    return Error{"cgroup_root " + layout.root + " is where recycler itself lives; choose another"};

  static int init = cgroup_init();
  if (init != 0)
    return fallback(std::string("libcgroup cannot initialise: ") + cgroup_strerror(init));

  if (layout.needs_leaf) {
    Status s = delegate_v2(layout);
    if (!s) return fallback("cgroup v2 delegation failed: " + s.error().message);
  }
  for (const Hierarchy& h : layout.hierarchies) {
    Status s = mkdir_p(layout.dir(h));
    if (!s) {
      if (is_permission_error(s.error().code)) return fallback(s.error().message);
      return s.error();
    }
  }
  std::string lock_dir = layout.dir(layout.hierarchies.front());
  UniqueFd lock(::open(lock_dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!lock) return errno_error("open " + lock_dir);
  if (::flock(lock.get(), LOCK_EX | LOCK_NB) != 0) {
    if (errno == EWOULDBLOCK) {
      auto holder = flock_holder(lock.get(), paths.proc);
      return Error{"another recycler" +
                   (holder ? " (pid " + std::to_string(*holder) + ")" : std::string()) +
                   " is already supervising workers under " + lock_dir +
                   "; stop it first, or give this one a cgroup root of its own (--cgroup-root, "
                   "or cgroup_root: in its config)"};
    }
    return errno_error("flock " + lock_dir);
  }
  auto manager = std::make_unique<CgroupManager>(std::move(layout), std::move(lock),
                                                 options.per_run_root, paths.proc);
  manager->clean_up_after_predecessors();
  return std::unique_ptr<Manager>(std::move(manager));
}

}  // namespace recycler::cgroup
