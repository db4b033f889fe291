#include "supervisor/control/format.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "policies/base/escape.h"
#include "policies/base/units.h"

namespace recycler::control {
namespace {

std::string size_or_dash(const std::optional<uint64_t>& v) {
  return v ? units::format_size(*v) : "-";
}

std::optional<uint64_t> figure(const WorkerStatus& w, const std::string& metric) {
  auto it = w.memory.find(metric);
  if (it == w.memory.end()) return std::nullopt;
  return it->second;
}

std::optional<uint64_t> gpu(const WorkerStatus& w) {
  if (auto v = figure(w, "gpu_total")) return v;
  if (auto v = figure(w, "gpu")) return v;
  return figure(w, "device");
}

}  // namespace

std::string format_uptime(double seconds) {
  if (seconds < 0 || !std::isfinite(seconds)) return "-";
  auto s = static_cast<uint64_t>(seconds);
  if (s >= 86400) return fmt::format("{}d{}h", s / 86400, s % 86400 / 3600);
  if (s >= 3600) return fmt::format("{}h{}m", s / 3600, s % 3600 / 60);
  if (s >= 60) return fmt::format("{}m{}s", s / 60, s % 60);
  return fmt::format("{}s", s);
}

std::string format_outlook(const WorkerStatus& w) {
  if (w.outlooks.empty()) return "-";
  const OutlookStatus& o = w.outlooks.front();
  auto per_min = static_cast<uint64_t>(std::llround(std::max(0.0, o.slope_bytes_per_s) * 60));
  return fmt::format("+{}/min, limit in {}", units::format_size(per_min),
                     format_uptime(o.seconds_to_limit));
}

std::string format_memory(const WorkerStatus& w) {
  if (w.memory_scope == "process") {
    // A per-process limit is compared with the largest process; the sum is
    // said to be one.
    if (!w.process_memory) return "-";
    std::string out = w.memory_metric + " " + units::format_size(*w.process_memory) + " largest";
    if (auto sum = figure(w, w.memory_metric)) out += ", " + units::format_size(*sum) + " sum";
    return out;
  }
  if (auto v = figure(w, w.memory_metric)) return w.memory_metric + " " + units::format_size(*v);
  return "-";
}

std::string format_limit(const WorkerStatus& w) {
  if (!w.limit) return "-";
  return units::format_size(*w.limit) + (w.memory_scope == "process" ? " each" : "");
}

std::string status_table(const std::vector<WorkerStatus>& workers, bool processes) {
  using Row = std::vector<std::string>;
  std::vector<Row> rows;
  rows.push_back({"NAME", "STATE", "PID", "UPTIME", "GEN", "RECYCLES", "CRASHES", "MEMORY",
                  "CURRENT", "LIMIT", "REQUESTS", "THREADS", "GPU", "OUTLOOK", "LAST RECYCLE"});
  for (const WorkerStatus& w : workers) {
    std::string state = w.state;
    if (!w.phase.empty() && w.phase != "none") state += "/" + w.phase;
    rows.push_back(
        {escape_text(w.program) + "[" + std::to_string(w.slot) + "]", state,
         w.pid ? std::to_string(*w.pid) : "-", w.pid ? format_uptime(w.uptime_s) : "-",
         std::to_string(w.generation), std::to_string(w.restarts_recycles),
         std::to_string(w.restarts_crashes), format_memory(w), size_or_dash(figure(w, "current")),
         format_limit(w), w.requests ? std::to_string(*w.requests) : "-",
         w.threads ? std::to_string(*w.threads) : "-", size_or_dash(gpu(w)), format_outlook(w),
         w.last_recycle_reason.empty() ? "-" : escape_text(w.last_recycle_reason)});
    if (!processes) continue;
    // Its processes beneath it: the master, then each worker process with
    // its figure, and its requests out of the limit drawn for it.
    for (const ProcessStatus& p : w.processes) {
      std::string memory = "-";
      if (p.memory) memory = w.memory_metric + " " + units::format_size(*p.memory);
      std::string requests = p.requests ? std::to_string(*p.requests) : "-";
      if (p.request_limit) requests += " of " + std::to_string(*p.request_limit);
      rows.push_back({"  process",
                      p.recycling ? "recycling"
                      : p.main    ? "main"
                                  : "running",
                      std::to_string(p.pid), "", "", "", "", memory, "", "", requests, "", "", "",
                      ""});
    }
  }
  std::vector<size_t> width(rows.front().size(), 0);
  for (const Row& r : rows)
    for (size_t i = 0; i < r.size(); ++i) width[i] = std::max(width[i], r[i].size());
  std::string out;
  for (const Row& r : rows) {
    std::string line;
    for (size_t i = 0; i < r.size(); ++i) {
      line += r[i];
      if (i + 1 < r.size()) line += std::string(width[i] - r[i].size() + 2, ' ');
    }
    out += line + "\n";
  }
  // What each worker said of itself (STATUS=), beneath, as systemctl's
  // "Status:" line: free text, so not in a column.
  for (const WorkerStatus& w : workers)
    if (!w.status_text.empty())
      out += escape_text(w.program) + "[" + std::to_string(w.slot) +
             "] status: " + escape_text(w.status_text) + "\n";
  return out;
}

std::vector<WorkerStatus> by_memory(std::vector<WorkerStatus> workers) {
  // The figure compared with the limit: the largest process's under scope: process.
  auto watched = [](const WorkerStatus& w) {
    if (w.memory_scope == "process") return w.process_memory.value_or(0);
    return figure(w, w.memory_metric).value_or(0);
  };
  std::stable_sort(
      workers.begin(), workers.end(),
      [&](const WorkerStatus& a, const WorkerStatus& b) { return watched(a) > watched(b); });
  return workers;
}

int status_exit_code(const std::vector<WorkerStatus>& workers) {
  for (const WorkerStatus& w : workers)
    if (!w.running()) return 3;
  return 0;
}

}  // namespace recycler::control
