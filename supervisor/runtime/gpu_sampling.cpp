#include "supervisor/runtime/gpu_sampling.h"

#include <unistd.h>

#include <chrono>
#include <optional>
#include <utility>

#include "supervisor/log/log.h"

namespace recycler {

GpuSampling::GpuSampling(uv_loop_t* loop, Timers& timers, std::string proc, PublishFn publish)
    : loop_(loop), timers_(timers), proc_(std::move(proc)), publish_(std::move(publish)) {}

void GpuSampling::apply(const config::Config& config) {
  std::optional<std::string> library = config.nvml_library();
  if (!library) return;
  if (sampler_) {
    if (*library != library_)
      log::warn("gpu.nvml: NVML stays {} until recycler restarts (a loaded library stays)",
                library_);
    return;
  }
  library_ = *library;
  sampler_ = std::make_unique<gpu::Sampler>(loop_, timers_, *library, proc_, ::getpid());
  publish_(sampler_.get());
}

void GpuSampling::progress(TimePoint now, std::vector<Progress>& out) const {
  if (!sampler_) return;
  if (auto since = sampler_->in_flight_since())
    out.push_back({"the GPU query", sampler_->interval(),
                   std::chrono::duration_cast<Duration>(now - *since)});
}

void GpuSampling::stop() {
  publish_(nullptr);
  sampler_.reset();
}

}  // namespace recycler
