#include "supervisor/worker/exit_report.h"

#include <csignal>

#include "policies/base/units.h"

namespace recycler {

ExitReport describe_exit(const Slot& slot, const RunEnd& end) {
  const ExitStatus& status = end.status;
  const auto& max = slot.program().limits.memory_max;
  std::string limit =
      max ? "cgroup memory limit " + units::format_size(*max)
          : "no memory limit on its cgroup: a parent cgroup's limit or the host's memory ran out";
  ExitReport report;
  if (end.oom && status.signaled && status.signal == SIGKILL) {
    report.message = fmt::format("{} was OOM-killed by the kernel ({}) after {}", slot.name(),
                                 limit, units::format_duration(end.uptime));
  } else {
    report.message = fmt::format("{} {} after {}", slot.name(), status.describe(),
                                 units::format_duration(end.uptime));
    if (end.oom)
      report.message += fmt::format("; the kernel OOM-killed a process in its cgroup ({})", limit);
  }
  // An OOM kill is a warning even during a stop or a recycle (a checkpoint
  // that never came, a stop that took too long): the kernel acted, not recycler.
  report.crash = !end.requested && !(status.success() && !end.oom);
  report.level = report.crash || end.oom ? log::Level::Warn : log::Level::Info;
  report.event = end.oom ? "oom_kill" : "exit";
  report.fields = {{"program", slot.program().name},
                   {"slot", slot.index()},
                   {"pid", end.pid},
                   {"generation", end.generation},
                   {"uptime_s", static_cast<double>(end.uptime.count()) / 1000.0},
                   {"oom_kill", end.oom},
                   {"requested", end.requested}};
  if (status.signaled)
    report.fields.emplace_back("signal", units::signal_name(status.signal));
  else
    report.fields.emplace_back("status", status.code);
  return report;
}

}  // namespace recycler
