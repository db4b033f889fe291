// A HostLookup the test fills in: its users, groups, ids, PATH and files, so
// that the config's identity and PATH checks run the same as root or not. In
// namespace config, not testing: the config tests name gtest's `testing::`.
#pragma once

#include <cstdio>
#include <map>
#include <optional>
#include <set>
#include <string>

#include "supervisor/config/host.h"

namespace recycler::config {

class FakeHost final : public HostLookup {
 public:
  // Runs as `euid`/`egid`; knows no user, group or file until told.
  FakeHost(uid_t euid, gid_t egid) : euid_(euid), egid_(egid) {}

  FakeHost& add_user(const std::string& name, uid_t uid, gid_t gid) {
    users_[name] = User{uid, gid};
    return *this;
  }
  FakeHost& add_group(const std::string& name, gid_t gid) {
    groups_[name] = gid;
    return *this;
  }
  FakeHost& add_file(const std::string& path, FileType type, bool executable = false) {
    files_[path] = type;
    if (executable) executables_.insert(path);
    return *this;
  }
  // NVML: loads (nullopt, the default) or fails with `error`.
  FakeHost& set_nvml_error(std::optional<std::string> error) {
    nvml_error_ = std::move(error);
    return *this;
  }
  // A library another user could have written: `why` is what the real host says.
  FakeHost& set_untrusted(const std::string& path, std::string why) {
    untrusted_[path] = std::move(why);
    return *this;
  }
  FakeHost& add_directory(const std::string& path, mode_t mode) {
    files_[path] = FileType::Directory;
    modes_[path] = mode;
    return *this;
  }
  FakeHost& set_path(std::optional<std::string> path) {
    path_ = std::move(path);
    return *this;
  }

  std::optional<User> user(const std::string& name) const override {
    auto it = users_.find(name);
    if (it == users_.end()) return std::nullopt;
    return it->second;
  }
  std::optional<gid_t> group(const std::string& name) const override {
    auto it = groups_.find(name);
    if (it == groups_.end()) return std::nullopt;
    return it->second;
  }
  uid_t euid() const override { return euid_; }
  gid_t egid() const override { return egid_; }
  std::optional<std::string> path_env() const override { return path_; }
  FileType file_type(const std::string& path) const override {
    auto it = files_.find(path);
    return it == files_.end() ? FileType::Missing : it->second;
  }
  bool executable(const std::string& path) const override {
    return file_type(path) == FileType::Regular && executables_.count(path) > 0;
  }
  std::optional<std::string> nvml_error(const std::string&) const override { return nvml_error_; }
  std::optional<std::string> untrusted_library(const std::string& path) const override {
    auto it = untrusted_.find(path);
    if (it == untrusted_.end()) return std::nullopt;
    return it->second;
  }
  // A directory added without a mode is 0755 and recycler's own; one that
  // others may write to is refused as the real rules would refuse it.
  std::optional<std::string> unsafe_socket_dir(const std::string& path) const override {
    auto it = modes_.find(path);
    if (file_type(path) != FileType::Directory || it == modes_.end()) return std::nullopt;
    if (!(it->second & 022)) return std::nullopt;
    char mode[8];
    std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(it->second & 07777));
    return path + ": writable by other users (mode " + mode +
           "): any of them could take a name there first; not a place for recycler's socket";
  }
  FakeHost& set_memory(std::optional<uint64_t> bytes) {
    memory_ = bytes;
    return *this;
  }
  std::optional<uint64_t> memory_available() const override { return memory_; }
  // The memory limit of the cgroup recycler runs in (nullopt, the default: none).
  FakeHost& set_container_limit(std::optional<uint64_t> bytes) {
    container_limit_ = bytes;
    return *this;
  }
  std::optional<uint64_t> container_memory_limit() const override { return container_limit_; }
  // The CUDA_VISIBLE_DEVICES recycler runs with (nullopt, the default: unset).
  FakeHost& set_cuda_visible_devices(std::optional<std::string> value) {
    cuda_visible_devices_ = std::move(value);
    return *this;
  }
  std::optional<std::string> cuda_visible_devices() const override { return cuda_visible_devices_; }

 private:
  std::optional<uint64_t> memory_;
  std::optional<uint64_t> container_limit_;
  std::optional<std::string> cuda_visible_devices_;
  uid_t euid_;
  gid_t egid_;
  std::map<std::string, User> users_;
  std::map<std::string, gid_t> groups_;
  std::map<std::string, FileType> files_;
  std::set<std::string> executables_;
  std::optional<std::string> path_ = "/usr/bin:/bin";
  std::optional<std::string> nvml_error_;
  std::map<std::string, std::string> untrusted_;
  std::map<std::string, mode_t> modes_;
};

// A Debian-like machine: root (0), nobody (65534) and alice (1000), groups
// root (0), nogroup (65534) and alice (1000), /bin/true executable.
inline FakeHost debian_host(uid_t euid, gid_t egid) {
  FakeHost host(euid, egid);
  host.add_user("root", 0, 0)
      .add_user("nobody", 65534, 65534)
      .add_user("alice", 1000, 1000)
      .add_group("root", 0)
      .add_group("nogroup", 65534)
      .add_group("alice", 1000)
      .add_file("/", HostLookup::FileType::Directory)
      .add_file("/bin", HostLookup::FileType::Directory)
      .add_file("/bin/true", HostLookup::FileType::Regular, true);
  return host;
}

}  // namespace recycler::config
