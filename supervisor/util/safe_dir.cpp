#include "supervisor/util/safe_dir.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <deque>

namespace recycler {
namespace {

// As the kernel's MAXSYMLINKS.
constexpr int kMaxSymlinks = 40;

std::deque<std::string> components(const std::string& path) {
  std::deque<std::string> out;
  size_t pos = 0;
  while (pos <= path.size()) {
    size_t slash = path.find('/', pos);
    if (slash == std::string::npos) slash = path.size();
    std::string part = path.substr(pos, slash - pos);
    if (!part.empty() && part != ".") out.push_back(std::move(part));
    pos = slash + 1;
  }
  return out;
}

std::string join(const std::string& dir, const std::string& name) {
  if (dir.empty() || dir == ".") return name;
  return dir.back() == '/' ? dir + name : dir + "/" + name;
}

std::string mode_text(mode_t mode) {
  return fmt::format("{:04o}", mode & 07777);
}

// What the directory at the end of a walk must be: recycler's own (a place
// it writes to), or only as trusted as those on the way (a place it loads
// code from: root's /usr/lib).
enum class Last { Private, Trusted };

// The rules of the header: `last` is the directory asked for, the others are
// on the way to it.
std::optional<std::string> untrusted_dir(const struct stat& st, bool last, Last rule,
                                         Shared shared) {
  uid_t me = ::geteuid();
  bool private_last = last && rule == Last::Private;
  if (private_last ? st.st_uid != me : st.st_uid != 0 && st.st_uid != me)
    return fmt::format("owned by uid {}, not by {}", st.st_uid,
                       private_last ? fmt::format("recycler's user (uid {})", me)
                                    : fmt::format("root or recycler's user (uid {})", me));
  bool others_write = st.st_mode & (S_IWGRP | S_IWOTH);
  if (others_write && last && shared == Shared::Never)
    return fmt::format(
        "writable by other users (mode {}): any of them could take a name there "
        "first",
        mode_text(st.st_mode));
  if (others_write && !(st.st_mode & S_ISVTX))
    return fmt::format("writable by other users (mode {}) without the sticky bit",
                       mode_text(st.st_mode));
  return std::nullopt;
}

// The target of the symlink `name` in `dirfd` (`st` is its lstat, `shown`
// its path for messages), if it may be followed: root's or recycler's user's,
// and not past kMaxSymlinks of them (`symlinks` counts).
Result<std::string> follow(int dirfd, const std::string& name, const struct stat& st,
                           const std::string& shown, const char* refusing, int& symlinks) {
  if (st.st_uid != 0 && st.st_uid != ::geteuid())
    return Error{fmt::format("{}: a symlink owned by uid {} (only root's and recycler's own are "
                             "followed); {}",
                             shown, st.st_uid, refusing),
                 EPERM};
  if (++symlinks > kMaxSymlinks) return errno_error(shown, ELOOP);
  char target[4096];
  ssize_t n = ::readlinkat(dirfd, name.c_str(), target, sizeof target - 1);
  if (n < 0) return errno_error(shown);
  return std::string(target, static_cast<size_t>(n));
}

// Walks `path` from / (or the working directory) to the directory it names,
// checking each one and following only trusted symlinks; creates what is
// missing with `create_mode` when given. `refusing` ends each refusal.
Result<UniqueFd> walk_to_dir(const std::string& path, std::optional<mode_t> create_mode, Last rule,
                             Shared shared, const char* refusing) {
  if (path.empty()) return Error{"empty directory path", EINVAL};
  std::deque<std::string> todo = components(path);
  std::string shown = path[0] == '/' ? "/" : ".";
  UniqueFd dir(::open(shown.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
  if (!dir) return errno_error(shown);
  auto check = [&](int fd, bool last) -> Status {
    struct stat st {};
    if (::fstat(fd, &st) != 0) return errno_error(shown);
    if (auto why = untrusted_dir(st, last, rule, shared))
      return Error{shown + ": " + *why + "; " + refusing, EPERM};
    return Ok{};
  };
  if (Status s = check(dir.get(), todo.empty()); !s) return s.error();

  int symlinks = 0;
  while (!todo.empty()) {
    std::string name = std::move(todo.front());
    todo.pop_front();
    std::string next_shown = join(shown, name);
    struct stat st {};
    if (::fstatat(dir.get(), name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
      if (errno != ENOENT || !create_mode) return errno_error(next_shown);
      if (::mkdirat(dir.get(), name.c_str(), *create_mode) != 0 && errno != EEXIST)
        return errno_error("mkdir " + next_shown);
      todo.push_front(std::move(name));  // look again at what is there now
      continue;
    }
    if (S_ISLNK(st.st_mode)) {
      auto target = follow(dir.get(), name, st, next_shown, refusing, symlinks);
      if (!target) return target.error();
      const std::string& to = *target;
      std::deque<std::string> more = components(to);
      todo.insert(todo.begin(), more.begin(), more.end());
      if (!to.empty() && to[0] == '/') {
        shown.assign(1, '/');  // not = "/": GCC 12 warns falsely (-Wrestrict)
        dir.reset(::open("/", O_PATH | O_DIRECTORY | O_CLOEXEC));
        if (!dir) return errno_error("/");
        if (Status s = check(dir.get(), todo.empty()); !s) return s.error();
      }
      continue;
    }
    UniqueFd next(::openat(dir.get(), name.c_str(), O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (!next) return errno_error(next_shown);
    shown = std::move(next_shown);
    if (Status s = check(next.get(), todo.empty()); !s) return s.error();
    dir = std::move(next);
  }
  return dir;
}

}  // namespace

Result<UniqueFd> open_private_dir(const std::string& path, mode_t create_mode, Shared shared) {
  return walk_to_dir(path, create_mode, Last::Private, shared, "refusing to write there");
}

Status check_private_dir(const std::string& path, Shared shared, const char* refusing) {
  auto dir = walk_to_dir(path, std::nullopt, Last::Private, shared, refusing);
  if (!dir && dir.error().code != ENOENT) return dir.error();
  return Ok{};
}

Result<UniqueFd> open_trusted_file(const std::string& path) {
  constexpr const char* kRefusing = "refusing to load from there";
  std::string at = path;
  for (int symlinks = 0;;) {
    size_t slash = at.rfind('/');
    std::string dir = slash == std::string::npos ? "." : slash == 0 ? "/" : at.substr(0, slash);
    std::string name = at.substr(slash == std::string::npos ? 0 : slash + 1);
    if (name.empty() || name == "." || name == "..") return Error{at + ": not a file", EINVAL};
    auto dirfd = walk_to_dir(dir, std::nullopt, Last::Trusted, Shared::Sticky, kRefusing);
    // Missing: said of the file asked for, not of the first directory missing.
    if (!dirfd) return dirfd.error().code == ENOENT ? errno_error(path, ENOENT) : dirfd.error();
    struct stat st {};
    if (::fstatat(dirfd->get(), name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0)
      return errno_error(path);
    if (S_ISLNK(st.st_mode)) {  // libnvidia-ml.so.1 -> libnvidia-ml.so.535.54.03
      auto to = follow(dirfd->get(), name, st, at, kRefusing, symlinks);
      if (!to) return to.error();
      at = !to->empty() && (*to)[0] == '/' ? *to : join(dir, *to);
      continue;
    }
    UniqueFd fd(::openat(dirfd->get(), name.c_str(),
                         O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NOCTTY | O_NONBLOCK));
    if (!fd) return errno_error(at);
    if (::fstat(fd.get(), &st) != 0) return errno_error(at);
    if (!S_ISREG(st.st_mode)) return Error{at + ": not a regular file; refusing it", EPERM};
    if (st.st_uid != 0 && st.st_uid != ::geteuid())
      return Error{fmt::format("{}: owned by uid {}, not by root or recycler's user (uid {}); "
                               "refusing to load it",
                               at, st.st_uid, ::geteuid()),
                   EPERM};
    if (st.st_mode & (S_IWGRP | S_IWOTH))
      return Error{fmt::format("{}: writable by other users (mode {}); refusing to load it", at,
                               mode_text(st.st_mode)),
                   EPERM};
    return fd;
  }
}

Result<UniqueFd> open_private_file(int dirfd, const std::string& name, int flags, mode_t mode) {
  bool truncate = flags & O_TRUNC;
  flags &= ~O_TRUNC;
  // O_NONBLOCK: a FIFO planted under this name must not block the open.
  UniqueFd fd(
      ::openat(dirfd, name.c_str(), flags | O_NOFOLLOW | O_CLOEXEC | O_NOCTTY | O_NONBLOCK, mode));
  if (!fd) {
    if (errno == ELOOP) return Error{name + ": a symlink; refusing to write through it", ELOOP};
    return errno_error(name);
  }
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return errno_error(name);
  if (!S_ISREG(st.st_mode)) return Error{name + ": not a regular file; refusing it", EPERM};
  if (st.st_uid != ::geteuid())
    return Error{fmt::format("{}: owned by uid {}, not by recycler's user (uid {}); refusing it",
                             name, st.st_uid, ::geteuid()),
                 EPERM};
  if (st.st_nlink != 1)
    return Error{fmt::format("{}: has {} links; refusing it", name, st.st_nlink), EPERM};
  int fl = ::fcntl(fd.get(), F_GETFL);
  if (fl >= 0) ::fcntl(fd.get(), F_SETFL, fl & ~O_NONBLOCK);
  if (truncate && ::ftruncate(fd.get(), 0) != 0) return errno_error("truncate " + name);
  return fd;
}

}  // namespace recycler
