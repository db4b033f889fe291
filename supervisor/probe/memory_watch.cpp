#include "supervisor/probe/memory_watch.h"

#include <fcntl.h>
#include <sys/eventfd.h>
#include <sys/inotify.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "supervisor/cgroup/files.h"
#include "supervisor/util/fd.h"
#include "supervisor/util/uv.h"

namespace recycler::probe {
namespace {

// v1: one eventfd per watch. The kernel holds its own references to the
// eventfd and to the cgroup; memory.usage_in_bytes and cgroup.event_control
// are only needed while registering, so they are closed at once.
class EventfdWatch final : public MemoryWatch {
 public:
  EventfdWatch(uint64_t threshold, std::function<void()> on_cross)
      : MemoryWatch(threshold, std::move(on_cross)) {}

  Status start(uv_loop_t* loop, int dirfd) {
    efd_.reset(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
    if (!efd_) return errno_error("eventfd");
    UniqueFd usage(::openat(dirfd, cgroup::kV1.memory_current, O_RDONLY | O_CLOEXEC));
    if (!usage) return errno_error(cgroup::kV1.memory_current);
    Status registered =
        write_file_at(dirfd, cgroup::kV1.event_control,
                      std::to_string(efd_.get()) + " " + std::to_string(usage.get()) + " " +
                          std::to_string(threshold()));
    if (!registered) return registered;
    auto poll = uv::poll(loop, efd_.get(), this, UV_READABLE, [](uv_poll_t* h, int, int) {
      auto* self = static_cast<EventfdWatch*>(h->data);
      if (!self) return;
      // Reading returns and resets the sum of every signal since the last
      // read: a burst is one call.
      uint64_t signals;
      if (::read(self->efd_.get(), &signals, sizeof signals) == sizeof signals) self->crossed();
    });
    if (!poll) return poll.error();
    poll_ = std::move(*poll);
    return Ok{};
  }

 private:
  UniqueFd efd_;
  uv::Handle<uv_poll_t> poll_;  // after efd_: closed before it
};

class HighWatch;

// v2: one inotify fd per loop, shared by every watch on that loop. Watching
// the same file twice yields the same wd, hence a list per wd.
class Inotify : public std::enable_shared_from_this<Inotify> {
 public:
  explicit Inotify(uv_loop_t* loop) : loop_(loop) {}
  ~Inotify();

  // The loop's instance, created on first use.
  static Result<std::shared_ptr<Inotify>> on(uv_loop_t* loop);

  // Watches memory.events in the cgroup behind `dirfd` for `watch`; the wd.
  Result<int> add(int dirfd, HighWatch* watch);
  void remove(int wd, HighWatch* watch);

 private:
  // Loops may run on different threads; each instance lives on its loop's.
  struct Registry {
    std::mutex mutex;
    std::map<uv_loop_t*, std::weak_ptr<Inotify>> by_loop;
  };
  static Registry& registry() {
    static Registry r;
    return r;
  }

  Status start();
  void on_readable();
  bool watching(int wd, const HighWatch* watch) const;

  uv_loop_t* loop_;
  UniqueFd fd_;
  uv::Handle<uv_poll_t> poll_;  // after fd_: closed before it
  std::map<int, std::vector<HighWatch*>> watches_;
};

// v2: memory.high at the threshold makes the kernel count a "high" event in
// memory.events (and notify) each time the cgroup goes over it.
class HighWatch final : public MemoryWatch {
 public:
  HighWatch(uint64_t threshold, std::function<void()> on_cross, int dirfd)
      : MemoryWatch(threshold, std::move(on_cross)), dirfd_(dirfd) {}
  ~HighWatch() override {
    if (inotify_) inotify_->remove(wd_, this);
  }

  // In this order: the watch, the baseline, then memory.high, so that no
  // event after the baseline is missed.
  Status start(uv_loop_t* loop) {
    auto inotify = Inotify::on(loop);
    if (!inotify) return inotify.error();
    inotify_ = std::move(*inotify);
    auto wd = inotify_->add(dirfd_, this);
    if (!wd) return wd.error();
    wd_ = *wd;
    auto events = read_file_at(dirfd_, cgroup::kV2.memory_events);
    if (!events) return events.error();
    high_events_ = find_keyed_value(*events, "high").value_or(0);
    return lower_high();
  }

  // memory.events changed, or may have (the inotify queue overflowed).
  void check() {
    auto events = read_file_at(dirfd_, cgroup::kV2.memory_events);
    if (!events) return;  // the cgroup is gone
    uint64_t high = find_keyed_value(*events, "high").value_or(0);
    if (high <= high_events_) return;  // another counter moved (low, max, oom)
    high_events_ = high;
    crossed();
  }

 private:
  Status lower_high() {
    auto current = read_file_at(dirfd_, cgroup::kV2.memory_high);
    if (!current) return current.error();
    uint64_t value = 0;
    auto [end, ec] = std::from_chars(current->data(), current->data() + current->size(), value);
    if (ec == std::errc() && value <= threshold()) return Ok{};  // "max" does not parse
    return write_file_at(dirfd_, cgroup::kV2.memory_high, std::to_string(threshold()));
  }

  int dirfd_;
  std::shared_ptr<Inotify> inotify_;
  int wd_ = -1;
  uint64_t high_events_ = 0;
};

Inotify::~Inotify() {
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  auto it = r.by_loop.find(loop_);
  if (it != r.by_loop.end() && it->second.expired()) r.by_loop.erase(it);
}

Result<std::shared_ptr<Inotify>> Inotify::on(uv_loop_t* loop) {
  Registry& r = registry();
  {
    std::lock_guard lock(r.mutex);
    auto it = r.by_loop.find(loop);
    if (it != r.by_loop.end())
      if (auto existing = it->second.lock()) return existing;
  }
  auto created = std::make_shared<Inotify>(loop);
  if (Status s = created->start(); !s) return s.error();
  std::lock_guard lock(r.mutex);
  r.by_loop[loop] = created;
  return created;
}

Status Inotify::start() {
  fd_.reset(::inotify_init1(IN_NONBLOCK | IN_CLOEXEC));
  if (!fd_) return errno_error("inotify_init1");
  auto poll = uv::poll(loop_, fd_.get(), this, UV_READABLE, [](uv_poll_t* h, int, int) {
    if (auto* self = static_cast<Inotify*>(h->data)) self->on_readable();
  });
  if (!poll) return poll.error();
  poll_ = std::move(*poll);
  return Ok{};
}

Result<int> Inotify::add(int dirfd, HighWatch* watch) {
  // /proc/self/fd resolves the O_PATH directory fd: no path to keep around.
  std::string path = "/proc/self/fd/" + std::to_string(dirfd) + "/" + cgroup::kV2.memory_events;
  int wd = ::inotify_add_watch(fd_.get(), path.c_str(), IN_MODIFY);
  if (wd < 0) return errno_error("inotify_add_watch memory.events");
  watches_[wd].push_back(watch);
  return wd;
}

void Inotify::remove(int wd, HighWatch* watch) {
  auto it = watches_.find(wd);
  if (it == watches_.end()) return;  // IN_IGNORED came first: the kernel dropped it
  std::erase(it->second, watch);
  if (!it->second.empty()) return;
  ::inotify_rm_watch(fd_.get(), wd);
  watches_.erase(it);
}

bool Inotify::watching(int wd, const HighWatch* watch) const {
  auto it = watches_.find(wd);
  return it != watches_.end() &&
         std::find(it->second.begin(), it->second.end(), watch) != it->second.end();
}

void Inotify::on_readable() {
  auto keep = shared_from_this();  // a callback may destroy the last watch, and so this
  std::vector<int> changed;
  bool overflow = false;
  alignas(inotify_event) char buf[4096];
  ssize_t n;
  while ((n = ::read(fd_.get(), buf, sizeof buf)) > 0) {
    for (ssize_t off = 0; off < n;) {
      const auto* e = reinterpret_cast<const inotify_event*>(buf + off);
      off += static_cast<ssize_t>(sizeof(inotify_event) + e->len);
      if (e->mask & IN_Q_OVERFLOW) {
        overflow = true;
      } else if (e->mask & IN_IGNORED) {
        watches_.erase(e->wd);  // the file is gone, and the kernel's watch with it
      } else if (std::find(changed.begin(), changed.end(), e->wd) == changed.end()) {
        changed.push_back(e->wd);
      }
    }
  }
  if (overflow) {  // events were lost: look at every file
    changed.clear();
    for (const auto& [wd, list] : watches_) changed.push_back(wd);
  }
  // Callbacks may destroy or create watches: look each one up again first.
  for (int wd : changed) {
    auto it = watches_.find(wd);
    if (it == watches_.end()) continue;
    std::vector<HighWatch*> targets = it->second;
    for (HighWatch* w : targets)
      if (watching(wd, w)) w->check();
  }
}

}  // namespace

Result<std::unique_ptr<MemoryWatch>> MemoryWatch::create(uv_loop_t* loop, int cgroup_dirfd, bool v2,
                                                         uint64_t threshold,
                                                         std::function<void()> on_cross) {
  if (v2) {
    auto watch = std::make_unique<HighWatch>(threshold, std::move(on_cross), cgroup_dirfd);
    if (Status s = watch->start(loop); !s) return s.error();
    return std::unique_ptr<MemoryWatch>(std::move(watch));
  }
  auto watch = std::make_unique<EventfdWatch>(threshold, std::move(on_cross));
  if (Status s = watch->start(loop, cgroup_dirfd); !s) return s.error();
  return std::unique_ptr<MemoryWatch>(std::move(watch));
}

}  // namespace recycler::probe
