#include "supervisor/runtime/container_watch.h"

#include <fcntl.h>
#include <unistd.h>

#include <utility>

#include "supervisor/probe/parse.h"
#include "supervisor/util/fd.h"

namespace recycler {
namespace {

std::optional<std::string> read_cgroup_file(const std::string& path) {
  Result<std::string> text = read_file_at(AT_FDCWD, path);
  if (!text) return std::nullopt;
  return std::move(text.value());
}

// v1 says "no limit" with a page-rounded LONG_MAX, v2 with "max".
std::optional<uint64_t> limit_of(const std::optional<std::string>& text) {
  auto bytes = text ? probe::parse_u64(*text) : std::nullopt;
  if (!bytes || *bytes >= (1ull << 62)) return std::nullopt;
  return bytes;
}

}  // namespace

std::string container_memory_dir(const cgroup::Layout& layout, const cgroup::Paths& paths) {
  bool v2 = layout.mode == cgroup::Mode::V2;
  const char* limit_file = v2 ? "/memory.max" : "/memory.limit_in_bytes";
  for (const cgroup::Hierarchy& h : layout.hierarchies) {
    if (!(v2 || h.controller == "memory")) continue;
    std::string own = v2 ? layout.own : std::string();
    if (!v2)
      if (auto text = read_cgroup_file(paths.self_cgroup))
        if (auto path = cgroup::parse_cgroup_of(*text, "memory")) own = *path;
    std::string dir = h.mount + (own == "/" || own.empty() ? std::string() : own);
    if (::access((dir + limit_file).c_str(), R_OK) == 0) return dir;
    // The root of a v2 hierarchy has no memory.max: the host's, not a container's.
    if (::access((h.mount + limit_file).c_str(), R_OK) == 0) return h.mount;
    return own.empty() || own == "/" ? h.mount : dir;
  }
  return "";
}

ContainerWatch::ContainerWatch(Timers& timers, std::string dir, bool v2, LimitChanged on_limit)
    : timers_(timers), v2_(v2), on_limit_(std::move(on_limit)) {
  status_.dir = std::move(dir);
  if (v2_)
    if (auto group = read_cgroup_file(status_.dir + "/memory.oom.group"))
      oom_group_ = probe::parse_u64(*group) == 1u;
  read();
}

void ContainerWatch::read() {
  tick_ = timers_.after(kInterval, [this] { read(); });
  const std::string& dir = status_.dir;
  std::optional<uint64_t> limit =
      limit_of(read_cgroup_file(dir + (v2_ ? "/memory.max" : "/memory.limit_in_bytes")));
  auto current = read_cgroup_file(dir + (v2_ ? "/memory.current" : "/memory.usage_in_bytes"));
  status_.current = current ? probe::parse_u64(*current) : std::nullopt;
  auto events = read_cgroup_file(dir + (v2_ ? "/memory.events" : "/memory.oom_control"));
  status_.oom_kills = events ? find_keyed_value(*events, "oom_kill") : std::nullopt;
  if (v2_) {
    auto pressure = read_cgroup_file(dir + "/memory.pressure");
    status_.pressure = pressure ? probe::parse_pressure_some_avg10(*pressure) : std::nullopt;
  }
  bool changed = first_ || limit != status_.limit;
  first_ = false;
  status_.limit = limit;
  if (changed && on_limit_) on_limit_(limit);
}

}  // namespace recycler
