// One-line descriptions of programs and their limits, shared by `recycler
// check` and the supervisor's log.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "supervisor/config/config.h"

namespace recycler {

// "memory_max 2 GiB, memory_high 1.6 GiB, pids_max 256, cpu 1.5", or "no limits":
// what the config writes (memory_low, swap_max and oom_group too; their
// defaults are not shown).
std::string describe_limits(const config::Limits& limits);
// The configured limits whose controller is in `missing` ("memory_max 2 GiB"), or "".
std::string unenforceable_limits(const config::Limits& limits,
                                 const std::vector<std::string>& missing);
// A command as a POSIX shell would read it back: a `shell` one (a YAML
// string, run under /bin/sh -c) as written, an argv with its odd words
// quoted (python3 -c 'print('\''hi'\'')').
std::string render_argv(const std::vector<std::string>& argv, bool shell);
// "api: gunicorn app:app; 2 instances; memory_max 2 GiB, pids_max 256; restart on-failure",
// with `devices:` each slot's GPUs ("; devices gpus 0,1, 1 per slot (api[0] 0; api[1] 1)").
std::string describe_program(const config::ProgramConfig& program);
// For a program with a request-counting policy, where its counts come from:
// "api: max_requests counts only RECYCLER_REQUESTS=N reports on its notify
// socket (NOTIFY_SOCKET); a worker that sends none is never recycled by it:
// ..." (ProgramConfig::request_source); nullopt for the others.
std::optional<std::string> describe_request_counting(const config::ProgramConfig& program);
// "preempt: on SIGUSR1, checkpoint train within 1m, stop every program within
// 1m30s, then requeue the job (scontrol requeue $SLURM_JOB_ID) and exit 138";
// nullopt without a preempt: section.
std::optional<std::string> describe_preempt(const config::Config& config);
// "budget: the sum of the workers' current over 2 GiB for 10s, or ...; then
// recycle the fastest-growing worker gracefully, ...".
std::string describe_budget(const config::BudgetConfig& budget);

}  // namespace recycler
