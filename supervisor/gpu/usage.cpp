#include "supervisor/gpu/usage.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <string_view>
#include <vector>

#include "supervisor/util/fd.h"

namespace recycler::gpu {
namespace {

// The NSpid line's pids, outermost first; at most a few levels are read.
std::vector<pid_t> nspid(int proc_dirfd, pid_t pid) {
  std::string path = std::to_string(pid) + "/status";
  UniqueFd fd(::openat(proc_dirfd, path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
  if (!fd) return {};
  char buf[4096];  // NSpid comes well within the first 4 KiB of status
  ssize_t n = ::read(fd.get(), buf, sizeof buf);
  if (n <= 0) return {};
  std::string_view text(buf, static_cast<size_t>(n));
  size_t at = text.find("\nNSpid:");
  if (at == std::string_view::npos) return {};
  text.remove_prefix(at + 7);
  text = text.substr(0, text.find('\n'));
  std::vector<pid_t> out;
  while (!text.empty() && out.size() < 32) {
    size_t skip = text.find_first_not_of(" \t");
    if (skip == std::string_view::npos) break;
    text.remove_prefix(skip);
    pid_t v = 0;
    auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
    if (ec != std::errc() || v <= 0) return {};
    out.push_back(v);
    text.remove_prefix(static_cast<size_t>(end - text.data()));
  }
  return out;
}

}  // namespace

Usage attribute(const Snapshot& snapshot, std::span<const pid_t> pids, bool host_hidden) {
  if (!snapshot.complete) return {};
  if (host_hidden && !snapshot.uses.empty()) return {};
  std::vector<uint64_t> per_device(snapshot.devices.size(), 0);
  std::vector<bool> holds(snapshot.devices.size(), false);
  for (const ProcessUse& use : snapshot.uses) {
    if (std::find(pids.begin(), pids.end(), use.pid) == pids.end()) continue;
    if (!use.bytes) return {};  // listed, amount unknown: an understated figure would mislead
    if (use.device >= per_device.size()) continue;
    per_device[use.device] += *use.bytes;
    holds[use.device] = true;
  }
  Usage out;
  out.gpu = 0;
  out.gpu_total = 0;
  for (size_t d = 0; d < per_device.size(); ++d) {
    if (!holds[d]) continue;
    *out.gpu_total += per_device[d];
    out.gpu_total_capacity = out.gpu_total_capacity.value_or(0) + snapshot.devices[d].total;
    if (!out.gpu_capacity || per_device[d] > *out.gpu) {
      out.gpu = per_device[d];
      out.gpu_capacity = snapshot.devices[d].total;
    }
  }
  return out;
}

Usage attribute_devices(const Snapshot& snapshot, std::span<const unsigned> devices) {
  if (!snapshot.complete || devices.empty()) return {};
  Usage out;
  out.gpu = 0;
  out.gpu_total = 0;
  out.gpu_total_capacity = 0;
  for (unsigned index : devices) {
    auto it = std::find_if(snapshot.devices.begin(), snapshot.devices.end(),
                           [&](const Device& d) { return d.index == index && d.instance < 0; });
    if (it == snapshot.devices.end()) return {};
    *out.gpu_total += it->used;
    *out.gpu_total_capacity += it->total;
    if (!out.gpu_capacity || it->used > *out.gpu) {
      out.gpu = it->used;
      out.gpu_capacity = it->total;
    }
  }
  return out;
}

pid_t host_pid(int proc_dirfd, pid_t pid) {
  std::vector<pid_t> ids = nspid(proc_dirfd, pid);
  return ids.size() > 1 ? ids.front() : pid;
}

bool nested_pid_namespace(int proc_dirfd, pid_t self) {
  return nspid(proc_dirfd, self).size() > 1;
}

bool host_pid_namespace(int proc_dirfd) {
  UniqueFd fd(::openat(proc_dirfd, "2/comm", O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
  if (!fd) return false;
  char buf[32];
  ssize_t n = ::read(fd.get(), buf, sizeof buf);
  return n > 0 && std::string_view(buf, static_cast<size_t>(n)).starts_with("kthreadd");
}

}  // namespace recycler::gpu
