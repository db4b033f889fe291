#include "supervisor/config/devices.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>

namespace recycler::config {
namespace {

std::string_view trimmed(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

// Sets `name` unless the program's env does.
void set_unless_given(const EnvMap& program_env, EnvMap& env, const char* name, std::string value) {
  if (!program_env.count(name)) env[name] = std::move(value);
}

}  // namespace

std::vector<std::string> visible_device_list(std::string_view value) {
  std::vector<std::string> out;
  while (true) {
    size_t comma = value.find(',');
    std::string_view entry = trimmed(value.substr(0, comma));
    if (!entry.empty()) out.emplace_back(entry);
    if (comma == std::string_view::npos) break;
    value.remove_prefix(comma + 1);
  }
  return out;
}

std::vector<std::string> slot_gpus(const std::vector<std::string>& pool, unsigned per_slot,
                                   unsigned slot) {
  std::vector<std::string> out;
  if (pool.empty()) return out;
  size_t first = (static_cast<size_t>(slot) * per_slot) % pool.size();
  for (size_t i = 0; i < per_slot; ++i) out.push_back(pool[(first + i) % pool.size()]);
  return out;
}

std::string join_gpus(const std::vector<std::string>& gpus) {
  std::string out;
  for (const std::string& g : gpus) out += (out.empty() ? "" : ",") + g;
  return out;
}

std::string format_mem_fraction(double fraction) {
  return fmt::format("{:g}", fraction);
}

void apply_devices(const DevicesConfig& devices, const EnvMap& program_env, unsigned slot,
                   const std::vector<std::string>& gpus_auto, EnvMap& env) {
  const std::vector<std::string>& pool = devices.gpus_auto ? gpus_auto : devices.gpus;
  if (!pool.empty() && !program_env.count(kCudaVisibleDevices)) {
    std::vector<std::string> mine = slot_gpus(pool, devices.per_slot, slot);
    env[kCudaVisibleDevices] = join_gpus(mine);
    bool indexes = std::any_of(mine.begin(), mine.end(), [](const std::string& g) {
      return std::isdigit(static_cast<unsigned char>(g.front()));
    });
    if (indexes && !env.count(kCudaDeviceOrder)) env[kCudaDeviceOrder] = "PCI_BUS_ID";
  }
  if (devices.pytorch_alloc_conf)
    set_unless_given(program_env, env, kPytorchAllocConf, *devices.pytorch_alloc_conf);
  if (devices.xla_preallocate)
    set_unless_given(program_env, env, kXlaPreallocate,
                     *devices.xla_preallocate ? "true" : "false");
  if (devices.xla_mem_fraction)
    set_unless_given(program_env, env, kXlaMemFraction,
                     format_mem_fraction(*devices.xla_mem_fraction));
}

}  // namespace recycler::config
