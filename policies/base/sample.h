// What the probes measure and the policies read: plain data, no behaviour.
// In namespace recycler::policies, as before it moved out of policy.h.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <optional>
#include <vector>

namespace recycler::policies {

using Clock = std::chrono::steady_clock;
using TimePoint = Clock::time_point;

// Memory and activity of one worker at one instant. Fields a probe could not
// measure stay empty; policies decide what an empty field means for them
// (usually: no opinion).
struct ProcessSample {
  pid_t pid = 0;
  bool main = false;  // the worker's main process (a pre-fork server's master)
  // Already being recycled (signalled, or waiting its turn): process-scope
  // policies pass over it, so that the next offender is found meanwhile.
  bool recycling = false;
  std::optional<uint64_t> rss, pss, uss;  // bytes, /proc/PID/smaps_rollup (rss: statm fallback)
  std::optional<uint32_t> threads;
  std::optional<uint64_t> requests;  // completed by this process since it was first seen
  // GPU memory (NVML) on the device where it holds the most, and that
  // device's total (what a percentage limit is of); scope: process reads it.
  std::optional<uint64_t> gpu, gpu_capacity;
};

struct Sample {
  TimePoint t;
  // The worker's cgroup, bytes: memory.current / memory.usage_in_bytes, and
  // memory.stat by kind (v1 names mapped: rss -> anon, cache -> file).
  std::optional<uint64_t> current, anon, file, kernel, shmem;
  std::optional<double> pressure;  // v2 memory.pressure "some avg10", percent
  std::optional<uint64_t> device;  // device bytes the worker reported (RECYCLER_DEVICE_BYTES)
  // GPU memory of all its processes from NVML (supervisor/gpu/): on the device
  // where it holds the most and that device's total; summed over devices and
  // the totals of those devices. 0 when it holds none; empty when unknown.
  std::optional<uint64_t> gpu, gpu_capacity, gpu_total, gpu_total_capacity;
  std::optional<uint32_t> threads;   // every thread of every process of the worker
  std::optional<uint64_t> requests;  // completed since the worker started
  std::vector<ProcessSample> processes;
  // The last iteration the worker reported (RECYCLER_ITERATION): a change is
  // an iteration boundary, which the leak policy projects its growth by.
  std::optional<uint64_t> iteration;
  // When the run last said it is alive (WATCHDOG=1, or any RECYCLER_ITERATION
  // report); empty until it first does. The watchdog policy reads it.
  std::optional<TimePoint> alive;
  // CPU time the worker has used, microseconds: v2's cpu.stat usage_usec
  // (over the cgroup's life, which spans runs), else utime + stime of the
  // processes alive now. Only growth means anything: the controller measures
  // it from the run's first sample (kNeedsCpu).
  std::optional<uint64_t> cpu_usec;
};

// What a policy reads, so that probes skip what nobody asked for
// (smaps_rollup walks page tables; a cgroup read does not).
enum Needs : unsigned {
  kNeedsCgroupMemory = 1u << 0,   // current, anon, file, kernel, shmem, pressure
  kNeedsProcessMemory = 1u << 1,  // per-process rss, pss, uss
  kNeedsThreads = 1u << 2,        // Sample::threads and per-process threads
  kNeedsRequests = 1u << 3,       // request counts: evaluated again on every report
  kNeedsDevice = 1u << 4,
  kNeedsProcesses = 1u << 5,   // the process list itself (scope: process)
  kNeedsGpu = 1u << 6,         // gpu, gpu_total (NVML, per process)
  kNeedsIterations = 1u << 7,  // Sample::iteration: evaluated again at every new iteration
  // Sample::cpu_usec. No policy reads it: the controller asks for it while a
  // request-counting policy has seen no request (RecycleController).
  kNeedsCpu = 1u << 8,
};

}  // namespace recycler::policies
