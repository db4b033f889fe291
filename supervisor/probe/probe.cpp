#include "supervisor/probe/probe.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <mutex>
#include <span>
#include <string_view>
#include <unordered_map>

namespace recycler::probe {
namespace {

// Larger than any memory.stat (v2 on 6.x: ~2 KiB), smaps_rollup, status or stat.
constexpr size_t kBufSize = 8192;

// A small pseudo-file in one read(): seq_file reads fill the buffer up to the
// end of the file. Should a file ever outgrow the buffer, it is cut at its
// last whole line, so no number is read half.
std::optional<std::string_view> read_small(int dirfd, const char* path, std::span<char> buf) {
  UniqueFd fd(::openat(dirfd, path, O_RDONLY | O_CLOEXEC));
  if (!fd) return std::nullopt;
  ssize_t n;
  do n = ::read(fd.get(), buf.data(), buf.size());
  while (n < 0 && errno == EINTR);
  if (n < 0) return std::nullopt;
  std::string_view text(buf.data(), static_cast<size_t>(n));
  if (text.size() == buf.size()) text = text.substr(0, text.rfind('\n') + 1);
  return text;
}

// The same through a file held open: pread at offset 0 regenerates a seq_file.
std::optional<std::string_view> pread_small(int fd, std::span<char> buf) {
  ssize_t n;
  do n = ::pread(fd, buf.data(), buf.size(), 0);
  while (n < 0 && errno == EINTR);
  if (n < 0) return std::nullopt;
  std::string_view text(buf.data(), static_cast<size_t>(n));
  if (text.size() == buf.size()) text = text.substr(0, text.rfind('\n') + 1);
  return text;
}

// The memory figures of a cgroup, each file's text from `read(name)`.
template <typename Read>
CgroupMemory read_memory(const cgroup::Files& files, bool with_pressure, Read read) {
  CgroupMemory out;
  if (auto text = read(files.memory_current)) out.current = parse_u64(*text);
  if (auto text = read(files.memory_stat)) parse_memory_stat(*text, files.v2, out);
  if (files.memory_pressure && with_pressure)
    if (auto text = read(files.memory_pressure)) out.pressure = parse_pressure_some_avg10(*text);
  return out;
}

struct Registry {
  std::mutex mutex;
  std::unordered_map<int, MemoryFiles*> by_dirfd;
};
Registry& registry() {
  static Registry r;
  return r;
}

// "PID/name" relative to the proc root; names are our own short literals.
struct PidPath {
  PidPath(pid_t pid, std::string_view name) {
    char* end = std::to_chars(text, text + 12, pid).ptr;  // 12 characters hold any int
    *end++ = '/';
    std::memcpy(end, name.data(), name.size());
    end[name.size()] = '\0';
  }
  char text[12 + 1 + 32];
};

}  // namespace

MemoryFiles::MemoryFiles(int dirfd, bool v2) : dirfd_(dirfd), files_(cgroup::files(v2)) {
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  r.by_dirfd[dirfd_] = this;
}

MemoryFiles::~MemoryFiles() {
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  auto it = r.by_dirfd.find(dirfd_);
  if (it != r.by_dirfd.end() && it->second == this) r.by_dirfd.erase(it);
}

MemoryFiles* MemoryFiles::of(int dirfd) {
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  auto it = r.by_dirfd.find(dirfd);
  return it == r.by_dirfd.end() ? nullptr : it->second;
}

void MemoryFiles::close() {
  current_.reset();
  stat_.reset();
  pressure_.reset();
}

CgroupMemory MemoryFiles::read(bool with_pressure) {
  char buf[kBufSize];
  return read_memory(files_, with_pressure, [&](const char* name) {
    UniqueFd& fd = name == files_.memory_current ? current_
                   : name == files_.memory_stat  ? stat_
                                                 : pressure_;
    if (!fd) fd.reset(::openat(dirfd_, name, O_RDONLY | O_CLOEXEC));
    if (!fd) return std::optional<std::string_view>();
    auto text = pread_small(fd.get(), buf);
    if (!text) fd.reset();  // opened again next time
    return text;
  });
}

std::optional<uint64_t> CgroupReader::cpu_usec() const {
  if (!files_.cpu_usage) return std::nullopt;
  char buf[kBufSize];
  auto text = read_small(dirfd_, files_.cpu_usage, buf);
  if (!text) return std::nullopt;
  return parse_cpu_stat_usage_usec(*text);
}

CgroupMemory CgroupReader::read(bool with_pressure) const {
  if (MemoryFiles* held = MemoryFiles::of(dirfd_)) return held->read(with_pressure);
  char buf[kBufSize];
  return read_memory(files_, with_pressure,
                     [&](const char* name) { return read_small(dirfd_, name, buf); });
}

ProcessReader::ProcessReader(std::string proc_root)
    : root_(::open(proc_root.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC)),
      page_size_(static_cast<uint64_t>(::sysconf(_SC_PAGESIZE))),
      clock_ticks_(static_cast<uint64_t>(std::max(1L, ::sysconf(_SC_CLK_TCK)))) {}

ProcessMemory ProcessReader::memory(pid_t pid, bool full) const {
  char buf[kBufSize];
  if (full) {
    if (auto text = read_small(root_.get(), PidPath(pid, "smaps_rollup").text, buf)) {
      ProcessMemory m = parse_smaps_rollup(*text);
      if (m.rss) return m;
    }
  }
  ProcessMemory m;
  if (auto text = read_small(root_.get(), PidPath(pid, "statm").text, buf))
    m.rss = parse_statm_rss(*text, page_size_);
  return m;
}

StatusMemory ProcessReader::status_memory(pid_t pid) const {
  char buf[kBufSize];
  auto text = read_small(root_.get(), PidPath(pid, "status").text, buf);
  if (!text) return {};
  return parse_status_memory(*text);
}

std::optional<uint32_t> ProcessReader::threads(pid_t pid) const {
  char buf[kBufSize];
  auto text = read_small(root_.get(), PidPath(pid, "stat").text, buf);
  if (!text) return std::nullopt;
  return parse_stat_threads(*text);
}

std::optional<uint64_t> ProcessReader::cpu_usec(pid_t pid) const {
  char buf[kBufSize];
  auto text = read_small(root_.get(), PidPath(pid, "stat").text, buf);
  if (!text) return std::nullopt;
  std::optional<ProcStat> stat = parse_stat(*text);
  if (!stat) return std::nullopt;
  // 100 ticks a second (USER_HZ): no overflow before 5000 years of CPU time.
  return (stat->utime + stat->stime) * 1'000'000 / clock_ticks_;
}

std::optional<ProcStat> read_stat(const std::string& proc_root, pid_t pid) {
  auto text = read_file(proc_root + "/" + std::to_string(pid) + "/stat");
  if (!text) return std::nullopt;
  return parse_stat(*text);
}

bool reads_processes(unsigned needs, const CgroupReader* cgroup) {
  using namespace policies;
  // Without the cgroup's figures, the sums come from the processes.
  return (needs & (kNeedsProcessMemory | kNeedsThreads | kNeedsProcesses)) ||
         (!cgroup && (needs & kNeedsCgroupMemory)) ||
         ((!cgroup || !cgroup->has_cpu_usage()) && (needs & kNeedsCpu));
}

namespace {

// What probe_worker reads of each process, from its needs.
struct ProcessReads {
  bool list;         // each process's own sample
  bool tree_memory;  // no cgroup: its memory is the sum over the processes
  bool memory;
  bool threads;
  bool tree_cpu;  // the cgroup has no CPU figure: summed over the processes
};

// The processes' figures: each process's own, and the sums into `s` where
// the cgroup's are missing.
void probe_processes(const ProcessReader& procs, const std::vector<pid_t>& pids, pid_t main_pid,
                     const ProcessReads& want, policies::Sample& s) {
  // A process whose rss was read but not its anon (smaps_rollup not readable,
  // no RssAnon before 4.5) would make the anon sum an underestimate: then it
  // stays empty. No rss: the process is gone, and so is its memory.
  bool anon_complete = true;
  auto add_to_tree = [&](std::optional<uint64_t> rss, std::optional<uint64_t> anon) {
    if (!rss) return;
    s.current = s.current.value_or(0) + *rss;
    if (anon)
      s.anon = s.anon.value_or(0) + *anon;
    else
      anon_complete = false;
  };
  if (want.list) s.processes.reserve(pids.size());
  for (pid_t pid : pids) {
    policies::ProcessSample p;
    p.pid = pid;
    p.main = pid == main_pid;
    if (want.memory) {
      ProcessMemory m = procs.memory(pid, true);
      p.rss = m.rss;
      p.pss = m.pss;
      p.uss = m.uss;
      if (want.tree_memory) add_to_tree(m.rss, m.anon);
    } else if (want.tree_memory) {
      // status costs the same for any process; smaps_rollup grows with it.
      StatusMemory m = procs.status_memory(pid);
      add_to_tree(m.rss, m.anon);
    }
    if (want.threads) {
      p.threads = procs.threads(pid);
      if (p.threads) s.threads = s.threads.value_or(0) + *p.threads;
    }
    if (want.tree_cpu)  // a process that exited meanwhile adds nothing
      if (auto cpu = procs.cpu_usec(pid)) s.cpu_usec = s.cpu_usec.value_or(0) + *cpu;
    if (want.list) s.processes.push_back(p);
  }
  if (!anon_complete) s.anon.reset();
}

}  // namespace

policies::Sample probe_worker(const CgroupReader* cgroup, const ProcessReader& procs,
                              const std::vector<pid_t>& pids, pid_t main_pid, unsigned needs,
                              policies::TimePoint now) {
  using namespace policies;
  Sample s;
  s.t = now;
  const bool cgroup_memory = needs & kNeedsCgroupMemory;
  if (cgroup && cgroup_memory) {
    CgroupMemory m = cgroup->read(true);
    s.current = m.current;
    s.anon = m.anon;
    s.file = m.file;
    s.kernel = m.kernel;
    s.shmem = m.shmem;
    s.pressure = m.pressure;
  }
  const bool cgroup_cpu = cgroup && cgroup->has_cpu_usage();
  if (cgroup_cpu && (needs & kNeedsCpu)) s.cpu_usec = cgroup->cpu_usec();

  if (!reads_processes(needs, cgroup)) return s;
  ProcessReads want;
  want.list = needs & (kNeedsProcessMemory | kNeedsThreads | kNeedsProcesses);
  want.tree_memory = !cgroup && cgroup_memory;
  want.memory = needs & kNeedsProcessMemory;
  want.threads = needs & kNeedsThreads;
  want.tree_cpu = !cgroup_cpu && (needs & kNeedsCpu);
  probe_processes(procs, pids, main_pid, want, s);
  return s;
}

}  // namespace recycler::probe
