#include "supervisor/runtime/container_limits.h"

#include <utility>

#include "policies/base/units.h"
#include "supervisor/log/log.h"

namespace recycler {

void ContainerLimits::open(const cgroup::Layout& layout, const cgroup::Paths& paths) {
  std::string dir = container_memory_dir(layout, paths);
  if (dir.empty()) return;
  watch_ = std::make_unique<ContainerWatch>(
      timers_, dir, layout.mode == cgroup::Mode::V2,
      [this, dir](std::optional<uint64_t> limit) { on_limit(dir, limit); });
}

std::optional<ContainerStatus> ContainerLimits::status() const {
  if (!watch_ || !watch_->limit()) return std::nullopt;
  return watch_->status();
}

// The container's limit, first read or changed (a pod resized in place).
void ContainerLimits::on_limit(const std::string& dir, std::optional<uint64_t> limit) {
  std::optional<uint64_t> before = std::exchange(monitors_.container_memory_max, limit);
  if (before)
    log::warn("container: memory limit {} -> {} ({}): percentage limits follow it",
              units::format_size(*before), limit ? units::format_size(*limit) : std::string("none"),
              dir);
  else if (limit)
    log::info(
        "container: memory limit {} ({}): percentage limits are of it where a program sets no "
        "limits.memory_max",
        units::format_size(*limit), dir);
  for (auto& [name, program] : programs_)
    if (program.monitor) program.monitor->set_default_memory_max(limit);
  check_fit();
}

void ContainerLimits::check_fit(const config::Config& config) {
  std::optional<uint64_t> limit = monitors_.container_memory_max;
  if (!limit) return;
  bool budgeted = config.budget && config.budget->scope == config::BudgetScope::Container;
  if (watch_ && watch_->oom_group() && !budgeted && !std::exchange(said_oom_group_, true))
    log::warn(
        "container: memory.oom.group is 1 ({}): an OOM kill at the container's {} takes every "
        "process in it, recycler too; a budget: {{scope: container, limit: 90%}} recycles a "
        "worker before",
        watch_->dir(), units::format_size(*limit));
  uint64_t sum = 0;
  for (const auto& [name, program] : programs_)
    if (const auto& max = program.config->limits.memory_max)
      sum += *max * program.config->instances;
  if (sum > *limit)
    log::warn(
        "container: the workers' limits.memory_max add up to {}, more than the container's {}: "
        "the container's limit (its OOM killer) comes first; lower them, or rely on policies "
        "with percentages",
        units::format_size(sum), units::format_size(*limit));
}

}  // namespace recycler
