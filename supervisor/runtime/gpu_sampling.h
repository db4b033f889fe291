// GPU figures (gpu/sampler.h) from the first config that asks for them
// until recycler exits: NVML is loaded once and never unloaded, so a reload
// that names another library is told that the first one stays. Out of
// Supervisor, which hands it where the monitors look for the sampler.
#pragma once

#include <uv.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "supervisor/config/config.h"
#include "supervisor/gpu/sampler.h"
#include "supervisor/runtime/watchdog.h"
#include "supervisor/util/timers.h"

namespace recycler {

class GpuSampling {
 public:
  // Tells the monitors which sampler to read: one once it starts, null when
  // it stops.
  using PublishFn = std::function<void(gpu::Sampler*)>;
  // `loop` and `timers` outlive this; `proc` is /proc (gpu::Sampler).
  GpuSampling(uv_loop_t* loop, Timers& timers, std::string proc, PublishFn publish);

  // Starts sampling if `config` asks for GPU figures and nothing samples yet.
  void apply(const config::Config& config);
  // For the watchdog: a query that should progress every interval.
  void progress(TimePoint now, std::vector<Progress>& out) const;
  // Waits for a query in flight (one NVML call); before the loop closes.
  void stop();

 private:
  uv_loop_t* loop_;
  Timers& timers_;
  std::string proc_;
  PublishFn publish_;
  std::unique_ptr<gpu::Sampler> sampler_;
  std::string library_;  // what sampler_ loaded
};

}  // namespace recycler
