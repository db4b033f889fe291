// What `devices: {gpus: auto}` shares out among the slots of a program that
// asks for it (config/devices.h): the CUDA_VISIBLE_DEVICES recycler was
// started with, when it has one (a Slurm job's GPUs: what recycler was given
// is what it shares, numbered as they are numbered for recycler), else the
// index of every GPU NVML sees. Found once, when the first such program is
// created (at start-up or by a reload), and kept for the others: NVML is
// loaded for it on the loop's thread (its initialisation may take a second),
// and never unloaded, as GpuSampling's is not. `check` and `replay` never get
// here: they do not load NVML.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "supervisor/config/config.h"
#include "supervisor/gpu/nvml.h"
#include "supervisor/util/result.h"

namespace recycler {

class GpuPool {
 public:
  // `base_env`: what workers inherit (WorkerServices::base_env), which
  // outlives this.
  explicit GpuPool(const std::vector<std::string>& base_env);

  // Finds the pool, unless it was found before, for `program`, whose
  // devices.gpus is auto, loading `nvml_library` if it must. An error, which
  // refuses the program, when NVML cannot be loaded or sees no GPU, or the
  // pool has fewer GPUs than devices.per_slot. A failure is not kept: a
  // reload tries again.
  Status resolve(const config::ProgramConfig& program, const std::string& nvml_library);

  // The entries ("0", "1", ...; or recycler's own CUDA_VISIBLE_DEVICES's);
  // empty until resolve() succeeds. The reference stays valid.
  const std::vector<std::string>& entries() const { return entries_; }

 private:
  struct Found {
    std::vector<std::string> entries;
    std::string source;  // for the log: where they came from
  };
  // recycler's own CUDA_VISIBLE_DEVICES, else NVML's count.
  Result<Found> find(const std::string& nvml_library);
  Result<std::vector<std::string>> count_with_nvml(const std::string& nvml_library);

  const std::vector<std::string>& base_env_;
  std::unique_ptr<gpu::Nvml> nvml_;
  std::vector<std::string> entries_;
};

}  // namespace recycler
