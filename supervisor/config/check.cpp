// Checks against this host, over a parsed config (check.h). Each check
// reports at the Site the parse step left, so its diagnostics keep their
// place; ids and the preloaded library's path are filled in here.
#include "supervisor/config/check.h"

#include <fmt/format.h>

#include "policies/policy.h"
#include "supervisor/config/devices.h"

namespace recycler::config::detail {
namespace {

// Anyone who may write to the socket's directory may bind the name first, and
// recycler's clients would talk to them (control/server.h).
void check_control(const ControlSites& sites, const HostLookup& host, ControlConfig& control,
                   Report& r) {
  if (const auto& s = sites.socket) {
    std::string dir = fs::path(control.socket).parent_path().string();
    if (auto why = host.unsafe_socket_dir(dir.empty() ? "." : dir))
      r.error(s->slot, s->mark,
              fmt::format("{}: {}: use a directory only recycler's user can write to (the "
                          "default: /run/recycler)",
                          s->path, *why));
  }
  if (const auto& s = sites.group) {
    auto gid = host.group(s->value);
    if (!gid) r.error(s->slot, s->mark, s->path + ": unknown group " + quote(s->value));
    if (gid) {
      control.group = s->value;
      control.gid = *gid;
    }
  }
}

void check_cwd(const Site& s, const HostLookup& host, const ProgramConfig& p, Report& r) {
  auto type = host.file_type(p.cwd);
  if (type == HostLookup::FileType::Missing) {
    r.error(s.slot, s.mark, s.path + ": " + quote(p.cwd) + " does not exist");
  } else if (type != HostLookup::FileType::Directory) {
    r.error(s.slot, s.mark, s.path + ": " + quote(p.cwd) + " is not a directory");
  }
}

// Without root, setuid()/setgid() can only keep the ids the recycler already
// has; catching that here beats every spawn failing later.
void check_identity(const ProgramSites& sites, const HostLookup& host, ProgramConfig& p,
                    Report& r) {
  bool root = host.euid() == 0;
  if (const auto& s = sites.user) {
    auto ids = host.user(s->value);
    if (!ids) r.error(s->slot, s->mark, s->path + ": unknown user " + quote(s->value));
    if (ids && !root && ids->uid != host.euid())
      r.error(s->slot, s->mark, s->path + ": running programs as another user needs root");
    if (ids) {
      p.user = s->value;
      p.uid = ids->uid;
      p.gid = ids->gid;
    }
  }
  if (const auto& s = sites.group) {
    auto gid = host.group(s->value);
    if (!gid) r.error(s->slot, s->mark, s->path + ": unknown group " + quote(s->value));
    if (gid && !root && *gid != host.egid())
      r.error(s->slot, s->mark, s->path + ": running programs as another group needs root");
    if (gid) {
      p.group = s->value;
      p.gid = *gid;
    }
  }
}

// A preloaded library runs in the worker, often as root: one that another
// user could have written (or replaced, through a directory on its way) is
// refused, as gpu.nvml is.
bool trusted_preload(const Site& s, const std::string& path, const HostLookup& host, Report& r) {
  auto why = host.untrusted_library(path);
  if (why) r.error(s.slot, s.mark, s.path + ": " + *why);
  return !why;
}

// The first of a named library's files that exists, or the path; "" (and
// reported) when there is none. A missing library is an error, not a warning
// as a missing command is: ld.so only prints "cannot be preloaded ...
// ignored" and runs the program on glibc's malloc, so the setting would
// quietly do nothing.
std::string find_preload(const PreloadSite& preload, const HostLookup& host, Report& r) {
  const Site& s = preload.site;
  if (preload.library) {
    for (const std::string& path : preload.candidates)
      if (host.file_type(path) == HostLookup::FileType::Regular)
        return trusted_preload(s, path, host, r) ? path : "";
    std::string looked;
    for (const std::string& path : preload.candidates)
      looked += (looked.empty() ? "" : ", ") + path;
    r.error(s.slot, s.mark,
            s.path + ": " + s.value + " is not installed (no " + looked +
                "); on Debian or Ubuntu: apt-get install " + std::string(preload.library->package));
    return "";
  }
  const std::string& path = preload.candidates.front();
  auto type = host.file_type(path);
  if (type == HostLookup::FileType::Missing) {
    r.error(s.slot, s.mark, s.path + ": " + quote(path) + " does not exist");
    return "";
  }
  if (type != HostLookup::FileType::Regular) {
    r.error(s.slot, s.mark, s.path + ": " + quote(path) + " is not a regular file");
    return "";
  }
  return trusted_preload(s, path, host, r) ? path : "";
}

// " and "-joined keys, for a warning.
std::string key_list(const std::vector<std::string>& keys) {
  std::string list;
  for (size_t i = 0; i < keys.size(); ++i)
    list += (i == 0 ? "" : i + 1 == keys.size() ? " and " : ", ") + keys[i];
  return list;
}

// Settings that cannot do what they say with the preload found: a warning,
// since the program still runs.
void warn_allocator(const AllocatorSite& s, const ProgramConfig& p, Report& r) {
  const AllocatorConfig& a = p.allocator;
  if (find_preload_library(a.preload)) {
    std::vector<std::string> unused;
    for (const GlibcTunable& t : kGlibcTunables)
      if (a.*t.value) unused.emplace_back(t.key);
    if (!unused.empty())
      r.warning(s.slot, s.preload,
                s.path + ": " + key_list(unused) +
                    (unused.size() == 1 ? " only tunes" : " only tune") +
                    " glibc's malloc, which " + a.preload + " replaces");
  }
  if (a.jemalloc_conf && a.preload == "tcmalloc")
    r.warning(s.slot, s.jemalloc_conf,
              s.path + ".jemalloc_conf: only jemalloc reads MALLOC_CONF, and preload is tcmalloc");
  // The user's own LD_PRELOAD comes first (allocator.h): a malloc in it wins.
  if (auto it = p.env.find("LD_PRELOAD"); it != p.env.end()) {
    std::string_view list = it->second;
    size_t start = 0;
    while (start < list.size()) {
      size_t end = std::min(list.find_first_of(": ", start), list.size());
      std::string_view library = list.substr(start, end - start);
      std::string_view file = library.substr(library.rfind('/') + 1);
      if (library != a.preload_path && file.find("malloc") != std::string_view::npos)
        r.warning(s.slot, s.preload,
                  s.path + ".preload: env.LD_PRELOAD already preloads " + quote(library) +
                      ", which comes first and keeps malloc");
      start = end + 1;
    }
  }
}

void check_allocator(const ProgramSites& sites, const HostLookup& host, ProgramConfig& p,
                     Report& r) {
  if (!sites.preload) return;
  std::string path = find_preload(*sites.preload, host, r);
  if (path.empty()) return;
  p.allocator.preload = sites.preload->site.value;
  p.allocator.preload_path = path;
  if (sites.allocator) warn_allocator(*sites.allocator, p, r);
}

// A unix socket's owner and group; one without a group is the program's
// (its workers may connect).
void check_listen(const std::vector<ListenSite>& sites, const HostLookup& host, ProgramConfig& p,
                  Report& r) {
  for (const ListenSite& site : sites) {
    ListenSocket* socket = site.socket ? &p.listen[*site.socket] : nullptr;
    if (const auto& s = site.owner) {
      auto ids = host.user(s->value);
      if (!ids) r.error(s->slot, s->mark, s->path + ": unknown user " + quote(s->value));
      if (ids && socket) {
        socket->owner = s->value;
        socket->uid = ids->uid;
      }
    }
    if (const auto& s = site.group) {
      auto gid = host.group(s->value);
      if (!gid) r.error(s->slot, s->mark, s->path + ": unknown group " + quote(s->value));
      if (gid && socket) {
        socket->group = s->value;
        socket->gid = *gid;
      }
    }
  }
  for (ListenSocket& socket : p.listen)
    if (!socket.tcp && !socket.gid) socket.gid = p.gid;
}

// A surge runs two generations of a slot at once: both must fit.
void check_surge(const Site& recycle, const HostLookup& host, const ProgramConfig& p, Report& r) {
  if (!p.limits.memory_max) return;
  auto available = host.memory_available();
  uint64_t needed = *p.limits.memory_max * (p.instances + 1ull);
  if (available && needed > *available)
    r.warning(recycle.slot, recycle.mark,
              recycle.path + ".mode: surge needs room for one more generation: memory_max " +
                  format_size(*p.limits.memory_max) + " x (instances " +
                  std::to_string(p.instances) + " + 1) = " + format_size(needed) + " exceeds the " +
                  format_size(*available) +
                  " this host (or recycler's cgroup) has; a surge may end in an OOM kill. "
                  "Prefer mode: restart, or scope: process recycling of a pre-fork server");
}

// The first word of a command: a warning only, since the program may be
// installed by the time it starts, or PATH may differ on the machine the
// config is meant for.
void check_executable(const Site& command, const HostLookup& host, const ProgramConfig& p,
                      Report& r) {
  if (p.shell || p.command.empty() || p.command[0].empty()) return;
  const std::string& argv0 = p.command[0];
  auto warn = [&](const std::string& why) {
    r.warning(command.slot, command.mark, command.path + ": " + quote(argv0) + why);
  };
  if (argv0.find('/') != std::string::npos) {
    fs::path file = argv0;
    // exec happens after the chdir into cwd.
    if (file.is_relative() && !p.cwd.empty()) file = fs::path(p.cwd) / file;
    if (host.file_type(file.string()) == HostLookup::FileType::Missing)
      warn(" does not exist");
    else if (!host.executable(file.string()))
      warn(" is not an executable file");
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
  warn(" was not found on PATH");
}

// devices.gpus: auto shares out the CUDA_VISIBLE_DEVICES recycler was given,
// else counts the GPUs through NVML when recycler runs: a library that
// cannot be found would refuse the program then, so it is said now, here.
void check_gpus_auto(const Site& s, const Config& config, const HostLookup& host, Report& r) {
  if (auto given = host.cuda_visible_devices()) {
    if (visible_device_list(*given).empty())
      r.error(s.slot, s.mark,
              s.path + ": auto shares out recycler's own CUDA_VISIBLE_DEVICES, which names no GPU");
    return;
  }
  std::string library = config.gpu ? config.gpu->nvml : GpuConfig{}.nvml;
  if (auto why = host.nvml_error(library))
    r.error(s.slot, s.mark,
            s.path + ": auto counts the GPUs through NVML, which cannot be used: " + *why +
                " (list the GPUs instead, install the NVIDIA driver, or set gpu.nvml to the "
                "path of libnvidia-ml.so.1)");
}

// In the order parse read them: identity before listen, whose sockets
// default to the program's group.
void check_program(const ProgramSites& sites, const HostLookup& host, ProgramConfig& p, Report& r) {
  if (sites.cwd) check_cwd(*sites.cwd, host, p, r);
  check_identity(sites, host, p, r);
  check_allocator(sites, host, p, r);
  check_listen(sites.listen, host, p, r);
  if (sites.surge) check_surge(*sites.surge, host, p, r);
  if (sites.command) check_executable(*sites.command, host, p, r);
}

}  // namespace

void check_host(Parsed& parsed, const HostLookup& host, Report& r) {
  check_control(parsed.control, host, parsed.config.control, r);
  for (size_t i = 0; i < parsed.programs.size(); ++i) {
    check_program(parsed.programs[i], host, parsed.config.programs[i], r);
    if (const auto& s = parsed.programs[i].gpus_auto) check_gpus_auto(*s, parsed.config, host, r);
  }
}

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

}  // namespace recycler::config::detail
