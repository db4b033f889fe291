#include "supervisor/notify/runtime_dir.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <utility>
#include <vector>

#include "supervisor/util/pidfd.h"
#include "supervisor/util/safe_dir.h"

namespace recycler::notify {
namespace {

constexpr mode_t kBaseMode = 0755;
constexpr mode_t kRunMode = 0711;    // workers of other users pass through, list nothing
constexpr mode_t kOwnMode = 0700;    // workers run as recycler's user
constexpr mode_t kGroupMode = 0710;  // workers run as another user or group
constexpr int kMaxDepth = 8;

bool all_digits(const std::string& s) {
  return !s.empty() && s.find_first_not_of("0123456789") == std::string::npos;
}

// The pid a run directory's name starts with ("<pid>" or "<pid>-<n>"); 0
// for any other name.
pid_t pid_of_run(const std::string& name) {
  std::string pid = name.substr(0, name.find('-'));
  std::string rest = pid.size() < name.size() ? name.substr(pid.size() + 1) : "0";
  if (!all_digits(pid) || pid.size() > 9 || !all_digits(rest) || rest.size() > 3) return 0;
  return static_cast<pid_t>(std::atol(pid.c_str()));
}

void remove_tree(int dirfd, const std::string& name, int depth) {
  struct stat st {};
  if (::fstatat(dirfd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) return;
  if (S_ISDIR(st.st_mode) && depth < kMaxDepth) {
    int fd = ::openat(dirfd, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (DIR* d = fd >= 0 ? ::fdopendir(fd) : nullptr) {
      while (dirent* e = ::readdir(d)) {
        std::string child = e->d_name;
        if (child != "." && child != "..") remove_tree(::dirfd(d), child, depth + 1);
      }
      ::closedir(d);
    } else if (fd >= 0) {
      ::close(fd);
    }
    ::unlinkat(dirfd, name.c_str(), AT_REMOVEDIR);
    return;
  }
  ::unlinkat(dirfd, name.c_str(), 0);
}

// The directories of recyclers that are gone (crashed, SIGKILLed). A running
// recycler holds a lock on its own (flock, which is seen across pid
// namespaces, where its pid is not: a recycler that is PID 1 of a container
// sharing this directory with the host); one without the lock is gone when
// its pid is too (a recycler from before the lock), or is this very pid.
void remove_abandoned(int base) {
  UniqueFd listing(::openat(base, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  DIR* d = listing ? ::fdopendir(listing.get()) : nullptr;
  if (!d) return;
  listing.release();  // the DIR owns it now
  // Each held locked until it is removed: a recycler that made a directory
  // of that name meanwhile waits for its lock, then sees it gone.
  std::vector<std::pair<std::string, UniqueFd>> gone;
  while (dirent* e = ::readdir(d)) {
    std::string name = e->d_name;
    pid_t pid = pid_of_run(name);
    if (pid <= 0) continue;
    UniqueFd lock(::openat(base, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (!lock || ::flock(lock.get(), LOCK_EX | LOCK_NB) != 0) continue;  // its recycler runs
    if (pid == ::getpid() || !process_exists(pid)) gone.emplace_back(name, std::move(lock));
  }
  ::closedir(d);
  for (const auto& [name, lock] : gone) remove_tree(base, name, 0);
}

// Whether `fd` is still the directory `name` in `base` (another recycler's
// remove_abandoned may have removed it between its mkdir and its lock).
bool still_named(int base, const std::string& name, int fd) {
  struct stat named {};
  struct stat held {};
  return ::fstatat(base, name.c_str(), &named, AT_SYMLINK_NOFOLLOW) == 0 &&
         ::fstat(fd, &held) == 0 && named.st_dev == held.st_dev && named.st_ino == held.st_ino;
}

}  // namespace

void remove_tree_at(int dirfd, const std::string& name) {
  remove_tree(dirfd, name, 0);
}

std::optional<std::string> default_runtime_base() {
  if (::geteuid() == 0) return "/run/recycler";
  const char* xdg = std::getenv("XDG_RUNTIME_DIR");
  if (xdg && xdg[0] == '/') return std::string(xdg) + "/recycler";
  return std::nullopt;
}

Result<RuntimeDir> RuntimeDir::open(const std::string& base) {
  auto opened = open_private_dir(base, kBaseMode);
  if (!opened) return opened.error();
  UniqueFd base_fd = std::move(*opened);
  remove_abandoned(base_fd.get());
  // "<pid>", unless another pid namespace's recycler has this pid and runs:
  // then "<pid>-1", ...
  std::string pid = std::to_string(::getpid());
  for (int n = 0, tries = 0; n < 100 && tries < 200; ++tries) {
    std::string name = n == 0 ? pid : pid + "-" + std::to_string(n);
    if (::mkdirat(base_fd.get(), name.c_str(), kRunMode) != 0) {
      if (errno != EEXIST) return errno_error("mkdir " + base + "/" + name);
      ++n;
      continue;
    }
    // Exactly this mode, whatever the umask.
    if (::fchmodat(base_fd.get(), name.c_str(), kRunMode, 0) != 0)
      return errno_error("chmod " + base + "/" + name);
    // Read-only (flock needs more than O_PATH); the *at() calls use it too.
    UniqueFd own(
        ::openat(base_fd.get(), name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (!own || ::flock(own.get(), LOCK_EX) != 0) return errno_error("lock " + base + "/" + name);
    if (!still_named(base_fd.get(), name, own.get())) continue;  // removed meanwhile: again
    return RuntimeDir(std::move(base_fd), std::move(own), base + "/" + name, name);
  }
  return Error{"no free name for this run's directory in " + base};
}

RuntimeDir::RuntimeDir(UniqueFd base, UniqueFd own, std::string path, std::string name)
    : base_(std::move(base)),
      own_(std::move(own)),
      path_(std::move(path)),
      name_(std::move(name)) {}

RuntimeDir::RuntimeDir(RuntimeDir&& o) noexcept
    : base_(std::move(o.base_)),
      own_(std::move(o.own_)),
      path_(std::move(o.path_)),
      name_(std::move(o.name_)) {}

RuntimeDir::~RuntimeDir() {
  // Locked until it is gone: no other recycler takes it for abandoned meanwhile.
  if (base_) remove_tree(base_.get(), name_, 0);
}

bool RuntimeDir::Access::others() const {
  return (uid && *uid != ::geteuid()) || (gid && *gid != ::getegid());
}

Result<UniqueFd> RuntimeDir::make_private_dir(const std::string& name, const Access& access) {
  remove_tree(own_.get(), name, 0);
  if (::mkdirat(own_.get(), name.c_str(), kOwnMode) != 0)
    return errno_error("mkdir " + path_ + "/" + name);
  bool others = access.others();
  mode_t mode = others ? kGroupMode : kOwnMode;
  if (others && ::fchownat(own_.get(), name.c_str(), static_cast<uid_t>(-1),
                           access.gid.value_or(::getegid()), AT_SYMLINK_NOFOLLOW) != 0)
    return errno_error("chown " + path_ + "/" + name);
  if (::fchmodat(own_.get(), name.c_str(), mode, 0) != 0)
    return errno_error("chmod " + path_ + "/" + name);
  UniqueFd fd(::openat(own_.get(), name.c_str(), O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!fd) return errno_error(path_ + "/" + name);
  return fd;
}

void RuntimeDir::remove(const std::string& name) {
  remove_tree(own_.get(), name, 0);
}

}  // namespace recycler::notify
