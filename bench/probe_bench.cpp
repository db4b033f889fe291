// Probe cost: the supervisor's CPU time for one sample of one worker, i.e.
// what supervisor/probe reads every sample_interval (default 1 s) per worker.
//
// The worker. A v1 memory cgroup, /sys/fs/cgroup/memory/recycler-bench-<pid>,
// holding 4 child processes that each map and touch 64 MiB of anonymous
// memory in 4 KiB pages (MADV_NOHUGEPAGE: smaps_rollup walks one page-table
// entry per page, the case of a Python heap) and then wait. The children join
// the cgroup before they allocate, so its counters are real. At the end they
// are killed and reaped and the cgroup removed; SIGINT/SIGTERM do the same.
//
// Variants (one iteration = one sample; the CPU column is what to read)
//   BM_Cgroup                 (a) CgroupReader::read: memory.usage_in_bytes +
//                             memory.stat, the kNeedsCgroupMemory sample
//   BM_CgroupHeld             (a) with the files held open (probe::MemoryFiles,
//                             as recycler's workers have them): a pread at
//                             offset 0 each, no openat/close
//   BM_CgroupSmaps/procs:1|4  (b) probe_worker with kNeedsCgroupMemory |
//                             kNeedsProcessMemory: (a) + smaps_rollup of 1 or
//                             4 processes (scope: process policies, USS/PSS)
//   BM_Statm/procs:1|4        (c) ProcessReader::memory(pid, false): statm of
//                             1 or 4 processes (rss only, no page-table walk)
//   Breakdown:
//   BM_SmapsRollup/procs:1|4  smaps_rollup of 1 or 4 processes, no cgroup
//   BM_ParseMemoryStat        parse_memory_stat alone on the cgroup's text
// Each (but the last) twice: cold:0 back to back, so the kernel data a sample
// walks stays in the CPU caches; cold:1 with the caches evicted before each
// sample (untimed), which is what a sample taken once a second meets. cold:1
// is the figure for the supervisor's cost.
//
// (a) and (b) need root (creating the cgroup): otherwise they report an error
// and the others still run. Run from a Release build (see bench/README.md):
//   sudo build-bench/bench/bench_probe
#include <benchmark/benchmark.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "supervisor/probe/parse.h"
#include "supervisor/probe/probe.h"
#include "supervisor/util/fd.h"

namespace {

using namespace recycler;

constexpr size_t kChildBytes = size_t{64} << 20;
constexpr int kChildren = 4;
constexpr size_t kScratchBytes = size_t{64} << 20;
constexpr int64_t kColdSamples = 300;

// What the benchmarks share; also read by the signal handler, hence plain arrays.
pid_t g_children[kChildren];
int g_child_count = 0;
char g_cgroup_dir[128];  // empty when no cgroup was created
UniqueFd g_cgroup_fd;
std::string g_cgroup_error;

void cleanup() {
  for (int i = 0; i < g_child_count; ++i) ::kill(g_children[i], SIGKILL);
  for (int i = 0; i < g_child_count; ++i)
    while (::waitpid(g_children[i], nullptr, 0) < 0 && errno == EINTR) {
    }
  g_child_count = 0;
  if (g_cgroup_dir[0] && ::rmdir(g_cgroup_dir) != 0)
    std::fprintf(stderr, "rmdir %s: %s\n", g_cgroup_dir, std::strerror(errno));
  g_cgroup_dir[0] = '\0';
}

void on_signal(int sig) {
  // Only async-signal-safe calls here: cleanup() without its message.
  for (int i = 0; i < g_child_count; ++i) ::kill(g_children[i], SIGKILL);
  for (int i = 0; i < g_child_count; ++i) ::waitpid(g_children[i], nullptr, 0);
  if (g_cgroup_dir[0]) ::rmdir(g_cgroup_dir);
  ::_exit(128 + sig);
}

void make_cgroup() {
  if (::geteuid() != 0) {
    g_cgroup_error = "needs root (creates a v1 memory cgroup)";
    return;
  }
  std::snprintf(g_cgroup_dir, sizeof g_cgroup_dir, "/sys/fs/cgroup/memory/recycler-bench-%d",
                static_cast<int>(::getpid()));
  if (::mkdir(g_cgroup_dir, 0755) != 0) {
    g_cgroup_error = std::string("mkdir ") + g_cgroup_dir + ": " + std::strerror(errno);
    g_cgroup_dir[0] = '\0';
    return;
  }
  g_cgroup_fd.reset(::open(g_cgroup_dir, O_PATH | O_DIRECTORY | O_CLOEXEC));
  if (!g_cgroup_fd)
    g_cgroup_error = std::string("open ") + g_cgroup_dir + ": " + std::strerror(errno);
}

// The child: join the cgroup, touch kChildBytes, report ready, wait to be killed.
[[noreturn]] void child(int ready_fd) {
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (g_cgroup_fd) {
    // One thread right after fork: moving it through "tasks" moves the process.
    UniqueFd tasks(::openat(g_cgroup_fd.get(), "tasks", O_WRONLY | O_CLOEXEC));
    if (!tasks || ::write(tasks.get(), "0", 1) != 1) ::_exit(1);
  }
  void* p =
      ::mmap(nullptr, kChildBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) ::_exit(1);
  ::madvise(p, kChildBytes, MADV_NOHUGEPAGE);
  std::memset(p, 1, kChildBytes);
  if (::write(ready_fd, "r", 1) != 1) ::_exit(1);
  for (;;) ::pause();
}

// Forks the children one by one, each on its own pipe, and waits until each
// has touched its memory (its pipe closes unwritten if it dies first).
bool start_children() {
  for (int i = 0; i < kChildren; ++i) {
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0) return false;
    UniqueFd read_end(fds[0]), write_end(fds[1]);
    pid_t pid = ::fork();
    if (pid < 0) return false;
    if (pid == 0) child(write_end.get());
    g_children[g_child_count++] = pid;
    write_end.reset();
    char c;
    ssize_t n;
    do n = ::read(read_end.get(), &c, 1);
    while (n < 0 && errno == EINTR);
    if (n != 1) return false;
  }
  return true;
}

std::vector<pid_t> children(int64_t n) {
  return {g_children, g_children + n};
}

bool cgroup_ready(benchmark::State& state) {
  if (g_cgroup_fd) return true;
  state.SkipWithError(g_cgroup_error.c_str());
  return false;
}

// Writing twice the last-level cache (32 MiB here) evicts the page tables,
// struct pages and kernel code a sample touches, as a second of other work
// between two samples does.
void evict_caches() {
  static std::vector<unsigned char> scratch(kScratchBytes);
  static unsigned char fill = 0;
  std::memset(scratch.data(), ++fill, scratch.size());
  benchmark::ClobberMemory();
}

// Runs `sample` once per iteration; `cold`: after evicting the caches (untimed).
template <typename Sample>
void run(benchmark::State& state, bool cold, Sample sample) {
  for (auto _ : state) {
    if (cold) {
      state.PauseTiming();
      evict_caches();
      state.ResumeTiming();
    }
    sample();
  }
}

void BM_Cgroup(benchmark::State& state) {
  if (!cgroup_ready(state)) return;
  probe::CgroupReader reader(g_cgroup_fd.get(), false);
  run(state, state.range(0), [&] { benchmark::DoNotOptimize(reader.read(true)); });
}

void BM_CgroupHeld(benchmark::State& state) {
  if (!cgroup_ready(state)) return;
  probe::MemoryFiles held(g_cgroup_fd.get(), false);  // registered while it lives
  probe::CgroupReader reader(g_cgroup_fd.get(), false);
  run(state, state.range(0), [&] { benchmark::DoNotOptimize(reader.read(true)); });
}

void BM_CgroupSmaps(benchmark::State& state) {
  if (!cgroup_ready(state)) return;
  probe::CgroupReader reader(g_cgroup_fd.get(), false);
  probe::ProcessReader procs;
  std::vector<pid_t> pids = children(state.range(0));
  const unsigned needs = policies::kNeedsCgroupMemory | policies::kNeedsProcessMemory;
  run(state, state.range(1), [&] {
    benchmark::DoNotOptimize(
        probe::probe_worker(&reader, procs, pids, pids[0], needs, policies::Clock::now()));
  });
}

void BM_Statm(benchmark::State& state) {
  probe::ProcessReader procs;
  std::vector<pid_t> pids = children(state.range(0));
  run(state, state.range(1), [&] {
    for (pid_t pid : pids) benchmark::DoNotOptimize(procs.memory(pid, false));
  });
}

void BM_SmapsRollup(benchmark::State& state) {
  probe::ProcessReader procs;
  std::vector<pid_t> pids = children(state.range(0));
  run(state, state.range(1), [&] {
    for (pid_t pid : pids) benchmark::DoNotOptimize(procs.memory(pid, true));
  });
}

void BM_ParseMemoryStat(benchmark::State& state) {
  if (!cgroup_ready(state)) return;
  Result<std::string> text = read_file_at(g_cgroup_fd.get(), "memory.stat");
  if (!text) {
    state.SkipWithError(text.error().message.c_str());
    return;
  }
  for (auto _ : state) {
    probe::CgroupMemory m;
    probe::parse_memory_stat(*text, false, m);
    benchmark::DoNotOptimize(m);
  }
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(text->size()));
}

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;

  std::signal(SIGINT, on_signal);
  std::signal(SIGTERM, on_signal);
  make_cgroup();
  if (!start_children()) {
    std::fprintf(stderr, "could not start the %d children\n", kChildren);
    cleanup();
    return 1;
  }

  // Hot: Google Benchmark picks the iteration count; cold: kColdSamples, each
  // after an eviction (~10 ms, untimed).
  auto add = [](const char* name, void (*fn)(benchmark::State&), bool per_process) {
    for (int64_t cold : {0, 1}) {
      auto* b = benchmark::RegisterBenchmark(name, fn)->Unit(benchmark::kMicrosecond);
      if (per_process)
        b->ArgNames({"procs", "cold"})->Args({1, cold})->Args({kChildren, cold});
      else
        b->ArgName("cold")->Arg(cold);
      if (cold) b->Iterations(kColdSamples);
    }
  };
  add("BM_Cgroup", BM_Cgroup, false);
  add("BM_CgroupHeld", BM_CgroupHeld, false);
  add("BM_CgroupSmaps", BM_CgroupSmaps, true);
  add("BM_Statm", BM_Statm, true);
  add("BM_SmapsRollup", BM_SmapsRollup, true);
  benchmark::RegisterBenchmark("BM_ParseMemoryStat", BM_ParseMemoryStat)
      ->Unit(benchmark::kMicrosecond);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();

  g_cgroup_fd.reset();
  cleanup();
  return 0;
}
