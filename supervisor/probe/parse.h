// Parsers for the cgroup and /proc files the probes read. Pure: text in,
// numbers out, no I/O and no allocation. Malformed input yields empty fields,
// never an exception.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace recycler::probe {

// A decimal number, optionally followed by whitespace (the trailing newline of
// a cgroup file). "max", garbage, an empty string or an overflow -> nullopt.
std::optional<uint64_t> parse_u64(std::string_view text);

// A worker's cgroup memory, bytes; pressure is v2's "some avg10" (percent).
struct CgroupMemory {
  std::optional<uint64_t> current, anon, file, kernel, shmem;
  std::optional<double> pressure;
};

// memory.stat into anon, file, kernel and shmem of `out` (other fields are
// left alone). v2: `anon`, `file`, `shmem`, `kernel`; kernels before 5.18 have
// no `kernel`: then the sum of `kernel_stack`, `pagetables`, `percpu`, `sock`
// and `slab` (or `slab_reclaimable` + `slab_unreclaimable`) that are present.
// v1: the hierarchical `total_rss`, `total_cache`, `total_shmem`, falling back
// to `rss`, `cache`, `shmem`; v1 has no kernel figure there (left empty).
// Unknown keys and malformed lines are skipped.
void parse_memory_stat(std::string_view text, bool v2, CgroupMemory& out);

// v2 cpu.stat: the value of its "usage_usec" line (microseconds of CPU time
// the cgroup has used); nullopt without that line or when it does not parse.
std::optional<uint64_t> parse_cpu_stat_usage_usec(std::string_view text);

// v2 memory.pressure: the avg10 of the "some" line, percent.
std::optional<double> parse_pressure_some_avg10(std::string_view text);
// memory.pressure or /proc/pressure/memory: the avg10 of the "some" or the
// "full" line, percent.
std::optional<double> parse_pressure_avg10(std::string_view text, bool full);

// /proc/meminfo, bytes: MemTotal, MemAvailable and AnonPages.
struct HostMemory {
  std::optional<uint64_t> total, available, anon;
};
HostMemory parse_meminfo(std::string_view text);

// One process's memory, bytes.
struct ProcessMemory {
  std::optional<uint64_t> rss, pss, uss, anon;
};

// /proc/PID/smaps_rollup (values in kB): rss = Rss, pss = Pss,
// uss = Private_Clean + Private_Dirty + Private_Hugetlb (those present),
// anon = Anonymous.
ProcessMemory parse_smaps_rollup(std::string_view text);

// A process's memory from the kernel's counters, bytes: cheap to read, unlike
// smaps_rollup, whose cost grows with the process (it walks the page tables).
struct StatusMemory {
  std::optional<uint64_t> rss, anon;
};

// /proc/PID/status (values in kB): rss = VmRSS, anon = RssAnon. Kernels before
// 4.5 have no RssAnon; kernel threads and zombies have neither (no mm).
StatusMemory parse_status_memory(std::string_view text);

// /proc/PID/statm: the resident field (pages) times `page_size`.
std::optional<uint64_t> parse_statm_rss(std::string_view text, uint64_t page_size);

// /proc/PID/stat: field 20, num_threads. The comm field (2) may hold spaces
// and parentheses, so fields are counted from the last ')'.
std::optional<uint32_t> parse_stat_threads(std::string_view text);

// The /proc/PID/stat fields that say who a process is and where it hangs:
// state (3), parent (4), session (6), the kernel's flags (9) and start time
// (22, clock ticks after boot: with the pid, it tells a process from a later
// one with the same pid); and what it costs: user and system CPU time (14,
// 15, clock ticks), virtual memory size (23, bytes) and resident pages (24).
struct ProcStat {
  char state = '?';
  uint64_t ppid = 0;
  uint64_t session = 0;
  uint64_t flags = 0;
  uint64_t utime = 0;
  uint64_t stime = 0;
  uint64_t starttime = 0;
  uint64_t vsize = 0;
  uint64_t rss_pages = 0;
  // PF_EXITING: the process is on its way out (and has already left its
  // cgroup, which /proc/PID/cgroup shows as the root).
  bool exiting() const { return flags & 0x4; }
};
std::optional<ProcStat> parse_stat(std::string_view text);

}  // namespace recycler::probe
