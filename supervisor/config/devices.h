// `devices:`, from the config to a worker's environment: the device
// counterpart of `allocator:`. Each slot gets its share of the GPUs as
// CUDA_VISIBLE_DEVICES, and the program the variables its framework reads
// for GPU memory.
//
// What each key sets (nothing else is touched):
//   gpus, per_slot      CUDA_VISIBLE_DEVICES=the slot's entries, and with
//                       indexes among them CUDA_DEVICE_ORDER=PCI_BUS_ID
//                       (they then count as nvidia-smi and NVML do) unless
//                       the environment has one
//   pytorch_alloc_conf  PYTORCH_CUDA_ALLOC_CONF=TEXT
//   xla_preallocate     XLA_PYTHON_CLIENT_PREALLOCATE=true|false
//   xla_mem_fraction    XLA_PYTHON_CLIENT_MEM_FRACTION=F
// Slot i gets `per_slot` consecutive entries of the list, starting at
// (i * per_slot) mod its length and wrapping (round-robin: slots beyond the
// GPUs share them). The program's own `env:` wins for every variable, as
// with `threads:` and `allocator:`; what recycler itself inherited is
// overridden.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "supervisor/config/allocator.h"
#include "supervisor/config/config.h"

namespace recycler::config {

inline constexpr const char* kCudaVisibleDevices = "CUDA_VISIBLE_DEVICES";
inline constexpr const char* kCudaDeviceOrder = "CUDA_DEVICE_ORDER";
inline constexpr const char* kPytorchAllocConf = "PYTORCH_CUDA_ALLOC_CONF";
inline constexpr const char* kXlaPreallocate = "XLA_PYTHON_CLIENT_PREALLOCATE";
inline constexpr const char* kXlaMemFraction = "XLA_PYTHON_CLIENT_MEM_FRACTION";

// Ranges the parser enforces.
inline constexpr unsigned kMaxGpuIndex = 4095;
inline constexpr unsigned kMaxGpusPerSlot = 1024;

// The entries of a CUDA_VISIBLE_DEVICES value ("0,1", " GPU-8f2a..., 2"):
// split at commas, trimmed, empty ones dropped.
std::vector<std::string> visible_device_list(std::string_view value);

// Slot `slot`'s share of `pool`: `per_slot` entries from (slot * per_slot)
// mod pool.size(), wrapping; empty for an empty pool.
std::vector<std::string> slot_gpus(const std::vector<std::string>& pool, unsigned per_slot,
                                   unsigned slot);

// "0,1": what CUDA_VISIBLE_DEVICES gets.
std::string join_gpus(const std::vector<std::string>& gpus);

// XLA_PYTHON_CLIENT_MEM_FRACTION's value: "0.5", "0.75", "1".
std::string format_mem_fraction(double fraction);

// Adds what `devices` sets for slot `slot` to `env`, the worker's environment
// so far (what recycler inherited, with `program_env` applied over it):
// each variable unless `program_env` sets it; CUDA_DEVICE_ORDER only with
// indexes in CUDA_VISIBLE_DEVICES, and not where `env` already has one (the numbering
// recycler's own environment uses stays). `gpus_auto` is the list `gpus:
// auto` shares out, resolved when recycler runs (runtime/gpu_pool.h); with
// none, auto sets no CUDA_VISIBLE_DEVICES (the runtime refuses to start such
// a program rather than get here).
void apply_devices(const DevicesConfig& devices, const EnvMap& program_env, unsigned slot,
                   const std::vector<std::string>& gpus_auto, EnvMap& env);

}  // namespace recycler::config
