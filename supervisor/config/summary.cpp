#include "supervisor/config/summary.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <utility>

#include "policies/base/units.h"
#include "supervisor/config/devices.h"

namespace recycler {
namespace {

struct Item {
  const char* controller;
  std::string text;
};

std::vector<Item> limit_items(const config::Limits& l) {
  std::vector<Item> items;
  if (l.memory_max) items.push_back({"memory", "memory_max " + units::format_size(*l.memory_max)});
  if (l.memory_high)
    items.push_back({"memory", "memory_high " + units::format_size(*l.memory_high)});
  if (l.memory_low) items.push_back({"memory", "memory_low " + units::format_size(*l.memory_low)});
  if (l.swap_max)
    items.push_back({"memory", "swap_max " + (*l.swap_max == config::Limits::kUnlimitedSwap
                                                  ? std::string("unlimited")
                                                  : units::format_size(*l.swap_max))});
  if (l.oom_group) items.push_back({"memory", *l.oom_group ? "oom_group on" : "oom_group off"});
  if (l.pids_max) items.push_back({"pids", "pids_max " + std::to_string(*l.pids_max)});
  if (l.cpu) items.push_back({"cpu", fmt::format("cpu {:g}", *l.cpu)});
  return items;
}

std::string join(const std::vector<std::string>& parts, const char* sep) {
  std::string out;
  for (const std::string& p : parts) out += (out.empty() ? "" : sep) + p;
  return out;
}

}  // namespace

// A word of anything but letters, digits and @%+=:,./_- goes in single
// quotes, and a quote in it is '\''.
std::string render_argv(const std::vector<std::string>& argv, bool shell) {
  if (shell && argv.size() == 3) return argv[2];
  std::vector<std::string> words;
  for (const std::string& a : argv) {
    bool plain = !a.empty() && std::all_of(a.begin(), a.end(), [](char c) {
      return std::isalnum(static_cast<unsigned char>(c)) ||
             std::string_view("@%+=:,./_-").find(c) != std::string_view::npos;
    });
    if (plain) {
      words.push_back(a);
      continue;
    }
    std::string quoted = "'";
    for (char c : a) quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
    words.push_back(quoted + "'");
  }
  return join(words, " ");
}

namespace {

// "arena_max 2, preload jemalloc (/usr/lib/x86_64-linux-gnu/libjemalloc.so.2)": the
// library found at check time is worth seeing.
std::string describe_allocator(const config::AllocatorConfig& a) {
  std::vector<std::string> parts;
  if (a.arena_max) parts.push_back(fmt::format("arena_max {}", *a.arena_max));
  for (auto [name, size] :
       {std::pair{"trim_threshold", a.trim_threshold},
        std::pair{"mmap_threshold", a.mmap_threshold}, std::pair{"top_pad", a.top_pad}})
    if (size) parts.push_back(fmt::format("{} {}", name, units::format_size(*size)));
  if (!a.preload.empty())
    parts.push_back(a.preload == a.preload_path
                        ? "preload " + a.preload
                        : fmt::format("preload {} ({})", a.preload, a.preload_path));
  if (a.jemalloc_conf) parts.push_back("jemalloc_conf " + *a.jemalloc_conf);
  return join(parts, ", ");
}

// "gpus 0,1,2,3, 2 per slot (api[0] 0,1; api[1] 2,3), pytorch_alloc_conf
// expandable_segments:True, xla_preallocate false, xla_mem_fraction 0.5"
std::string describe_devices(const config::ProgramConfig& p) {
  const config::DevicesConfig& d = p.devices;
  std::vector<std::string> parts;
  if (d.gpus_auto) parts.push_back(fmt::format("gpus auto, {} per slot", d.per_slot));
  if (!d.gpus.empty()) {
    std::vector<std::string> slots;
    for (unsigned i = 0; i < p.instances; ++i)
      slots.push_back(fmt::format("{}[{}] {}", p.name, i,
                                  config::join_gpus(config::slot_gpus(d.gpus, d.per_slot, i))));
    parts.push_back(fmt::format("gpus {}, {} per slot ({})", config::join_gpus(d.gpus), d.per_slot,
                                join(slots, "; ")));
  }
  if (d.pytorch_alloc_conf) parts.push_back("pytorch_alloc_conf " + *d.pytorch_alloc_conf);
  if (d.xla_preallocate)
    parts.push_back(std::string("xla_preallocate ") + (*d.xla_preallocate ? "true" : "false"));
  if (d.xla_mem_fraction)
    parts.push_back("xla_mem_fraction " + config::format_mem_fraction(*d.xla_mem_fraction));
  return join(parts, ", ");
}

}  // namespace

std::string describe_limits(const config::Limits& limits) {
  std::vector<std::string> parts;
  for (const Item& i : limit_items(limits)) parts.push_back(i.text);
  return parts.empty() ? "no limits" : join(parts, ", ");
}

std::string unenforceable_limits(const config::Limits& limits,
                                 const std::vector<std::string>& missing) {
  std::vector<std::string> parts;
  for (const Item& i : limit_items(limits))
    if (std::find(missing.begin(), missing.end(), i.controller) != missing.end())
      parts.push_back(i.text);
  return join(parts, ", ");
}

std::string describe_program(const config::ProgramConfig& p) {
  std::string out = p.name + ": " + render_argv(p.command, p.shell);
  out += fmt::format("; {} instance{}", p.instances, p.instances == 1 ? "" : "s");
  if (p.gang)
    out += fmt::format("; a gang of {} ranks (RANK, WORLD_SIZE{}), recycled together", p.instances,
                       p.gang->master ? ", MASTER_ADDR:PORT " + p.gang->master->str() : "");
  out += "; " + describe_limits(p.limits);
  if (p.threads) out += fmt::format("; threads {}", *p.threads);
  if (p.allocator != config::AllocatorConfig{})
    out += "; allocator " + describe_allocator(p.allocator);
  if (p.devices != config::DevicesConfig{}) out += "; devices " + describe_devices(p);
  if (p.user) out += "; user " + *p.user;
  out += std::string("; restart ") + config::to_string(p.restart.mode);
  if (!p.policies.empty()) {
    std::vector<std::string> sources;
    for (const config::PolicyConfig& policy : p.policies) sources.push_back(policy.source);
    out += fmt::format("; policies (every {}): {}", units::format_duration(p.sample_interval),
                       join(sources, ", "));
  }
  if (p.requests) out += "; requests counted by pattern " + p.requests->pattern;
  if (p.checkpoint != config::CheckpointConfig{})
    out += fmt::format(
        "; checkpoint {}{} within {}, then {}", units::signal_name(p.checkpoint.signal),
        p.checkpoint.signal_to == config::SignalTo::Main       ? ""
        : p.checkpoint.signal_to == config::SignalTo::Children ? " to the main process's children"
                                                               : " to every process",
        units::format_duration(p.checkpoint.timeout), config::to_string(p.checkpoint.on_timeout));
  if (p.diagnose) {
    std::vector<std::string> what;
    if (p.diagnose->signal) what.push_back(units::signal_name(*p.diagnose->signal));
    if (!p.diagnose->command.empty())
      what.push_back(fmt::format("`{}` (at most {})",
                                 render_argv(p.diagnose->command, p.diagnose->shell),
                                 units::format_duration(p.diagnose->timeout)));
    out += fmt::format("; diagnose with {} before {} recycles", join(what, ", then "),
                       join(p.diagnose->policies, ", "));
  }
  if (p.timeline) out += "; timeline in " + p.timeline->dir;
  if (p.budget.preference != config::BudgetPreference::None)
    out += std::string("; budget: ") + config::to_string(p.budget.preference);
  if (p.budget_needs && p.budget_processes()) out += "; the budget recycles one process at a time";
  return out;
}

std::optional<std::string> describe_request_counting(const config::ProgramConfig& p) {
  const config::PolicyConfig* counting = p.request_counting_policy();
  if (!counting) return std::nullopt;
  return fmt::format("{}: {} {}", p.name, counting->name, p.request_source());
}

std::optional<std::string> describe_preempt(const config::Config& config) {
  if (!config.preempt) return std::nullopt;
  const config::PreemptConfig& p = *config.preempt;
  std::string checkpoints;
  for (const config::ProgramConfig& program : config.programs)
    if (program.checkpoints())
      checkpoints += fmt::format(
          "{} {} within {}", checkpoints.empty() ? ", checkpoint" : ",", program.name,
          units::format_duration(config::preempt_checkpoint_window(program, p.deadline)));
  return fmt::format("preempt: on {}{}, stop every program within {}, then {}exit {}",
                     units::signal_name(p.signal), checkpoints, units::format_duration(p.deadline),
                     p.then == config::PreemptThen::Requeue
                         ? "requeue the job (scontrol requeue $SLURM_JOB_ID) and "
                         : "",
                     p.exit_status());
}

std::string describe_budget(const config::BudgetConfig& b) {
  std::vector<std::string> triggers;
  if (b.limit) {
    std::string limit = b.limit->percent ? fmt::format("{:g}% of {}", *b.limit->percent,
                                                       b.scope == config::BudgetScope::Host
                                                           ? "the host's memory"
                                                           : "the container's (or host's) memory")
                                         : units::format_size(b.limit->bytes);
    triggers.push_back(fmt::format("over {}{}", limit,
                                   b.held.count() ? " for " + units::format_duration(b.held) : ""));
    if (b.horizon)
      triggers.push_back("projected to reach it within " + units::format_duration(*b.horizon) +
                         " (leak estimator, window " + units::format_duration(b.window) + ")");
  }
  if (b.pressure)
    triggers.push_back(fmt::format("memory pressure {} avg10 over {:g}% for {}",
                                   b.pressure->full ? "full" : "some", b.pressure->percent,
                                   units::format_duration(b.pressure->held)));
  const char* scope = b.scope == config::BudgetScope::Workers ? "the sum of the workers'"
                      : b.scope == config::BudgetScope::Host  ? "the host's"
                                                              : "the container's";
  return fmt::format(
      "budget: {} {} {}; then recycle the {} worker gracefully, one at a time, "
      "{} apart at least (every {})",
      scope, b.metric, join(triggers, ", or "),
      b.choose == config::BudgetChoose::Fastest   ? "fastest-growing"
      : b.choose == config::BudgetChoose::Largest ? "largest"
                                                  : "newest",
      units::format_duration(b.cooldown), units::format_duration(b.interval));
}

}  // namespace recycler
