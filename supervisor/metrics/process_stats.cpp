#include "supervisor/metrics/process_stats.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>

#include "supervisor/probe/parse.h"
#include "supervisor/util/fd.h"

namespace recycler::metrics {

std::optional<ProcessStats> parse_process_stats(std::string_view pid_stat,
                                                std::string_view proc_stat, long ticks_per_second,
                                                long page_size) {
  std::optional<probe::ProcStat> st = probe::parse_stat(pid_stat);
  std::optional<uint64_t> btime = find_keyed_value(proc_stat, "btime");
  if (!st || !btime || ticks_per_second <= 0 || page_size <= 0) return std::nullopt;
  double ticks = static_cast<double>(ticks_per_second);
  ProcessStats out;
  out.cpu_seconds = static_cast<double>(st->utime + st->stime) / ticks;
  out.resident_bytes = st->rss_pages * static_cast<uint64_t>(page_size);
  out.virtual_bytes = st->vsize;
  out.start_time_seconds = static_cast<double>(*btime) + static_cast<double>(st->starttime) / ticks;
  return out;
}

Result<ProcessStats> read_process_stats(const std::string& proc_root) {
  auto pid_stat = read_file(proc_root + "/self/stat");
  if (!pid_stat) return pid_stat.error();
  auto proc_stat = read_file(proc_root + "/stat");
  if (!proc_stat) return proc_stat.error();
  auto stats =
      parse_process_stats(*pid_stat, *proc_stat, ::sysconf(_SC_CLK_TCK), ::sysconf(_SC_PAGESIZE));
  if (!stats) return Error{proc_root + "/self/stat: unexpected contents"};
  int fd = ::open((proc_root + "/self/fd").c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (DIR* dir = fd >= 0 ? ::fdopendir(fd) : nullptr) {
    uint64_t n = 0;
    while (const dirent* e = ::readdir(dir))
      if (e->d_name[0] != '.') ++n;
    ::closedir(dir);
    stats->open_fds = n > 0 ? n - 1 : 0;  // not the directory's own fd
  } else if (fd >= 0) {
    ::close(fd);
  }
  rlimit nofile{};
  if (::getrlimit(RLIMIT_NOFILE, &nofile) == 0 && nofile.rlim_cur != RLIM_INFINITY)
    stats->max_fds = nofile.rlim_cur;
  return *stats;
}

}  // namespace recycler::metrics
