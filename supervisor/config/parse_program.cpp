// One entry of programs: its command, environment, directory, identity,
// limits, rlimits, stop and restart settings here; its allocator, sockets
// and policies in their own files. Names of users and groups, cwd and the
// command's first word are left for check.cpp to look up on the host.
#include <cctype>
#include <cstdlib>

#include "supervisor/config/parse_util.h"

namespace recycler::config {
namespace detail {

std::optional<std::vector<std::string>> read_command(const Field& f, Report& r) {
  if (f.value.IsScalar()) {
    if (f.value.Scalar().empty()) {
      r.error(f.mark(), f.path + " must not be empty");
      return std::nullopt;
    }
    return std::vector<std::string>{"/bin/sh", "-c", f.value.Scalar()};
  }
  if (!f.value.IsSequence()) {
    r.error(f.mark(), f.path + " must be a string or a list");
    return std::nullopt;
  }
  if (f.value.size() == 0) {
    r.error(f.mark(), f.path + " must not be empty");
    return std::nullopt;
  }
  std::vector<std::string> argv;
  for (size_t i = 0; i < f.value.size(); ++i) {
    Field arg = f.item(i, f.value[i]);
    auto text = read_scalar(arg, "a string", r);
    if (text && i == 0 && text->empty()) r.error(arg.mark(), arg.path + " must not be empty");
    if (text) argv.push_back(*text);
  }
  return argv;
}

std::optional<Duration> read_positive_duration(const Field& f, Report& r, std::string_view why) {
  auto d = read_duration(f, r);
  if (!d || *d != Duration::zero()) return d;
  r.error(f.mark(), f.path + " must be greater than 0" + std::string(why));
  return std::nullopt;
}

namespace {

constexpr unsigned kMaxInstances = 1024;
constexpr unsigned kMaxThreads = 4096;
constexpr uint64_t kMaxPids = 4'194'304;  // PID_MAX_LIMIT on 64-bit Linux
constexpr double kMaxCpus = 1024;
constexpr unsigned kMaxCrashLoop = 1'000'000;
constexpr Duration kMinSampleInterval = 10ms;
constexpr uint64_t kMinMemoryLimit = 1 << 20;  // limits.memory_max/memory_high

void parse_command(const Field& f, ProgramConfig& p, Report& r) {
  if (auto argv = read_command(f, r)) {
    p.command = std::move(*argv);
    p.shell = f.value.IsScalar();
  }
}

bool valid_env_name(std::string_view name) {
  auto word = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; };
  return !name.empty() && !std::isdigit(static_cast<unsigned char>(name[0])) &&
         std::all_of(name.begin(), name.end(), word);
}

void parse_env(const Field& f, ProgramConfig& p, Report& r) {
  auto map = read_map(f, r, std::nullopt);
  if (!map) return;
  for (const auto& [name, value] : map->entries()) {
    if (!valid_env_name(name)) {
      r.error(value.key_mark, "invalid variable name " + quote(name) + " " + f.where() +
                                  "; use letters, digits and _, not starting with a digit");
      continue;
    }
    if (value.null()) {
      // An empty value is more likely a forgotten one than a wish for "".
      r.error(value.mark(), value.path + " must be a string; write \"\" for an empty value");
      continue;
    }
    if (auto text = read_scalar(value, "a string", r)) p.env[name] = *text;
  }
}

// Relative directories are relative to the config file, not to wherever the
// recycler happened to be started from.
void parse_cwd(const Field& f, const fs::path& base, ProgramConfig& p, ProgramSites& sites,
               Report& r) {
  auto text = read_scalar(f, "a string", r);
  if (!text) return;
  if (text->empty()) return r.error(f.mark(), f.path + " must not be empty");
  std::error_code ec;
  fs::path dir = fs::absolute(base / *text, ec).lexically_normal();
  if (!dir.has_filename() && dir != dir.root_path()) dir = dir.parent_path();
  sites.cwd = Site{f.path, f.mark(), r.reserve(), {}};
  p.cwd = dir.string();
}

// user: and group: are names here; check.cpp resolves them.
void parse_identity(const MapView& map, ProgramSites& sites, Report& r) {
  for (auto [key, site] : {std::pair{"user", &sites.user}, std::pair{"group", &sites.group}}) {
    const Field* f = map.get(key);
    if (!f) continue;
    if (auto name = read_scalar(*f, "a string", r))
      *site = Site{f->path, f->mark(), r.reserve(), *name};
  }
}

void parse_limits_cpu(const Field& v, Limits& limits, Report& r) {
  auto text = read_scalar(v, "a number", r);
  if (!text) return;
  std::string expected = "expected a number of CPUs above 0 and at most 1024";
  // Plain decimals only: strtod would also take "inf", "nan" and hex floats.
  bool plain = !text->empty() && text->find_first_not_of("0123456789.") == std::string::npos &&
               std::count(text->begin(), text->end(), '.') <= 1 && text->front() != '.' &&
               text->back() != '.';
  double cpus = plain ? std::strtod(text->c_str(), nullptr) : 0;
  if (!plain) {
    r.error(v.mark(), v.path + ": invalid value " + quote(*text) + "; " + expected);
  } else if (cpus <= 0 || cpus > kMaxCpus) {
    r.error(v.mark(), v.path + ": " + *text + " is out of range; " + expected);
  } else {
    limits.cpu = cpus;
  }
}

// limits.swap_max: a size, or "unlimited" (what the kernel's files spell
// "max" or "-1" gets a hint).
std::optional<uint64_t> read_swap(const Field& v, Report& r) {
  if (v.value.IsScalar() && v.value.Scalar() == "unlimited") return Limits::kUnlimitedSwap;
  for (const char* other : {"max", "-1", "none", "infinity"})
    if (v.value.IsScalar() && v.value.Scalar() == other) {
      r.error(v.mark(), v.path + ": invalid value " + quote(other) +
                            "; write \"unlimited\" for no limit, or a size");
      return std::nullopt;
    }
  auto size = read_size(v, r);
  if (size && *size == Limits::kUnlimitedSwap) {
    r.error(v.mark(), v.path + " is too large; write \"unlimited\" for no limit");
    return std::nullopt;
  }
  return size;
}

// The settings beside the limits (memory_settings.h writes them): memory_low
// protects at most what memory_high and memory_max allow.
void parse_limits_memory_settings(const MapView& map, Limits& limits, Report& r) {
  if (auto* v = map.get("memory_low")) limits.memory_low = read_size(*v, r);
  if (auto* v = map.get("swap_max")) limits.swap_max = read_swap(*v, r);
  if (auto* v = map.get("oom_group")) limits.oom_group = read_bool(*v, r);
  if (!limits.memory_low) return;
  for (auto [name, bound] :
       {std::pair{"memory_high", limits.memory_high}, std::pair{"memory_max", limits.memory_max}}) {
    if (!bound || *limits.memory_low <= *bound) continue;
    const Field* low = map.get("memory_low");
    return r.error(low->mark(), low->path + " (" + format_size(*limits.memory_low) + ") is above " +
                                    name + " (" + format_size(*bound) + ")");
  }
}

void parse_limits(const Field& f, Limits& limits, Report& r) {
  auto map = read_map(f, r, kLimitKeys);
  if (!map) return;
  auto positive_size = [&](const char* key) -> std::optional<uint64_t> {
    const Field* v = map->get(key);
    if (!v) return std::nullopt;
    auto size = read_size(*v, r);
    // Below a mebibyte no program gets as far as its first page of heap:
    // every start is OOM-killed at once, forever.
    if (size && *size < kMinMemoryLimit) {
      r.error(v->mark(), v->path + " (" + format_size(*size) +
                             ") is too small: no program starts in less than " +
                             format_size(kMinMemoryLimit));
      return std::nullopt;
    }
    return size;
  };
  limits.memory_max = positive_size("memory_max");
  limits.memory_high = positive_size("memory_high");
  if (limits.memory_max && limits.memory_high && *limits.memory_high > *limits.memory_max) {
    const Field* high = map->get("memory_high");
    r.error(high->mark(), high->path + " (" + format_size(*limits.memory_high) +
                              ") is above memory_max (" + format_size(*limits.memory_max) + ")");
  }
  parse_limits_memory_settings(*map, limits, r);
  if (auto* v = map->get("pids_max")) limits.pids_max = read_integer(*v, 1, kMaxPids, r);
  if (auto* v = map->get("cpu")) parse_limits_cpu(*v, limits, r);
}

std::optional<uint64_t> read_rlimit_value(const Field& f, const RlimitKind& kind, Report& r) {
  if (f.null()) {
    r.error(f.mark(), f.path + " must not be empty");
    return std::nullopt;
  }
  if (f.value.IsScalar() && f.value.Scalar() == "unlimited") return RLIM_INFINITY;
  if (kind.size) {
    auto v = read_size(f, r);
    if (v && *v >= RLIM_INFINITY) {
      r.error(f.mark(), f.path + " is too large; write \"unlimited\" for no limit");
      return std::nullopt;
    }
    return v;
  }
  auto text = read_scalar(f, "an integer", r);
  if (!text) return std::nullopt;
  auto v = parse_digits(*text);
  if (!v || *v >= RLIM_INFINITY) {
    r.error(f.mark(), f.path + ": invalid value " + quote(*text) +
                          "; expected a whole number or \"unlimited\"");
    return std::nullopt;
  }
  return v;
}

// A scalar sets both limits; {soft, hard} sets them apart.
std::optional<Rlimit> parse_rlimit(const Field& f, const RlimitKind& kind, Report& r) {
  if (!f.value.IsMap()) {
    auto limit = read_rlimit_value(f, kind, r);
    if (!limit) return std::nullopt;
    return Rlimit{kind.resource, *limit, *limit};
  }
  auto range = read_map(f, r, kRlimitRangeKeys);
  if (!range) return std::nullopt;
  std::optional<uint64_t> ends[2];
  for (size_t i = 0; i < 2; ++i) {
    if (const Field* end = range->find(kRlimitRangeKeys[i]))
      ends[i] = read_rlimit_value(*end, kind, r);
    else
      r.error(f.key_mark, f.path + "." + std::string(kRlimitRangeKeys[i]) + " is required");
  }
  if (!ends[0] || !ends[1]) return std::nullopt;
  if (*ends[0] > *ends[1]) {
    const Field* soft = range->find("soft");
    r.error(soft->mark(), f.path + ": soft limit " + quote(soft->value.Scalar()) +
                              " is above hard limit " + quote(range->find("hard")->value.Scalar()));
    return std::nullopt;
  }
  return Rlimit{kind.resource, *ends[0], *ends[1]};
}

void parse_rlimits(const Field& f, ProgramConfig& p, Report& r) {
  auto map = read_map(f, r, kRlimitKeys);
  if (!map) return;
  for (const auto& [name, value] : map->entries()) {
    for (const auto& kind : kRlimits)
      if (kind.name == name)
        if (auto limit = parse_rlimit(value, kind, r)) p.rlimits.push_back(*limit);
  }
}

void parse_stop(const Field& f, StopConfig& stop, Report& r) {
  auto map = read_map(f, r, kStopKeys);
  if (!map) return;
  if (auto* v = map->get("signal")) set(stop.signal, read_signal(*v, r));
  if (auto* v = map->get("timeout")) set(stop.timeout, read_duration(*v, r));
}

void parse_backoff(const Field& f, BackoffConfig& backoff, Report& r) {
  auto map = read_map(f, r, kBackoffKeys);
  if (!map) return;
  const Field* initial = map->get("initial");
  const Field* max = map->get("max");
  bool failed = false;
  for (auto [field, out] : {std::pair{initial, &backoff.initial}, std::pair{max, &backoff.max}}) {
    if (!field) continue;
    auto v = read_duration(*field, r);
    failed |= !v;
    set(*out, v);
  }
  if (auto* v = map->get("reset_after")) set(backoff.reset_after, read_duration(*v, r));
  if (failed || backoff.max >= backoff.initial) return;
  // Blame whichever of the two was written: a default is not the mistake.
  std::string values =
      " (" + format_duration(backoff.max) + " < " + format_duration(backoff.initial) + ")";
  if (max)
    r.error(max->mark(), max->path + " must not be below backoff.initial" + values);
  else
    r.error(initial->mark(), initial->path + " must not be above backoff.max" + values);
}

void parse_crash_loop(const Field& f, CrashLoopConfig& crash_loop, Report& r) {
  auto map = read_map(f, r, kCrashLoopKeys);
  if (!map) return;
  if (auto* v = map->get("max")) set(crash_loop.max, read_integer(*v, 1, kMaxCrashLoop, r));
  if (auto* v = map->get("within")) set(crash_loop.within, read_positive_duration(*v, r));
}

void parse_restart(const Field& f, RestartConfig& restart, Report& r) {
  auto map = read_map(f, r, kRestartKeys);
  if (!map) return;
  if (auto* v = map->get("mode")) set(restart.mode, read_choice(*v, kRestartModes, r));
  if (auto* v = map->find("backoff")) parse_backoff(*v, restart.backoff, r);
  if (auto* v = map->find("crash_loop")) parse_crash_loop(*v, restart.crash_loop, r);
}

// The settings of the program's process, in the order they are checked.
void parse_process(const MapView& map, const fs::path& base, ProgramConfig& p, ProgramSites& sites,
                   Report& r) {
  if (auto* v = map.find("env")) parse_env(*v, p, r);
  if (auto* v = map.get("cwd")) parse_cwd(*v, base, p, sites, r);
  parse_identity(map, sites, r);
  if (auto* v = map.get("instances")) set(p.instances, read_integer(*v, 1, kMaxInstances, r));
  if (auto* v = map.get("threads")) set(p.threads, read_integer(*v, 1, kMaxThreads, r));
  if (auto* v = map.find("allocator")) parse_allocator(*v, base, p, sites, r);
  if (auto* v = map.find("devices")) parse_devices(*v, p, sites, r);
  if (auto* v = map.find("limits")) parse_limits(*v, p.limits, r);
  if (auto* v = map.find("rlimits")) parse_rlimits(*v, p, r);
  if (auto* v = map.find("stop")) parse_stop(*v, p.stop, r);
  if (auto* v = map.find("restart")) parse_restart(*v, p.restart, r);
}

// How its workers are watched and recycled.
void parse_recycling(const MapView& map, const fs::path& base, ProgramConfig& p, ProgramSpec& spec,
                     ProgramSites& sites, Report& r) {
  if (auto* v = map.find("policies")) parse_policies(*v, spec, r);
  if (auto* v = map.find("requests")) parse_requests(*v, spec, r);
  if (auto* v = map.find("watchdog")) parse_watchdog(*v, p, spec, r);
  if (auto* v = map.get("sample_interval")) {
    if (auto d = read_duration(*v, r); d && *d < kMinSampleInterval)
      r.error(v->mark(), v->path + ": " + format_duration(*d) + " is too short; at least " +
                             format_duration(kMinSampleInterval));
    else
      set(p.sample_interval, d);
  }
  if (auto* v = map.get("max_concurrent_recycles"))
    set(p.max_concurrent_recycles, read_integer(*v, 1, kMaxInstances, r));
  if (auto* v = map.get("max_concurrent_process_recycles"))
    set(p.max_concurrent_process_recycles, read_integer(*v, 0, 65536, r));
  if (auto* v = map.get("min_uptime")) set(p.min_uptime, read_duration(*v, r));
  if (auto* v = map.find("checkpoint")) parse_checkpoint(*v, p.checkpoint, r);
  if (auto* v = map.get("diagnose")) parse_diagnose(*v, p.diagnose, r);
  if (auto* v = map.find("timeline")) parse_timeline(*v, base, p.timeline, r);
  if (auto* v = map.find("listen")) parse_listen(*v, base, p, sites, r);
  if (auto* v = map.find("recycle")) parse_recycle(*v, p.recycle, r);
  if (auto* v = map.find("gang")) parse_gang(*v, p, r);
  if (auto* v = map.find("drain")) parse_drain(*v, p, sites, r);
  if (auto* v = map.get("budget")) {
    parse_program_budget(*v, p.budget, r);
    sites.budget = Site{v->path, v->mark(), r.reserve(), ""};
  }
}

}  // namespace

ProgramConfig parse_program(const std::string& name, const Field& f, const fs::path& base,
                            ProgramSpec& spec, ProgramSites& sites, Report& r) {
  ProgramConfig p;
  p.name = name;
  if (!valid_program_name(name))
    r.error(f.key_mark,
            "invalid program name " + quote(name) +
                " in programs: use 1 to 64 letters, digits, _ . or -, not starting with .");
  auto map = read_map(f, r, kProgramKeys);
  if (!map) return p;
  if (const Field* v = map->find("command")) {
    if (v->null())
      r.error(v->mark(), v->path + " must not be empty");
    else
      parse_command(*v, p, r);
  } else {
    r.error(f.key_mark, f.path + ".command is required");
  }
  parse_process(*map, base, p, sites, r);
  parse_recycling(*map, base, p, spec, sites, r);
  warn_surge_without_listen(p, *map, r);
  if (const Field* recycle = map->get("recycle"); recycle && p.recycle.mode == RecycleMode::Surge)
    sites.surge = Site{recycle->path, recycle->mark(), r.reserve(), {}};
  // A command list's first word is looked for on PATH (a shell line's is the shell's business).
  if (auto* v = map->get("command"); v && v->value.IsSequence() && v->value.size() > 0)
    sites.command = Site{v->path, v->value[0].Mark(), r.reserve(), {}};
  return p;
}

// budget: {prefer: true | avoid: true | omit: true, scope: worker|process}
void parse_program_budget(const Field& f, ProgramBudget& budget, Report& r) {
  auto map = read_map(f, r, kProgramBudgetKeys);
  if (!map) return;
  const Field* chosen = nullptr;
  for (auto [key, preference] :
       {std::pair{"prefer", BudgetPreference::Prefer}, std::pair{"avoid", BudgetPreference::Avoid},
        std::pair{"omit", BudgetPreference::Omit}}) {
    const Field* v = map->get(key);
    if (!v) continue;
    auto on = read_bool(*v, r);
    if (!on || !*on) continue;
    if (chosen) {
      r.error(v->mark(), v->path + ": " + chosen->path +
                             " is set already: a program is "
                             "preferred, avoided or omitted, one of them");
      continue;
    }
    chosen = v;
    budget.preference = preference;
  }
  if (auto* v = map->get("scope")) {
    static constexpr std::string_view kScopes[] = {"worker", "process"};
    if (auto s = read_choice(*v, kScopes, r)) budget.process = *s == "process";
  }
}

}  // namespace detail

bool valid_program_name(std::string_view name) {
  auto ok = [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || detail::one_of(c, "_.-");
  };
  return !name.empty() && name.size() <= 64 && name.front() != '.' &&
         std::all_of(name.begin(), name.end(), ok);
}

}  // namespace recycler::config
