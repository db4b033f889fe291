// One slot of a program (api[0], api[1], ...) as every run of it is started:
// who it is (its program, its number, the name logs give it) and what each
// run starts with (the command, the environment of environment.h, the
// notify socket, the listening sockets, the rlimits, the cgroup it joins
// before exec). The worker's own starts and a surge's next generation go
// through the one launch(), so a surge starts a generation exactly as a
// restart would; the lifecycle around the runs stays the worker's.
#pragma once

#include <sys/types.h>

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "supervisor/cgroup/cgroup.h"
#include "supervisor/config/config.h"
#include "supervisor/process/listen.h"
#include "supervisor/process/process.h"
#include "supervisor/worker/environment.h"

namespace recycler {

class Slot {
 public:
  // `launcher`, `base_env` and `worker_nofile` are the worker's services
  // (WorkerServices, worker.h), which outlive this; `worker_nofile` is read
  // at each launch (recycler sets it once its own limit is raised).
  // `notify_socket`: NOTIFY_SOCKET for its runs ("" = none). `sockets`: the
  // program's listen: sockets (null: none). `gpus_auto`: what `devices:
  // {gpus: auto}` shares out (WorkerServices; null: nothing), read at each
  // launch.
  Slot(Launcher& launcher, const std::vector<std::string>& base_env,
       const std::optional<config::Rlimit>& worker_nofile,
       std::shared_ptr<const config::ProgramConfig> program, unsigned index,
       std::string notify_socket, std::shared_ptr<const listen::Set> sockets,
       const std::vector<std::string>* gpus_auto = nullptr);

  const config::ProgramConfig& program() const { return *program_; }
  unsigned index() const { return index_; }
  const std::string& name() const { return name_; }  // "api[0]"

  // Starts `generation` of the slot in `cgroup`, a replacement with `cause`
  // (none: a start). `observe` sees every whole output line (null: nobody);
  // `on_exit` runs once the process has been reaped.
  Result<std::unique_ptr<Process>> launch(
      unsigned generation, const std::optional<RecycleCause>& cause, cgroup::WorkerCgroup& cgroup,
      std::function<void(pid_t pid, std::string_view line)> observe,
      Launcher::ExitCallback on_exit) const;

 private:
  Launcher& launcher_;
  const std::vector<std::string>& base_env_;
  const std::optional<config::Rlimit>& worker_nofile_;
  std::shared_ptr<const config::ProgramConfig> program_;
  unsigned index_;
  std::string name_;
  std::string notify_socket_;
  std::shared_ptr<const listen::Set> sockets_;
  const std::vector<std::string>* gpus_auto_;
};

}  // namespace recycler
