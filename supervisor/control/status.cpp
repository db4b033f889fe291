#include "supervisor/control/status.h"

#include <fmt/format.h>

#include <limits>

namespace recycler {
namespace {

const log::Field* find(const log::Fields& fields, std::string_view key) {
  for (const log::Field& f : fields)
    if (f.key == key) return &f;
  return nullptr;
}

std::string text(const log::Fields& fields, std::string_view key) {
  const log::Field* f = find(fields, key);
  if (!f) return {};
  if (const auto* s = std::get_if<std::string>(&f->value)) return *s;
  return {};
}

bool flag(const log::Fields& fields, std::string_view key) {
  const log::Field* f = find(fields, key);
  if (!f) return false;
  if (const auto* b = std::get_if<bool>(&f->value)) return *b;
  return false;
}

int64_t integer(const log::Fields& fields, std::string_view key) {
  const log::Field* f = find(fields, key);
  if (!f) return 0;
  if (const auto* i = std::get_if<int64_t>(&f->value)) return *i;
  if (const auto* u = std::get_if<uint64_t>(&f->value)) return static_cast<int64_t>(*u);
  return 0;
}

std::string plural(uint64_t n, std::string_view one, std::string_view many) {
  return fmt::format("{} {}", n, n == 1 ? one : many);
}

}  // namespace

const char* to_string(ExitReason reason) {
  return enum_name(kExitReasonNames, reason);
}

ExitReason classify_exit(bool oom_kill, bool requested, bool signaled, int status) {
  if (oom_kill) return ExitReason::OomKill;
  if (requested || (!signaled && status == 0)) return ExitReason::Clean;
  return signaled ? ExitReason::Signal : ExitReason::Crash;
}

void StatusCounters::observe(std::string_view event, const log::Fields& fields) {
  if (event == "exit" || event == "oom_kill") {
    bool signaled = find(fields, "signal") != nullptr;
    int status = static_cast<int>(integer(fields, "status"));
    ExitReason reason = classify_exit(event == "oom_kill" || flag(fields, "oom_kill"),
                                      flag(fields, "requested"), signaled, status);
    ++exits_[reason];
    ++exits_by_[{text(fields, "program"), reason}];
  } else if (event == "gang_recycle") {
    auto& [n, reason] = gangs_[text(fields, "program")];
    ++n;
    std::string worker = text(fields, "worker");
    reason = (worker.empty() ? "" : worker + ": ") + text(fields, "reason");
  } else if (event == "recycle") {
    std::string program = text(fields, "program");
    std::string action = text(fields, "action");
    ++recycles_[{program, text(fields, "policy"), action}];
    auto slot = integer(fields, "slot");
    if (!find(fields, "slot") || slot < 0 || slot > std::numeric_limits<unsigned>::max()) return;
    SlotRecycles& r = slots_[{program, static_cast<unsigned>(slot)}];
    r.last_was_process = action == "signal";
    if (r.last_was_process) {
      ++r.processes;
      r.last_process_reason = fmt::format("pid {}: {} ({} policy)", integer(fields, "pid"),
                                          text(fields, "reason"), text(fields, "policy"));
    }
  }
}

const StatusCounters::SlotRecycles* StatusCounters::slot(const std::string& program,
                                                         unsigned slot) const {
  auto it = slots_.find({program, slot});
  return it == slots_.end() ? nullptr : &it->second;
}

void StatusCounters::fill(SupervisorStatus& status) const {
  for (ExitReason r :
       {ExitReason::Clean, ExitReason::Crash, ExitReason::OomKill, ExitReason::Signal}) {
    auto it = exits_.find(r);
    status.exits[r] = it == exits_.end() ? 0 : it->second;
  }
  status.oom_kills = status.exits[ExitReason::OomKill];
  status.recycles_by = recycles_;
  status.exits_by = exits_by_;
  status.recycles = 0;
  for (const auto& [key, n] : recycles_) status.recycles += n;
  for (ProgramStatus& p : status.programs)
    if (auto it = gangs_.find(p.name); p.gang && it != gangs_.end())
      std::tie(p.gang_recycles, p.gang_last_reason) = it->second;
}

std::string summary_line(const SupervisorStatus& s) {
  return fmt::format("{}, {} running, {}, {}", plural(s.programs.size(), "program", "programs"),
                     plural(s.workers_running, "worker", "workers"),
                     plural(s.recycles, "recycle", "recycles"),
                     plural(s.oom_kills, "OOM kill", "OOM kills"));
}

}  // namespace recycler
