// A unix socket's name in a directory recycler checked (util/safe_dir.h):
// addressed through /proc/self/fd/DIRFD/NAME, so that bind() and connect()
// resolve it from that directory's fd and never walk the path again (a
// directory swapped for a symlink meanwhile is not followed).
#pragma once

#include <sys/socket.h>
#include <sys/un.h>

#include <optional>
#include <string>

namespace recycler {

// The address of `name` in `dirfd`, and its length in `len`; nullopt when it
// does not fit in sun_path.
std::optional<sockaddr_un> unix_address_at(int dirfd, const std::string& name, socklen_t* len);

// Whether a program listens on the socket `name` in `dirfd`: it accepts a
// connection, or its backlog is full. (A socket file nobody listens on is a
// stale one: safe to replace.)
bool unix_socket_answers(int dirfd, const std::string& name);

}  // namespace recycler
