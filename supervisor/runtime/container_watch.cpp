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

std::optional<uint64_t> read_u64(const std::string& path) {
  auto text = read_cgroup_file(path);
  return text ? probe::parse_u64(*text) : std::nullopt;
}

}  // namespace

std::optional<uint64_t> read_memory_limit(const std::string& dir, bool v2) {
  auto bytes = read_u64(dir + (v2 ? "/memory.max" : "/memory.limit_in_bytes"));
  if (!bytes || *bytes >= (1ull << 62)) return std::nullopt;  // "max" does not parse
  return bytes;
}

std::optional<uint64_t> read_memory_current(const std::string& dir, bool v2) {
  return read_u64(dir + (v2 ? "/memory.current" : "/memory.usage_in_bytes"));
}

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
    : timers_(timers), dir_(std::move(dir)), v2_(v2), on_limit_(std::move(on_limit)) {
  if (v2_) oom_group_ = read_u64(dir_ + "/memory.oom.group") == 1u;
  read();
}

void ContainerWatch::read() {
  // On whole seconds of the loop's clock, in the wake-up that samples the
  // workers (sample_interval 1s): a timer of its own woke the loop once more
  // a second, about 3 us per worker per sample at 50 workers (bench/README.md).
  tick_ = timers_.aligned(kInterval, kInterval, [this] { read(); });
  std::optional<uint64_t> limit = read_memory_limit(dir_, v2_);
  bool changed = first_ || limit != limit_;
  first_ = false;
  limit_ = limit;
  if (changed && on_limit_) on_limit_(limit);
}

ContainerStatus ContainerWatch::status() const {
  ContainerStatus s;
  s.dir = dir_;
  s.limit = limit_;
  s.current = read_memory_current(dir_, v2_);
  auto events = read_cgroup_file(dir_ + (v2_ ? "/memory.events" : "/memory.oom_control"));
  if (events) s.oom_kills = find_keyed_value(*events, "oom_kill");
  if (v2_)
    if (auto pressure = read_cgroup_file(dir_ + "/memory.pressure"))
      s.pressure = probe::parse_pressure_some_avg10(*pressure);
  return s;
}

}  // namespace recycler
