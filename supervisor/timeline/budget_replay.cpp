#include "supervisor/timeline/budget_replay.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <filesystem>

#include "supervisor/util/escape.h"

namespace recycler::timeline {

std::vector<BudgetReplayed> replay_budget(const config::Config& config,
                                          const std::vector<WorkerTrace>& traces,
                                          std::optional<uint64_t> capacity) {
  std::vector<BudgetReplayed> out;
  if (!config.budget) return out;
  const config::BudgetConfig& cfg = *config.budget;
  engine::Budget budget(cfg);
  policies::TimePoint end{};
  for (const WorkerTrace& w : traces)
    if (!w.samples.empty()) end = std::max(end, w.samples.back().t);
  std::vector<size_t> next(traces.size(), 0);  // each trace's first row after now
  std::vector<bool> recycled(traces.size(), false);
  for (policies::TimePoint now{}; now <= end; now += cfg.interval) {
    engine::BudgetReading r;
    r.t = now;
    r.capacity = capacity;
    uint64_t sum = 0;
    for (size_t i = 0; i < traces.size(); ++i) {
      const WorkerTrace& w = traces[i];
      while (next[i] < w.samples.size() && w.samples[next[i]].t <= now) ++next[i];
      if (recycled[i] || next[i] == 0) continue;
      auto bytes = engine::budget_figure(w.samples[next[i] - 1], cfg.metric);
      if (!bytes) continue;
      sum += *bytes;
      const config::ProgramConfig* program = config.find(w.program);
      if (!program || program->budget.preference == config::BudgetPreference::Omit) continue;
      bool eligible = now - policies::TimePoint{} >= program->min_uptime;
      r.candidates.push_back({w.program, w.slot, 0, *bytes, policies::TimePoint{},
                              program->budget.preference, eligible});
    }
    r.used = sum;
    auto choice = budget.evaluate(r);
    if (!choice) continue;
    out.push_back({std::chrono::duration<double>(now.time_since_epoch()).count(), *choice, sum});
    for (size_t i = 0; i < traces.size(); ++i)
      if (traces[i].program == choice->program && traces[i].slot == choice->slot)
        recycled[i] = true;
  }
  return out;
}

std::optional<std::pair<std::string, unsigned>> trace_worker(const std::string& path) {
  std::string name = std::filesystem::path(path).filename().string();
  if (!name.ends_with(".csv")) return std::nullopt;
  name.resize(name.size() - 4);
  size_t dot = name.rfind('.');
  if (dot == std::string::npos || dot == 0 || dot + 1 == name.size()) return std::nullopt;
  std::string slot = name.substr(dot + 1);
  if (slot.size() > 6 ||
      !std::all_of(slot.begin(), slot.end(), [](char c) { return c >= '0' && c <= '9'; }))
    return std::nullopt;
  return std::pair{name.substr(0, dot), static_cast<unsigned>(std::stoul(slot))};
}

std::string to_json(const BudgetReplayed& r) {
  auto text = [](const std::string& s) { return fmt::format("\"{}\"", json_escape(s)); };
  return fmt::format(R"({{"t": {:.3f}, "program": {}, "slot": {}, "trigger": {}, )"
                     R"("used_bytes": {}, "reason": {}}})",
                     r.t, text(r.choice.program), r.choice.slot, text(r.choice.trigger), r.used,
                     text(r.choice.reason));
}

}  // namespace recycler::timeline
