#include "supervisor/cgroup/memory_settings.h"

#include <algorithm>

namespace recycler::cgroup {
namespace {

constexpr uint64_t kUnlimitedSwap = config::Limits::kUnlimitedSwap;

constexpr const char* kUnprotected = "the workers' memory is not protected from reclaim";
constexpr const char* kHalfKilled =
    "an OOM kill may take one process of a worker and leave the rest running";
constexpr const char* kMaySwap = "the workers may swap beyond their memory limit";

// v1: memory and swap together, saturating at "unlimited".
std::string memory_and_swap(uint64_t memory, uint64_t swap, const Files& files) {
  if (swap == kUnlimitedSwap || swap > UINT64_MAX - memory) return files.unlimited;
  return std::to_string(memory + swap);
}

std::optional<MemorySetting> swap_setting(const config::Limits& l, const Files& f) {
  uint64_t swap = l.swap_limit();
  bool matters = swap != kUnlimitedSwap;
  if (!f.swap_includes_memory) {
    std::string value = swap == kUnlimitedSwap ? f.unlimited : std::to_string(swap);
    return MemorySetting{f.swap_max, value, "limits.swap_max", matters, kMaySwap};
  }
  // v1 cannot limit swap without a memory limit to add it to.
  if (!l.memory_max) return std::nullopt;
  return MemorySetting{f.swap_max, memory_and_swap(*l.memory_max, swap, f), "limits.swap_max",
                       matters, kMaySwap};
}

bool absent(const Layout& layout, const char* file) {
  return file && std::find(layout.absent_files.begin(), layout.absent_files.end(), file) !=
                     layout.absent_files.end();
}

std::optional<std::string> unapplied_swap(const config::Limits& l, const Layout& layout) {
  const Files& f = layout.files();
  if (l.swap_limit() == kUnlimitedSwap) return std::nullopt;  // the kernel's own behaviour
  if (f.swap_includes_memory && !l.memory_max) {
    if (!l.swap_max) return std::nullopt;  // the default: no memory limit to go beyond
    return "limits.swap_max: cgroup v1 limits swap only together with memory "
           "(memory.memsw.limit_in_bytes), so only with limits.memory_max; not applied";
  }
  if (!absent(layout, f.swap_max)) return std::nullopt;
  std::string how = f.swap_includes_memory
                        ? "boot it with swapaccount=1"
                        : "it was built without CONFIG_MEMCG_SWAP or booted with swapaccount=0";
  return std::string("limits.swap_max") + (l.swap_max ? "" : " (default: no swap)") +
         ": this kernel does not account swap (no " + f.swap_max + "; " + how + "): " + kMaySwap;
}

}  // namespace

std::vector<MemorySetting> memory_settings(const config::Limits& l, const Files& f) {
  std::vector<MemorySetting> out;
  if (f.memory_low)
    out.push_back({f.memory_low, std::to_string(l.memory_low.value_or(0)), "limits.memory_low",
                   l.memory_low.value_or(0) > 0, kUnprotected});
  if (f.oom_group)
    out.push_back(
        {f.oom_group, l.groups_oom() ? "1" : "0", "limits.oom_group", l.groups_oom(), kHalfKilled});
  if (auto swap = swap_setting(l, f)) out.push_back(*swap);
  return out;
}

std::vector<std::string> unapplied_settings(const config::Limits& l, const Layout& layout) {
  bool no_memory =
      std::find(layout.missing.begin(), layout.missing.end(), "memory") != layout.missing.end();
  if (layout.not_enforced || layout.hierarchies.empty() || no_memory) return {};
  const Files& f = layout.files();
  std::vector<std::string> out;
  if (l.memory_low.value_or(0) > 0 && !f.memory_low)
    out.push_back("limits.memory_low: cgroup v1 has no memory.low; not applied");
  else if (l.memory_low.value_or(0) > 0 && absent(layout, f.memory_low))
    out.push_back("limits.memory_low: this kernel has no memory.low; not applied");
  if (l.oom_group.value_or(false) && !f.oom_group)
    out.push_back(
        "limits.oom_group: cgroup v1 has no memory.oom.group: an OOM kill takes the process the "
        "kernel picks, not the whole worker");
  else if (l.groups_oom() && absent(layout, f.oom_group))
    out.push_back(std::string("limits.oom_group") + (l.oom_group ? "" : " (default: on)") +
                  ": this kernel has no memory.oom.group (Linux 4.19 added it): " + kHalfKilled);
  if (auto swap = unapplied_swap(l, layout)) out.push_back(*swap);
  return out;
}

}  // namespace recycler::cgroup
