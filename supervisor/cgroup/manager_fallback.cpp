// Fallback mode, for a host where recycler cannot use cgroups (none to use,
// no permission, libcgroup or v2 delegation failing): a worker is its main
// process's session, and no limit is enforced. Apart from manager.cpp, the
// cgroup code, with which it shares nothing but the interface (cgroup.h).
#include <dirent.h>

#include <csignal>
#include <cstdlib>
#include <map>
#include <memory>

#include "supervisor/cgroup/cgroup.h"
#include "supervisor/probe/probe.h"
#include "supervisor/util/pidfd.h"

namespace recycler::cgroup {
namespace {

// Which worker each session belongs to (a worker's session id is its main
// process's pid).
using Sessions = std::map<pid_t, WorkerId>;

class FallbackWorker final : public WorkerCgroup {
 public:
  FallbackWorker(std::string proc, WorkerId id, std::shared_ptr<Sessions> sessions)
      : proc_(std::move(proc)), id_(std::move(id)), sessions_(std::move(sessions)) {}
  ~FallbackWorker() override { forget(); }
  std::string path() const override {
    return id_.program + "[" + std::to_string(id_.slot) + "] (session of pid " +
           std::to_string(sid_) + ")";
  }
  std::vector<UniqueFd> open_join_fds() override { return {}; }
  void adopt(pid_t main_pid) override {
    forget();
    sid_ = main_pid;
    (*sessions_)[sid_] = id_;
  }
  bool enforcing() const override { return false; }

  // Every live process in the worker's session (the child calls setsid, so the
  // session id is the main pid and outlives it while members remain).
  std::vector<pid_t> pids() const override {
    std::vector<pid_t> out;
    if (sid_ <= 0) return out;
    DIR* d = ::opendir(proc_.c_str());
    if (!d) return out;
    while (dirent* e = ::readdir(d)) {
      if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
      pid_t pid = static_cast<pid_t>(std::atol(e->d_name));
      auto stat = probe::read_stat(proc_, pid);
      if (stat && stat->session == static_cast<uint64_t>(sid_) && stat->state != 'Z')
        out.push_back(pid);
    }
    ::closedir(d);
    return out;
  }
  bool populated() const override { return !pids().empty(); }
  void kill_all() override {
    for (pid_t p : pids()) signal_pid(p, SIGKILL);
  }
  std::optional<uint64_t> oom_kills() const override { return std::nullopt; }
  std::optional<MemoryDir> memory_dir() const override { return std::nullopt; }
  Status remove() override { return Ok{}; }

 private:
  void forget() {
    auto it = sessions_->find(sid_);
    if (it != sessions_->end() && it->second == id_) sessions_->erase(it);
  }

  std::string proc_;
  WorkerId id_;
  std::shared_ptr<Sessions> sessions_;
  pid_t sid_ = 0;
};

class FallbackManager final : public Manager {
 public:
  FallbackManager(Layout layout, std::string proc)
      : layout_(std::move(layout)), proc_(std::move(proc)) {}
  const Layout& layout() const override { return layout_; }
  bool enforcing() const override { return false; }
  Result<std::unique_ptr<WorkerCgroup>> create(const std::string& program, unsigned slot,
                                               const config::Limits&, unsigned variant) override {
    return std::unique_ptr<WorkerCgroup>(
        std::make_unique<FallbackWorker>(proc_, WorkerId{program, slot, variant}, sessions_));
  }
  void remove_program(const std::string&) override {}
  void close() override {}
  std::optional<WorkerId> owner_of(pid_t pid) const override {
    auto stat = pid > 0 ? probe::read_stat(proc_, pid) : std::nullopt;
    if (!stat) return std::nullopt;
    auto it = sessions_->find(static_cast<pid_t>(stat->session));
    if (it == sessions_->end()) return std::nullopt;
    return it->second;
  }

 private:
  Layout layout_;
  std::string proc_;
  std::shared_ptr<Sessions> sessions_ = std::make_shared<Sessions>();
};

}  // namespace

std::unique_ptr<Manager> open_fallback(Layout layout, const Paths& paths) {
  return std::make_unique<FallbackManager>(std::move(layout), paths.proc);
}

}  // namespace recycler::cgroup
