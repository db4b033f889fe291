#include "supervisor/worker/checkpoint_signal.h"

#include <algorithm>
#include <cerrno>

#include "supervisor/probe/probe.h"
#include "supervisor/util/fd.h"
#include "supervisor/util/pidfd.h"

namespace recycler {

std::vector<pid_t> checkpoint_targets(config::SignalTo to, pid_t main,
                                      const std::vector<pid_t>& members,
                                      const std::function<std::optional<pid_t>(pid_t)>& parent_of) {
  if (to == config::SignalTo::Main) return {main};
  std::vector<pid_t> out;
  for (pid_t pid : members) {
    if (pid == main) {
      if (to == config::SignalTo::All) out.push_back(pid);
      continue;
    }
    if (to == config::SignalTo::All || parent_of(pid) == main) out.push_back(pid);
  }
  // The main process may have left its cgroup; it is still the worker's.
  if (to == config::SignalTo::All && std::find(out.begin(), out.end(), main) == out.end())
    out.insert(out.begin(), main);
  return out;
}

std::string checkpoint_target(config::SignalTo to, pid_t main) {
  switch (to) {
    case config::SignalTo::Main:
      return "pid " + std::to_string(main);
    case config::SignalTo::Children:
      return "the children of pid " + std::to_string(main);
    case config::SignalTo::All:
      return "every process of the worker";
  }
  return {};
}

unsigned send_checkpoint_signal(config::SignalTo to, int signal, Process& main,
                                const cgroup::WorkerCgroup& cgroup, const std::string& proc) {
  pid_t main_pid = main.pid();
  if (to == config::SignalTo::Main) {
    errno = ESRCH;
    return main.signal(signal) ? 1 : 0;
  }
  auto parent_of = [&proc](pid_t pid) -> std::optional<pid_t> {
    auto stat = probe::read_stat(proc, pid);
    if (!stat) return std::nullopt;
    return static_cast<pid_t>(stat->ppid);
  };
  std::vector<pid_t> targets = checkpoint_targets(to, main_pid, cgroup.pids(), parent_of);
  // Pinned first, then checked: a pid listed a moment ago may have been
  // reused by a process outside the worker since.
  std::vector<std::pair<pid_t, UniqueFd>> pinned;
  for (pid_t pid : targets)
    if (pid != main_pid)
      if (int fd = pidfd_open(pid); fd >= 0) pinned.emplace_back(pid, UniqueFd(fd));
  std::vector<pid_t> members = cgroup.pids();
  unsigned sent = 0;
  if (std::find(targets.begin(), targets.end(), main_pid) != targets.end() && main.signal(signal))
    ++sent;
  for (auto& [pid, fd] : pinned)
    if (std::find(members.begin(), members.end(), pid) != members.end() &&
        pidfd_send_signal(fd.get(), signal) == 0)
      ++sent;
  if (sent == 0) errno = ESRCH;
  return sent;
}

}  // namespace recycler
