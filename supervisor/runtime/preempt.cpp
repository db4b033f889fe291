#include "supervisor/runtime/preempt.h"

#include <poll.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <string_view>

#include "policies/base/units.h"
#include "supervisor/log/log.h"
#include "supervisor/util/fd.h"
#include "supervisor/util/pidfd.h"

extern char** environ;

namespace recycler {

namespace {

// Waits for `pid` (a child) at most `timeout`: its wait status, or nullopt
// once it was killed for taking too long.
std::optional<int> wait_bounded(pid_t pid, Duration timeout) {
  UniqueFd pidfd(pidfd_open(pid));
  if (pidfd) {
    pollfd p{pidfd.get(), POLLIN, 0};
    int ms =
        static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(timeout).count());
    int n = 0;
    do {
      n = ::poll(&p, 1, ms);
    } while (n < 0 && errno == EINTR);
    if (n == 0) {
      pidfd_send_signal(pidfd.get(), SIGKILL);
      int status = 0;
      while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
      }
      return std::nullopt;
    }
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return status;
}

}  // namespace

std::optional<std::string> slurm_job_id() {
  const char* id = std::getenv("SLURM_JOB_ID");
  if (!id || !*id) return std::nullopt;
  return std::string(id);
}

std::optional<unsigned> slurm_restart_count() {
  const char* text = std::getenv("SLURM_RESTART_COUNT");
  if (!text) return std::nullopt;
  std::string_view v(text);
  unsigned n = 0;
  auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), n);
  if (ec != std::errc() || end != v.data() + v.size() || n == 0) return std::nullopt;
  return n;
}

std::string requeue_slurm_job(const std::optional<std::string>& job_id, Duration timeout) {
  if (!job_id || job_id->empty()) return "not in a Slurm job (SLURM_JOB_ID is not set)";
  if (job_id->size() > 20 ||
      !std::all_of(job_id->begin(), job_id->end(), [](char c) { return c >= '0' && c <= '9'; }))
    return "SLURM_JOB_ID " + units::quote(*job_id) + " is not a job number";
  std::string id = *job_id;
  const char* argv[] = {"scontrol", "requeue", id.c_str(), nullptr};
  // Slurm ends the job's processes (SIGTERM) as soon as the requeue is in:
  // recycler, whose workers are gone already, only has its exit to make.
  ::signal(SIGTERM, SIG_IGN);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t all, none;
  sigfillset(&all);
  sigdelset(&all, SIGTERM);  // scontrol too: its answer would be lost to the same SIGTERM
  sigemptyset(&none);
  posix_spawnattr_setsigdefault(&attr, &all);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK);
  pid_t pid = 0;
  // recycler's own stdout and stderr: scontrol's message lands in the job's log.
  int err =
      ::posix_spawnp(&pid, "scontrol", nullptr, &attr, const_cast<char* const*>(argv), environ);
  posix_spawnattr_destroy(&attr);
  if (err != 0) return std::string("cannot run scontrol: ") + std::strerror(err);
  std::optional<int> status = wait_bounded(pid, timeout);
  if (!status)
    return "scontrol requeue " + id + " took longer than " + units::format_duration(timeout) +
           "; killed it";
  if (WIFEXITED(*status) && WEXITSTATUS(*status) == 0) return "";
  if (WIFEXITED(*status))
    return "scontrol requeue " + id + " exited with status " + std::to_string(WEXITSTATUS(*status));
  return "scontrol requeue " + id + " was killed by " + units::signal_name(WTERMSIG(*status));
}

void Preemption::begin(const config::PreemptConfig& p, const Programs& programs,
                       std::function<void()> at_deadline) {
  active_ = true;
  std::string sig = units::signal_name(p.signal);
  std::string checkpointing;
  for (const auto& [name, program] : programs)
    if (program.config && program.config->checkpoints())
      checkpointing += fmt::format(
          "{}{} within {}", checkpointing.empty() ? "checkpointing " : ", ", name,
          units::format_duration(config::preempt_checkpoint_window(*program.config, p.deadline)));
  std::string then = p.then == config::PreemptThen::Requeue
                         ? fmt::format("requeue the job and exit {}", p.exit_status())
                         : fmt::format("exit {}", p.exit_status());
  log::event(log::Level::Warn, "preempt",
             fmt::format("{}: preempted; {}stopping every program within {}, then {}", sig,
                         checkpointing.empty() ? "no program checkpoints; " : checkpointing + "; ",
                         units::format_duration(p.deadline), then),
             {{"signal", sig},
              {"deadline_s", static_cast<double>(p.deadline.count()) / 1000.0},
              {"then", std::string(config::to_string(p.then))},
              {"exit_code", p.exit_status()}});
  requeue_ = p.then == config::PreemptThen::Requeue;
  deadline_ = timers_.after(p.deadline, [d = p.deadline, at_deadline = std::move(at_deadline)] {
    log::warn("preempt: {} passed; killing every worker still running", units::format_duration(d));
    at_deadline();
  });
}

void Preemption::requeue_if_asked() const {
  if (!requeue_) return;
  std::string why = requeue_slurm_job(slurm_job_id(), kRequeueTimeout);
  if (why.empty())
    log::info("preempt: requeued Slurm job {}", *slurm_job_id());
  else
    log::error("preempt: cannot requeue the job: {}", why);
}

}  // namespace recycler
