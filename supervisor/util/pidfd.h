// pidfds: a process handle that cannot be confused with a later process that
// reuses the pid (Linux 5.3+; glibc 2.36 has no wrappers, hence syscall()).
#pragma once

#include <sys/syscall.h>
#include <sys/types.h>
#include <unistd.h>

namespace recycler {

// A pidfd for `pid` (close-on-exec), or -1 with errno set.
inline int pidfd_open(pid_t pid) {
  return static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
}

// 0, or -1 with errno set (ESRCH once the process has exited).
inline int pidfd_send_signal(int pidfd, int sig) {
  return static_cast<int>(::syscall(SYS_pidfd_send_signal, pidfd, sig, nullptr, 0));
}

}  // namespace recycler
