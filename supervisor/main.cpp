// recycler's command line.
//
//   recycler run -c FILE                      supervise the programs of a config file
//   recycler run [OPTIONS] -- CMD [ARG...]    supervise one command, no config file
//   recycler check -c FILE                    validate a config file
//   recycler replay -c FILE --program NAME TRACE.csv
//                                             feed a recorded timeline through the policies
//   recycler status|start|stop|restart|recycle|signal|reload|events|top
//                                             ask a running recycler (control/cli.h)
//
// Exit status: 0 success, 1 runtime failure, 2 invalid config or usage,
// 127 command not found, 126 found but not runnable (wrap mode); in wrap mode, once the command has
// exited for good, its own status (128 + signal when killed).
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <csignal>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>

#include "policies/base/units.h"
#include "policies/metric.h"
#include "supervisor/cgroup/cgroup.h"
#include "supervisor/cgroup/memory_settings.h"
#include "supervisor/config/parse.h"
#include "supervisor/config/summary.h"
#include "supervisor/config/wrap.h"
#include "supervisor/control/cli.h"
#include "supervisor/probe/parse.h"
#include "supervisor/process/spawn.h"
#include "supervisor/runtime/supervisor.h"
#include "supervisor/timeline/budget_replay.h"
#include "supervisor/timeline/replay.h"
#include "supervisor/timeline/replay_json.h"
#include "supervisor/timeline/trace.h"
#include "supervisor/util/escape.h"

namespace {

using namespace recycler;

constexpr int kUsageError = 2;
constexpr const char* kWrapRootParent = "recycler-run";

struct RunOptions {
  std::string config_file;
  config::WrapFlags wrap;   // wrap mode: the command and what stands for its YAML
  std::string cgroup_root;  // --cgroup-root, else RECYCLER_CGROUP_ROOT
  bool cgroup_root_from_env = false;
  std::string log_format;
  std::string log_level;
  std::string metrics;  // --metrics (wrap mode)
};

int print_diagnostics(const config::LoadResult& loaded) {
  for (const config::Diagnostic& d : loaded.warnings) std::cerr << d.str() << "\n";
  for (const config::Diagnostic& d : loaded.errors) std::cerr << d.str() << "\n";
  return loaded.config ? 0 : kUsageError;
}

int usage_error(const std::string& message) {
  std::cerr << "recycler: " << escape_text(message) << "\n";
  return kUsageError;
}

// A program name from a command: its basename, with anything a cgroup
// directory name should not hold replaced.
std::string name_from_command(const std::string& argv0) {
  std::string base = argv0.substr(argv0.rfind('/') + 1);
  for (char& c : base)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '-' && c != '.') c = '_';
  if (base.empty() || base[0] == '.') base = "cmd" + base;
  return base.substr(0, 64);
}

// Wrap mode: the same Config a one-program file would give (config/wrap.h).
std::optional<config::Config> config_from_command_line(const RunOptions& o, int* status) {
  config::WrapFlags flags = o.wrap;
  if (flags.name.empty()) flags.name = name_from_command(flags.command.front());
  if (!config::valid_program_name(flags.name)) {
    *status = usage_error("--name: invalid program name \"" + flags.name +
                          "\" (letters, digits, '_', '-', '.'; at most 64)");
    return std::nullopt;
  }
  if (!flags.memory_max.empty()) {
    std::string why;
    if (!units::parse_size(flags.memory_max, &why)) {
      *status = usage_error("--memory-max: invalid size \"" + flags.memory_max + "\": " + why);
      return std::nullopt;
    }
  }
  const char* path = std::getenv("PATH");
  auto exe = resolve_executable(flags.command.front(), {std::string("PATH=") + (path ? path : "")});
  if (!exe) {
    std::cerr << "recycler: " << escape_text(exe.error().message) << "\n";
    *status = 127;
    return std::nullopt;
  }
  config::WrapResult built = config::config_from_flags(flags, config::HostLookup::real());
  if (!built.config) {
    for (const std::string& e : built.errors) usage_error(e);
    std::cerr << "recycler: see recycler run --help; a config file (-c) does the rest\n";
    *status = kUsageError;
    return std::nullopt;
  }
  config::Config cfg = std::move(*built.config);
  if (!o.metrics.empty()) {
    std::string why;
    auto listen = config::parse_listen_address(o.metrics, &why);
    if (!listen) {
      *status = usage_error("--metrics: \"" + o.metrics + "\": " + why);
      return std::nullopt;
    }
    cfg.metrics = config::MetricsConfig{*listen};
  }
  // Several wrapped commands may run side by side: each run gets a root of its
  // own unless told otherwise.
  cfg.cgroup_root = o.cgroup_root.empty() ? std::string(kWrapRootParent) + "/" + flags.name + "." +
                                                std::to_string(::getpid())
                                          : o.cgroup_root;
  return cfg;
}

void apply_log_overrides(const RunOptions& o, config::Config& cfg) {
  if (auto format = enum_value(config::kLogFormats, o.log_format)) cfg.log.format = *format;
  if (auto level = enum_value(config::kLogLevels, o.log_level)) cfg.log.level = *level;
}

int run_command(const RunOptions& o) {
  if (!o.config_file.empty() && !o.wrap.command.empty())
    return usage_error("give either -c FILE or -- CMD [ARG...], not both");
  if (o.config_file.empty() && o.wrap.command.empty())
    return usage_error("nothing to run: give -c FILE or -- CMD [ARG...] (see recycler run --help)");

  config::Config cfg;
  SupervisorOptions options;
  if (!o.cgroup_root.empty())
    if (std::string why = config::cgroup_root_problem(o.cgroup_root); !why.empty())
      return usage_error((o.cgroup_root_from_env ? "RECYCLER_CGROUP_ROOT: " : "--cgroup-root: ") +
                         why);
  if (!o.config_file.empty()) {
    const config::WrapFlags& w = o.wrap;
    if (!w.name.empty() || !w.memory_max.empty() || w.threads || !w.recycle_at.empty() || w.leak ||
        !w.checkpoint.empty() || !w.checkpoint_timeout.empty() || !w.max_requests.empty() ||
        !w.max_lifetime.empty() || !w.timeline.empty() || !o.metrics.empty())
      return usage_error(
          "--name, --memory-max, --threads, --recycle-at, --leak, --checkpoint, "
          "--checkpoint-timeout, --max-requests, --max-lifetime, --timeline and --metrics apply "
          "to -- CMD only; set "
          "them in the config file");
    config::LoadResult loaded = config::load_file(o.config_file);
    if (int status = print_diagnostics(loaded)) return status;
    cfg = std::move(*loaded.config);
    options.config_path = o.config_file;
    if (!o.cgroup_root.empty()) cfg.cgroup_root = options.cgroup_root = o.cgroup_root;
  } else {
    int status = 0;
    auto built = config_from_command_line(o, &status);
    if (!built) return status;
    options.per_run_root = o.cgroup_root.empty();
    cfg = std::move(*built);
    options.wrap_mode = true;
  }
  apply_log_overrides(o, cfg);
  Supervisor supervisor(std::move(cfg), options);
  return supervisor.run();
}

int check_command(const std::string& file) {
  config::LoadResult loaded = config::load_file(file);
  if (int status = print_diagnostics(loaded)) return status;
  const config::Config& cfg = *loaded.config;
  cgroup::Layout layout = cgroup::detect(cfg.cgroup_root);
  for (const config::ProgramConfig& p : cfg.programs) {
    std::string line = describe_program(p);
    if (p.limits.any() && layout.not_enforced) {
      line += " (limits NOT enforced here)";
    } else if (std::string missing = unenforceable_limits(p.limits, layout.missing);
               !missing.empty()) {
      line += " (not enforced here, no controller: " + missing + ")";
    }
    for (std::string why : cgroup::unapplied_settings(p.limits, layout)) {
      if (why.ends_with("; not applied")) why.resize(why.size() - 13);  // said once, here
      line += " (not applied here: " + why + ")";
    }
    std::cout << escape_text(line) << "\n";  // commands, paths: text from the file
    if (auto counting = describe_request_counting(p)) std::cout << escape_text(*counting) << "\n";
  }
  if (cfg.metrics) std::cout << "metrics: http://" << cfg.metrics->listen.str() << "/metrics\n";
  if (auto preempt = describe_preempt(cfg)) std::cout << escape_text(*preempt) << "\n";
  if (cfg.budget) std::cout << escape_text(describe_budget(*cfg.budget)) << "\n";
  if (cfg.exit.when == config::ExitWhen::AnyFailed)
    std::cout << "exit: when one program fails for good, stop every program and exit 1\n";
  if (cfg.exit.when == config::ExitWhen::Never)
    std::cout << "exit: never by itself (once every program has exited, recycler stays)\n";
  std::cout << escape_text(file) << ": ok, " << cfg.programs.size() << " program"
            << (cfg.programs.size() == 1 ? "" : "s") << "; cgroup "
            << cgroup::to_string(layout.mode);
  if (layout.not_enforced)
    std::cout << "; limits NOT enforced when run from here: " << *layout.not_enforced << "\n";
  else
    std::cout << ", worker cgroups under " << layout.display_root() << "\n";
  return 0;
}

struct ReplayArgs {
  std::string config_file;
  std::string program;
  std::string trace;
  std::vector<std::string> traces;  // the positional arguments: one, or several with --budget
  bool budget = false;
  bool stop_at_first = false;
  uint64_t seed = 0;
};

constexpr const char* kReplayHelp =
    "Feeds a recorded memory timeline through the policies of one program of a config,\n"
    "offline, and prints when each would have fired: to tune policies before deploying them.\n"
    "\n"
    "Trace: a CSV file whose header line names its columns, recorded by recycler as\n"
    "  t,current,anon,file,rss,pss,uss,device,requests,threads,gpu,gpu_total,iteration\n"
    "  t                    seconds since the worker started (decimals allowed), never\n"
    "                       decreasing; the only required column\n"
    "  current, anon, file  the worker's cgroup memory, bytes\n"
    "  rss, pss, uss        its processes' memory, summed, bytes\n"
    "  device               accelerator memory the worker reported, bytes\n"
    "  requests             requests completed since the worker started\n"
    "  threads              threads of all its processes\n"
    "  gpu, gpu_total       GPU memory of its processes (NVML): on the device where it\n"
    "                       holds the most, and summed over devices, bytes\n"
    "  iteration            the last iteration the worker reported (RECYCLER_ITERATION):\n"
    "                       where it changes, an iteration boundary\n"
    "Any subset of the other columns, in any order; an empty cell means not measured;\n"
    "decimals are rounded down. rss, pss, uss, requests, threads and gpu also make one process\n"
    "(pid 1) for policies with scope: process.\n"
    "To record traces, give the program `timeline: {dir: DIR}` in the config: each worker's\n"
    "samples go to DIR/PROGRAM.SLOT.csv, one file per run (older files: .1, .2, ...),\n"
    "its starts, recycles and exits to DIR/PROGRAM.SLOT.events.csv.\n"
    "\n"
    "Replay: the trace goes through the same decision engine as a running recycler, with\n"
    "a simulated worker: every policy starts at t = 0 with the program's limits.memory_max\n"
    "and sees every row in order. A trace is one run: the worker goes on as it did, so a\n"
    "recycle stays under way to the end and the policies keep their state; a checkpoint is\n"
    "never confirmed (checkpoint.timeout applies); a process signalled exits before the\n"
    "next row.\n"
    "\n"
    "Output: one JSON object per line on stdout each time a policy starts firing (not again\n"
    "while it keeps firing):\n"
    "  {\"t\": 997.0, \"policy\": \"memory\", \"action\": \"restart\", \"reason\": "
    "\"anon 612 MiB > 600 MiB\"}\n"
    "with \"predicted_s\" (seconds left to the limit) where the policy predicts one, and\n"
    "\"pid\" and \"signal\" for action signal. A summary goes to stderr, with the\n"
    "decisions recycler would have carried out (its precedence, queue and checkpoints).\n"
    "\n"
    "With --budget, several traces of workers that ran side by side (their timelines'\n"
    "PROGRAM.SLOT.csv files, all from t = 0) go through the config's budget: section\n"
    "instead, read every budget.interval (scope: workers: the sum of their figures; no\n"
    "PSI). A chosen worker counts as recycled: out of the sum from then on. Output: one\n"
    "JSON object per choice:\n"
    "  {\"t\": 31.5, \"program\": \"api\", \"slot\": 2, \"trigger\": \"trend\", "
    "\"used_bytes\": ..., \"reason\": \"...\"}\n"
    "\n"
    "Exit status: 0 when the trace was replayed, whether or not a policy fired; 2 for an\n"
    "invalid config, an unknown program or a bad trace (FILE:LINE: column NAME: ...).";

std::string program_names(const config::Config& cfg) {
  std::string out;
  for (const config::ProgramConfig& p : cfg.programs) out += (out.empty() ? "" : ", ") + p.name;
  return out;
}

// The program whose policies to replay: the one --program names, else the
// only one. nullptr, said on stderr, when there is none.
const config::ProgramConfig* replayed_program(const config::Config& cfg, const ReplayArgs& a) {
  if (!a.program.empty()) {
    const config::ProgramConfig* program = cfg.find(a.program);
    if (!program)
      usage_error("--program: no program " + units::quote(a.program) + " in " + a.config_file +
                  "; its programs: " + program_names(cfg));
    return program;
  }
  if (cfg.programs.size() == 1) return &cfg.programs.front();
  usage_error("which program? give --program NAME; " + a.config_file +
              " has: " + program_names(cfg));
  return nullptr;
}

// The summary on stderr: what was replayed through which policies, and what
// recycler would have carried out.
void print_replay_summary(const ReplayArgs& a, const config::ProgramConfig& program,
                          const std::vector<policies::Sample>& samples,
                          const timeline::ReplayRun& run) {
  const std::vector<timeline::Replayed>& decisions = run.reported;
  std::string names;
  for (const config::PolicyConfig& p : program.policies)
    names += (names.empty() ? "" : ", ") + p.name;
  std::cerr << "recycler: replayed " << samples.size() << " samples of " << a.trace;
  if (!samples.empty())
    std::cerr << " (t " << timeline::seconds(samples.front().t) << " to "
              << timeline::seconds(samples.back().t) << " s)";
  std::cerr << " through " << program.name << "'s policies (" << (names.empty() ? "none" : names)
            << "): " << decisions.size() << " decision" << (decisions.size() == 1 ? "" : "s")
            << (a.stop_at_first && !decisions.empty() ? ", stopped at the first" : "");
  // What the runtime would have done with them: its precedence and queue.
  for (size_t i = 0; i < run.acted.size(); ++i) {
    const timeline::Replayed& r = run.acted[i];
    std::cerr << (i == 0 ? "; recycler acts on " : ", ") << policies::to_string(r.decision.action)
              << " at " << r.t << " s (" << r.policy << " policy)";
  }
  std::cerr << "\n";
}

void note_trace_too_short(const config::PolicyConfig& p,
                          const std::vector<policies::Sample>& samples) {
  auto first = p.policy->first_decision();
  policies::TimePoint end = samples.empty() ? policies::TimePoint{} : samples.back().t;
  if (first && end.time_since_epoch() < first->after)
    std::cerr << "recycler: note: the " << p.name << " policy decides nothing before "
              << units::format_duration(first->after) << " after a start (" << first->why
              << "); this trace ends at " << timeline::seconds(end)
              << " s: it could not decide anything here\n";
}

void note_metric_unfilled(const config::PolicyConfig& p,
                          const std::vector<policies::Sample>& samples) {
  auto name = p.policy->metric();
  auto metric = name ? policies::parse_metric(*name) : std::nullopt;
  if (!metric) return;
  bool filled = std::any_of(samples.begin(), samples.end(), [&](const policies::Sample& s) {
    return policies::value(s, *metric).has_value();
  });
  if (!filled)
    std::cerr << "recycler: note: the " << p.name << " policy reads " << *name << ", a column "
              << (samples.empty() ? "of an empty trace" : "no row of this trace fills")
              << ": it could not decide anything here\n";
}

// --budget: the traces of several workers through the config's budget.
int replay_budget_command(const ReplayArgs& a, const config::Config& cfg) {
  if (!cfg.budget) {
    std::cerr << "recycler: --budget: " << escape_text(a.config_file)
              << " has no budget: section\n";
    return kUsageError;
  }
  if (cfg.budget->scope != config::BudgetScope::Workers) {
    std::cerr << "recycler: --budget: budget.scope is " << to_string(cfg.budget->scope)
              << ": traces hold the workers' figures, not the host's or a container's; "
                 "replay scope: workers\n";
    return kUsageError;
  }
  std::vector<timeline::WorkerTrace> traces;
  for (const std::string& path : a.traces) {
    auto worker = timeline::trace_worker(path);
    if (!worker || !cfg.find(worker->first)) {
      std::cerr << "recycler: --budget: " << escape_text(path)
                << ": expected a timeline's PROGRAM.SLOT.csv of a program of the config ("
                << escape_text(program_names(cfg)) << ")\n";
      return kUsageError;
    }
    auto samples = timeline::read_trace_file(path);
    if (!samples) {
      std::cerr << escape_text(samples.error().message) << "\n";
      return kUsageError;
    }
    traces.push_back({worker->first, worker->second, std::move(*samples)});
  }
  // A percentage is of this machine's memory: the traces do not say the box's.
  std::optional<uint64_t> capacity;
  if (cfg.budget->limit && cfg.budget->limit->percent) {
    std::ifstream in("/proc/meminfo");
    std::stringstream text;
    text << in.rdbuf();
    capacity = probe::parse_meminfo(text.str()).total;
    std::cerr << "recycler: budget.limit is a percentage: of this machine's memory ("
              << units::format_size(capacity.value_or(0)) << ")\n";
  }
  auto choices = timeline::replay_budget(cfg, traces, capacity);
  for (const timeline::BudgetReplayed& c : choices) std::cout << timeline::to_json(c) << "\n";
  std::cout.flush();
  std::cerr << "recycler: replayed " << traces.size()
            << " workers through the budget: " << choices.size() << " choice"
            << (choices.size() == 1 ? "" : "s") << "\n";
  if (cfg.budget->pressure)
    std::cerr << "recycler: note: traces hold no memory pressure: budget.pressure could not "
                 "trigger here\n";
  return 0;
}

int replay_command(ReplayArgs a) {
  config::LoadResult loaded = config::load_file(a.config_file);
  // Warnings (a command missing from PATH) are about running, not replaying.
  for (const config::Diagnostic& d : loaded.errors) std::cerr << d.str() << "\n";
  if (!loaded.config) return kUsageError;
  if (a.budget) return replay_budget_command(a, *loaded.config);
  if (a.traces.size() != 1) {
    std::cerr << "recycler: replay takes one trace (several only with --budget)\n";
    return kUsageError;
  }
  a.trace = a.traces.front();
  const config::ProgramConfig* program = replayed_program(*loaded.config, a);
  if (!program) return kUsageError;

  auto samples = timeline::read_trace_file(a.trace);
  if (!samples) {
    std::cerr << escape_text(samples.error().message) << "\n";
    return kUsageError;
  }
  timeline::ReplayRun run = timeline::replay_run(*program, *samples, {a.seed, a.stop_at_first});
  for (const timeline::Replayed& r : run.reported) std::cout << timeline::to_json(r) << "\n";
  std::cout.flush();
  print_replay_summary(a, *program, *samples, run);
  // "0 decisions" from a column the trace never filled, or from a trace that
  // ends before a policy may decide, is no verdict on the policy: say so.
  for (const config::PolicyConfig& p : program->policies) {
    note_trace_too_short(p, *samples);
    note_metric_unfilled(p, *samples);
  }
  return 0;
}

constexpr const char* kRunFooter =
    "Forms:\n"
    "  recycler run -c FILE                    the programs of a config file (SIGHUP reloads it)\n"
    "  recycler run [OPTIONS] -- CMD [ARG...]  one command, no config file\n\n"
    "Wrap mode's flags stand for the YAML a one-program file would hold (--recycle-at for a\n"
    "memory policy, --leak, --max-requests, --max-lifetime, --checkpoint, --timeline): for\n"
    "more (other metrics, several policies, scope: process, requests counted from output,\n"
    "env, user, limits beyond memory) write a config file: see recycler.yaml(5)\n"
    "(docs/configuration.md).\n\n"
    "Exit status: 0 after SIGTERM/SIGINT or when every program has exited successfully; 1 on\n"
    "failure; 2 for an invalid config or usage; in wrap mode, the command's own status once it\n"
    "has exited for good (128+N when killed by signal N), 127 when it is not found and 126\n"
    "when it cannot be run.";

// Wrap mode's flags: they stand for the YAML a one-program file would hold.
void add_wrap_options(CLI::App* run_cmd, config::WrapFlags& wrap) {
  run_cmd->add_option("--name", wrap.name,
                      "Wrap mode: program name (default: the command's basename)");
  run_cmd->add_option("--memory-max", wrap.memory_max,
                      "Wrap mode: cgroup memory limit, e.g. 512MiB, 2GiB");
  run_cmd->add_option("--restart", wrap.restart, "Wrap mode: when to restart the command")
      ->check(CLI::IsMember(enum_names(config::kRestartModes)))
      ->capture_default_str();
  run_cmd
      ->add_option("--threads", wrap.threads,
                   "Wrap mode: set OMP_NUM_THREADS, MKL_NUM_THREADS, ... to N")
      ->check(CLI::Range(1, 4096));
  run_cmd->add_option("--recycle-at", wrap.recycle_at,
                      "Wrap mode: restart the command when its anonymous memory passes SIZE "
                      "(512MiB) or PCT of --memory-max (80%): the memory policy");
  run_cmd->add_flag("--leak", wrap.leak,
                    "Wrap mode: restart the command when its memory grows steadily towards 90% "
                    "of --memory-max and would reach it within 15m: the leak policy (it decides "
                    "after a warm-up of 2m; a memory policy at 95% of --memory-max restarts the "
                    "command meanwhile)");
  run_cmd->add_option("--checkpoint", wrap.checkpoint,
                      "Wrap mode: before --recycle-at or --leak restart the command, send it "
                      "SIG (SIGUSR1) and wait for RECYCLER_CHECKPOINTED=1 on its notify socket "
                      "(a command that never confirms is restarted at 95% of --memory-max, "
                      "before the kernel kills it)");
  run_cmd->add_option("--checkpoint-timeout", wrap.checkpoint_timeout,
                      "Wrap mode: how long to wait for RECYCLER_CHECKPOINTED=1 before restarting "
                      "the command without one (default 5m)");
  run_cmd->add_option("--max-requests", wrap.max_requests,
                      "Wrap mode: restart the command after N[+JITTER] requests (reported as "
                      "RECYCLER_REQUESTS=N on its notify socket: N requests since its last "
                      "message), e.g. 1000+100");
  run_cmd->add_option("--max-lifetime", wrap.max_lifetime,
                      "Wrap mode: restart the command after DUR[+JITTER] of uptime, e.g. 6h+30m");
  run_cmd->add_option("--timeline", wrap.timeline,
                      "Wrap mode: record the command's memory samples and events under DIR (for "
                      "recycler replay)");
}

CLI::App* add_run_command(CLI::App& app, RunOptions& run) {
  CLI::App* run_cmd = app.add_subcommand(
      "run", "Supervise programs in the foreground until SIGTERM/SIGINT (SIGHUP reloads -c FILE)");
  run_cmd->add_option("-c,--config", run.config_file, "YAML config file with the programs to run");
  add_wrap_options(run_cmd, run.wrap);
  run_cmd->add_option("--cgroup-root", run.cgroup_root,
                      "Where worker cgroups go, instead of the file's cgroup_root (wrap mode: "
                      "instead of recycler-run/NAME.PID); default: $RECYCLER_CGROUP_ROOT");
  run_cmd->add_option("--metrics", run.metrics,
                      "Wrap mode: serve Prometheus metrics on HOST:PORT ([V6]:PORT), e.g. "
                      "127.0.0.1:9464");
  run_cmd->add_option("--log-format", run.log_format, "Override log.format")
      ->check(CLI::IsMember(enum_names(config::kLogFormats)));
  run_cmd->add_option("--log-level", run.log_level, "Override log.level")
      ->check(CLI::IsMember(enum_names(config::kLogLevels)));
  run_cmd->add_option("command", run.wrap.command, "Wrap mode: the command to run, after --");
  run_cmd->footer(kRunFooter);
  return run_cmd;
}

CLI::App* add_check_command(CLI::App& app, std::string& check_file) {
  CLI::App* check_cmd =
      app.add_subcommand("check",
                         "Validate a config file: a summary per program, or every error "
                         "as FILE:LINE:COLUMN: error: MESSAGE (exit 2)");
  check_cmd->add_option("-c,--config", check_file, "YAML config file to check")->required();
  return check_cmd;
}

CLI::App* add_replay_command(CLI::App& app, ReplayArgs& replay) {
  CLI::App* replay_cmd = app.add_subcommand(
      "replay",
      "Feed a recorded memory timeline through a program's policies offline: one JSON line per "
      "decision");
  replay_cmd->add_option("-c,--config", replay.config_file, "YAML config file with the program")
      ->required();
  replay_cmd->add_option("--program", replay.program,
                         "The program whose policies to replay (optional when there is one)");
  replay_cmd->add_flag("--stop-at-first", replay.stop_at_first,
                       "Print only the first decision, then stop");
  replay_cmd->add_option("--seed", replay.seed, "Seed of the policies' jitter")
      ->capture_default_str();
  replay_cmd->add_flag("--budget", replay.budget,
                       "Replay several workers' traces (PROGRAM.SLOT.csv) through the budget");
  replay_cmd->add_option("trace", replay.traces, "The trace: a samples CSV file")->required();
  replay_cmd->footer(kReplayHelp);
  return replay_cmd;
}

// "recycler stauts": CLI11 would say only that an argument was not
// expected; name the command that was meant, as config keys do. True when
// argv[1] names no command (said on stderr).
bool reject_unknown_command(CLI::App& app, int argc, char** argv) {
  if (argc <= 1 || argv[1][0] == '-') return false;
  std::vector<std::string> commands;
  for (const CLI::App* sub : app.get_subcommands({})) commands.push_back(sub->get_name());
  std::string word = argv[1];
  if (std::find(commands.begin(), commands.end(), word) != commands.end()) return false;
  std::string guess = units::suggest(word, commands);
  std::cerr << "recycler: unknown command " << units::quote(word)
            << (guess.empty() ? "" : "; did you mean \"" + guess + "\"?") << "\n"
            << "Run 'recycler --help' for the commands.\n";
  return true;
}

// RECYCLER_CGROUP_ROOT stands for --cgroup-root when that is not given.
void cgroup_root_from_env(RunOptions& run) {
  if (const char* root = std::getenv("RECYCLER_CGROUP_ROOT");
      root && *root && run.cgroup_root.empty()) {
    run.cgroup_root = root;
    run.cgroup_root_from_env = true;
  }
}

}  // namespace

int main(int argc, char** argv) {
  // A closed stderr or a worker's pipe must never kill the supervisor.
  std::signal(SIGPIPE, SIG_IGN);

  CLI::App app{
      "recycler runs programs in their own cgroups, watches them, and recycles them "
      "before the kernel's OOM killer does.",
      "recycler"};
  app.set_version_flag("-V,--version", "recycler " RECYCLER_VERSION);
  app.require_subcommand(1);
  app.footer("Run 'recycler SUBCOMMAND --help' for the options of each subcommand.");

  RunOptions run;
  CLI::App* run_cmd = add_run_command(app, run);
  std::string check_file;
  CLI::App* check_cmd = add_check_command(app, check_file);
  ReplayArgs replay;
  CLI::App* replay_cmd = add_replay_command(app, replay);
  control::Cli control(app);
  if (reject_unknown_command(app, argc, argv)) return kUsageError;

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int status = app.exit(e);
    return status == 0 ? 0 : kUsageError;
  }
  if (*run_cmd) {
    cgroup_root_from_env(run);
    return run_command(run);
  }
  if (*check_cmd) return check_command(check_file);
  if (*replay_cmd) return replay_command(replay);
  if (auto status = control.run()) return *status;
  return kUsageError;
}
