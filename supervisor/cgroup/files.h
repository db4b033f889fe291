// The cgroup files recycler reads and writes, by hierarchy: one table for v1
// (and hybrid hosts, whose controllers are v1's) and one for v2, chosen once
// from the detected mode (like crun's _v1/_v2 helpers), so that no code past
// detection asks "v2 ?" for a file name. Header only, no dependencies: the
// probes use it as well as the manager.
#pragma once

namespace recycler::cgroup {

struct Files {
  bool v2;
  // The controller whose hierarchy holds a file group ("" is v2's unified
  // hierarchy): where the memory files and the freezer are.
  const char* memory_controller;
  const char* freezer_controller;

  // Joining: the file a child writes "0" into between fork and exec. v1
  // moves the child's single thread through "tasks" (no global threadgroup
  // lock); v2 forbids moving a lone thread, so cgroup.procs there.
  const char* join;
  // Every process of the cgroup, one pid a line.
  const char* procs;
  // Key "populated" (v2 only; nullptr on v1, which counts the pids instead).
  const char* events;
  // One write of "1" kills the whole cgroup (v2 from 5.14; nullptr on v1).
  const char* kill;

  // Freezing: the file to write, its two values, and the file (and value)
  // that says the freeze is done. v2's "frozen" is a key of cgroup.events.
  const char* freeze;
  const char* frozen;
  const char* thawed;
  const char* freeze_state;

  // The word for "no limit" in the memory limits and the cpu quota (pids.max
  // says "max" on both).
  const char* unlimited;

  // Memory: usage in bytes, the statistics, the event counters (key
  // "oom_kill" on both; v2 also counts "high"), the hard and soft limits, and
  // v1's registration of an eventfd for a usage threshold (nullptr on v2,
  // which notifies changes of memory.events instead).
  const char* memory_current;
  const char* memory_stat;
  const char* memory_pressure;  // nullptr on v1
  const char* memory_events;
  const char* memory_max;
  const char* memory_high;
  const char* event_control;
  // The memory settings a kernel may lack (cgroup/memory_settings.h writes
  // them once the cgroup exists, never through libcgroup, so that a missing
  // one fails no creation): nullptr where the hierarchy has no such file.
  // v2's memory.swap.max limits swap alone; v1's memory.memsw.limit_in_bytes
  // limits memory and swap together (swap_includes_memory), must not be below
  // memory.limit_in_bytes, and is there only with swap accounting
  // (swapaccount=1, or CONFIG_MEMCG_SWAP_ENABLED).
  const char* memory_low;  // nullptr on v1
  const char* oom_group;   // nullptr on v1
  const char* swap_max;
  bool swap_includes_memory;

  // cpu: v2's "QUOTA PERIOD" in one file; v1's period and quota apart.
  const char* cpu_max;     // nullptr on v1
  const char* cpu_period;  // nullptr on v2
  const char* cpu_quota;   // nullptr on v2
  // The CPU time the cgroup has used: v2's cpu.stat (key usage_usec, there
  // whether or not the cpu controller is enabled). nullptr on v1, where it is
  // cpuacct's, a hierarchy recycler creates no cgroup in: the probes sum the
  // processes' /proc/PID/stat instead.
  const char* cpu_usage;
};

inline constexpr Files kV1{
    .v2 = false,
    .memory_controller = "memory",
    .freezer_controller = "freezer",
    .join = "tasks",
    .procs = "cgroup.procs",
    .events = nullptr,
    .kill = nullptr,
    .freeze = "freezer.state",
    .frozen = "FROZEN",
    .thawed = "THAWED",
    .freeze_state = "freezer.state",
    .unlimited = "-1",
    .memory_current = "memory.usage_in_bytes",
    .memory_stat = "memory.stat",
    .memory_pressure = nullptr,
    .memory_events = "memory.oom_control",
    .memory_max = "memory.limit_in_bytes",
    .memory_high = "memory.soft_limit_in_bytes",
    .event_control = "cgroup.event_control",
    .memory_low = nullptr,
    .oom_group = nullptr,
    .swap_max = "memory.memsw.limit_in_bytes",
    .swap_includes_memory = true,
    .cpu_max = nullptr,
    .cpu_period = "cpu.cfs_period_us",
    .cpu_quota = "cpu.cfs_quota_us",
    .cpu_usage = nullptr,
};

inline constexpr Files kV2{
    .v2 = true,
    .memory_controller = "",
    .freezer_controller = "",
    .join = "cgroup.procs",
    .procs = "cgroup.procs",
    .events = "cgroup.events",
    .kill = "cgroup.kill",
    .freeze = "cgroup.freeze",
    .frozen = "1",
    .thawed = "0",
    .freeze_state = "cgroup.events",
    .unlimited = "max",
    .memory_current = "memory.current",
    .memory_stat = "memory.stat",
    .memory_pressure = "memory.pressure",
    .memory_events = "memory.events",
    .memory_max = "memory.max",
    .memory_high = "memory.high",
    .event_control = nullptr,
    .memory_low = "memory.low",
    .oom_group = "memory.oom.group",
    .swap_max = "memory.swap.max",
    .swap_includes_memory = false,
    .cpu_max = "cpu.max",
    .cpu_period = nullptr,
    .cpu_quota = nullptr,
    .cpu_usage = "cpu.stat",
};

// The table for a hierarchy: v2's, or v1's (v1 and hybrid hosts).
constexpr const Files& files(bool v2) {
  return v2 ? kV2 : kV1;
}

}  // namespace recycler::cgroup
