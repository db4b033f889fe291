// pidfds: a process handle that cannot be confused with a later process that
// reuses the pid (Linux 5.3+; glibc 2.36 has no wrappers, hence syscall()).
#pragma once

#include <sys/syscall.h>
#include <sys/types.h>
#include <unistd.h>

#include <cerrno>

namespace recycler {

// A pidfd for `pid` (close-on-exec), or -1 with errno set.
inline int pidfd_open(pid_t pid) {
  return static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
}

// 0, or -1 with errno set (ESRCH once the process has exited).
inline int pidfd_send_signal(int pidfd, int sig) {
  return static_cast<int>(::syscall(SYS_pidfd_send_signal, pidfd, sig, nullptr, 0));
}

// Whether a process with this pid exists (a zombie included): no signal is
// involved, so nothing can reach a process by mistake.
inline bool process_exists(pid_t pid) {
  int fd = pidfd_open(pid);
  if (fd < 0) return errno != ESRCH;
  ::close(fd);
  return true;
}

// `sig` to `pid` through a pidfd: 0, or -1 with errno set. Only as safe as
// the caller's knowledge that `pid` is still the process it means (a frozen
// cgroup's member, an unreaped child): hold a pidfd where that can change.
inline int signal_pid(pid_t pid, int sig) {
  int fd = pidfd_open(pid);
  if (fd < 0) return -1;
  int rc = pidfd_send_signal(fd, sig);
  int err = errno;
  ::close(fd);
  errno = err;
  return rc;
}

}  // namespace recycler
