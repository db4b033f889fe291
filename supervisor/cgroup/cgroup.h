// Worker cgroups, v1 and v2. The mode is detected once; worker cgroups live at
// <root>/<program>/<slot> (and <slot>.b, during and after a surge), created through libcgroup with
// the program's limits; a child joins its cgroup between fork and exec by writing "0" to the join
// fds. Without permission to create cgroups, a fallback tracks each worker by its session (the
// child calls setsid) and enforces nothing.
//
// Filesystem locations are data (Paths), never constants past this seam, so
// detection can be tested against fixture trees.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "supervisor/cgroup/files.h"
#include "supervisor/config/config.h"
#include "supervisor/util/fd.h"
#include "supervisor/util/result.h"

namespace recycler::cgroup {

enum class Mode { None, V1, Hybrid, V2 };
const char* to_string(Mode mode);

struct Paths {
  std::string mountinfo = "/proc/self/mountinfo";
  std::string self_cgroup = "/proc/self/cgroup";
  std::string proc = "/proc";
  std::string prefix;  // prepended to every mount point (fixture trees)
};

// The controllers recycler uses. v1 mounts each where it likes (cpu is often
// co-mounted with cpuacct); freezer only matters on v1, for killing a cgroup.
inline constexpr const char* kControllers[] = {"memory", "pids", "cpu"};

struct Hierarchy {
  std::string controller;  // "memory", ...; "" for the v2 unified hierarchy
  std::string mount;       // where it is mounted (with Paths::prefix)
};

// What detection found, and where this recycler's worker cgroups would go.
struct Layout {
  Mode mode = Mode::None;
  std::vector<Hierarchy> hierarchies;  // v1: one per available controller; v2: one
  std::string root;                    // the root, relative to each mount, starting with '/'
  // v2 only: our own cgroup (relative to the mount), and whether we must move
  // ourselves into a leaf below it before controllers can be enabled there.
  std::string own;
  bool needs_leaf = false;
  std::vector<std::string> missing;  // controllers we wanted but the system lacks
  // The optional memory files (files.h: swap, memory.low, oom.group) this
  // kernel lacks, as far as detection can tell without creating a cgroup:
  // v1 looks at the memory hierarchy's top, v2 at recycler's own cgroup when
  // the memory controller is enabled there; empty when it cannot tell.
  std::vector<std::string> absent_files;
  // Set when limits cannot be enforced here; says why, for logs and `check`.
  std::optional<std::string> not_enforced;

  std::string dir(const Hierarchy& h) const { return h.mount + root; }
  // The names of the cgroup files in this mode's hierarchies (files.h).
  const Files& files() const { return cgroup::files(mode == Mode::V2); }
  // "/sys/fs/cgroup/memory/recycler" (v1: the memory hierarchy's), for messages.
  std::string display_root() const;
};

// Reads mountinfo and /proc/self/cgroup, resolves `root` (config cgroup_root)
// and predicts whether limits can be enforced. Changes nothing.
Layout detect(const std::string& root, const Paths& paths = {});

// A worker slot: program name and slot number.
struct WorkerId {
  std::string program;
  unsigned slot = 0;
  // Which of the slot's two cgroups: 0 <slot>, 1 <slot>.b (a surge runs the
  // next generation in the one the current one does not use; Worker tells
  // which generation is in which). Not part of the identity: both are the slot.
  unsigned variant = 0;
  bool operator==(const WorkerId& o) const { return program == o.program && slot == o.slot; }
};

class WorkerCgroup {
 public:
  virtual ~WorkerCgroup() = default;
  virtual std::string path() const = 0;  // for logs
  // Files the child writes "0" into before exec (v1 tasks, v2 cgroup.procs);
  // empty in fallback.
  // Opened for one spawn: the caller closes them (UniqueFd) right after the fork.
  virtual std::vector<UniqueFd> open_join_fds() = 0;
  // Fallback mode tracks processes by the main process's session.
  virtual void adopt(pid_t main_pid) = 0;
  virtual std::vector<pid_t> pids() const = 0;
  virtual bool populated() const = 0;
  // SIGKILL to every process, grandchildren included, without racing forks:
  // cgroup.kill (v2), else freeze -> kill each -> thaw.
  virtual void kill_all() = 0;
  // The kernel's OOM-kill counter for this cgroup; nullopt when unknown.
  virtual std::optional<uint64_t> oom_kills() const = 0;
  virtual bool enforcing() const = 0;
  // The worker's memory cgroup directory for probes and the fast path: an
  // O_PATH fd owned by this object, and whether it is cgroup v2. nullopt
  // without a memory cgroup (fallback mode, or no memory controller).
  struct MemoryDir {
    int fd = -1;
    bool v2 = false;
  };
  virtual std::optional<MemoryDir> memory_dir() const = 0;
  // Removes the cgroup; an error with code EBUSY means "not empty yet, try again".
  virtual Status remove() = 0;
};

class Manager {
 public:
  virtual ~Manager() = default;
  virtual const Layout& layout() const = 0;
  virtual bool enforcing() const = 0;
  // <root>/<program>/<slot>, or with variant 1 <slot>.b: a surge runs a
  // slot's next generation in the variant its current one does not use.
  virtual Result<std::unique_ptr<WorkerCgroup>> create(const std::string& program, unsigned slot,
                                                       const config::Limits& limits,
                                                       unsigned variant = 0) = 0;
  // Removes <root>/<program> once its slots are gone (best effort).
  virtual void remove_program(const std::string& program) = 0;
  // Removes the root itself at shutdown (best effort) and releases the lock.
  virtual void close() = 0;
  // The worker slot process `pid` belongs to, from one read of
  // /proc/PID/cgroup (fallback mode: of /proc/PID/stat, by its session);
  // nullopt for a process outside every worker (or gone). Cheap enough for
  // every datagram of a stranger on the notify socket.
  virtual std::optional<WorkerId> owner_of(pid_t pid) const = 0;
};

// Sets up the root described by `layout`: on v2 moves this process into a leaf
// and enables controllers where needed, creates the root, takes an exclusive
// lock on it (a second recycler on the same root is refused), and kills and
// removes worker cgroups a crashed predecessor left behind. Without permission
// it returns a fallback manager (and says why, once); an error only when the
// root is locked by another live recycler.
struct OpenOptions {
  // The root is <parent>/<name>.<pid>, one per run (wrap mode): also clean up
  // siblings whose recycler is gone.
  bool per_run_root = false;
};
Result<std::unique_ptr<Manager>> open(Layout layout, const Paths& paths = {},
                                      OpenOptions options = {});

// A manager that never touches cgroups (also used when there is no cgroupfs).
std::unique_ptr<Manager> open_fallback(Layout layout, const Paths& paths = {});

// Parsing helpers, exposed for tests.
struct MountEntry {
  std::string mount_point;
  std::string fstype;
  std::string super_options;
};
std::vector<MountEntry> parse_mountinfo(const std::string& text);
// The v2 ("0::") path of /proc/<pid>/cgroup; nullopt when absent.
std::optional<std::string> parse_v2_self_cgroup(const std::string& text);
// The path a /proc/<pid>/cgroup text gives for the hierarchy of `controller`
// ("4:memory:/a/b", also among co-mounted ones, "4:cpu,cpuacct:/a/b"), or
// v2's ("0::/a/b") for "": "/a/b"; nullopt without that line.
std::optional<std::string_view> parse_cgroup_of(std::string_view proc_cgroup,
                                                std::string_view controller);
// The worker slot a /proc/<pid>/cgroup text places a process in under
// `layout` (its root, in the hierarchy of its first controller or v2's).
std::optional<WorkerId> parse_worker_of(std::string_view proc_cgroup, const Layout& layout);

}  // namespace recycler::cgroup
