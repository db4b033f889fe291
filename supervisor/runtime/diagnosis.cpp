#include "supervisor/runtime/diagnosis.h"

#include <fmt/format.h>

#include <csignal>

#include "policies/base/units.h"
#include "supervisor/config/summary.h"
#include "supervisor/log/log.h"
#include "supervisor/util/escape.h"

namespace recycler {

Diagnosis::Diagnosis(Launcher& launcher, Timers& timers, const std::vector<std::string>& base_env,
                     const config::ProgramConfig& program, const std::string& name, unsigned slot,
                     unsigned generation, const engine::Diagnose& asked,
                     const std::function<bool(int)>& signal_main, std::function<void(Outcome)> done)
    : timers_(timers), config_(*program.diagnose), done_(std::move(done)), started_(timers.now()) {
  if (config_.signal) {
    bool sent = signal_main(*config_.signal);
    outcome_.what = fmt::format("{} to pid {}{}", units::signal_name(*config_.signal), asked.pid,
                                sent ? "" : " failed (it is gone)");
  }
  if (config_.command.empty()) {
    finish("");
    return;
  }
  LaunchSpec spec;
  spec.argv = config_.command;
  // Ours, not an outer recycler's of the same names.
  for (const std::string& kv : base_env)
    if (!kv.starts_with("RECYCLER_")) spec.env.push_back(kv);
  for (auto [k, v] :
       {std::pair<const char*, std::string>{"RECYCLER_PID", std::to_string(asked.pid)},
        {"RECYCLER_PROGRAM", program.name},
        {"RECYCLER_SLOT", std::to_string(slot)},
        {"RECYCLER_GENERATION", std::to_string(generation)},
        {"RECYCLER_POLICY", asked.policy},
        {"RECYCLER_DIAGNOSE_REASON", asked.reason}})
    spec.env.push_back(std::string(k) + "=" + v);
  spec.cwd = program.cwd;
  spec.uid = program.uid;
  spec.gid = program.gid;
  OutputTag tag{program.name, slot, [this](pid_t, std::string_view line) {
                  if (outcome_.output.size() + line.size() + 1 > config_.max_output) {
                    outcome_.truncated = true;
                    return;
                  }
                  outcome_.output.append(line);
                  outcome_.output += '\n';
                }};
  auto started = launcher.launch(std::move(spec), std::move(tag), [this](ExitStatus status) {
    exited_ = true;
    finish(status.describe());
  });
  if (!started) {
    finish("cannot be run: " + started.error().message);
    return;
  }
  process_ = std::move(*started);
  std::string argv = render_argv(config_.command, config_.shell);
  log::info("{} diagnose ({} policy): {}{}`{}` (pid {}), at most {}", name, asked.policy,
            outcome_.what, outcome_.what.empty() ? "" : ", then ", escape_text(argv),
            process_->pid(), units::format_duration(config_.timeout));
  timeout_ = timers_.after(config_.timeout, [this] {
    if (!process_ || exited_) return;
    timed_out_ = true;
    process_->signal_group(SIGKILL);  // gdb under `sh -c` too
  });
}

Diagnosis::~Diagnosis() {
  if (process_ && !exited_) process_->signal_group(SIGKILL);
}

// From a later turn: the exit callback must return before its Process goes.
void Diagnosis::finish(const std::string& how) {
  if (finishing_) return;
  finishing_ = timers_.after(Duration{0}, [this, how] {
    timeout_.reset();
    outcome_.took = std::chrono::duration_cast<Duration>(timers_.now() - started_);
    if (!config_.command.empty()) {
      std::string command = render_argv(config_.command, config_.shell);
      outcome_.what += fmt::format("{}`{}` {}{} after {}", outcome_.what.empty() ? "" : "; ",
                                   escape_text(command), how, timed_out_ ? " at its timeout" : "",
                                   units::format_duration(outcome_.took));
      if (outcome_.truncated)
        outcome_.what += fmt::format(" (output cut at {})", units::format_size(config_.max_output));
    }
    auto done = std::move(done_);
    done(std::move(outcome_));  // may destroy this
  });
}

}  // namespace recycler
