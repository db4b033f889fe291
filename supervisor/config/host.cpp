#include "supervisor/config/host.h"

#include <grp.h>
#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include "supervisor/util/safe_dir.h"

namespace recycler::config {
namespace {

std::string join(const std::vector<std::string>& parts, const char* between) {
  std::string out;
  for (const std::string& p : parts) out += (out.empty() ? "" : between) + p;
  return out;
}

// Where dlopen looks for a soname, in its order: LD_LIBRARY_PATH, the
// directories /etc/ld.so.conf.d names (its cache's source), then the
// defaults. (The cache itself is not read: a library only it knows of is
// reported missing by `check`, and `run` still loads it.)
std::vector<std::string> loader_dirs() {
  std::vector<std::string> dirs;
  if (const char* env = std::getenv("LD_LIBRARY_PATH")) {
    std::string_view rest = env;
    while (!rest.empty()) {
      size_t end = rest.find_first_of(":;");
      std::string_view dir = rest.substr(0, end);
      if (!dir.empty()) dirs.emplace_back(dir);
      rest = end == std::string_view::npos ? std::string_view() : rest.substr(end + 1);
    }
  }
  std::error_code ec;
  std::vector<std::filesystem::path> confs;
  for (const auto& entry : std::filesystem::directory_iterator("/etc/ld.so.conf.d", ec))
    if (entry.path().extension() == ".conf") confs.push_back(entry.path());
  std::sort(confs.begin(), confs.end());
  for (const auto& conf : confs) {
    std::ifstream in(conf);
    for (std::string line; std::getline(in, line);)
      if (!line.empty() && line[0] == '/')
        dirs.push_back(line.substr(0, line.find_first_of(" \t#")));
  }
  if (std::string_view(RECYCLER_LIBRARY_ARCH).size() > 0) {
    dirs.emplace_back("/lib/" RECYCLER_LIBRARY_ARCH);
    dirs.emplace_back("/usr/lib/" RECYCLER_LIBRARY_ARCH);
  }
  for (const char* dir : {"/lib64", "/usr/lib64", "/lib", "/usr/lib"}) dirs.emplace_back(dir);
  return dirs;
}

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
    std::string file = library;
    if (library.find('/') == std::string::npos) {
      std::vector<std::string> dirs = loader_dirs();
      auto found = std::find_if(dirs.begin(), dirs.end(), [&](const std::string& dir) {
        return file_type(dir + "/" + library) == FileType::Regular;
      });
      if (found == dirs.end())
        return "cannot load NVML: " + library + " is in none of the loader's directories (" +
               join(dirs, ", ") + ")";
      file = *found + "/" + library;
    }
    if (auto why = untrusted_library(file)) return "cannot load NVML: " + *why;
    return std::nullopt;
  }

  std::optional<std::string> untrusted_library(const std::string& path) const override {
    auto opened = open_trusted_file(path);
    if (opened) return std::nullopt;
    return opened.error().message;
  }

  std::optional<std::string> unsafe_socket_dir(const std::string& dir) const override {
    if (Status s = check_private_dir(dir, Shared::Never, "not a place for recycler's socket"); !s)
      return s.error().message;
    return std::nullopt;
  }

  std::optional<std::string> cuda_visible_devices() const override {
    const char* own = std::getenv("CUDA_VISIBLE_DEVICES");
    if (!own) return std::nullopt;
    return std::string(own);
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
    if (auto limit = container_memory_limit(); limit && (!total || *limit < *total)) total = limit;
    return total;
  }

  std::optional<uint64_t> container_memory_limit() const override {
    // The cgroup recycler runs in (a systemd unit's MemoryMax=, a container's
    // limit): v2 "0::/path", v1 the memory controller's line; where that path
    // is not under the mount (a container without a cgroup namespace sees
    // the host's path), the mount itself is its cgroup.
    std::optional<uint64_t> total;
    std::ifstream self("/proc/self/cgroup");
    for (std::string line; std::getline(self, line);) {
      size_t a = line.find(':'), b = a == std::string::npos ? a : line.find(':', a + 1);
      if (b == std::string::npos) continue;
      std::string controllers = line.substr(a + 1, b - a - 1), path = line.substr(b + 1);
      std::string mount, name;
      if (line.rfind("0::", 0) == 0)
        mount = "/sys/fs/cgroup", name = "/memory.max";
      else if (("," + controllers + ",").find(",memory,") != std::string::npos)
        mount = "/sys/fs/cgroup/memory", name = "/memory.limit_in_bytes";
      if (mount.empty()) continue;
      std::ifstream limit(mount + path + name);
      if (!limit) limit = std::ifstream(mount + name);
      uint64_t bytes = 0;
      // "max" fails to parse; v1 says "none" with a page-rounded LONG_MAX
      if (limit >> bytes && bytes < (1ull << 62) && (!total || bytes < *total)) total = bytes;
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
