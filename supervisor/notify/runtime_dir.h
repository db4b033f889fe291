// Where recycler's sockets live, so that the file system's permissions decide
// who may talk to them (an abstract socket admits every local process):
//
//   /run/recycler/               0755, recycler's user's (as root; otherwise
//                                $XDG_RUNTIME_DIR/recycler)
//   /run/recycler/<pid>/         0711: this run's own, locked (flock) while it
//                                runs; removed at exit, and at the next start
//                                when its recycler is gone (<pid>-<n> where a
//                                recycler of another pid namespace has the pid)
//   /run/recycler/<pid>/<name>/  one program's: 0700 when its workers run as
//                                recycler's user, else the workers' group only
//                                (0710); its socket inside is theirs (0660)
//
// Every directory is checked as util/safe_dir.h says; sockets are bound
// through the directory's fd, so nothing can redirect them.
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>

#include "supervisor/util/fd.h"
#include "supervisor/util/result.h"

namespace recycler::notify {

// /run/recycler for root, $XDG_RUNTIME_DIR/recycler for others; nullopt when
// there is no such place (a user without a runtime directory).
std::optional<std::string> default_runtime_base();

class RuntimeDir {
 public:
  // Opens (creating) `base`, removes the directories of recyclers that are
  // gone, and creates this run's own.
  static Result<RuntimeDir> open(const std::string& base);
  RuntimeDir(RuntimeDir&& o) noexcept;
  RuntimeDir& operator=(RuntimeDir&&) = delete;
  ~RuntimeDir();  // removes this run's directory and everything in it

  const std::string& path() const { return path_; }  // <base>/<pid>[-<n>]

  // Who a socket is for: its workers' user and group (nullopt: recycler's).
  struct Access {
    std::optional<uid_t> uid;
    std::optional<gid_t> gid;
    // For workers that do not run as recycler's own user and group.
    bool others() const;
  };
  // Creates the directory `name` for the workers of `access`, replacing
  // whatever had that name; its fd.
  Result<UniqueFd> make_private_dir(const std::string& name, const Access& access);
  // Removes `name` and what is in it.
  void remove(const std::string& name);

 private:
  RuntimeDir(UniqueFd base, UniqueFd own, std::string path, std::string name);

  UniqueFd base_;  // <base>
  UniqueFd own_;   // <base>/<pid>, flock()ed while this run lasts
  std::string path_;
  std::string name_;  // "<pid>" (or "<pid>-<n>")
};

// Removes `name` in `dirfd` and, for a directory, everything below it,
// without following a symlink. Best effort.
void remove_tree_at(int dirfd, const std::string& name);

}  // namespace recycler::notify
