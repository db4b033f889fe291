#include "supervisor/runtime/gpu_pool.h"

#include "supervisor/config/devices.h"
#include "supervisor/log/log.h"

namespace recycler {
namespace {

// The value of `name` in an environment of "NAME=value" strings.
std::optional<std::string> lookup(const std::vector<std::string>& env, const std::string& name) {
  for (const std::string& kv : env)
    if (kv.size() > name.size() && kv.compare(0, name.size(), name) == 0 && kv[name.size()] == '=')
      return kv.substr(name.size() + 1);
  return std::nullopt;
}

}  // namespace

GpuPool::GpuPool(const std::vector<std::string>& base_env) : base_env_(base_env) {}

Result<std::vector<std::string>> GpuPool::count_with_nvml(const std::string& nvml_library) {
  if (!nvml_) {
    auto opened = gpu::Nvml::open(nvml_library);
    if (!opened) return opened.error();
    nvml_ = std::move(*opened);
  }
  auto count = nvml_->device_count();
  if (!count) return Error{"NVML: " + count.error().message};
  if (*count == 0) return Error{"NVML sees no GPU"};
  std::vector<std::string> out;
  for (unsigned i = 0; i < *count; ++i) out.push_back(std::to_string(i));
  return out;
}

Result<GpuPool::Found> GpuPool::find(const std::string& nvml_library) {
  if (auto given = lookup(base_env_, config::kCudaVisibleDevices)) {
    Found found{config::visible_device_list(*given), "recycler's own CUDA_VISIBLE_DEVICES"};
    if (found.entries.empty())
      return Error{"devices.gpus: auto shares out " + found.source + ", which names no GPU"};
    return found;
  }
  auto counted = count_with_nvml(nvml_library);
  if (!counted)
    return Error{"devices.gpus: auto counts the GPUs through NVML, which cannot be used: " +
                 counted.error().message + "; not started (list the GPUs instead)"};
  return Found{std::move(*counted), "NVML"};
}

Status GpuPool::resolve(const config::ProgramConfig& program, const std::string& nvml_library) {
  if (entries_.empty()) {
    auto found = find(nvml_library);
    if (!found) return found.error();
    entries_ = std::move(found->entries);
    log::info("devices.gpus: auto shares out {} GPU{} ({}): {}", entries_.size(),
              entries_.size() == 1 ? "" : "s", found->source, config::join_gpus(entries_));
  }
  if (program.devices.per_slot > entries_.size())
    return Error{"devices.per_slot is " + std::to_string(program.devices.per_slot) +
                 " but gpus: auto has only " + std::to_string(entries_.size()) + " GPU" +
                 (entries_.size() == 1 ? "" : "s") + " to share out: a slot would get one twice"};
  return Ok{};
}

}  // namespace recycler
