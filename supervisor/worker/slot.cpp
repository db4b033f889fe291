#include "supervisor/worker/slot.h"

#include <sys/resource.h>

#include <algorithm>

namespace recycler {
namespace {
const std::vector<std::string> kNoGpus;
}  // namespace

Slot::Slot(Launcher& launcher, const std::vector<std::string>& base_env,
           const std::optional<config::Rlimit>& worker_nofile,
           std::shared_ptr<const config::ProgramConfig> program, unsigned index,
           std::string notify_socket, std::shared_ptr<const listen::Set> sockets,
           const std::vector<std::string>* gpus_auto)
    : launcher_(launcher),
      base_env_(base_env),
      worker_nofile_(worker_nofile),
      program_(std::move(program)),
      index_(index),
      name_(program_->name + "[" + std::to_string(index) + "]"),
      notify_socket_(std::move(notify_socket)),
      sockets_(std::move(sockets)),
      gpus_auto_(gpus_auto) {}

Result<std::unique_ptr<Process>> Slot::launch(
    unsigned generation, const std::optional<RecycleCause>& cause, cgroup::WorkerCgroup& cgroup,
    std::function<void(pid_t pid, std::string_view line)> observe,
    Launcher::ExitCallback on_exit) const {
  LaunchSpec spec;
  spec.argv = program_->command;
  spec.env = worker_environment(base_env_, *program_, index_, generation, notify_socket_, cause,
                                sockets_.get(), gpus_auto_ ? *gpus_auto_ : kNoGpus);
  spec.cwd = program_->cwd;
  spec.uid = program_->uid;
  spec.gid = program_->gid;
  spec.rlimits = program_->rlimits;
  bool sets_nofile =
      std::any_of(spec.rlimits.begin(), spec.rlimits.end(),
                  [](const config::Rlimit& r) { return r.resource == RLIMIT_NOFILE; });
  if (worker_nofile_ && !sets_nofile) spec.rlimits.push_back(*worker_nofile_);
  spec.join_fds = cgroup.open_join_fds();
  if (sockets_) spec.listen_fds = sockets_->fds();
  spec.watchdog_pid = program_->watchdog_timeout.has_value();
  bool joinable = std::all_of(spec.join_fds.begin(), spec.join_fds.end(),
                              [](const UniqueFd& fd) { return static_cast<bool>(fd); });
  if (!joinable) return errno_error("cannot open the files that join its cgroup " + cgroup.path());
  OutputTag tag{program_->name, index_, std::move(observe)};
  return launcher_.launch(std::move(spec), std::move(tag), std::move(on_exit));
}

}  // namespace recycler
