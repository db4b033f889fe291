// The validated configuration: plain structs, no YAML types. Produced by
// config::load_file() (parse.h) or built by the CLI's wrap mode, and compared
// program by program on SIGHUP to decide what to restart.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <csignal>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "policies/base/enums.h"
#include "policies/base/time.h"

namespace recycler::policies {
class Policy;
}
namespace recycler::notify {
class OutputMatcher;
}

namespace recycler::config {

using namespace std::chrono_literals;

// One table per enum (policies/base/enums.h): to_string() below, the
// parser and the command line all read it.
enum class RestartMode { Always, OnFailure, Never };
// recycle.mode: how a whole worker is recycled. restart: stop it, then start
// the next generation; surge: start the next generation beside it, stop it
// once the new one is ready.
enum class RecycleMode { Restart, Surge };
inline constexpr EnumName<RecycleMode> kRecycleModes[] = {{RecycleMode::Restart, "restart"},
                                                          {RecycleMode::Surge, "surge"}};
inline constexpr EnumName<RestartMode> kRestartModes[] = {{RestartMode::Always, "always"},
                                                          {RestartMode::OnFailure, "on-failure"},
                                                          {RestartMode::Never, "never"}};

enum class LogFormat { Text, Json };
inline constexpr EnumName<LogFormat> kLogFormats[] = {{LogFormat::Text, "text"},
                                                      {LogFormat::Json, "json"}};

enum class LogLevel { Trace, Debug, Info, Warn, Error };
inline constexpr EnumName<LogLevel> kLogLevels[] = {{LogLevel::Trace, "trace"},
                                                    {LogLevel::Debug, "debug"},
                                                    {LogLevel::Info, "info"},
                                                    {LogLevel::Warn, "warn"},
                                                    {LogLevel::Error, "error"}};

struct Limits {
  std::optional<uint64_t> memory_max;   // bytes; v1 memory.limit_in_bytes, v2 memory.max
  std::optional<uint64_t> memory_high;  // bytes; v1 memory.soft_limit_in_bytes, v2 memory.high
  // The kernel's settings libcgroup is not given (cgroup/memory_settings.h
  // writes them, and says which this host cannot apply). Unset: the default.
  std::optional<uint64_t> memory_low;  // bytes; v2 memory.low (reclaim protection); v1 has none
  // Swap the worker may use: default none, so that a leak meets memory_max or
  // its policy instead of thrashing; kUnlimitedSwap: no limit. v2
  // memory.swap.max; v1 memory.memsw.limit_in_bytes = memory_max + swap_max,
  // so only with memory_max.
  std::optional<uint64_t> swap_max;
  // v2 memory.oom.group: an OOM kill takes every process of the worker, never
  // half of it. Default on; v1 has none.
  std::optional<bool> oom_group;
  std::optional<uint64_t> pids_max;
  std::optional<double> cpu;  // CPUs: 1.5 = 150 ms of CPU time per 100 ms period

  static constexpr uint64_t kUnlimitedSwap = UINT64_MAX;
  uint64_t swap_limit() const { return swap_max.value_or(0); }
  bool groups_oom() const { return oom_group.value_or(true); }
  // Whether any limit is written in the config (the defaults are not).
  bool any() const {
    return memory_max || memory_high || memory_low || swap_max || oom_group || pids_max || cpu;
  }
  bool operator==(const Limits&) const = default;
};

// One setrlimit() applied in the child before exec. RLIM_INFINITY means unlimited.
struct Rlimit {
  int resource = 0;  // RLIMIT_NOFILE, ...
  uint64_t soft = 0;
  uint64_t hard = 0;
  bool operator==(const Rlimit&) const = default;
};

struct StopConfig {
  int signal = SIGTERM;
  Duration timeout = 10s;
  bool operator==(const StopConfig&) const = default;
};

struct BackoffConfig {
  Duration initial = 1s;
  Duration max = 60s;
  Duration reset_after = 60s;  // uptime after which the backoff starts over
  bool operator==(const BackoffConfig&) const = default;
};

struct CrashLoopConfig {
  unsigned max = 5;       // this many exits...
  Duration within = 60s;  // ...within this window mark the slot failed
  bool operator==(const CrashLoopConfig&) const = default;
};

struct RestartConfig {
  RestartMode mode = RestartMode::OnFailure;
  BackoffConfig backoff;
  CrashLoopConfig crash_loop;
  bool operator==(const RestartConfig&) const = default;
};

// A policy as configured. `source` is the policy's YAML node re-emitted in a
// canonical form: two configs with the same source build the same policy, which
// is what a reload compares.
struct PolicyConfig {
  std::string name;
  std::string source;
  std::shared_ptr<const policies::Policy> policy;
  bool operator==(const PolicyConfig& o) const { return name == o.name && source == o.source; }
};

// Counting requests from the worker's output: each line matching `pattern`
// is one request; a named group (?<pid>...) says which process served it.
// `matcher` is the pattern compiled (config/compile.h), shared by every copy
// of the config and every worker of the program: the supervisor is
// single-threaded, and a match leaves nothing behind in it.
struct RequestsConfig {
  std::string pattern;
  std::shared_ptr<const notify::OutputMatcher> matcher;
  bool operator==(const RequestsConfig& o) const { return pattern == o.pattern; }
};

// How `action: checkpoint` asks a worker to save its work before a restart:
// `signal` to the main process, then wait up to `timeout` for
// RECYCLER_CHECKPOINTED=1 on the notify socket (or a clean exit).
enum class CheckpointTimeout { Restart, Wait };
inline constexpr EnumName<CheckpointTimeout> kCheckpointTimeouts[] = {
    {CheckpointTimeout::Restart, "restart"}, {CheckpointTimeout::Wait, "wait"}};
// checkpoint.signal_to: which of the worker's processes get the checkpoint
// signal. main: the main process (a trainer); children: the main process's
// children, not itself (torchrun's elastic agent, whose ranks save; the
// agent forwards only TERM, INT, HUP and QUIT and dies of USR1); all: every
// process of the worker.
enum class SignalTo { Main, Children, All };
inline constexpr EnumName<SignalTo> kSignalTos[] = {
    {SignalTo::Main, "main"}, {SignalTo::Children, "children"}, {SignalTo::All, "all"}};
struct CheckpointConfig {
  int signal = SIGUSR1;
  SignalTo signal_to = SignalTo::Main;
  Duration timeout = 5min;
  // After the timeout: restart anyway, or keep waiting while the worker's
  // memory stays under memory_max.
  CheckpointTimeout on_timeout = CheckpointTimeout::Restart;
  // The program has a checkpoint: section: it is also asked to checkpoint
  // before an operator's or a scheduler's stop or recycle
  // (ProgramConfig::checkpoints).
  bool given = false;
  bool operator==(const CheckpointConfig&) const = default;
};

// `diagnose:`: evidence of why, gathered before a worker is recycled by one
// of `policies` (by default a hang, the watchdog, or a leak): `signal` to its
// main process (the Python helper dumps every thread's stack on it:
// RECYCLER_DIAGNOSE_SIGNAL), then `command` with RECYCLER_PID (the main
// process) in its environment, as the program's user, for at most `timeout`
// and `max_output` bytes of output; the output is logged, and kept next to the
// timeline (DIR/PROGRAM.SLOT.diagnose.GENERATION.txt) when there is one.
struct DiagnoseConfig {
  std::optional<int> signal;
  std::vector<std::string> command;  // argv; a YAML string runs under /bin/sh -c
  bool shell = false;                // command came from a YAML string
  Duration timeout = 30s;
  uint64_t max_output = 1 << 20;
  std::vector<std::string> policies{"watchdog", "leak"};
  bool operator==(const DiagnoseConfig&) const = default;
};

// Per-worker memory timelines: every Sample as a CSV row in
// DIR/PROGRAM.SLOT.csv, events in DIR/PROGRAM.SLOT.events.csv; a file over
// max_size, and the samples file at each new run, is rotated to .1 (.1 to
// .2, ...), keeping `keep` old files.
struct TimelineConfig {
  std::string dir;
  uint64_t max_size = 16ull << 20;
  unsigned keep = 5;
  bool operator==(const TimelineConfig&) const = default;
};

// `allocator:`: environment variables that tune glibc's malloc or replace it
// for the program's processes (supervisor/config/allocator.h builds them).
// Unset fields set nothing.
struct AllocatorConfig {
  std::optional<uint64_t> arena_max;       // MALLOC_ARENA_MAX
  std::optional<uint64_t> trim_threshold;  // bytes; GLIBC_TUNABLES glibc.malloc.trim_threshold
  std::optional<uint64_t> mmap_threshold;  // bytes; glibc.malloc.mmap_threshold
  std::optional<uint64_t> top_pad;         // bytes; glibc.malloc.top_pad
  std::string preload;       // as written: "jemalloc", "tcmalloc" or a path; "" for none
  std::string preload_path;  // the library LD_PRELOAD gets, found when the config was checked
  std::optional<std::string> jemalloc_conf;  // MALLOC_CONF

  bool operator==(const AllocatorConfig&) const = default;
};

// `devices:`: each slot's share of the GPUs (CUDA_VISIBLE_DEVICES) and the
// variables GPU frameworks read (supervisor/config/devices.h builds them).
// Unset fields set nothing.
struct DevicesConfig {
  // What CUDA_VISIBLE_DEVICES entries are shared out: indexes or GPU-/MIG-
  // UUIDs as written; empty with gpus_auto (resolved when recycler runs:
  // runtime/gpu_pool.h) or without `gpus`.
  std::vector<std::string> gpus;
  bool gpus_auto = false;
  unsigned per_slot = 1;                          // entries each slot gets
  std::optional<std::string> pytorch_alloc_conf;  // PYTORCH_CUDA_ALLOC_CONF
  std::optional<bool> xla_preallocate;            // XLA_PYTHON_CLIENT_PREALLOCATE
  std::optional<double> xla_mem_fraction;         // XLA_PYTHON_CLIENT_MEM_FRACTION, (0, 1]

  bool operator==(const DevicesConfig&) const = default;
};

// Where an endpoint listens: a numeric IPv4 address or an IPv6 one (written
// [V6]:PORT), and a TCP port (0: one the kernel picks, logged at start-up).
struct ListenAddress {
  std::string host;  // without brackets
  uint16_t port = 0;
  bool v6 = false;
  // HOST:PORT, [V6]:PORT for IPv6.
  std::string str() const;
  bool operator==(const ListenAddress&) const = default;
};

// "HOST:PORT" or "[V6]:PORT" -> ListenAddress; nullopt and `why` otherwise.
// Numeric addresses only: a host name would need a resolver at start-up.
std::optional<ListenAddress> parse_listen_address(std::string_view text, std::string* why);

// One entry of a program's `listen:`: a socket recycler binds once (as root,
// before any worker runs) and passes to every start of the program's workers
// the systemd way (supervisor/process/listen.h): fds 3.., LISTEN_FDS, LISTEN_PID,
// LISTEN_FDNAMES. TCP (HOST:PORT, [V6]:PORT) or a unix socket (unix:/path,
// created with `mode`, owned by `owner`/`group`).
struct ListenSocket {
  std::string name;                  // its LISTEN_FDNAMES entry; default: the program's name
  std::optional<ListenAddress> tcp;  // set for TCP
  std::string path;                  // a unix socket's path (absolute) otherwise
  mode_t mode = 0660;                // unix only
  std::optional<std::string> owner;  // unix only; default: root (recycler)
  std::optional<std::string> group;  // unix only; default: the program's group
  std::optional<uid_t> uid;          // resolved from owner
  std::optional<gid_t> gid;          // resolved from group (or the program's)
  unsigned backlog = 0;              // 0: the kernel's net.core.somaxconn
  // "127.0.0.1:8000", "[::1]:8000", "unix:/run/app.sock"
  std::string address() const;
  // The same endpoint (what a bound socket can be kept for across a reload).
  bool same_endpoint(const ListenSocket& o) const { return tcp == o.tcp && path == o.path; }
  bool operator==(const ListenSocket&) const = default;
};

// `recycle:`: how a whole-worker recycle replaces the worker.
struct RecycleConfig {
  RecycleMode mode = RecycleMode::Restart;
  // surge: how long the next generation may take to send READY=1 ...
  Duration ready_timeout = std::chrono::seconds(60);
  // ... or, for a program that never sends it, how long it must have run.
  std::optional<Duration> ready_after;
  // Whose READY=1 counts: the main process's (systemd's rule), or a child's
  // (a pre-fork server whose master says READY=1 before it forks a worker:
  // gunicorn's arbiter does; its post_worker_init hook can send one per
  // worker once the app is loaded).
  bool ready_from_child = false;
  bool operator==(const RecycleConfig&) const = default;
};

// `gang:`: the program's instances are the ranks of one job
// (worker/gang.h): a decision for one recycles them all together, and each
// start gets RANK, LOCAL_RANK, WORLD_SIZE and LOCAL_WORLD_SIZE (its slot and
// the instances), and MASTER_ADDR and MASTER_PORT with `master`.
struct GangConfig {
  std::optional<ListenAddress> master;
  bool operator==(const GangConfig&) const = default;
};

// A program's place in the top-level budget (BudgetConfig), `budget:` in the
// program: chosen before the others (prefer), only when nothing else is left
// (avoid), or never (omit); and whether the budget recycles one of its
// processes (scope: process: each child of a pre-fork server is a candidate
// of its own) or the whole worker. The worker cgroups carry the same preference for systemd-oomd
// and oomd, should they act first (cgroup/oomd_marks.h).
enum class BudgetPreference { None, Prefer, Avoid, Omit };
inline constexpr EnumName<BudgetPreference> kBudgetPreferences[] = {
    {BudgetPreference::None, "none"},
    {BudgetPreference::Prefer, "prefer"},
    {BudgetPreference::Avoid, "avoid"},
    {BudgetPreference::Omit, "omit"}};
struct ProgramBudget {
  BudgetPreference preference = BudgetPreference::None;
  // Unset: process when one of the program's policies has scope: process
  // (ProgramConfig::budget_processes).
  std::optional<bool> process;
  bool operator==(const ProgramBudget&) const = default;
};

struct ProgramConfig {
  std::string name;                  // [A-Za-z0-9_.-]+, used as a cgroup directory name
  std::vector<std::string> command;  // argv; a YAML string becomes {"/bin/sh", "-c", string}
  bool shell = false;                // command came from a YAML string
  std::map<std::string, std::string> env;
  std::string cwd;  // empty: the recycler's own working directory
  std::optional<std::string> user;
  std::optional<std::string> group;
  std::optional<uid_t> uid;  // resolved from user at validation
  std::optional<gid_t> gid;  // resolved from group, else the user's primary group
  unsigned instances = 1;
  std::optional<unsigned> threads;
  AllocatorConfig allocator;
  DevicesConfig devices;
  Limits limits;
  std::vector<Rlimit> rlimits;
  StopConfig stop;
  RestartConfig restart;
  std::vector<PolicyConfig> policies;
  Duration sample_interval = 1s;         // how often policies see a fresh Sample
  unsigned max_concurrent_recycles = 1;  // per program: capacity never drops all at once
  // Processes of the program signalled by a process-scope policy and not yet
  // out of service, at once. 0: no cap: each process goes at its limit, as
  // with gunicorn's own max_requests (its master replaces each one); a cap
  // makes a process over its limit serve on while it waits its turn.
  unsigned max_concurrent_process_recycles = 0;
  // A replacement that trips the same memory/thread policy sooner than this
  // after starting is in a recycle loop: its restarts back off.
  Duration min_uptime = 5s;
  std::optional<RequestsConfig> requests;
  // watchdog.timeout: workers get WATCHDOG_USEC (and WATCHDOG_PID), as
  // systemd gives them; the watchdog policy itself is in `policies`.
  std::optional<Duration> watchdog_timeout;
  CheckpointConfig checkpoint;
  std::optional<DiagnoseConfig> diagnose;
  std::optional<TimelineConfig> timeline;
  std::vector<ListenSocket> listen;
  RecycleConfig recycle;
  std::optional<GangConfig> gang;
  ProgramBudget budget;
  // drain.unready_for: before a whole-worker recycle its slot is not ready
  // (GET /readyz) for that long, then the recycle goes ahead; nullopt: at once.
  std::optional<Duration> drain_unready_for;
  // What the top-level budget reads of this program's samples (Needs bits;
  // 0 without a budget): set when the config is loaded, so the controller
  // samples the program even without policies of its own.
  unsigned budget_needs = 0;

  bool operator==(const ProgramConfig&) const = default;

  // The first policy that counts requests (max_requests), or null. It sees
  // only the requests counted: RECYCLER_REQUESTS=N reports on the notify
  // socket and, with `requests`, output lines matching its pattern.
  const PolicyConfig* request_counting_policy() const;
  // Where those counts come from, as `check` says it and the warning of a run
  // that has counted none (RecycleController) repeats it: "counts requests
  // from output lines matching /PATTERN/ ...", or "counts only
  // RECYCLER_REQUESTS=N reports on its notify socket ...; a worker that sends
  // none is never recycled by it: ...". Unescaped: `requests.pattern` is text
  // from the file.
  std::string request_source() const;
  // RECYCLER_REQUESTS_BATCH_BELOW in its workers' environment: below how many
  // requests each of their processes may report its counts in batches
  // (examples/python/recycler_notify.py), the smallest requests_exact_from()
  // of its policies; nullopt ("unlimited") when none of them acts on a
  // process's count, 1 when every request counts.
  std::optional<uint64_t> requests_batch_below() const;
  // The same as its workers get it: the program's env: value of the variable
  // when it sets one, read as recycler_notify.py reads it ("unlimited", a
  // number, anything else 1), else requests_batch_below(); nullopt: unlimited.
  std::optional<uint64_t> requests_held_below() const;
  // Asked to checkpoint before it is stopped (recycler's SIGTERM, `recycler
  // stop`, `restart`, a reload that replaces it, a preemption) or recycled
  // by an operator (`recycler recycle`): it has a checkpoint: section, or a
  // policy with action: checkpoint.
  bool checkpoints() const;
  // The top-level budget recycles one process of its workers at a time
  // rather than a whole worker: budget.scope, else whether a policy has
  // scope: process.
  bool budget_processes() const;
};

struct LogConfig {
  LogLevel level = LogLevel::Info;
  LogFormat format = LogFormat::Text;
  bool operator==(const LogConfig&) const = default;
};

inline constexpr const char* kDefaultCgroupRoot = "recycler";

// GPU memory through NVML (supervisor/gpu/). Without this section NVML is
// loaded only when a policy reads gpu or gpu_total; with it, also to record
// the timelines' gpu columns (a missing library is then a warning).
struct GpuConfig {
  std::string nvml = "libnvidia-ml.so.1";  // a soname (searched) or an absolute path
  bool operator==(const GpuConfig&) const = default;
};

// `control:`: the control socket (supervisor/control/). The socket's path
// defaults to control::default_socket_path(); it is owner-only (mode 0600)
// unless `mode` and `group` open it to a group, whose members may then use
// it too (their credentials are checked as well).
struct ControlConfig {
  std::string socket;  // "" for the default
  mode_t mode = 0600;
  std::optional<std::string> group;
  std::optional<gid_t> gid;  // resolved from group
  bool operator==(const ControlConfig&) const = default;
};

// `metrics: {listen: 127.0.0.1:9464}`: the Prometheus endpoint
// (supervisor/metrics/); off without the section.
struct MetricsConfig {
  ListenAddress listen{"127.0.0.1", 9464, false};
  bool operator==(const MetricsConfig&) const = default;
};

// `preempt:`: what recycler does on the signal a scheduler sends ahead of
// the end of a job (Slurm's --signal=B:USR1@T, a spot instance's notice
// relayed as a signal): every program that checkpoints is asked to, each
// worker is stopped, all by `deadline` (then whatever is left is killed), and
// recycler exits with `exit_code`, after `scontrol requeue $SLURM_JOB_ID`
// with then: requeue. No restarts meanwhile.
enum class PreemptThen { Exit, Requeue };
inline constexpr EnumName<PreemptThen> kPreemptThens[] = {{PreemptThen::Exit, "exit"},
                                                          {PreemptThen::Requeue, "requeue"}};
struct PreemptConfig {
  int signal = SIGUSR1;
  // Slurm's default for --signal's @T: the signal comes 60 s before the end.
  Duration deadline = 60s;
  PreemptThen then = PreemptThen::Exit;
  // Unset: 128 + signal, as a shell reports a process ended by it (not 0:
  // the job did not finish).
  std::optional<int> exit_code;
  int exit_status() const { return exit_code.value_or(128 + signal); }
  bool operator==(const PreemptConfig&) const = default;
};
// `budget:`: the whole box's memory (engine/budget.h), not one worker's: the
// sum of the supervised workers, the host, or the container recycler runs
// in, against a limit (held `for:`), under memory pressure (PSI avg10 held
// `pressure.for`), or projected to reach the limit within `horizon` (the
// leak policy's estimator over the scope's figure). Then one worker is
// chosen, by `choose` and the programs' preferences, and recycled gracefully
// through its program's engine; the next choice waits for that recycle and
// `cooldown`.
enum class BudgetScope { Workers, Host, Container };
inline constexpr EnumName<BudgetScope> kBudgetScopes[] = {{BudgetScope::Workers, "workers"},
                                                          {BudgetScope::Host, "host"},
                                                          {BudgetScope::Container, "container"}};
enum class BudgetChoose { Fastest, Largest, Newest };
inline constexpr EnumName<BudgetChoose> kBudgetChooses[] = {{BudgetChoose::Fastest, "fastest"},
                                                            {BudgetChoose::Largest, "largest"},
                                                            {BudgetChoose::Newest, "newest"}};
struct BudgetLimit {
  uint64_t bytes = 0;             // when percent is empty
  std::optional<double> percent;  // (0, 100] of the scope's capacity
  std::optional<uint64_t> resolve(std::optional<uint64_t> capacity) const;
  bool operator==(const BudgetLimit&) const = default;
};
struct BudgetPressure {
  bool full = false;  // full avg10, else some avg10
  double percent = 0;
  Duration held = 10s;
  bool operator==(const BudgetPressure&) const = default;
};
struct BudgetConfig {
  BudgetScope scope = BudgetScope::Workers;
  // current or anon for every scope; rss, pss or uss (summed over the
  // workers' processes) for scope: workers.
  std::string metric = "current";
  std::optional<BudgetLimit> limit;
  Duration held = 0s;  // for:
  std::optional<BudgetPressure> pressure;
  // The projection (needs limit): the leak policy's estimator over the
  // scope's figure, with this window and warm-up.
  std::optional<Duration> horizon;
  Duration window = 10min;
  Duration warmup = 2min;
  BudgetChoose choose = BudgetChoose::Fastest;
  Duration growth_window = 1min;  // what `fastest` measures each worker's growth over
  Duration cooldown = 30s;        // after a recycle is done, before the next choice
  Duration interval = 1s;         // how often the budget is evaluated
  // Its figure at each evaluation, as a timeline: DIR/budget.0.csv (the
  // figure in the `current` column: `recycler replay` reads it back), its
  // choices in DIR/budget.0.events.csv.
  std::optional<TimelineConfig> timeline;
  // The leak policy behind `horizon`, built when the config is loaded.
  std::shared_ptr<const policies::Policy> trend;
  bool operator==(const BudgetConfig& o) const {
    return scope == o.scope && metric == o.metric && limit == o.limit && held == o.held &&
           pressure == o.pressure && horizon == o.horizon && window == o.window &&
           warmup == o.warmup && choose == o.choose && growth_window == o.growth_window &&
           cooldown == o.cooldown && interval == o.interval && timeline == o.timeline;
  }
  // The Needs bits (policies/base/sample.h) of each worker's samples; with
  // `processes`, of a program whose processes it recycles one at a time.
  unsigned worker_needs(bool processes) const;
};

// `exit: {when: ...}`: when recycler itself ends (config mode; wrap mode
// ends with its command). all_exited (the default): once every slot has
// stopped for good, with status 1 if any failed; any_failed: also as soon as
// one slot fails for good (a crash loop, or a failed exit it is not
// restarted after), stopping the others first, status 1, so that an
// orchestrator restarts the pod instead of keeping one that looks healthy;
// never: it stays, to be reloaded or stopped.
enum class ExitWhen { AllExited, AnyFailed, Never };
inline constexpr EnumName<ExitWhen> kExitWhens[] = {{ExitWhen::AllExited, "all_exited"},
                                                    {ExitWhen::AnyFailed, "any_failed"},
                                                    {ExitWhen::Never, "never"}};
struct ExitConfig {
  ExitWhen when = ExitWhen::AllExited;
  bool operator==(const ExitConfig&) const = default;
};

struct ProgramConfig;
// The checkpoint window of `program` in a preemption with `deadline`: its
// checkpoint.timeout, but never so long that its stop (stop.timeout) cannot
// follow before the deadline; at least half the deadline goes to the
// checkpoint, whose loss costs more than a SIGKILL.
Duration preempt_checkpoint_window(const ProgramConfig& program, Duration deadline);

struct Config {
  std::string path;  // the file it came from ("" when built from the command line)
  LogConfig log;
  std::optional<GpuConfig> gpu;
  ControlConfig control;
  std::optional<MetricsConfig> metrics;
  std::optional<PreemptConfig> preempt;
  std::optional<BudgetConfig> budget;
  ExitConfig exit;
  // Relative: under the recycler's own cgroup (v2) or each controller's mount (v1).
  // Absolute: from the top of the hierarchy.
  std::string cgroup_root = kDefaultCgroupRoot;
  std::vector<ProgramConfig> programs;  // in file order

  const ProgramConfig* find(const std::string& name) const;
  // Whether any program's policies read gpu or gpu_total.
  bool needs_gpu() const;
  // The NVML library to load, when anything asks for GPU figures.
  std::optional<std::string> nvml_library() const;
};

// Set in each worker's environment unless the program's env sets it:
// ProgramConfig::requests_batch_below(), or "unlimited".
inline constexpr const char* kRequestsBatchBelowVar = "RECYCLER_REQUESTS_BATCH_BELOW";

// Environment variables that `threads: N` sets unless the program's env sets them.
inline constexpr const char* kThreadEnvVars[] = {"OMP_NUM_THREADS", "MKL_NUM_THREADS",
                                                 "OPENBLAS_NUM_THREADS", "NUMEXPR_NUM_THREADS",
                                                 "VECLIB_MAXIMUM_THREADS"};

constexpr const char* to_string(RestartMode mode) {
  return enum_name(kRestartModes, mode);
}
constexpr const char* to_string(RecycleMode mode) {
  return enum_name(kRecycleModes, mode);
}
constexpr const char* to_string(LogFormat format) {
  return enum_name(kLogFormats, format);
}
constexpr const char* to_string(LogLevel level) {
  return enum_name(kLogLevels, level);
}
constexpr const char* to_string(CheckpointTimeout on_timeout) {
  return enum_name(kCheckpointTimeouts, on_timeout);
}
constexpr const char* to_string(SignalTo to) {
  return enum_name(kSignalTos, to);
}
constexpr const char* to_string(PreemptThen then) {
  return enum_name(kPreemptThens, then);
}
constexpr const char* to_string(ExitWhen when) {
  return enum_name(kExitWhens, when);
}
constexpr const char* to_string(BudgetScope scope) {
  return enum_name(kBudgetScopes, scope);
}
constexpr const char* to_string(BudgetChoose choose) {
  return enum_name(kBudgetChooses, choose);
}
constexpr const char* to_string(BudgetPreference preference) {
  return enum_name(kBudgetPreferences, preference);
}

}  // namespace recycler::config
