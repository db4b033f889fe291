#include "policies/metric.h"

#include <algorithm>
#include <array>

namespace recycler::policies {
namespace {

struct MetricName {
  Metric metric;
  std::string_view name;
};

constexpr std::array<MetricName, 9> kMetrics{{{Metric::Current, "current"},
                                              {Metric::Anon, "anon"},
                                              {Metric::File, "file"},
                                              {Metric::Rss, "rss"},
                                              {Metric::Pss, "pss"},
                                              {Metric::Uss, "uss"},
                                              {Metric::Device, "device"},
                                              {Metric::Gpu, "gpu"},
                                              {Metric::GpuTotal, "gpu_total"}}};

}  // namespace

std::string_view to_string(Metric metric) {
  for (const auto& m : kMetrics)
    if (m.metric == metric) return m.name;
  return "?";
}

std::optional<Metric> parse_metric(std::string_view name) {
  for (const auto& m : kMetrics)
    if (m.name == name) return m.metric;
  return std::nullopt;
}

bool per_process(Metric metric) {
  return metric == Metric::Rss || metric == Metric::Pss || metric == Metric::Uss;
}

bool gpu_metric(Metric metric) {
  return metric == Metric::Gpu || metric == Metric::GpuTotal;
}

bool has_process_figure(Metric metric) {
  return per_process(metric) || metric == Metric::Gpu;
}

unsigned needs(Metric metric) {
  if (per_process(metric)) return kNeedsProcessMemory | kNeedsProcesses;
  if (metric == Metric::Device) return kNeedsDevice;
  if (gpu_metric(metric)) return kNeedsGpu;
  return kNeedsCgroupMemory;
}

std::optional<uint64_t> value(const ProcessSample& process, Metric metric) {
  switch (metric) {
    case Metric::Rss:
      return process.rss;
    case Metric::Pss:
      return process.pss;
    case Metric::Uss:
      return process.uss;
    case Metric::Gpu:
      return process.gpu;
    default:
      return std::nullopt;
  }
}

std::optional<uint64_t> capacity(const Sample& sample, Metric metric,
                                 const std::optional<uint64_t>& memory_max) {
  if (metric == Metric::Gpu) return sample.gpu_capacity;
  if (metric == Metric::GpuTotal) return sample.gpu_total_capacity;
  return memory_max;
}

std::optional<uint64_t> capacity(const ProcessSample& process, Metric metric,
                                 const std::optional<uint64_t>& memory_max) {
  if (gpu_metric(metric)) return process.gpu_capacity;
  return memory_max;
}

std::optional<uint64_t> value(const Sample& sample, Metric metric) {
  switch (metric) {
    case Metric::Current:
      return sample.current;
    case Metric::Anon:
      return sample.anon;
    case Metric::File:
      return sample.file;
    case Metric::Device:
      return sample.device;
    case Metric::Gpu:
      return sample.gpu;
    case Metric::GpuTotal:
      return sample.gpu_total;
    case Metric::Rss:
    case Metric::Pss:
    case Metric::Uss:
      break;
  }
  // A sum missing one process would understate the worker: no figure instead.
  if (sample.processes.empty()) return std::nullopt;
  uint64_t total = 0;
  for (const auto& p : sample.processes) {
    auto v = value(p, metric);
    if (!v) return std::nullopt;
    total += *v;
  }
  return total;
}

std::optional<Duration> Hold::update(TimePoint t, bool holds, Duration need) {
  if (!holds) {
    since_.reset();
    return std::nullopt;
  }
  if (!since_) since_ = t;
  // Samples arrive in time order; a stray earlier one counts as no time at all.
  auto held = std::max(Duration::zero(), std::chrono::duration_cast<Duration>(t - *since_));
  if (held < need) return std::nullopt;
  return held;
}

}  // namespace recycler::policies
