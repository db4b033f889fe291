// What memory policies measure, and the bookkeeping every threshold policy
// shares: how long a condition has held, and state kept per process.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <optional>
#include <string_view>
#include <unordered_map>

#include "policies/base/time.h"
#include "policies/policy.h"

namespace recycler::policies {

// current, anon and file come from the worker's cgroup; rss, pss and uss
// from each process (a worker's is the sum over its processes); device is
// what the worker reports of its accelerator memory; gpu and gpu_total what
// NVML reports for the worker's processes (on its fullest device; summed).
enum class Metric { Current, Anon, File, Rss, Pss, Uss, Device, Gpu, GpuTotal };

std::string_view to_string(Metric metric);  // "anon"
std::optional<Metric> parse_metric(std::string_view name);
// rss, pss and uss: measured per process.
bool per_process(Metric metric);
// gpu and gpu_total: read through NVML; a percentage limit of them is of the
// device's memory, not of memory_max.
bool gpu_metric(Metric metric);
// Whether scope: process can use `metric`: the per-process ones and gpu.
bool has_process_figure(Metric metric);
// The Needs bits that make the probes measure `metric`.
unsigned needs(Metric metric);

// The worker's figure; empty when the probe could not measure it. rss, pss
// and uss are sums, empty when any process lacks the figure or there is none.
std::optional<uint64_t> value(const Sample& sample, Metric metric);
// One process's rss, pss, uss or gpu; empty for the other metrics.
std::optional<uint64_t> value(const ProcessSample& process, Metric metric);
// What a percentage limit of `metric` is of when it is not memory_max: the
// device's total for gpu and gpu_total (empty while it holds no GPU memory);
// `memory_max` for the others.
std::optional<uint64_t> capacity(const Sample& sample, Metric metric,
                                 const std::optional<uint64_t>& memory_max);
std::optional<uint64_t> capacity(const ProcessSample& process, Metric metric,
                                 const std::optional<uint64_t>& memory_max);

// How long a condition has held without a break, in Sample time (`for:`).
class Hold {
 public:
  // Records whether the sample at `t` meets the condition; one that does not
  // starts the count over. Returns how long it has held once that reaches
  // `need`. A sample that cannot tell (the figure is missing) is simply not
  // recorded: it neither breaks nor extends the hold.
  std::optional<Duration> update(TimePoint t, bool holds, Duration need);

 private:
  std::optional<TimePoint> since_;
};

// State per process for scope: process. A pid's state is made when it first
// appears in a Sample and dropped with the first Sample that lacks it, so a
// reused pid starts fresh. The worker's main process is never tracked: a
// policy with process scope must not signal it.
template <typename T>
class ProcessTable {
 public:
  // Tracks exactly the non-main processes of `sample`, calling
  // make(const ProcessSample&) -> T for each new one, in the Sample's order.
  template <typename Make>
  void sync(const Sample& sample, Make&& make) {
    ++generation_;
    for (const auto& p : sample.processes) {
      if (p.main) continue;
      auto it = entries_.find(p.pid);
      if (it == entries_.end()) it = entries_.emplace(p.pid, Entry{make(p), 0}).first;
      it->second.generation = generation_;
    }
    std::erase_if(entries_, [&](const auto& e) { return e.second.generation != generation_; });
  }

  // The state of a process of the last synced Sample.
  T& at(pid_t pid) { return entries_.at(pid).state; }
  const T* find(pid_t pid) const {
    auto it = entries_.find(pid);
    return it == entries_.end() ? nullptr : &it->second.state;
  }
  size_t size() const { return entries_.size(); }

 private:
  struct Entry {
    T state;
    uint64_t generation;
  };
  std::unordered_map<pid_t, Entry> entries_;
  uint64_t generation_ = 0;
};

// The process furthest over its limit among those offered (the first of
// equals): the one a process-scope policy acts on.
struct Worst {
  const ProcessSample* process = nullptr;
  uint64_t excess = 0;

  // True when `p` is now the worst.
  bool offer(const ProcessSample& p, uint64_t over_by) {
    if (process && over_by <= excess) return false;
    process = &p;
    excess = over_by;
    return true;
  }
};

}  // namespace recycler::policies
