// Memory and thread probes: turn a worker's cgroup files and its processes'
// /proc files into a policies::Sample. Each file costs one openat() and one
// read() into a stack buffer; nothing is allocated per file or per line.
// Missing files (a v1 host has no memory.pressure, a process exits between
// listing and reading) leave fields empty; nothing here throws or fails.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "policies/policy.h"
#include "supervisor/cgroup/files.h"
#include "supervisor/probe/parse.h"
#include "supervisor/util/fd.h"

namespace recycler::probe {

// Reads one cgroup's memory figures through a directory fd.
class CgroupReader {
 public:
  // `dirfd`: the cgroup's directory in the memory hierarchy (v1) or the
  // unified one (v2); borrowed, may be O_PATH.
  CgroupReader(int dirfd, bool v2) : dirfd_(dirfd), files_(cgroup::files(v2)) {}

  // v2: memory.current, memory.stat and, when `with_pressure`, memory.pressure;
  // v1: memory.usage_in_bytes and memory.stat (no pressure there). Through
  // the MemoryFiles registered for the directory fd when there is one.
  CgroupMemory read(bool with_pressure) const;
  // Whether the cgroup's own files say how much CPU time it has used (v2's
  // cpu.stat); without, probe_worker sums its processes' /proc/PID/stat.
  bool has_cpu_usage() const { return files_.cpu_usage != nullptr; }
  // usage_usec of cpu.stat; nullopt on v1 or when unreadable.
  std::optional<uint64_t> cpu_usec() const;

 private:
  int dirfd_;
  const cgroup::Files& files_;
};

// One cgroup's memory files, held open between samples. On cgroupfs an
// openat() is mostly path lookup and permission checks (about half of what a
// sample cost); a pread() at offset 0 of a file already open regenerates its
// contents without them. The owner of a cgroup's directory fd (the cgroup
// manager's worker) registers one for as long as that fd lives; CgroupReader
// finds it by the fd and reads through it, opening each file on first use
// (so only sampled workers hold them: 2 fds on v1, 3 on v2) and again after
// a failed read. Loops may run on several threads: the registry is locked.
class MemoryFiles {
 public:
  MemoryFiles(int dirfd, bool v2);  // registers under `dirfd` (borrowed)
  ~MemoryFiles();                   // unregisters and closes the files
  MemoryFiles(const MemoryFiles&) = delete;
  MemoryFiles& operator=(const MemoryFiles&) = delete;

  // Closes the files held (before the cgroup is removed); they are opened
  // again if read.
  void close();
  CgroupMemory read(bool with_pressure);

  // The instance registered under `dirfd`, or null.
  static MemoryFiles* of(int dirfd);

 private:
  int dirfd_;
  const cgroup::Files& files_;
  UniqueFd current_, stat_, pressure_;
};

// Reads processes' files under a proc root ("/proc", or a fixture tree).
class ProcessReader {
 public:
  explicit ProcessReader(std::string proc_root = "/proc");

  // full: smaps_rollup (rss, pss, uss, anon), falling back to statm when it is
  // missing or unreadable; otherwise statm alone (rss only, much cheaper:
  // smaps_rollup walks the page tables).
  ProcessMemory memory(pid_t pid, bool full) const;
  // rss and anon from /proc/PID/status: the kernel's counters, a constant cost
  // whatever the process's size.
  StatusMemory status_memory(pid_t pid) const;
  // num_threads from /proc/PID/stat.
  std::optional<uint32_t> threads(pid_t pid) const;
  // utime + stime from /proc/PID/stat, microseconds.
  std::optional<uint64_t> cpu_usec(pid_t pid) const;

 private:
  UniqueFd root_;  // O_PATH: every read is an openat() of "PID/file" below it
  uint64_t page_size_;
  uint64_t clock_ticks_;  // of utime and stime, per second
};

// /proc/PID/stat under `proc_root` ("/proc", or a fixture tree), parsed by
// parse_stat; nullopt when the process is gone or the file does not parse.
std::optional<ProcStat> read_stat(const std::string& proc_root, pid_t pid);

// One Sample of one worker at `now`, reading only what `needs` (Needs bits of
// policies/policy.h, OR-ed over the program's policies) asks for:
//   kNeedsCgroupMemory   the cgroup's current, anon, file, kernel, shmem, pressure
//   kNeedsProcessMemory  per process: smaps_rollup (rss, pss, uss)
//   kNeedsThreads        per process and in total (Sample::threads)
//   kNeedsProcesses      the process list (one ProcessSample per pid)
//   kNeedsCpu            Sample::cpu_usec: the cgroup's cpu.stat (v2), else
//                        the sum of utime + stime over the processes
// Any of kNeedsProcessMemory, kNeedsThreads and kNeedsProcesses fills
// Sample::processes, `main` set for main_pid.
// Without cgroups (`cgroup` null) the cgroup figures come from the processes:
// current = sum of rss, anon = sum of anonymous memory, file/kernel/shmem/
// pressure empty. The sums come from smaps_rollup (Rss, Anonymous) when
// kNeedsProcessMemory reads it anyway, else from status (VmRSS, RssAnon);
// anon is empty when a live process's figure could not be read. A process
// that has exited meanwhile adds nothing, and stays listed with empty fields.
// requests and device are left to the caller.
// Whether probe_worker reads the worker's processes for `needs` with this
// `cgroup` (null: none): the caller lists the pids only then.
bool reads_processes(unsigned needs, const CgroupReader* cgroup);

policies::Sample probe_worker(const CgroupReader* cgroup, const ProcessReader& procs,
                              const std::vector<pid_t>& pids, pid_t main_pid, unsigned needs,
                              policies::TimePoint now);

}  // namespace recycler::probe
