// What a program's monitor keeps per worker slot: its sampling, its kernel
// watch, its timeline, and the commands waiting on a diagnosis or a drain.
// Internal to the monitor (monitor.cpp, monitor_commands.cpp).
#pragma once

#include <memory>
#include <optional>
#include <vector>

#include "supervisor/runtime/monitor.h"

namespace recycler {

struct ProgramMonitor::Slot {
  explicit Slot(Worker& w) : worker(&w), index(w.slot()) {}

  Worker* worker;
  unsigned index;
  std::optional<unsigned> generation;  // of the run being sampled
  std::unique_ptr<Timer> tick;
  std::unique_ptr<Timer> checkpoint_timeout;
  // watchdog.timeout: due when the run has been silent that long, then a
  // sample (watch_silence); moved on by each WATCHDOG=1 or iteration.
  std::unique_ptr<Timer> silence;
  TimePoint silent_at{};
  // The cgroup outlives runs, and so do its kernel watches (a surge moves
  // the slot to its other cgroup: then they are made afresh): on v1 one per
  // policy's threshold (a checkpoint asked for at the lowest must not hide a
  // backstop's above it), on v2 the lowest (memory.high).
  std::vector<std::unique_ptr<probe::MemoryWatch>> watches;
  bool watch_tried = false;
  const cgroup::WorkerCgroup* watched = nullptr;
  unsigned follow_ups = 0;  // close samples left after a kernel event
  TimePoint last_sample{};
  TimePoint last_tick{};  // the sampling tick's, while armed (the watchdog's view)
  std::optional<timeline::TimelineWriter> timeline;
  bool timeline_tried = false;
  // diagnose: under way; the commands that came after it, held until it is done.
  std::unique_ptr<Diagnosis> diagnosis;
  std::vector<engine::Command> held;
  // drain.unready_for: the slot is unready and its recycle (in `held`) waits
  // for this timer; `drained` lets that recycle through when it fires.
  std::unique_ptr<Timer> drain;
  bool drained = false;
  // The runs (generations) that have sent READY=1: the current one, and a
  // surge's next one, which becomes current when it takes over.
  std::optional<unsigned> ready_run, ready_next;
  // The whole GPUs (NVML indexes) its CUDA_VISIBLE_DEVICES gives it alone
  // (devices:, no other slot of the program on them); empty otherwise.
  std::vector<unsigned> pinned_gpus;
};

}  // namespace recycler
