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
//   group or others only with the sticky bit;
// - a file must be a regular file of recycler's user with a single link (a
//   hard link to /etc/shadow is refused), and is never opened through a
//   symlink (O_NOFOLLOW).
#pragma once

#include <sys/types.h>

#include <string>

#include "supervisor/util/fd.h"
#include "supervisor/util/result.h"

namespace recycler {

// Opens `path` (absolute, or relative to the working directory) as an
// O_PATH | O_DIRECTORY fd (for the *at() calls), creating it and its missing parents with
// `create_mode` (before the umask). The error says which component broke which rule.
Result<UniqueFd> open_private_dir(const std::string& path, mode_t create_mode);

// Opens `name` (one path component) in `dirfd` with `flags` (O_WRONLY,
// O_APPEND, O_CREAT...; O_NOFOLLOW, O_CLOEXEC, O_NOCTTY are added, O_TRUNC
// is applied only after the checks) and `mode` for a new file. Refuses a
// symlink, anything but a regular file, a file of another user and a file
// with more than one link.
Result<UniqueFd> open_private_file(int dirfd, const std::string& name, int flags, mode_t mode);

}  // namespace recycler
