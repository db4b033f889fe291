#include "supervisor/process/escapes.h"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <cstdlib>

#include "supervisor/log/log.h"
#include "supervisor/probe/parse.h"
#include "supervisor/probe/probe.h"
#include "supervisor/util/fd.h"
#include "supervisor/util/pidfd.h"

namespace recycler {
namespace {

using cgroup::WorkerId;
using Clock = std::chrono::steady_clock;

// Deeper process trees than this are not followed (a loop cannot happen, a
// fork chain that deep is no worker's).
constexpr int kMaxDepth = 4096;

struct Proc {
  pid_t ppid = 0;
  pid_t session = 0;
  uint64_t start = 0;
};

// Every live process: one read of /proc/PID/stat each, through a directory
// fd and into a buffer on the stack (three system calls per process: this is
// most of a scan's cost).
std::map<pid_t, Proc> read_table(const std::string& proc) {
  std::map<pid_t, Proc> out;
  DIR* d = ::opendir(proc.c_str());
  if (!d) return out;
  int root = ::dirfd(d);
  char path[300];
  char buf[1024];
  while (dirent* e = ::readdir(d)) {
    if (e->d_name[0] < '1' || e->d_name[0] > '9') continue;
    std::snprintf(path, sizeof path, "%s/stat", e->d_name);
    UniqueFd fd(::openat(root, path, O_RDONLY | O_CLOEXEC));
    ssize_t n = fd ? ::read(fd.get(), buf, sizeof buf) : -1;
    if (n <= 0) continue;
    auto stat = probe::parse_stat(std::string_view(buf, static_cast<size_t>(n)));
    // An exiting process has left its cgroup already: it has not escaped.
    if (!stat || stat->state == 'Z' || stat->state == 'X' || stat->exiting()) continue;
    out[static_cast<pid_t>(std::atol(e->d_name))] =
        Proc{static_cast<pid_t>(stat->ppid), static_cast<pid_t>(stat->session), stat->starttime};
  }
  ::closedir(d);
  return out;
}

std::string comm_of(const std::string& proc, pid_t pid) {
  std::string comm = read_file(proc + "/" + std::to_string(pid) + "/comm").value_or("?");
  while (!comm.empty() && comm.back() == '\n') comm.pop_back();
  return comm;
}

std::string name_of(const WorkerId& id) {
  return id.program + "[" + std::to_string(id.slot) + "]";
}

// Which processes of a table descend from recycler, memoised along each
// chain: a scan asks about every process, and siblings share their ancestors.
class Descendants {
 public:
  Descendants(const std::map<pid_t, Proc>& table, pid_t self) : table_(table), self_(self) {}

  bool contains(pid_t pid) {
    std::vector<pid_t> chain;
    bool result = false;
    for (pid_t p = pid; static_cast<int>(chain.size()) < kMaxDepth;) {
      if (p == self_) {
        result = true;
        break;
      }
      if (auto m = below_.find(p); m != below_.end()) {
        result = m->second;
        break;
      }
      auto it = table_.find(p);
      if (it == table_.end() || p <= 1) break;
      chain.push_back(p);
      p = it->second.ppid;
    }
    for (pid_t c : chain) below_[c] = result;
    return result;
  }

 private:
  const std::map<pid_t, Proc>& table_;
  pid_t self_;
  std::map<pid_t, bool> below_;
};

// The worker of a process's nearest ancestor inside one, walking up from its
// parent `ppid` to recycler (`self`); `worker_of` says which worker a pid is in.
template <typename WorkerOf>
std::optional<WorkerId> nearest_ancestor_worker(const std::map<pid_t, Proc>& table, pid_t ppid,
                                                pid_t self, WorkerOf worker_of) {
  std::optional<WorkerId> from;
  for (pid_t a = ppid; !from && a != self;) {
    from = worker_of(a);
    auto it = table.find(a);
    if (it == table.end()) break;
    a = it->second.ppid;
  }
  return from;
}

// The worker of the latest run whose main process led `session`.
std::optional<WorkerId> session_worker(const std::deque<std::pair<pid_t, WorkerId>>& sessions,
                                       pid_t session) {
  for (auto it = sessions.rbegin(); it != sessions.rend(); ++it)
    if (it->first == session) return it->second;
  return std::nullopt;
}

void report_escape(const std::string& proc, pid_t pid, const std::optional<WorkerId>& from) {
  std::string comm = comm_of(proc, pid);
  if (from) {
    std::string name = name_of(*from);
    log::event(log::Level::Warn, "escaped",
               fmt::format("{}: pid {} ({}) has left its cgroup: no limit applies to it and "
                           "its memory no longer counts; it will be killed when {} stops "
                           "(run workers with user: to prevent this)",
                           name, pid, comm, name),
               {{"program", from->program}, {"slot", from->slot}, {"pid", pid}});
  } else {
    log::event(log::Level::Warn, "escaped",
               fmt::format("pid {} ({}), started by a worker, is in no worker's cgroup; it "
                           "will be killed when recycler stops",
                           pid, comm),
               {{"pid", pid}});
  }
}

}  // namespace

EscapeTracker::EscapeTracker(std::string proc, pid_t self, const cgroup::Manager& cgroups)
    : proc_(std::move(proc)), self_(self), cgroups_(cgroups) {}

void EscapeTracker::started(const WorkerId& worker, pid_t pid) {
  if (sessions_.size() >= kMaxSessions) sessions_.pop_front();
  sessions_.emplace_back(pid, worker);
}

std::optional<WorkerId> EscapeTracker::worker_in(const std::map<pid_t, Known>& known, pid_t pid,
                                                 std::optional<uint64_t> start) {
  auto it = known.find(pid);
  if (it == known.end() || (start && it->second.start != *start)) return std::nullopt;
  return it->second.worker;
}

void EscapeTracker::scan() {
  std::map<pid_t, Proc> table = read_table(proc_);
  Descendants descendants(table, self_);
  std::map<pid_t, Known> members;
  std::vector<pid_t> outside;
  for (const auto& [pid, p] : table) {
    if (pid == self_ || !descendants.contains(pid)) continue;
    if (auto owner = cgroups_.owner_of(pid))
      members[pid] = Known{p.start, std::move(owner)};
    else
      outside.push_back(pid);
  }
  for (pid_t pid : outside) {
    const Proc& p = table.at(pid);
    if (auto it = escaped_.find(pid); it != escaped_.end() && it->second.start == p.start) continue;
    // Its nearest ancestor inside a worker, else the worker it was in at the
    // last scan, else the one whose session it is in (a worker's main process
    // leads its session).
    std::optional<WorkerId> from = nearest_ancestor_worker(
        table, p.ppid, self_, [&](pid_t a) { return worker_in(members, a, std::nullopt); });
    if (!from) from = worker_in(members_, pid, p.start);
    if (!from) from = session_worker(sessions_, p.session);
    escaped_[pid] = Known{p.start, from};
    report_escape(proc_, pid, from);
  }
  std::erase_if(escaped_, [&](const auto& e) {
    auto it = table.find(e.first);
    return it == table.end() || it->second.start != e.second.start;
  });
  members_ = std::move(members);
}

bool EscapeTracker::signal_checked(pid_t pid, uint64_t start) {
  UniqueFd fd(pidfd_open(pid));
  if (!fd) return false;
  // The pidfd pins the process: if its start time is the one recorded, it
  // is the same process, and stays so.
  auto stat = probe::read_stat(proc_, pid);
  if (!stat || stat->starttime != start) return false;
  return pidfd_send_signal(fd.get(), SIGKILL) == 0;
}

size_t EscapeTracker::kill(const WorkerId& worker) {
  size_t n = 0;
  for (auto it = escaped_.begin(); it != escaped_.end();) {
    if (it->second.worker != worker) {
      ++it;
      continue;
    }
    std::string comm = comm_of(proc_, it->first);
    if (signal_checked(it->first, it->second.start)) {
      ++n;
      log::info("{}: killed pid {} ({}), which had left its cgroup", name_of(worker), it->first,
                comm);
    }
    it = escaped_.erase(it);
  }
  return n;
}

size_t EscapeTracker::kill_all(std::chrono::milliseconds timeout) {
  auto deadline = Clock::now() + timeout;
  size_t n = 0;
  // A killed process's children come back to recycler: look again.
  for (int round = 0; round < 16; ++round) {
    scan();
    if (escaped_.empty()) break;
    std::vector<UniqueFd> dying;
    for (const auto& [pid, known] : escaped_) {
      UniqueFd fd(pidfd_open(pid));
      std::string comm = comm_of(proc_, pid);
      if (!fd || !signal_checked(pid, known.start)) continue;
      ++n;
      if (known.worker)
        log::info("{}: killed pid {} ({}), which had left its cgroup", name_of(*known.worker), pid,
                  comm);
      else
        log::info("killed pid {} ({}), which was in no worker's cgroup", pid, comm);
      dying.push_back(std::move(fd));
    }
    escaped_.clear();
    for (const UniqueFd& fd : dying) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
      if (left.count() <= 0) return n;
      pollfd p{fd.get(), POLLIN, 0};
      ::poll(&p, 1, static_cast<int>(left.count()));
    }
  }
  return n;
}

}  // namespace recycler
