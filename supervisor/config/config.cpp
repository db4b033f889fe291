#include "supervisor/config/config.h"

#include "policies/policy.h"

namespace recycler::config {

const ProgramConfig* Config::find(const std::string& name) const {
  for (const auto& program : programs)
    if (program.name == name) return &program;
  return nullptr;
}

bool Config::needs_gpu() const {
  for (const auto& program : programs)
    for (const auto& p : program.policies)
      if (p.policy && (p.policy->needs() & policies::kNeedsGpu)) return true;
  return false;
}

std::optional<std::string> Config::nvml_library() const {
  if (gpu) return gpu->nvml;
  if (needs_gpu()) return GpuConfig{}.nvml;
  return std::nullopt;
}

}  // namespace recycler::config
