#include "supervisor/config/host.h"

#include <grp.h>
#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include "supervisor/gpu/nvml.h"

namespace recycler::config {
namespace {

class RealHost final : public HostLookup {
 public:
  // getpwnam_r() and getgrnam_r() want a caller-supplied buffer: grow it until
  // the entry fits. Only the ids are returned, since the names point into it.
  std::optional<User> user(const std::string& name) const override {
    passwd entry{};
    passwd* found = nullptr;
    std::vector<char> buffer(4096);
    int err = 0;
    while ((err = getpwnam_r(name.c_str(), &entry, buffer.data(), buffer.size(), &found)) == ERANGE)
      buffer.resize(buffer.size() * 2);
    if (err != 0 || !found) return std::nullopt;
    return User{entry.pw_uid, entry.pw_gid};
  }

  std::optional<gid_t> group(const std::string& name) const override {
    struct group entry {};
    struct group* found = nullptr;
    std::vector<char> buffer(4096);
    int err = 0;
    while ((err = getgrnam_r(name.c_str(), &entry, buffer.data(), buffer.size(), &found)) == ERANGE)
      buffer.resize(buffer.size() * 2);
    if (err != 0 || !found) return std::nullopt;
    return entry.gr_gid;
  }

  uid_t euid() const override { return ::geteuid(); }
  gid_t egid() const override { return ::getegid(); }

  std::optional<std::string> path_env() const override {
    const char* own = std::getenv("PATH");
    if (!own) return std::nullopt;
    return std::string(own);
  }

  FileType file_type(const std::string& path) const override {
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0) return FileType::Missing;
    if (S_ISDIR(st.st_mode)) return FileType::Directory;
    if (S_ISREG(st.st_mode)) return FileType::Regular;
    return FileType::Other;
  }

  bool executable(const std::string& path) const override {
    struct stat st {};
    return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) &&
           ::access(path.c_str(), X_OK) == 0;
  }

  std::optional<std::string> nvml_error(const std::string& library) const override {
    Status loaded = gpu::Nvml::probe(library);
    if (loaded) return std::nullopt;
    return loaded.error().message;
  }

  std::optional<uint64_t> memory_available() const override {
    std::optional<uint64_t> total;
    std::ifstream meminfo("/proc/meminfo");
    std::string key;
    uint64_t kib = 0;
    while (meminfo >> key >> kib) {
      if (key == "MemTotal:") {
        total = kib * 1024;
        break;
      }
      meminfo.ignore(std::numeric_limits<std::streamsize>::max(), '\n');
    }
    // The cgroup recycler runs in (a systemd unit's MemoryMax=, a container's
    // limit): v2 "0::/path", v1 the memory controller's line.
    std::ifstream self("/proc/self/cgroup");
    for (std::string line; std::getline(self, line);) {
      size_t a = line.find(':'), b = a == std::string::npos ? a : line.find(':', a + 1);
      if (b == std::string::npos) continue;
      std::string controllers = line.substr(a + 1, b - a - 1), path = line.substr(b + 1);
      std::string file;
      if (line.rfind("0::", 0) == 0)
        file = "/sys/fs/cgroup" + path + "/memory.max";
      else if (("," + controllers + ",").find(",memory,") != std::string::npos)
        file = "/sys/fs/cgroup/memory" + path + "/memory.limit_in_bytes";
      if (file.empty()) continue;
      std::ifstream limit(file);
      uint64_t bytes = 0;
      if (limit >> bytes && (!total || bytes < *total)) total = bytes;  // "max" fails to parse
    }
    return total;
  }
};

}  // namespace

const HostLookup& HostLookup::real() {
  static const RealHost host;
  return host;
}

}  // namespace recycler::config
