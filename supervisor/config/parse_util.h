// What the parse step's files (parse*.cpp) and the host check (check.cpp)
// share, and nothing outside supervisor/config/ includes: the Report that
// collects diagnostics, the node readers of policies/base/fields.h under
// short names, the keys each map accepts, and each section's reader.
//
// Loading a config is three steps (parse.cpp's parse_document): parse reads
// the YAML into a Config, checking syntax and values only; check (check.h)
// looks at this machine (users, files, PATH, NVML); compile (compile.h)
// builds the policies. Each step reports into the same Report.
#pragma once

#include <sys/resource.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include "policies/base/fields.h"
#include "policies/base/units.h"
#include "supervisor/config/allocator.h"
#include "supervisor/config/compile.h"
#include "supervisor/config/config.h"
#include "supervisor/config/parse.h"

namespace recycler::config::detail {

namespace fs = std::filesystem;

// ---------------------------------------------------------------------------
// Diagnostics

// Every diagnostic, listed in file order. Ties (two at one line and column,
// e.g. one YAML node reached through an alias) keep the order in which a
// single pass over the file would find them: each diagnostic takes the next
// place in that order, and the host check, which runs after the parse, puts
// its findings at places the parse reserved for them where it read the value.
class Report final : public fields::ErrorSink {
 public:
  using Slot = size_t;

  explicit Report(std::string file) : file_(std::move(file)) {}

  void error(const YAML::Mark& at, std::string message) override {
    error(reserve(), at, std::move(message));
  }
  void warning(const YAML::Mark& at, std::string message) override {
    warning(reserve(), at, std::move(message));
  }
  // A place for diagnostics found later, among those found so far.
  Slot reserve() { return next_slot_++; }
  void error(Slot slot, const YAML::Mark& at, std::string message) {
    errors_.push_back({make(at, std::move(message), false), slot});
  }
  void warning(Slot slot, const YAML::Mark& at, std::string message) {
    warnings_.push_back({make(at, std::move(message), true), slot});
  }

  LoadResult finish(std::optional<Config> config) && {
    LoadResult result;
    result.errors = in_file_order(std::move(errors_));
    result.warnings = in_file_order(std::move(warnings_));
    if (result.errors.empty()) result.config = std::move(config);
    return result;
  }

 private:
  struct Entry {
    Diagnostic diagnostic;
    Slot slot;
  };

  Diagnostic make(const YAML::Mark& at, std::string message, bool warning) const {
    bool known = !at.is_null() && at.line >= 0;
    return Diagnostic{file_, known ? at.line + 1 : 0, known ? at.column + 1 : 0, std::move(message),
                      warning};
  }

  // Stable: one slot's diagnostics keep the order they were reported in.
  static std::vector<Diagnostic> in_file_order(std::vector<Entry> entries) {
    std::stable_sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
      return std::tie(a.diagnostic.line, a.diagnostic.column, a.slot) <
             std::tie(b.diagnostic.line, b.diagnostic.column, b.slot);
    });
    std::vector<Diagnostic> out;
    out.reserve(entries.size());
    for (Entry& e : entries) out.push_back(std::move(e.diagnostic));
    return out;
  }

  std::string file_;
  std::vector<Entry> errors_;
  std::vector<Entry> warnings_;
  Slot next_slot_ = 0;
};

// Line 1, column 1: a default Mark is all zeros.
inline YAML::Mark start_of_file() {
  return YAML::Mark();
}

// ---------------------------------------------------------------------------
// Generic node reading: policies/base/fields.h

using fields::Field;
using fields::Keys;
using fields::MapView;
using fields::parse_digits;
using fields::read_choice;
using fields::read_duration;
using fields::read_integer;
using fields::read_map;
using fields::read_scalar;
using fields::read_signal;
using fields::read_size;
using units::format_duration;
using units::format_size;
using units::quote;
using units::suggest;

// Assigns `out` only from a value that is present, not null, and valid.
template <typename T, typename U>
void set(T& out, const std::optional<U>& v) {
  if (v) out = static_cast<T>(*v);
}

// true or false (YAML's yes, no, on and off are refused as ambiguous).
inline std::optional<bool> read_bool(const Field& f, Report& r) {
  static constexpr std::string_view kWords[] = {"true", "false"};
  auto word = read_choice(f, kWords, r);
  if (!word) return std::nullopt;
  return *word == "true";
}

// strchr() would also find the terminating NUL, which YAML can spell "\0".
inline bool one_of(char c, const char* chars) {
  return c != '\0' && std::strchr(chars, c) != nullptr;
}

inline bool control_char(char c) {
  return static_cast<unsigned char>(c) < 0x20 || c == 0x7f;
}

// Octal, as chmod takes it: "0600", "660".
inline bool octal_mode(const std::string& text) {
  return !text.empty() && text.size() <= 4 &&
         text.find_first_not_of("01234567") == std::string::npos;
}

// ---------------------------------------------------------------------------
// The keys each map accepts (key_tables() lists them for the docs test)

inline constexpr std::string_view kTopKeys[] = {
    "log", "cgroup_root", "gpu", "control", "metrics", "preempt", "budget", "exit", "programs"};
inline constexpr std::string_view kBudgetKeys[] = {
    "scope",  "metric", "limit",         "for",      "pressure", "horizon", "window",
    "warmup", "choose", "growth_window", "cooldown", "interval", "timeline"};
inline constexpr std::string_view kBudgetPressureKeys[] = {"some_avg10", "full_avg10", "for"};
inline constexpr std::string_view kExitKeys[] = {"when"};
inline constexpr std::string_view kProgramBudgetKeys[] = {"prefer", "avoid", "omit", "scope"};
inline constexpr std::string_view kPreemptKeys[] = {"signal", "deadline", "then", "exit_code"};
inline constexpr std::string_view kControlKeys[] = {"socket", "mode", "group"};
inline constexpr std::string_view kGpuKeys[] = {"nvml"};
inline constexpr std::string_view kMetricsKeys[] = {"listen"};
inline constexpr std::string_view kLogKeys[] = {"level", "format"};
inline constexpr std::string_view kProgramKeys[] = {"command",
                                                    "env",
                                                    "cwd",
                                                    "user",
                                                    "group",
                                                    "instances",
                                                    "threads",
                                                    "allocator",
                                                    "devices",
                                                    "limits",
                                                    "rlimits",
                                                    "stop",
                                                    "restart",
                                                    "policies",
                                                    "requests",
                                                    "watchdog",
                                                    "sample_interval",
                                                    "max_concurrent_recycles",
                                                    "max_concurrent_process_recycles",
                                                    "min_uptime",
                                                    "checkpoint",
                                                    "diagnose",
                                                    "timeline",
                                                    "listen",
                                                    "recycle",
                                                    "gang",
                                                    "budget",
                                                    "drain"};
inline constexpr std::string_view kListenKeys[] = {"name", "address", "backlog",
                                                   "mode", "owner",   "group"};
inline constexpr std::string_view kRecycleKeys[] = {"mode", "ready_timeout", "ready_after",
                                                    "ready_from"};
inline constexpr std::string_view kAllocatorKeys[] = {
    "arena_max", "trim_threshold", "mmap_threshold", "top_pad", "preload", "jemalloc_conf"};
inline constexpr std::string_view kDevicesKeys[] = {"gpus", "per_slot", "pytorch_alloc_conf",
                                                    "xla_preallocate", "xla_mem_fraction"};
inline constexpr std::string_view kRequestsKeys[] = {"pattern"};
inline constexpr std::string_view kCheckpointKeys[] = {"signal", "signal_to", "timeout",
                                                       "on_timeout"};
inline constexpr std::string_view kGangKeys[] = {"master"};
inline constexpr std::string_view kDrainKeys[] = {"unready_for"};
inline constexpr std::string_view kDiagnoseKeys[] = {"signal", "command", "timeout", "max_output",
                                                     "policies"};
inline constexpr std::string_view kTimelineKeys[] = {"dir", "max_size", "keep"};
inline constexpr std::string_view kLimitKeys[] = {
    "memory_max", "memory_high", "memory_low", "swap_max", "oom_group", "pids_max", "cpu"};
inline constexpr std::string_view kStopKeys[] = {"signal", "timeout"};
inline constexpr std::string_view kRestartKeys[] = {"mode", "backoff", "crash_loop"};
inline constexpr std::string_view kBackoffKeys[] = {"initial", "max", "reset_after"};
inline constexpr std::string_view kCrashLoopKeys[] = {"max", "within"};
inline constexpr std::string_view kRlimitRangeKeys[] = {"soft", "hard"};

struct RlimitKind {
  std::string_view name;
  int resource;
  bool size;  // a size ("64MiB") rather than a count
};

inline constexpr RlimitKind kRlimits[] = {
    {"nofile", RLIMIT_NOFILE, false},  {"nproc", RLIMIT_NPROC, false}, {"core", RLIMIT_CORE, true},
    {"memlock", RLIMIT_MEMLOCK, true}, {"stack", RLIMIT_STACK, true},  {"as", RLIMIT_AS, true},
    {"fsize", RLIMIT_FSIZE, true}};

// The rlimits' names, as a table of keys like the others.
inline constexpr auto kRlimitKeys = [] {
  std::array<std::string_view, std::size(kRlimits)> names;
  for (size_t i = 0; i < names.size(); ++i) names[i] = kRlimits[i].name;
  return names;
}();

// ---------------------------------------------------------------------------
// The parse step's result: the Config as written, and beside it what the
// later steps need and the Config has no room for.

// A value the host check looks at: where it is in the file and the place its
// diagnostics take among the parse's (Report::reserve).
struct Site {
  std::string path;  // "programs.api.user"
  YAML::Mark mark;
  Report::Slot slot = 0;
  std::string value;  // as written, where the check needs it: a user or group name
};

// allocator.preload: a library known by name (its candidate files, in the
// order they are looked for) or one path.
struct PreloadSite {
  Site site;  // value: the preload as written
  const PreloadLibrary* library = nullptr;
  std::vector<std::string> candidates;
};

// The allocator's warnings about settings a found preload ignores.
struct AllocatorSite {
  std::string path;  // "programs.api.allocator"
  YAML::Mark preload;
  YAML::Mark jemalloc_conf;  // null when not set
  Report::Slot slot = 0;
};

// One entry of listen:, kept in ProgramConfig::listen or not (a duplicate).
struct ListenSite {
  std::optional<size_t> socket;  // its index in ProgramConfig::listen
  std::optional<Site> owner;
  std::optional<Site> group;
};

struct ProgramSites {
  std::optional<Site> cwd;
  std::optional<Site> user;
  std::optional<Site> group;
  std::optional<PreloadSite> preload;
  std::optional<AllocatorSite> allocator;
  std::vector<ListenSite> listen;
  std::optional<Site> surge;      // recycle: mode: surge, for its memory headroom
  std::optional<Site> command;    // a command list's first word, for the PATH lookup
  std::optional<Site> gpus_auto;  // devices.gpus: auto, which counts GPUs through NVML
  std::optional<Site> budget;     // its budget: section, which needs the top-level one
  std::optional<Site> drain;      // drain.unready_for, which only /readyz (metrics:) shows
};

struct ControlSites {
  std::optional<Site> socket;  // for its directory's mode
  std::optional<Site> group;
};

struct Parsed {
  Config config;
  std::vector<ProgramSpec> specs;      // one per program, for compile()
  std::vector<ProgramSites> programs;  // one per program
  ControlSites control;
};

// ---------------------------------------------------------------------------
// The section readers: each reports what is wrong with its node and carries
// on with the default. None looks at the host: they leave a Site instead.

// parse_top.cpp: the top-level sections other than programs.
void parse_log(const Field& f, LogConfig& log, Report& r);
void parse_cgroup_root(const Field& f, std::string& root, Report& r);
void parse_gpu(const Field& f, const fs::path& base, std::optional<GpuConfig>& gpu, Report& r);
void parse_control(const Field& f, const fs::path& base, ControlConfig& control,
                   ControlSites& sites, Report& r);
void parse_metrics(const Field& f, std::optional<MetricsConfig>& metrics, Report& r);
void parse_preempt(const Field& f, std::optional<PreemptConfig>& preempt, Report& r);
void parse_budget(const Field& f, const fs::path& base, std::optional<BudgetConfig>& budget,
                  Report& r);
// "20%" or "20" (`text`, read from `f`): a share in (0, 100]; reported otherwise.
std::optional<double> read_percent(const Field& f, std::string text, Report& r);
void parse_exit(const Field& f, ExitConfig& exit, Report& r);
// A program's `budget:` (its preference and scope), in parse_program.cpp.
void parse_program_budget(const Field& f, ProgramBudget& budget, Report& r);

// parse_program.cpp: one entry of programs, and its process's settings.
// A command as `command:` takes it (and diagnose.command): a string runs
// under /bin/sh -c, a list is the argv; nullopt (reported) when invalid.
std::optional<std::vector<std::string>> read_command(const Field& f, Report& r);
// A duration that must not be zero; `why` follows the error's "must be
// greater than 0". nullopt (reported) when invalid.
std::optional<Duration> read_positive_duration(const Field& f, Report& r,
                                               std::string_view why = {});
ProgramConfig parse_program(const std::string& name, const Field& f, const fs::path& base,
                            ProgramSpec& spec, ProgramSites& sites, Report& r);

// parse_allocator.cpp
void parse_allocator(const Field& f, const fs::path& base, ProgramConfig& p, ProgramSites& sites,
                     Report& r);

// parse_devices.cpp: the GPUs of each slot and the frameworks' variables.
void parse_devices(const Field& f, ProgramConfig& p, ProgramSites& sites, Report& r);

// parse_listen.cpp: a program's sockets, and that no two programs share one.
void parse_listen(const Field& f, const fs::path& base, ProgramConfig& p, ProgramSites& sites,
                  Report& r);
void check_listen_taken(const Field& program, const std::vector<ProgramConfig>& programs,
                        Report& r);

// parse_policies.cpp: what decides a recycle, and how one goes.
void parse_policies(const Field& f, ProgramSpec& spec, Report& r);
void parse_requests(const Field& f, ProgramSpec& spec, Report& r);
void parse_watchdog(const Field& f, ProgramConfig& p, ProgramSpec& spec, Report& r);
void parse_checkpoint(const Field& f, CheckpointConfig& checkpoint, Report& r);
void parse_diagnose(const Field& f, std::optional<DiagnoseConfig>& diagnose, Report& r);
void parse_timeline(const Field& f, const fs::path& base, std::optional<TimelineConfig>& out,
                    Report& r);
void parse_recycle(const Field& f, RecycleConfig& recycle, Report& r);
// After parse_recycle: a gang cannot surge.
void parse_gang(const Field& f, ProgramConfig& p, Report& r);
// drain: {unready_for: DUR}.
void parse_drain(const Field& f, ProgramConfig& p, ProgramSites& sites, Report& r);
void warn_surge_without_listen(const ProgramConfig& p, const MapView& map, Report& r);

}  // namespace recycler::config::detail
