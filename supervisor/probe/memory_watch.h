// The fast path for memory spikes: the kernel wakes the supervisor when a
// worker's cgroup memory usage crosses a threshold, so a spike is sampled in
// milliseconds instead of at the next tick.
//
//   v1: an eventfd registered through cgroup.event_control for
//       memory.usage_in_bytes at the threshold. The kernel signals crossings
//       in either direction (checked every 128 charged pages per CPU, so up to
//       512 KiB per CPU late), and once more when the cgroup is removed.
//       Usage already over the threshold at creation is not reported: the
//       next signal is its way back down.
//   v2: memory.high is set to the threshold, unless it is already lower: it
//       also throttles the spike while the worker is recycled. memory.events
//       is watched with inotify; on_cross runs when its "high" counter moved.
//       One inotify fd serves every watch on the same loop.
//
// A burst of kernel events runs on_cross once per loop wake-up per watch.
// on_cross may destroy its watch (or any other).
#pragma once

#include <uv.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <utility>

#include "supervisor/util/result.h"

namespace recycler::probe {

class MemoryWatch {
 public:
  // `cgroup_dirfd` (an O_PATH directory fd of the worker's memory cgroup) is
  // borrowed: v2 reads memory.events through it, so it must stay open while
  // the watch lives. On v2, lowering memory.high below the current usage
  // makes the kernel reclaim in this call: create the watch when the worker
  // starts.
  static Result<std::unique_ptr<MemoryWatch>> create(uv_loop_t* loop, int cgroup_dirfd, bool v2,
                                                     uint64_t threshold,
                                                     std::function<void()> on_cross);
  virtual ~MemoryWatch() = default;
  MemoryWatch(const MemoryWatch&) = delete;
  MemoryWatch& operator=(const MemoryWatch&) = delete;

  uint64_t threshold() const { return threshold_; }

 protected:
  MemoryWatch(uint64_t threshold, std::function<void()> on_cross)
      : threshold_(threshold), on_cross_(std::move(on_cross)) {}
  // Runs on_cross from a copy: it may destroy this watch.
  void crossed() const {
    auto callback = on_cross_;
    callback();
  }

 private:
  uint64_t threshold_;
  std::function<void()> on_cross_;
};

}  // namespace recycler::probe
