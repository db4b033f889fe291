// A shared library whose constructor creates the file RECYCLER_TEST_MARK
// names: whoever loads it runs its code, and the mark says so. The hardening
// tests plant it where another user could have written it (gpu.nvml,
// allocator.preload) and check that recycler never loads it from there.
#include <fcntl.h>
#include <unistd.h>

#include <cstdlib>

namespace {

__attribute__((constructor)) void leave_mark() {
  const char* path = std::getenv("RECYCLER_TEST_MARK");
  if (!path) return;
  int fd = ::open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
  if (fd >= 0) ::close(fd);
}

}  // namespace
