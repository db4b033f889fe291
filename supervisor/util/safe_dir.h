// Directories and files that recycler (often root) writes into, opened so that
// another local user cannot redirect the write: no symlink planted by someone
// else is followed, every file is opened relative to a directory fd that was
// checked, and what recycler creates is owner-only.
//
//   auto dir = open_private_dir("/var/lib/recycler/timelines", 0750);
//   auto fd = open_private_file(dir->get(), "api.0.csv", O_WRONLY | O_APPEND, 0640);
//   ::renameat(dir->get(), "api.0.csv", dir->get(), "api.0.csv.1");
//
// The rules (those of OpenSSH's StrictModes and the kernel's
// fs.protected_symlinks, applied by hand):
// - every directory on the way must belong to root or to recycler's
//   effective user and must not be writable by group or others unless it has
//   the sticky bit (/tmp): nobody else may rename or replace what follows;
// - a symlink on the way is followed only when it belongs to root or to
//   recycler's user (in a sticky /tmp anyone may plant one);
// - the directory itself must belong to recycler's user, and be writable by
//   group or others only with the sticky bit (Shared::Sticky) or not at all
//   (Shared::Never);
// - a file must be a regular file of recycler's user with a single link (a
//   hard link to /etc/shadow is refused), and is never opened through a
//   symlink (O_NOFOLLOW).
#pragma once

#include <sys/types.h>

#include <string>

#include "supervisor/util/fd.h"
#include "supervisor/util/result.h"

namespace recycler {

// Whether the directory asked for may be one that others can write to with
// the sticky bit (/tmp). Fine for files, which recycler creates or refuses
// by their owner; not for a socket's name, which anyone could bind first.
enum class Shared { Sticky, Never };

// Opens `path` (absolute, or relative to the working directory) as an
// O_PATH | O_DIRECTORY fd (for the *at() calls), creating it and its missing parents with
// `create_mode` (before the umask). The error says which component broke which rule.
Result<UniqueFd> open_private_dir(const std::string& path, mode_t create_mode,
                                  Shared shared = Shared::Sticky);

// What open_private_dir(path, ..., shared) would refuse, without creating
// or opening anything past what exists (`recycler check`): the rules are
// applied to the directories of `path` that exist; what is missing would be
// created as recycler's own. Error: the component and the rule it broke,
// then `refusing` ("not a place for a socket").
Status check_private_dir(const std::string& path, Shared shared, const char* refusing);

// Opens `path`, a file recycler loads code from (a library it dlopens or has
// a worker preload), read-only, when no other user could have changed it:
// the file and every directory on the way belong to root or recycler's user
// and are writable by nobody else (a directory on the way only with the
// sticky bit), and only their symlinks are followed (the file's own
// included). The error names the component and the rule it broke.
Result<UniqueFd> open_trusted_file(const std::string& path);

// Opens `name` (one path component) in `dirfd` with `flags` (O_WRONLY,
// O_APPEND, O_CREAT...; O_NOFOLLOW, O_CLOEXEC, O_NOCTTY are added, O_TRUNC
// is applied only after the checks) and `mode` for a new file. Refuses a
// symlink, anything but a regular file, a file of another user and a file
// with more than one link.
Result<UniqueFd> open_private_file(int dirfd, const std::string& name, int flags, mode_t mode);

}  // namespace recycler
