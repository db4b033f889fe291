// One pass over the YAML tree. Every reader reports what is wrong with its
// node and carries on with the default, so a single load lists every problem;
// the Config is handed out only when nothing was reported as an error.
#include "supervisor/config/parse.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <span>
#include <tuple>
#include <utility>

#include "policies/base/fields.h"
#include "policies/base/units.h"
#include "policies/policy.h"
#include "supervisor/config/allocator.h"
#include "supervisor/config/compile.h"
#include "supervisor/util/escape.h"
#include "supervisor/util/fd.h"

namespace recycler::config {
namespace {

namespace fs = std::filesystem;

// ---------------------------------------------------------------------------
// Diagnostics

class Report final : public fields::ErrorSink {
 public:
  explicit Report(std::string file) : file_(std::move(file)) {}

  void error(const YAML::Mark& at, std::string message) override {
    errors_.push_back(make(at, std::move(message), false));
  }
  void warning(const YAML::Mark& at, std::string message) override {
    warnings_.push_back(make(at, std::move(message), true));
  }

  LoadResult finish(std::optional<Config> config) && {
    // Checks run section by section, not in file order; the reader wants file order.
    auto by_position = [](const Diagnostic& a, const Diagnostic& b) {
      return std::tie(a.line, a.column) < std::tie(b.line, b.column);
    };
    std::stable_sort(errors_.begin(), errors_.end(), by_position);
    std::stable_sort(warnings_.begin(), warnings_.end(), by_position);
    LoadResult result;
    if (errors_.empty()) result.config = std::move(config);
    result.errors = std::move(errors_);
    result.warnings = std::move(warnings_);
    return result;
  }

 private:
  Diagnostic make(const YAML::Mark& at, std::string message, bool warning) const {
    bool known = !at.is_null() && at.line >= 0;
    return Diagnostic{file_, known ? at.line + 1 : 0, known ? at.column + 1 : 0, std::move(message),
                      warning};
  }

  std::string file_;
  std::vector<Diagnostic> errors_;
  std::vector<Diagnostic> warnings_;
};

// Line 1, column 1: a default Mark is all zeros.
YAML::Mark start_of_file() {
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

// ---------------------------------------------------------------------------
// Top-level sections

constexpr std::string_view kTopKeys[] = {"log",     "cgroup_root", "gpu",
                                         "control", "metrics",     "programs"};
constexpr std::string_view kControlKeys[] = {"socket", "mode", "group"};
constexpr std::string_view kGpuKeys[] = {"nvml"};
constexpr std::string_view kMetricsKeys[] = {"listen"};
constexpr std::string_view kLogKeys[] = {"level", "format"};
constexpr std::string_view kProgramKeys[] = {"command",
                                             "env",
                                             "cwd",
                                             "user",
                                             "group",
                                             "instances",
                                             "threads",
                                             "allocator",
                                             "limits",
                                             "rlimits",
                                             "stop",
                                             "restart",
                                             "policies",
                                             "requests",
                                             "sample_interval",
                                             "max_concurrent_recycles",
                                             "max_concurrent_process_recycles",
                                             "min_uptime",
                                             "checkpoint",
                                             "timeline",
                                             "listen",
                                             "recycle"};
constexpr std::string_view kListenKeys[] = {"name", "address", "backlog", "mode", "owner", "group"};
constexpr std::string_view kRecycleKeys[] = {"mode", "ready_timeout", "ready_after", "ready_from"};
constexpr std::string_view kAllocatorKeys[] = {"arena_max", "trim_threshold", "mmap_threshold",
                                               "top_pad",   "preload",        "jemalloc_conf"};
constexpr std::string_view kRequestsKeys[] = {"pattern"};
constexpr std::string_view kCheckpointKeys[] = {"signal", "timeout", "on_timeout"};
constexpr std::string_view kTimelineKeys[] = {"dir", "max_size", "keep"};
constexpr std::string_view kLimitKeys[] = {"memory_max", "memory_high", "pids_max", "cpu"};
constexpr std::string_view kStopKeys[] = {"signal", "timeout"};
constexpr std::string_view kRestartKeys[] = {"mode", "backoff", "crash_loop"};
constexpr std::string_view kBackoffKeys[] = {"initial", "max", "reset_after"};
constexpr std::string_view kCrashLoopKeys[] = {"max", "within"};
constexpr std::string_view kRlimitRangeKeys[] = {"soft", "hard"};

constexpr unsigned kMaxInstances = 1024;
constexpr unsigned kMaxThreads = 4096;
constexpr uint64_t kMaxPids = 4'194'304;  // PID_MAX_LIMIT on 64-bit Linux
constexpr double kMaxCpus = 1024;
constexpr unsigned kMaxCrashLoop = 1'000'000;
constexpr Duration kMinSampleInterval = 10ms;
constexpr uint64_t kMinTimelineSize = 64 << 10;  // a header and some rows
constexpr uint64_t kMinMemoryLimit = 1 << 20;    // limits.memory_max/memory_high
constexpr unsigned kMaxTimelineKeep = 1000;
constexpr size_t kMaxListen = 64;           // sockets per program
constexpr unsigned kMaxBacklog = 1u << 20;  // listen() caps it at somaxconn anyway
constexpr size_t kMaxSocketPath = 107;      // sizeof(sockaddr_un::sun_path) - 1

void parse_log(const Field& f, LogConfig& log, Report& r) {
  auto map = read_map(f, r, kLogKeys);
  if (!map) return;
  if (auto* v = map->get("level")) set(log.level, read_choice(*v, kLogLevels, r));
  if (auto* v = map->get("format")) set(log.format, read_choice(*v, kLogFormats, r));
}

// strchr() would also find the terminating NUL, which YAML can spell "\0".
bool one_of(char c, const char* chars) {
  return c != '\0' && std::strchr(chars, c) != nullptr;
}

bool cgroup_char(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || one_of(c, "_.@/-");
}

// gpu: {nvml: PATH}; a bare `gpu:` turns GPU figures on with the default library.
void parse_gpu(const Field& f, const fs::path& base, std::optional<GpuConfig>& gpu, Report& r) {
  gpu.emplace();
  if (f.null()) return;
  auto map = read_map(f, r, kGpuKeys);
  if (!map) return;
  if (auto* v = map->get("nvml")) {
    auto text = read_scalar(*v, "a string", r);
    if (!text) return;
    if (text->empty()) return r.error(v->mark(), v->path + ": must not be empty");
    // A soname is searched like dlopen does; a relative path is the config's.
    if (text->find('/') == std::string::npos || fs::path(*text).is_absolute())
      gpu->nvml = *text;
    else
      gpu->nvml = (base / *text).lexically_normal().string();
  }
}

// control: {socket: PATH, mode: 0660, group: NAME}
void parse_control(const Field& f, const fs::path& base, const HostLookup& host,
                   ControlConfig& control, Report& r) {
  if (f.null()) return;
  auto map = read_map(f, r, kControlKeys);
  if (!map) return;
  if (auto* v = map->get("socket")) {
    auto text = read_scalar(*v, "a path", r);
    if (text && text->empty()) {
      r.error(v->mark(), v->path + ": must not be empty");
    } else if (text && text->find('\0') != std::string::npos) {
      r.error(v->mark(), v->path + ": must not contain a NUL byte");
    } else if (text) {
      control.socket =
          fs::path(*text).is_absolute() ? *text : (base / *text).lexically_normal().string();
      // Anyone who may write to the directory may bind the name first, and
      // recycler's clients would talk to them (control/server.h).
      std::string dir = fs::path(control.socket).parent_path().string();
      auto mode = host.directory_mode(dir.empty() ? "." : dir);
      if (mode && (*mode & (S_IWGRP | S_IWOTH)))
        r.error(v->mark(), fmt::format("{}: its directory {} is writable by other users (mode "
                                       "{:04o}): any of them could bind {} first and answer "
                                       "recycler's clients; use a directory only recycler's user "
                                       "can write to (the default: /run/recycler)",
                                       v->path, dir, *mode, quote(control.socket)));
    }
  }
  if (auto* v = map->get("mode")) {
    // Octal, as chmod takes it: 0600, 660.
    auto text = read_scalar(*v, "an octal mode such as 0600", r);
    if (text) {
      bool octal = !text->empty() && text->size() <= 4 &&
                   text->find_first_not_of("01234567") == std::string::npos;
      mode_t mode = octal ? static_cast<mode_t>(std::stoul(*text, nullptr, 8)) : 0;
      if (!octal)
        r.error(v->mark(), v->path + ": expected an octal mode such as 0600, got " + quote(*text));
      else if (mode & 0117)
        r.error(v->mark(), v->path + ": " + quote(*text) +
                               " would let others connect or mark the socket executable; use "
                               "0600, or 0660 with a group");
      else if ((mode & 0600) != 0600)
        r.error(v->mark(), v->path + ": " + quote(*text) + " must give its owner read and write");
      else
        control.mode = mode;
    }
  }
  if (auto* v = map->get("group")) {
    auto name = read_scalar(*v, "a group name", r);
    auto gid = name ? host.group(*name) : std::nullopt;
    if (name && !gid) r.error(v->mark(), v->path + ": unknown group " + quote(*name));
    if (gid) {
      control.group = *name;
      control.gid = *gid;
    }
  }
}

// metrics: {listen: HOST:PORT}; a bare `metrics:` listens on the default.
void parse_metrics(const Field& f, std::optional<MetricsConfig>& metrics, Report& r) {
  metrics.emplace();
  if (f.null()) return;
  auto map = read_map(f, r, kMetricsKeys);
  if (!map) return;
  if (auto* v = map->get("listen")) {
    auto text = read_scalar(*v, "HOST:PORT", r);
    if (!text) return;
    std::string why;
    if (auto address = parse_listen_address(*text, &why))
      metrics->listen = *address;
    else
      r.error(v->mark(), v->path + ": " + why);
  }
}

// A policy that reads gpu or gpu_total needs NVML: said at its name, at check
// time, not when the first sample comes.
void check_nvml(const Config& config, const std::vector<ProgramSpec>& specs, const HostLookup& host,
                Report& r) {
  for (size_t i = 0; i < specs.size(); ++i)
    for (const PolicyConfig& p : config.programs[i].policies) {
      if (!(p.policy->needs() & policies::kNeedsGpu)) continue;
      const std::string library = config.nvml_library().value_or(GpuConfig{}.nvml);
      auto why = host.nvml_error(library);
      if (!why) return;
      for (const PolicySpec& spec : specs[i].policies)
        if (spec.source == p.source)
          return r.error(spec.name_mark,
                         spec.path + ": reads GPU memory through NVML, which cannot be used: " +
                             *why + " (install the NVIDIA driver, or set gpu.nvml to the path of " +
                             "libnvidia-ml.so.1)");
      return;
    }
}

void parse_cgroup_root(const Field& f, std::string& root, Report& r) {
  auto text = read_scalar(f, "a string", r);
  if (!text) return;
  if (std::string why = cgroup_root_problem(*text); !why.empty())
    return r.error(f.mark(), f.path + ": " + why);
  root = *text;
}

// ---------------------------------------------------------------------------
// Program sections

void parse_command(const Field& f, ProgramConfig& p, Report& r) {
  if (f.value.IsScalar()) {
    if (f.value.Scalar().empty()) return r.error(f.mark(), f.path + " must not be empty");
    p.command = {"/bin/sh", "-c", f.value.Scalar()};
    p.shell = true;
    return;
  }
  if (!f.value.IsSequence()) return r.error(f.mark(), f.path + " must be a string or a list");
  if (f.value.size() == 0) return r.error(f.mark(), f.path + " must not be empty");
  for (size_t i = 0; i < f.value.size(); ++i) {
    Field arg = f.item(i, f.value[i]);
    auto text = read_scalar(arg, "a string", r);
    if (text && i == 0 && text->empty()) r.error(arg.mark(), arg.path + " must not be empty");
    if (text) p.command.push_back(*text);
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
void parse_cwd(const Field& f, const fs::path& base, const HostLookup& host, ProgramConfig& p,
               Report& r) {
  auto text = read_scalar(f, "a string", r);
  if (!text) return;
  if (text->empty()) return r.error(f.mark(), f.path + " must not be empty");
  std::error_code ec;
  fs::path dir = fs::absolute(base / *text, ec).lexically_normal();
  if (!dir.has_filename() && dir != dir.root_path()) dir = dir.parent_path();
  auto type = host.file_type(dir.string());
  if (type == HostLookup::FileType::Missing) {
    r.error(f.mark(), f.path + ": " + quote(dir.string()) + " does not exist");
  } else if (type != HostLookup::FileType::Directory) {
    r.error(f.mark(), f.path + ": " + quote(dir.string()) + " is not a directory");
  }
  p.cwd = dir.string();
}

// Without root, setuid()/setgid() can only keep the ids the recycler already
// has; catching that here beats every spawn failing later.
void parse_identity(const MapView& map, const HostLookup& host, ProgramConfig& p, Report& r) {
  bool root = host.euid() == 0;
  if (const Field* f = map.get("user")) {
    auto name = read_scalar(*f, "a string", r);
    auto ids = name ? host.user(*name) : std::nullopt;
    if (name && !ids) r.error(f->mark(), f->path + ": unknown user " + quote(*name));
    if (ids && !root && ids->uid != host.euid())
      r.error(f->mark(), f->path + ": running programs as another user needs root");
    if (ids) {
      p.user = *name;
      p.uid = ids->uid;
      p.gid = ids->gid;
    }
  }
  if (const Field* f = map.get("group")) {
    auto name = read_scalar(*f, "a string", r);
    auto gid = name ? host.group(*name) : std::nullopt;
    if (name && !gid) r.error(f->mark(), f->path + ": unknown group " + quote(*name));
    if (gid && !root && *gid != host.egid())
      r.error(f->mark(), f->path + ": running programs as another group needs root");
    if (gid) {
      p.group = *name;
      p.gid = *gid;
    }
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
  if (auto* v = map->get("pids_max")) limits.pids_max = read_integer(*v, 1, kMaxPids, r);
  if (auto* v = map->get("cpu")) {
    if (auto text = read_scalar(*v, "a number", r)) {
      std::string expected = "expected a number of CPUs above 0 and at most 1024";
      // Plain decimals only: strtod would also take "inf", "nan" and hex floats.
      bool plain = !text->empty() && text->find_first_not_of("0123456789.") == std::string::npos &&
                   std::count(text->begin(), text->end(), '.') <= 1 && text->front() != '.' &&
                   text->back() != '.';
      double cpus = plain ? std::strtod(text->c_str(), nullptr) : 0;
      if (!plain) {
        r.error(v->mark(), v->path + ": invalid value " + quote(*text) + "; " + expected);
      } else if (cpus <= 0 || cpus > kMaxCpus) {
        r.error(v->mark(), v->path + ": " + *text + " is out of range; " + expected);
      } else {
        limits.cpu = cpus;
      }
    }
  }
}

// ---------------------------------------------------------------------------
// allocator: supervisor/config/allocator.h says what each key sets.

bool control_char(char c) {
  return static_cast<unsigned char>(c) < 0x20 || c == 0x7f;
}

// A preloaded library runs in the worker, often as root: one that another
// user could have written (or replaced, through a directory on its way) is
// refused, as gpu.nvml is.
bool trusted_preload(const Field& f, const std::string& path, const HostLookup& host, Report& r) {
  auto why = host.untrusted_library(path);
  if (why) r.error(f.mark(), f.path + ": " + *why);
  return !why;
}

// A missing library is an error, not a warning as a missing command is: ld.so
// only prints "cannot be preloaded ... ignored" and runs the program on glibc's
// malloc, so the setting would quietly do nothing.
void parse_preload(const Field& f, const fs::path& base, const HostLookup& host, AllocatorConfig& a,
                   Report& r) {
  auto text = read_scalar(f, "a string", r);
  if (!text) return;
  if (text->empty()) return r.error(f.mark(), f.path + " must not be empty");
  if (text->find('/') == std::string::npos) {
    const PreloadLibrary* library = find_preload_library(*text);
    if (!library) {
      std::vector<std::string> names;
      for (const PreloadLibrary& l : kPreloadLibraries) names.emplace_back(l.name);
      std::string hint = suggest(*text, names);
      return r.error(f.mark(), f.path + ": unknown allocator " + quote(*text) +
                                   (hint.empty() ? "" : "; did you mean " + quote(hint) + "?") +
                                   " (expected jemalloc, tcmalloc or the path of a library)");
    }
    std::vector<std::string> candidates = preload_candidates(*library);
    for (const std::string& path : candidates) {
      if (host.file_type(path) == HostLookup::FileType::Regular) {
        if (!trusted_preload(f, path, host, r)) return;
        a.preload = *text;
        a.preload_path = path;
        return;
      }
    }
    std::string looked;
    for (const std::string& path : candidates) looked += (looked.empty() ? "" : ", ") + path;
    return r.error(f.mark(), f.path + ": " + *text + " is not installed (no " + looked +
                                 "); on Debian or Ubuntu: apt-get install " +
                                 std::string(library->package));
  }
  // ld.so splits LD_PRELOAD at spaces and colons, with no way to escape them.
  auto bad = std::find_if(text->begin(), text->end(),
                          [](char c) { return c == ' ' || c == ':' || control_char(c); });
  if (bad != text->end())
    return r.error(f.mark(), f.path + ": " + quote(*text) +
                                 " cannot be preloaded: LD_PRELOAD cannot hold a path with "
                                 "spaces, colons or control characters");
  std::error_code ec;
  std::string path = fs::absolute(base / *text, ec).lexically_normal().string();
  auto type = host.file_type(path);
  if (type == HostLookup::FileType::Missing)
    return r.error(f.mark(), f.path + ": " + quote(path) + " does not exist");
  if (type != HostLookup::FileType::Regular)
    return r.error(f.mark(), f.path + ": " + quote(path) + " is not a regular file");
  if (!trusted_preload(f, path, host, r)) return;
  a.preload = *text;
  a.preload_path = path;
}

// jemalloc reads MALLOC_CONF as NAME:VALUE pairs separated by commas and
// only complains (on the worker's stderr) when the worker starts; the shape
// is checked here, the names are jemalloc's business.
void parse_jemalloc_conf(const Field& f, AllocatorConfig& a, Report& r) {
  auto text = read_scalar(f, "a string", r);
  if (!text) return;
  std::string expected =
      "expected NAME:VALUE pairs separated by commas, e.g. "
      "\"background_thread:true,dirty_decay_ms:5000\"";
  if (text->empty()) return r.error(f.mark(), f.path + " must not be empty; " + expected);
  auto name_char = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; };
  std::string_view rest = *text;
  while (true) {
    size_t comma = rest.find(',');
    std::string_view pair = rest.substr(0, comma);
    size_t colon = pair.find(':');
    bool valid = colon != std::string_view::npos && colon > 0 && colon + 1 < pair.size() &&
                 std::all_of(pair.begin(), pair.begin() + colon, name_char) &&
                 std::none_of(pair.begin(), pair.end(), control_char);
    if (!valid)
      return r.error(f.mark(), f.path + ": invalid option " + quote(pair) + " in " + quote(*text) +
                                   "; " + expected);
    if (comma == std::string_view::npos) break;
    rest.remove_prefix(comma + 1);
  }
  a.jemalloc_conf = *text;
}

// Settings that cannot do what they say with this preload: a warning, since
// the program still runs.
void check_allocator(const Field& f, const MapView& map, const ProgramConfig& p, Report& r) {
  const AllocatorConfig& a = p.allocator;
  const Field* preload = map.get("preload");
  if (!preload || a.preload_path.empty()) return;
  if (find_preload_library(a.preload)) {
    std::vector<std::string> unused;
    for (const GlibcTunable& t : kGlibcTunables)
      if (a.*t.value) unused.emplace_back(t.key);
    if (!unused.empty()) {
      std::string keys;
      for (size_t i = 0; i < unused.size(); ++i)
        keys += (i == 0 ? "" : i + 1 == unused.size() ? " and " : ", ") + unused[i];
      r.warning(preload->mark(), f.path + ": " + keys +
                                     (unused.size() == 1 ? " only tunes" : " only tune") +
                                     " glibc's malloc, which " + a.preload + " replaces");
    }
  }
  if (a.jemalloc_conf && a.preload == "tcmalloc")
    r.warning(map.get("jemalloc_conf")->mark(),
              f.path + ".jemalloc_conf: only jemalloc reads MALLOC_CONF, and preload is tcmalloc");
  // The user's own LD_PRELOAD comes first (allocator.h): a malloc in it wins.
  if (auto it = p.env.find("LD_PRELOAD"); it != p.env.end()) {
    std::string_view list = it->second;
    size_t start = 0;
    while (start < list.size()) {
      size_t end = std::min(list.find_first_of(": ", start), list.size());
      std::string_view library = list.substr(start, end - start);
      std::string_view file = library.substr(library.rfind('/') + 1);
      if (library != a.preload_path && file.find("malloc") != std::string_view::npos)
        r.warning(preload->mark(), f.path + ".preload: env.LD_PRELOAD already preloads " +
                                       quote(library) + ", which comes first and keeps malloc");
      start = end + 1;
    }
  }
}

void parse_allocator(const Field& f, const fs::path& base, const HostLookup& host, ProgramConfig& p,
                     Report& r) {
  auto map = read_map(f, r, kAllocatorKeys);
  if (!map) return;
  AllocatorConfig& a = p.allocator;
  if (auto* v = map->get("arena_max")) a.arena_max = read_integer(*v, 1, kMaxArenas, r);
  if (auto* v = map->get("trim_threshold")) a.trim_threshold = read_size(*v, r);
  if (auto* v = map->get("mmap_threshold")) {
    auto size = read_size(*v, r);
    if (size && *size > kMaxMmapThreshold)
      r.error(v->mark(), v->path + ": " + format_size(*size) + " is above glibc's maximum of " +
                             format_size(kMaxMmapThreshold) +
                             ", which it would ignore without a word");
    else
      a.mmap_threshold = size;
  }
  if (auto* v = map->get("top_pad")) a.top_pad = read_size(*v, r);
  if (auto* v = map->get("preload")) parse_preload(*v, base, host, a, r);
  if (auto* v = map->get("jemalloc_conf")) parse_jemalloc_conf(*v, a, r);
  check_allocator(f, *map, p, r);
}

struct RlimitKind {
  std::string_view name;
  int resource;
  bool size;  // a size ("64MiB") rather than a count
};

constexpr RlimitKind kRlimits[] = {
    {"nofile", RLIMIT_NOFILE, false},  {"nproc", RLIMIT_NPROC, false}, {"core", RLIMIT_CORE, true},
    {"memlock", RLIMIT_MEMLOCK, true}, {"stack", RLIMIT_STACK, true},  {"as", RLIMIT_AS, true},
    {"fsize", RLIMIT_FSIZE, true}};

// The rlimits' names, as a table of keys like the others.
constexpr auto kRlimitKeys = [] {
  std::array<std::string_view, std::size(kRlimits)> names;
  for (size_t i = 0; i < names.size(); ++i) names[i] = kRlimits[i].name;
  return names;
}();

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
  if (auto* v = map->get("within")) {
    auto within = read_duration(*v, r);
    if (within && *within == Duration::zero())
      r.error(v->mark(), v->path + " must be greater than 0");
    else
      set(crash_loop.within, within);
  }
}

void parse_restart(const Field& f, RestartConfig& restart, Report& r) {
  auto map = read_map(f, r, kRestartKeys);
  if (!map) return;
  if (auto* v = map->get("mode")) set(restart.mode, read_choice(*v, kRestartModes, r));
  if (auto* v = map->find("backoff")) parse_backoff(*v, restart.backoff, r);
  if (auto* v = map->find("crash_loop")) parse_crash_loop(*v, restart.crash_loop, r);
}

// ---------------------------------------------------------------------------
// Policies

// Re-emits a node in one fixed form: flow style, map keys sorted, scalars
// as plain text. Block vs flow, quoting and key order then make no difference
// to whether a reload sees the policy as changed.
void emit_canonical(YAML::Emitter& out, const YAML::Node& node) {
  switch (node.Type()) {
    case YAML::NodeType::Map: {
      // Sort positions, not nodes (see Field on assigning nodes).
      std::vector<std::pair<YAML::Node, YAML::Node>> entries;
      std::vector<std::pair<std::string, size_t>> order;
      for (const auto& entry : node) {
        YAML::Emitter key;
        emit_canonical(key, entry.first);
        order.emplace_back(key.c_str(), entries.size());
        entries.emplace_back(entry.first, entry.second);
      }
      std::stable_sort(order.begin(), order.end());
      out << YAML::BeginMap;
      for (const auto& [text, index] : order) {
        out << YAML::Key;
        emit_canonical(out, entries[index].first);
        out << YAML::Value;
        emit_canonical(out, entries[index].second);
      }
      out << YAML::EndMap;
      return;
    }
    case YAML::NodeType::Sequence:
      out << YAML::BeginSeq;
      for (const auto& item : node) emit_canonical(out, item);
      out << YAML::EndSeq;
      return;
    case YAML::NodeType::Scalar:
      out << node.Scalar();
      return;
    default:
      out << YAML::Null;
  }
}

std::string canonical(const YAML::Node& node) {
  YAML::Emitter out;
  out.SetMapFormat(YAML::Flow);
  out.SetSeqFormat(YAML::Flow);
  emit_canonical(out, node);
  return out.c_str();
}

// Policies read their own arguments with yaml-cpp lookups, which silently take
// the first of two equal keys; catch those here, at every depth.
void check_duplicate_keys(const Field& f, Report& r) {
  if (f.value.IsMap()) {
    if (auto map = read_map(f, r, std::nullopt))
      for (const auto& entry : map->entries()) check_duplicate_keys(entry.second, r);
  } else if (f.value.IsSequence()) {
    for (size_t i = 0; i < f.value.size(); ++i) check_duplicate_keys(f.item(i, f.value[i]), r);
  }
}

std::string unknown_policy(const std::string& name) {
  auto names = policies::Registry::instance().names();
  std::string message = "unknown policy " + quote(name);
  if (auto hint = suggest(name, names); !hint.empty())
    return message + "; did you mean " + quote(hint) + "?";
  std::string list;
  for (const auto& n : names) list += (list.empty() ? "" : ", ") + n;
  return message + " (available: " + list + ")";
}

// Checks an entry's shape and name; its settings are the factory's business,
// at compile().
std::optional<PolicySpec> parse_policy(const Field& item, Report& r) {
  if (!item.value.IsMap() || item.value.size() != 1) {
    r.error(item.mark(), item.path + " must be a map with a single key, the policy name");
    return std::nullopt;
  }
  auto entry = *item.value.begin();
  if (!entry.first.IsScalar()) {
    r.error(entry.first.Mark(), item.path + ": the policy name must be a string");
    return std::nullopt;
  }
  const std::string name = entry.first.Scalar();
  Field args = item.child(name, entry.second, entry.first.Mark());
  if (!policies::Registry::instance().find(name)) {
    r.error(entry.first.Mark(), item.path + ": " + unknown_policy(name));
    return std::nullopt;
  }
  // The factory reports duplicates among the policy's own keys (policies/args.h);
  // nested maps are checked here.
  if (args.value.IsMap())
    for (const auto& arg : args.value)
      if (arg.first.IsScalar())
        check_duplicate_keys(args.child(arg.first.Scalar(), arg.second, arg.first.Mark()), r);
  // An empty node carries the mark of the next token, possibly lines below;
  // a fresh null node has none, so its errors land on the policy name.
  return PolicySpec{name, args.null() ? YAML::Node() : args.value, args.path, args.key_mark,
                    canonical(item.value)};
}

void parse_policies(const Field& f, ProgramSpec& spec, Report& r) {
  if (f.null()) return;
  if (!f.value.IsSequence()) return r.error(f.mark(), f.path + " must be a list");
  for (size_t i = 0; i < f.value.size(); ++i)
    if (auto policy = parse_policy(f.item(i, f.value[i]), r))
      spec.policies.push_back(std::move(*policy));
}

void parse_requests(const Field& f, ProgramSpec& spec, Report& r) {
  auto map = read_map(f, r, kRequestsKeys);
  if (!map) return;
  const Field* v = map->get("pattern");
  if (!v) return r.error(f.mark(), f.path + ".pattern is required");
  auto text = read_scalar(*v, "a string", r);
  if (!text) return;
  spec.requests = RequestsSpec{*text, v->path, v->mark()};
}

void parse_checkpoint(const Field& f, CheckpointConfig& checkpoint, Report& r) {
  auto map = read_map(f, r, kCheckpointKeys);
  if (!map) return;
  if (auto* v = map->get("signal")) set(checkpoint.signal, read_signal(*v, r));
  if (auto* v = map->get("timeout")) {
    auto d = read_duration(*v, r);
    if (d && *d == Duration::zero())
      r.error(v->mark(), v->path + " must be greater than 0");
    else
      set(checkpoint.timeout, d);
  }
  if (auto* v = map->get("on_timeout"))
    set(checkpoint.on_timeout, read_choice(*v, kCheckpointTimeouts, r));
}

// The directory is created when the program starts (it may be on a volume
// mounted later); relative paths are relative to the config file, like cwd.
void parse_timeline(const Field& f, const fs::path& base, ProgramConfig& p, Report& r) {
  auto map = read_map(f, r, kTimelineKeys);
  if (!map) return;
  TimelineConfig timeline;
  const Field* dir = map->get("dir");
  if (!dir) return r.error(f.mark(), f.path + ".dir is required");
  auto text = read_scalar(*dir, "a string", r);
  if (!text) return;
  if (text->empty()) return r.error(dir->mark(), dir->path + " must not be empty");
  std::error_code ec;
  timeline.dir = fs::absolute(base / *text, ec).lexically_normal().string();
  if (auto* v = map->get("max_size")) {
    if (auto size = read_size(*v, r); size && *size < kMinTimelineSize)
      r.error(v->mark(), v->path + ": " + format_size(*size) + " is too small; at least " +
                             format_size(kMinTimelineSize));
    else
      set(timeline.max_size, size);
  }
  if (auto* v = map->get("keep")) set(timeline.keep, read_integer(*v, 0, kMaxTimelineKeep, r));
  p.timeline = std::move(timeline);
}

// listen: ["127.0.0.1:8000", "unix:/run/app.sock",
//          {name: http, address: "[::1]:8000", backlog: 1024},
//          {address: "unix:app.sock", mode: 0660, owner: app, group: www-data}]
// A relative unix path is relative to the config file, like cwd.
void parse_listen_entry(const Field& f, const fs::path& base, const HostLookup& host,
                        ProgramConfig& p, Report& r) {
  ListenSocket socket;
  socket.name = p.name;
  const Field* address = &f;
  std::optional<MapView> map;
  if (f.value.IsMap()) {
    map = read_map(f, r, kListenKeys);
    if (!map) return;
    address = map->get("address");
    if (!address) return r.error(f.mark(), f.path + ".address is required");
  }
  auto text = read_scalar(*address, "HOST:PORT, [IPV6]:PORT or unix:/path", r);
  if (!text) return;
  bool is_unix = text->rfind("unix:", 0) == 0;
  if (is_unix) {
    std::string path = text->substr(5);
    if (path.empty() || path.find('\0') != std::string::npos)
      return r.error(address->mark(), address->path + ": expected unix:/path, got " + quote(*text));
    std::error_code ec;
    socket.path = fs::absolute(base / path, ec).lexically_normal().string();
    if (socket.path.size() > kMaxSocketPath)
      return r.error(address->mark(), address->path + ": " + quote(socket.path) + " is " +
                                          std::to_string(socket.path.size()) +
                                          " bytes long; a unix socket's path has at most " +
                                          std::to_string(kMaxSocketPath));
  } else {
    std::string why;
    socket.tcp = parse_listen_address(*text, &why);
    if (!socket.tcp)
      return r.error(address->mark(), address->path + ": " + why + " (or unix:/path)");
    if (socket.tcp->port == 0)
      return r.error(address->mark(),
                     address->path + ": port 0 would give every start another port; name one");
  }
  if (map) {
    if (auto* v = map->get("name")) {
      auto name = read_scalar(*v, "a name", r);
      // LISTEN_FDNAMES is colon-separated; systemd allows at most 255 characters.
      if (name && (name->empty() || name->size() > 255 ||
                   name->find_first_not_of("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
                                           "0123456789_.-") != std::string::npos))
        r.error(v->mark(), v->path + ": " + quote(*name) +
                               " is not a valid name: use 1 to 255 letters, digits, _ . or -");
      else if (name)
        socket.name = *name;
    }
    if (auto* v = map->get("backlog")) set(socket.backlog, read_integer(*v, 1, kMaxBacklog, r));
    for (const char* key : {"mode", "owner", "group"})
      if (const Field* v = map->get(key); v && !is_unix)
        r.error(v->mark(), v->path + ": only a unix socket has a " + key);
    if (auto* v = map->get("mode"); v && is_unix) {
      auto mode = read_scalar(*v, "an octal mode such as 0660", r);
      bool octal = mode && !mode->empty() && mode->size() <= 4 &&
                   mode->find_first_not_of("01234567") == std::string::npos;
      if (mode && !octal)
        r.error(v->mark(), v->path + ": expected an octal mode such as 0660, got " + quote(*mode));
      else if (mode)
        socket.mode = static_cast<mode_t>(std::stoul(*mode, nullptr, 8));
    }
    if (auto* v = map->get("owner"); v && is_unix) {
      auto name = read_scalar(*v, "a user name", r);
      auto ids = name ? host.user(*name) : std::nullopt;
      if (name && !ids) r.error(v->mark(), v->path + ": unknown user " + quote(*name));
      if (ids) {
        socket.owner = *name;
        socket.uid = ids->uid;
      }
    }
    if (auto* v = map->get("group"); v && is_unix) {
      auto name = read_scalar(*v, "a group name", r);
      auto gid = name ? host.group(*name) : std::nullopt;
      if (name && !gid) r.error(v->mark(), v->path + ": unknown group " + quote(*name));
      if (gid) {
        socket.group = *name;
        socket.gid = *gid;
      }
    }
  }
  if (is_unix && !socket.gid) socket.gid = p.gid;  // the program's group may connect
  for (const ListenSocket& other : p.listen) {
    if (other.same_endpoint(socket))
      return r.error(address->mark(), address->path + ": " + socket.address() + " is listed twice");
  }
  p.listen.push_back(std::move(socket));
}

void parse_listen(const Field& f, const fs::path& base, const HostLookup& host, ProgramConfig& p,
                  Report& r) {
  if (f.null()) return;
  if (f.value.IsScalar() || f.value.IsMap()) return parse_listen_entry(f, base, host, p, r);
  if (!f.value.IsSequence()) return r.error(f.mark(), f.path + " must be a list of addresses");
  if (f.value.size() > kMaxListen)
    return r.error(f.mark(), f.path + ": at most " + std::to_string(kMaxListen) + " sockets");
  for (size_t i = 0; i < f.value.size(); ++i)
    parse_listen_entry(f.item(i, f.value[i]), base, host, p, r);
}

// recycle: {mode: surge, ready_timeout: 60s, ready_from: main|child}
//       or {mode: surge, ready_after: 5s} for a program that never sends READY=1
void parse_recycle(const Field& f, RecycleConfig& recycle, Report& r) {
  auto map = read_map(f, r, kRecycleKeys);
  if (!map) return;
  if (auto* v = map->get("mode")) set(recycle.mode, read_choice(*v, kRecycleModes, r));
  for (const char* key : {"ready_timeout", "ready_after"}) {
    const Field* v = map->get(key);
    if (!v) continue;
    auto d = read_duration(*v, r);
    if (d && *d == Duration::zero())
      r.error(v->mark(), v->path + " must be greater than 0");
    else if (d && std::string_view(key) == "ready_timeout")
      recycle.ready_timeout = *d;
    else if (d)
      recycle.ready_after = *d;
  }
  if (auto* v = map->get("ready_from")) {
    auto from = read_scalar(*v, "main or child", r);
    if (from && *from != "main" && *from != "child")
      r.error(v->mark(), v->path + ": expected main or child, got " + quote(*from));
    else if (from)
      recycle.ready_from_child = *from == "child";
  }
  if (map->get("ready_after") && map->get("ready_from"))
    r.warning(map->get("ready_from")->mark(),
              f.path + ".ready_from does nothing with ready_after: readiness is a delay then");
  if (recycle.mode != RecycleMode::Surge)
    for (const char* key : {"ready_timeout", "ready_after", "ready_from"})
      if (const Field* v = map->get(key))
        r.warning(v->mark(), v->path + " applies to mode: surge only");
}

// A surge runs two generations of a slot at once: both must fit.
void check_surge(const ProgramConfig& p, const MapView& map, const HostLookup& host, Report& r) {
  if (p.recycle.mode != RecycleMode::Surge) return;
  const Field* recycle = map.get("recycle");
  if (!recycle) return;
  if (p.listen.empty())
    r.warning(recycle->mark(),
              recycle->path +
                  ".mode: surge without listen: the next generation starts while the "
                  "old one still holds its port, so it must bind with SO_REUSEPORT; "
                  "with listen: both serve the same sockets");
  if (!p.limits.memory_max) return;
  auto available = host.memory_available();
  uint64_t needed = *p.limits.memory_max * (p.instances + 1ull);
  if (available && needed > *available)
    r.warning(recycle->mark(),
              recycle->path + ".mode: surge needs room for one more generation: memory_max " +
                  format_size(*p.limits.memory_max) + " x (instances " +
                  std::to_string(p.instances) + " + 1) = " + format_size(needed) + " exceeds the " +
                  format_size(*available) +
                  " this host (or recycler's cgroup) has; a surge may end in an OOM kill. "
                  "Prefer mode: restart, or scope: process recycling of a pre-fork server");
}

// ---------------------------------------------------------------------------
// Executable check: a warning only, since the program may be installed by the
// time it starts, or PATH may differ on the machine the config is meant for.

void check_executable(const ProgramConfig& p, const Field& command, const HostLookup& host,
                      Report& r) {
  if (p.shell || p.command.empty() || p.command[0].empty()) return;
  const std::string& argv0 = p.command[0];
  YAML::Mark at = command.value[0].Mark();
  if (argv0.find('/') != std::string::npos) {
    fs::path file = argv0;
    // exec happens after the chdir into cwd.
    if (file.is_relative() && !p.cwd.empty()) file = fs::path(p.cwd) / file;
    if (host.file_type(file.string()) == HostLookup::FileType::Missing)
      r.warning(at, command.path + ": " + quote(argv0) + " does not exist");
    else if (!host.executable(file.string()))
      r.warning(at, command.path + ": " + quote(argv0) + " is not an executable file");
    return;
  }
  std::string path;
  if (auto it = p.env.find("PATH"); it != p.env.end()) {
    path = it->second;
  } else if (auto own = host.path_env()) {
    path = *own;
  } else {
    path = "/bin:/usr/bin";  // what execvp() falls back to
  }
  std::string_view rest = path;
  while (true) {
    size_t colon = rest.find(':');
    std::string_view dir = rest.substr(0, colon);
    if (host.executable((fs::path(dir.empty() ? "." : dir) / argv0).string())) return;
    if (colon == std::string_view::npos) break;
    rest.remove_prefix(colon + 1);
  }
  r.warning(at, command.path + ": " + quote(argv0) + " was not found on PATH");
}

ProgramConfig parse_program(const std::string& name, const Field& f, const fs::path& base,
                            const HostLookup& host, ProgramSpec& spec, Report& r) {
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
  if (auto* v = map->find("env")) parse_env(*v, p, r);
  if (auto* v = map->get("cwd")) parse_cwd(*v, base, host, p, r);
  parse_identity(*map, host, p, r);
  if (auto* v = map->get("instances")) set(p.instances, read_integer(*v, 1, kMaxInstances, r));
  if (auto* v = map->get("threads")) set(p.threads, read_integer(*v, 1, kMaxThreads, r));
  if (auto* v = map->find("allocator")) parse_allocator(*v, base, host, p, r);
  if (auto* v = map->find("limits")) parse_limits(*v, p.limits, r);
  if (auto* v = map->find("rlimits")) parse_rlimits(*v, p, r);
  if (auto* v = map->find("stop")) parse_stop(*v, p.stop, r);
  if (auto* v = map->find("restart")) parse_restart(*v, p.restart, r);
  if (auto* v = map->find("policies")) parse_policies(*v, spec, r);
  if (auto* v = map->find("requests")) parse_requests(*v, spec, r);
  if (auto* v = map->get("sample_interval")) {
    if (auto d = read_duration(*v, r); d && *d < kMinSampleInterval)
      r.error(v->mark(), v->path + ": " + format_duration(*d) + " is too short; at least " +
                             format_duration(kMinSampleInterval));
    else
      set(p.sample_interval, d);
  }
  if (auto* v = map->get("max_concurrent_recycles"))
    set(p.max_concurrent_recycles, read_integer(*v, 1, kMaxInstances, r));
  if (auto* v = map->get("max_concurrent_process_recycles"))
    set(p.max_concurrent_process_recycles, read_integer(*v, 0, 65536, r));
  if (auto* v = map->get("min_uptime")) set(p.min_uptime, read_duration(*v, r));
  if (auto* v = map->find("checkpoint")) parse_checkpoint(*v, p.checkpoint, r);
  if (auto* v = map->find("timeline")) parse_timeline(*v, base, p, r);
  if (auto* v = map->find("listen")) parse_listen(*v, base, host, p, r);
  if (auto* v = map->find("recycle")) parse_recycle(*v, p.recycle, r);
  check_surge(p, *map, host, r);
  if (auto* v = map->get("command"); v && !v->value.IsScalar()) check_executable(p, *v, host, r);
  return p;
}

void parse_programs(const Field* f, const YAML::Mark& root, Config& config, const fs::path& base,
                    const HostLookup& host, std::vector<ProgramSpec>& specs, Report& r) {
  if (!f) return r.error(root, "programs is required");
  auto map = read_map(*f, r, std::nullopt);
  if (!map) return;
  if (map->entries().empty()) return r.error(f->mark(), "programs must not be empty");
  for (const auto& [name, program] : map->entries()) {
    config.programs.push_back(parse_program(name, program, base, host, specs.emplace_back(), r));
    // One socket, one program: the second bind would fail at start-up.
    const ProgramConfig& added = config.programs.back();
    for (const ListenSocket& socket : added.listen)
      for (size_t i = 0; i + 1 < config.programs.size(); ++i)
        for (const ListenSocket& other : config.programs[i].listen)
          if (other.same_endpoint(socket))
            r.error(program.key_mark, "programs." + name + ".listen: " + socket.address() +
                                          " is already a socket of " + config.programs[i].name);
  }
}

// Where each YAML document of a text starts and where its content does, for
// at most `limit` documents. yaml-cpp 0.7's LoadAll never returns on a stray
// ',' after a document (it yields null documents at that place forever):
// events, counted, end.
class DocumentStarts final : public YAML::EventHandler {
 public:
  struct Document {
    YAML::Mark start;
    YAML::Mark content;
  };
  static std::vector<Document> of(const std::string& text, size_t limit) {
    std::istringstream in(text);
    YAML::Parser parser(in);
    DocumentStarts starts;
    while (starts.documents_.size() < limit && parser.HandleNextDocument(starts)) {
    }
    return std::move(starts.documents_);
  }

  void OnDocumentStart(const YAML::Mark& mark) override {
    documents_.push_back({mark, mark});
    first_ = true;
  }
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark& mark, YAML::anchor_t) override { content(mark); }
  void OnAlias(const YAML::Mark& mark, YAML::anchor_t) override { content(mark); }
  void OnScalar(const YAML::Mark& mark, const std::string&, YAML::anchor_t,
                const std::string&) override {
    content(mark);
  }
  void OnSequenceStart(const YAML::Mark& mark, const std::string&, YAML::anchor_t,
                       YAML::EmitterStyle::value) override {
    content(mark);
  }
  void OnSequenceEnd() override {}
  void OnMapStart(const YAML::Mark& mark, const std::string&, YAML::anchor_t,
                  YAML::EmitterStyle::value) override {
    content(mark);
  }
  void OnMapEnd() override {}

 private:
  void content(const YAML::Mark& mark) {
    if (std::exchange(first_, false) && !documents_.empty()) documents_.back().content = mark;
  }

  std::vector<Document> documents_;
  bool first_ = false;
};

// The first tab among the leading whitespace of a line, up to line `last`
// (0-based; the line a parse error was found on).
std::optional<YAML::Mark> tab_in_indentation(std::string_view text, int last) {
  int line = 0;
  for (size_t start = 0; start < text.size() && line <= last; ++line) {
    size_t end = std::min(text.find('\n', start), text.size());
    for (size_t i = start; i < end && (text[i] == ' ' || text[i] == '\t'); ++i) {
      if (text[i] != '\t') continue;
      YAML::Mark mark;
      mark.pos = static_cast<int>(i);
      mark.line = line;
      mark.column = static_cast<int>(i - start);
      return mark;
    }
    start = end + 1;
  }
  return std::nullopt;
}

LoadResult parse_document(std::string_view yaml, const std::string& file, const fs::path& base,
                          const HostLookup& host) {
  Report r(file);
  std::string text(yaml);
  YAML::Node document;
  try {
    std::vector<DocumentStarts::Document> documents = DocumentStarts::of(text, 2);
    if (documents.size() > 1) {
      const DocumentStarts::Document& second = documents[1];
      size_t pos = second.start.pos < 0 ? text.size() : static_cast<size_t>(second.start.pos);
      std::string_view at = std::string_view(text).substr(std::min(pos, text.size()));
      if (at.starts_with("---") || at.starts_with("..."))
        r.error(second.content, "the config must be a single YAML document");
      else
        r.error(second.start, "invalid YAML: unexpected " + (at.empty() ? std::string("end of file")
                                                                        : quote(at.substr(0, 1))));
      return std::move(r).finish(std::nullopt);
    }
    document = YAML::Load(text);
  } catch (const YAML::Exception& e) {
    YAML::Mark at = e.mark.is_null() ? start_of_file() : e.mark;
    // yaml-cpp says "end of map not found" for a tab: name the tab instead.
    if (auto tab = tab_in_indentation(text, at.line))
      r.error(*tab, "invalid YAML: a tab in the indentation; YAML indents with spaces only");
    else
      r.error(at, "invalid YAML: " + e.msg);
    return std::move(r).finish(std::nullopt);
  }
  if (!document || document.IsNull()) {
    r.error(start_of_file(), "the config is empty; expected a map with a \"programs\" key");
    return std::move(r).finish(std::nullopt);
  }

  Field root{"", document};
  if (!root.value.IsMap()) {
    r.error(start_of_file(), "the config must be a map with a \"programs\" key");
    return std::move(r).finish(std::nullopt);
  }
  Config config;
  config.path = file;
  std::vector<ProgramSpec> specs;  // one per program, in the same order
  // x-* keys hold anchors for merge keys (<<: *defaults), as in docker-compose.
  auto top = read_map(root, r, kTopKeys, fields::MapStyle::Section, /*extensions=*/true);
  if (auto* v = top->find("log")) parse_log(*v, config.log, r);
  if (auto* v = top->get("cgroup_root")) parse_cgroup_root(*v, config.cgroup_root, r);
  if (auto* v = top->find("gpu")) parse_gpu(*v, base, config.gpu, r);
  if (auto* v = top->find("control")) parse_control(*v, base, host, config.control, r);
  if (auto* v = top->find("metrics")) parse_metrics(*v, config.metrics, r);
  parse_programs(top->find("programs"), root.value.Mark(), config, base, host, specs, r);
  // The compile step: policies and request patterns, built once.
  for (size_t i = 0; i < specs.size(); ++i) compile(specs[i], config.programs[i], r);
  check_nvml(config, specs, host, r);
  return std::move(r).finish(std::move(config));
}

}  // namespace

std::string Diagnostic::str() const {
  std::string kind = warning ? "warning: " : "error: ";
  // Keys and values come from the file: one line each, nothing raw.
  if (line == 0) return escape_text(file + ": " + kind + message);
  return escape_text(file + ":" + std::to_string(line) + ":" + std::to_string(column) + ": " +
                     kind + message);
}

LoadResult load_file(const std::string& path) {
  return load_file(path, HostLookup::real());
}

LoadResult load_file(const std::string& path, const HostLookup& host) {
  Result<std::string> text = read_regular_file(path, kMaxConfigBytes);
  if (!text) {
    Report r(path);
    std::string why = text.error().message;
    if (why.rfind(path + ": ", 0) == 0) why.erase(0, path.size() + 2);
    r.error(YAML::Mark::null_mark(), "cannot read config: " + why);
    return std::move(r).finish(std::nullopt);
  }
  return parse_document(*text, path, fs::path(path).parent_path(), host);
}

LoadResult parse_string(std::string_view yaml, const std::string& file_name) {
  return parse_string(yaml, file_name, HostLookup::real());
}

LoadResult parse_string(std::string_view yaml, const std::string& file_name,
                        const HostLookup& host) {
  return parse_document(yaml, file_name, fs::path(file_name).parent_path(), host);
}

// The root ends up in paths handed to the kernel, so nothing that could
// climb out of the intended subtree or name the same directory twice.
std::string cgroup_root_problem(std::string_view text) {
  if (text.empty()) return "must not be empty";
  auto bad = std::find_if_not(text.begin(), text.end(), cgroup_char);
  if (bad != text.end())
    return "invalid character " + quote(std::string(1, *bad)) + " in " + quote(text) +
           "; use letters, digits and _ . @ / -";
  std::string_view rest = text;
  if (rest.front() == '/') rest.remove_prefix(1);
  while (true) {
    size_t slash = rest.find('/');
    std::string_view part = rest.substr(0, slash);
    if (part.empty()) return "empty path component in " + quote(text);
    if (part == "." || part == "..") return "\".\" and \"..\" are not allowed in " + quote(text);
    if (slash == std::string_view::npos) break;
    rest.remove_prefix(slash + 1);
  }
  return "";
}

std::vector<KeyTable> key_tables() {
  return {{"", kTopKeys},
          {"log", kLogKeys},
          {"gpu", kGpuKeys},
          {"control", kControlKeys},
          {"metrics", kMetricsKeys},
          {"programs.*", kProgramKeys},
          {"programs.*.allocator", kAllocatorKeys},
          {"programs.*.limits", kLimitKeys},
          {"programs.*.rlimits", kRlimitKeys},
          {"programs.*.rlimits.*", kRlimitRangeKeys},
          {"programs.*.stop", kStopKeys},
          {"programs.*.restart", kRestartKeys},
          {"programs.*.restart.backoff", kBackoffKeys},
          {"programs.*.restart.crash_loop", kCrashLoopKeys},
          {"programs.*.requests", kRequestsKeys},
          {"programs.*.checkpoint", kCheckpointKeys},
          {"programs.*.timeline", kTimelineKeys},
          {"programs.*.listen[]", kListenKeys},
          {"programs.*.recycle", kRecycleKeys}};
}

bool valid_program_name(std::string_view name) {
  auto ok = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || one_of(c, "_.-"); };
  return !name.empty() && name.size() <= 64 && name.front() != '.' &&
         std::all_of(name.begin(), name.end(), ok);
}

}  // namespace recycler::config
