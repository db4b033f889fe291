#include "supervisor/probe/service.h"

#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>

#include "supervisor/probe/probe.h"
#include "supervisor/util/fd.h"

namespace recycler::probe {

std::optional<uint64_t> parse_socket_link(std::string_view link) {
  constexpr std::string_view kPrefix = "socket:[";
  if (link.size() <= kPrefix.size() + 1 || link.substr(0, kPrefix.size()) != kPrefix ||
      link.back() != ']')
    return std::nullopt;
  std::string_view digits = link.substr(kPrefix.size(), link.size() - kPrefix.size() - 1);
  uint64_t v = 0;
  auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), v);
  if (ec != std::errc() || end != digits.data() + digits.size()) return std::nullopt;
  return v;
}

std::optional<std::vector<uint64_t>> socket_inodes(const std::string& proc, pid_t pid,
                                                   size_t max_fds) {
  if (pid <= 0) return std::nullopt;
  std::string path = proc + "/" + std::to_string(pid) + "/fd";
  UniqueFd dir(::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!dir) return std::nullopt;
  DIR* d = ::fdopendir(dir.get());
  if (!d) return std::nullopt;
  dir.release();  // closedir closes it
  std::vector<uint64_t> out;
  size_t seen = 0;
  bool ok = true;
  char link[64];
  while (dirent* e = ::readdir(d)) {
    if (e->d_name[0] == '.') continue;
    if (++seen > max_fds) {
      ok = false;
      break;
    }
    ssize_t n = ::readlinkat(::dirfd(d), e->d_name, link, sizeof link);
    if (n <= 0 || static_cast<size_t>(n) >= sizeof link)
      continue;  // closed meanwhile, or no socket
    if (auto inode = parse_socket_link(std::string_view(link, static_cast<size_t>(n))))
      out.push_back(*inode);
  }
  ::closedir(d);
  if (!ok) return std::nullopt;
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

std::vector<uint64_t> ProcServiceProbe::shared_sockets(pid_t pid) const {
  auto stat = read_stat(proc_, pid);
  if (!stat || stat->ppid <= 1) return {};
  auto own = socket_inodes(proc_, pid, kMaxFds);
  if (!own || own->empty()) return {};
  auto parent = socket_inodes(proc_, static_cast<pid_t>(stat->ppid), kMaxFds);
  if (!parent) return {};
  std::vector<uint64_t> shared;
  std::set_intersection(own->begin(), own->end(), parent->begin(), parent->end(),
                        std::back_inserter(shared));
  return shared;
}

bool ProcServiceProbe::holds_any(pid_t pid, const std::vector<uint64_t>& inodes) const {
  auto own = socket_inodes(proc_, pid, kMaxFds);
  if (!own) return ::access((proc_ + "/" + std::to_string(pid)).c_str(), F_OK) == 0;
  return std::any_of(inodes.begin(), inodes.end(),
                     [&](uint64_t i) { return std::binary_search(own->begin(), own->end(), i); });
}

}  // namespace recycler::probe
