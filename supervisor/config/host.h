// What the config parser asks the machine it runs on: users and groups, the
// recycler's own ids and PATH, and what a path is. Behind an interface so that
// tests can answer with a fake host (any user, root or not) and the parser's
// checks run the same everywhere.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>

namespace recycler::config {

class HostLookup {
 public:
  struct User {
    uid_t uid = 0;
    gid_t gid = 0;  // the primary group
  };
  enum class FileType { Missing, Directory, Regular, Other };

  virtual ~HostLookup() = default;

  virtual std::optional<User> user(const std::string& name) const = 0;
  virtual std::optional<gid_t> group(const std::string& name) const = 0;
  // The ids the recycler runs with: without root it can only keep them.
  virtual uid_t euid() const = 0;
  virtual gid_t egid() const = 0;
  // The recycler's own PATH; nullopt when it has none.
  virtual std::optional<std::string> path_env() const = 0;
  // What `path` is, following symbolic links.
  virtual FileType file_type(const std::string& path) const = 0;
  // A regular file the recycler may execute.
  virtual bool executable(const std::string& path) const = 0;
  // Why the NVML library `library` (a soname or a path) cannot be used, or
  // nullopt when it is there and trusted, found and checked as
  // gpu::Nvml::open would, without loading it: validating a config runs no
  // library's code. (Whether it has every function recycler needs is known
  // only once `run` loads it.)
  virtual std::optional<std::string> nvml_error(const std::string& library) const = 0;
  // Why a library at `path` must not be loaded into a program recycler
  // starts (allocator.preload): a user other than root or recycler's could
  // have written it or a directory on its way (util/safe_dir.h's
  // open_trusted_file); nullopt when none could.
  virtual std::optional<std::string> untrusted_library(const std::string& path) const = 0;
  // Why recycler must not bind a socket in the directory `dir`: another
  // user could take the name first (util/safe_dir.h's rules with
  // Shared::Never, as `run` applies them); nullopt when none could.
  virtual std::optional<std::string> unsafe_socket_dir(const std::string& dir) const = 0;
  // The memory recycler's workers can have at most: the host's MemTotal, or
  // recycler's own cgroup's limit when that is lower; nullopt when unknown
  // (a fake host, unless a test sets it).
  virtual std::optional<uint64_t> memory_available() const { return std::nullopt; }
  // The memory limit of the cgroup recycler runs in (a container's, a
  // systemd unit's MemoryMax=): what a percentage limit is of where a
  // program sets no limits.memory_max; nullopt when it has none (a fake
  // host, unless a test sets it).
  virtual std::optional<uint64_t> container_memory_limit() const { return std::nullopt; }
  // The CUDA_VISIBLE_DEVICES recycler was started with (a Slurm job's GPUs),
  // which `devices: {gpus: auto}` shares out instead of counting GPUs through
  // NVML; nullopt when unset (a fake host, unless a test sets it).
  virtual std::optional<std::string> cuda_visible_devices() const { return std::nullopt; }

  // The machine itself: getpwnam_r, getgrnam_r, geteuid, getenv, stat,
  // access, the loader's directories, /proc/meminfo and /proc/self/cgroup.
  static const HostLookup& real();
};

}  // namespace recycler::config
