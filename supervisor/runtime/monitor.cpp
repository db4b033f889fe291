#include "supervisor/runtime/monitor.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <set>
#include <type_traits>

#include "policies/base/fields.h"
#include "policies/base/units.h"
#include "supervisor/cgroup/files.h"
#include "supervisor/config/devices.h"
#include "supervisor/log/log.h"
#include "supervisor/runtime/monitor_slot.h"
#include "supervisor/util/fd.h"
#include "supervisor/worker/worker_checkpoints.h"

namespace recycler {

using log::Level;
using units::format_duration;

namespace {

// Slot `slot`'s CUDA_VISIBLE_DEVICES from the program's devices: (or env:),
// as NVML indexes; empty when it names none, or any by UUID.
std::vector<unsigned> slot_gpu_indexes(const config::ProgramConfig& program, unsigned slot,
                                       const std::vector<std::string>* gpus_auto) {
  config::EnvMap env = program.env;
  config::apply_devices(program.devices, program.env, slot,
                        gpus_auto ? *gpus_auto : std::vector<std::string>{}, env);
  auto it = env.find("CUDA_VISIBLE_DEVICES");
  if (it == env.end()) return {};
  std::vector<unsigned> out;
  for (const std::string& entry : config::visible_device_list(it->second)) {
    auto index = fields::parse_digits(entry);
    if (!index || *index > 4096) return {};
    out.push_back(static_cast<unsigned>(*index));
  }
  return out;
}

}  // namespace

ProgramMonitor::ProgramMonitor(MonitorContext& ctx,
                               std::shared_ptr<const config::ProgramConfig> program,
                               const std::vector<std::unique_ptr<Worker>>& workers)
    : ctx_(ctx),
      program_(std::move(program)),
      controller_(program_, static_cast<unsigned>(workers.size()),
                  [&timers = ctx.timers] { return timers.now(); }) {
  if (program_->requests) matcher_ = program_->requests->matcher;  // compiled with the config
  controller_.set_default_memory_max(ctx.container_memory_max);
  for (const auto& w : workers) {
    slots_.push_back(std::make_unique<Slot>(*w));
    w->observe(this);
  }
  // GPUs two slots share are no slot's alone.
  std::map<unsigned, unsigned> holders;
  for (auto& slot : slots_) {
    slot->pinned_gpus = slot_gpu_indexes(*program_, slot->index, ctx.gpus_auto);
    for (unsigned gpu : slot->pinned_gpus) ++holders[gpu];
  }
  for (auto& slot : slots_)
    if (std::any_of(slot->pinned_gpus.begin(), slot->pinned_gpus.end(),
                    [&](unsigned gpu) { return holders[gpu] > 1; }))
      slot->pinned_gpus.clear();
  if (ctx_.gpu && wants_gpu()) ctx_.gpu->want(program_->sample_interval);
  if (program_->gang) {
    std::vector<Worker*> ranks;
    for (const auto& w : workers) ranks.push_back(w.get());
    gang_ = std::make_unique<Gang>(ctx_.timers, std::move(ranks));
  }
}

ProgramMonitor::~ProgramMonitor() {
  for (auto& slot : slots_) slot->worker->observe(nullptr);
}

ProgramMonitor::Slot* ProgramMonitor::find(const Worker& worker) {
  unsigned i = worker.slot();
  return i < slots_.size() && slots_[i]->worker == &worker ? slots_[i].get() : nullptr;
}

std::optional<unsigned> ProgramMonitor::live_generation(unsigned slot) const {
  if (slot >= slots_.size()) return std::nullopt;
  const Worker& w = *slots_[slot]->worker;
  if (w.state() != WorkerState::Running && w.state() != WorkerState::Stopping) return std::nullopt;
  return w.generation();
}

std::string ProgramMonitor::worker_name(unsigned slot) const {
  return slot < slots_.size() ? slots_[slot]->worker->name() : program_->name;
}

notify::Answer ProgramMonitor::receive(const notify::Origin& origin, pid_t pid,
                                       const notify::NotifyMessage& message, bool answer_wanted) {
  if (origin.place.slot >= slots_.size()) return {};
  Slot& slot = *slots_[origin.place.slot];
  Worker& worker = *slot.worker;
  // During a surge and after one, two generations of the slot report: each
  // counts in its own run.
  engine::Generation generation = worker.surge().generation_in(origin.place.variant);
  if (message.ready) {
    worker.notified_ready(pid);
    sends_ready_ = true;
    if (generation == engine::Generation::Current)
      slot.ready_run = worker.generation();
    else if (generation == engine::Generation::Next)
      slot.ready_next = worker.surge().next_generation();
  }
  on_notify(worker, generation, pid, message);
  if (!answer_wanted) return {};
  return answer(worker, generation, pid, *message.requests);
}

void ProgramMonitor::on_state_change(Worker& worker) {
  Slot* slot = find(worker);
  // The controller hears of every run, sampled or not: a recycle asked from
  // the control socket goes through it.
  if (!slot) return;
  switch (worker.state()) {
    case WorkerState::Running:
      if (slot->generation != worker.generation())
        begin_run(*slot);
      else  // the same run: only a recycle under way may be done
        controller_.run_started(slot->index, worker.generation(), worker.started_at(),
                                worker.pid().value_or(0), 0);
      break;
    case WorkerState::Starting:
      break;
    case WorkerState::Exited: {
      auto exit = worker.record().last_exit();
      slot->tick.reset();
      controller_.run_ended(slot->index, engine::RunEnd::Exited, worker.recycling(),
                            exit ? exit->describe() : std::string());
      break;
    }
    case WorkerState::Stopping:
    case WorkerState::Backoff:
      slot->tick.reset();
      controller_.run_ended(slot->index, engine::RunEnd::Stopping);
      break;
    case WorkerState::Stopped:
    case WorkerState::Failed:
      slot->tick.reset();
      controller_.run_ended(slot->index, engine::RunEnd::Finished);
      break;
  }
  run_commands();
  if (gang_) gang_->on_state_change(worker);
}

void ProgramMonitor::begin_run(Slot& slot) {
  Worker& w = *slot.worker;
  slot.generation = w.generation();
  // The policies' jitter: drawn here, where the run starts, as it always was.
  uint64_t seed = ctx_.rng();
  controller_.run_started(slot.index, w.generation(), w.started_at(), w.pid().value_or(0), seed);
  if (!controller_.active()) return;  // nothing to sample

  if (program_->timeline && !slot.timeline_tried) {
    slot.timeline_tried = true;
    auto writer = timeline::TimelineWriter::create(*program_->timeline, program_->name, slot.index);
    if (writer)
      slot.timeline.emplace(std::move(writer.value()));
    else
      log::warn("{}: no timeline: {}", w.name(), writer.error().message);
  }
  if (slot.timeline) {
    if (Status s = slot.timeline->start_run(w.generation(), w.pid().value_or(0), w.started_at());
        !s)
      log::warn("{}: timeline: {}", w.name(), s.error().message);
  }

  if (slot.watched != &w.cgroup()) {
    slot.watches.clear();
    slot.watch_tried = false;
  }
  if (!slot.watch_tried) watch_memory(slot);
  slot.last_tick = ctx_.timers.now();
  arm_tick(slot, program_->sample_interval);
}

void ProgramMonitor::watch_memory(Slot& slot) {
  Worker& w = *slot.worker;
  slot.watch_tried = true;
  slot.watched = &w.cgroup();
  policies::WorkerContext context;
  context.started = w.started_at();
  context.memory_max = controller_.memory_max();
  std::set<uint64_t> thresholds;
  for (const policies::Policy* p : controller_.policies())
    if (auto t = p->fast_threshold(context)) thresholds.insert(*t);
  auto dir = w.cgroup().memory_dir();
  if (thresholds.empty() || !dir) return;
  // v2's watch is memory.high, one value: the lowest (it throttles the
  // worker there while it is recycled).
  if (dir->v2) thresholds.erase(std::next(thresholds.begin()), thresholds.end());
  for (uint64_t threshold : thresholds) {
    auto watch = probe::MemoryWatch::create(ctx_.loop, dir->fd, dir->v2, threshold,
                                            [this, &slot] { on_kernel_event(slot); });
    if (!watch) {
      log::warn("{}: no fast path for memory spikes (sampling every {} only): {}", w.name(),
                format_duration(program_->sample_interval), watch.error().message);
      slot.watches.clear();
      return;
    }
    slot.watches.push_back(std::move(watch.value()));
  }
}

void ProgramMonitor::set_default_memory_max(std::optional<uint64_t> bytes) {
  std::optional<uint64_t> before = controller_.memory_max();
  controller_.set_default_memory_max(bytes);
  if (controller_.memory_max() == before) return;
  // The kernel's fast path was armed at a threshold of the old limit (on v2
  // memory.high, which a watch only ever lowers): back to the program's own
  // memory.high, then armed again at the new one.
  for (auto& slot : slots_) {
    if (slot->watches.empty()) continue;
    slot->watches.clear();
    if (auto dir = slot->watched->memory_dir(); dir && dir->v2) {
      const auto& high = program_->limits.memory_high;
      if (Status s = write_file_at(dir->fd, cgroup::kV2.memory_high,
                                   high ? std::to_string(*high) : std::string("max"));
          !s)
        log::warn("{}: cannot reset memory.high: {}", slot->worker->name(), s.error().message);
    }
    watch_memory(*slot);
  }
}

void ProgramMonitor::sampling_progress(TimePoint now, std::vector<Progress>& out) const {
  for (const auto& slot : slots_)
    if (slot->tick)
      out.push_back({slot->worker->name() + " sampling", program_->sample_interval,
                     std::chrono::duration_cast<Duration>(now - slot->last_tick)});
}

void ProgramMonitor::arm_tick(Slot& slot, Duration delay) {
  // Every worker with the same sample_interval is sampled in the same
  // wake-up of the loop, whichever program it is of and whenever it started
  // (its first sample comes sooner); a follow-up after a kernel event is exact.
  Duration grain = delay == program_->sample_interval ? delay : Duration{0};
  slot.tick = ctx_.timers.aligned(delay, grain, [this, &slot] {
    slot.last_tick = ctx_.timers.now();
    sample(slot);
    if (!controller_.running(slot.index)) return;
    // After a kernel event, look closely for a while: the cgroup's `current`
    // crosses the threshold a little before the policy's own metric does.
    // Bounded, so a worker whose page cache keeps `current` above the
    // threshold costs no more than a few samples per crossing.
    if (slot.follow_ups > 0) {
      --slot.follow_ups;
      arm_tick(slot, std::min(kFollowUp, program_->sample_interval));
    } else {
      arm_tick(slot, program_->sample_interval);
    }
  });
}

void ProgramMonitor::on_kernel_event(Slot& slot) {
  if (!controller_.running(slot.index)) return;
  if (ctx_.timers.now() - slot.last_sample >= kFollowUp) sample(slot);
  if (!controller_.running(slot.index)) return;
  slot.follow_ups = kFollowUps;
  arm_tick(slot, std::min(kFollowUp, program_->sample_interval));
}

void ProgramMonitor::sample(Slot& slot) {
  Worker& w = *slot.worker;
  if (!controller_.running(slot.index) || w.state() != WorkerState::Running || w.recycling())
    return;
  // What the probes cost, from the first read (cgroup.procs) to the last.
  TimePoint probe_start = SteadyClock::now();
  unsigned needs = controller_.needs();
  auto dir = w.cgroup().memory_dir();
  std::optional<probe::CgroupReader> reader;
  if (dir) reader.emplace(dir->fd, dir->v2);
  bool list = probe::reads_processes(needs, reader ? &*reader : nullptr);
  bool gpu = ctx_.gpu && wants_gpu();
  std::vector<pid_t> pids;
  if (list || gpu) pids = w.cgroup().pids();
  TimePoint now = ctx_.timers.now();
  policies::Sample s = probe::probe_worker(reader ? &*reader : nullptr, ctx_.procs, pids,
                                           w.pid().value_or(0), needs, now);
  if (gpu) add_gpu(slot, s, pids);
  ctx_.sample_duration.observe(
      std::chrono::duration<double>(SteadyClock::now() - probe_start).count());
  controller_.prepare(slot.index, s, list ? &pids : nullptr);
  slot.last_sample = now;
  if (slot.timeline) {
    if (Status written = slot.timeline->sample(s); !written)
      log::warn("{}: timeline: {}", w.name(), written.error().message);
  }
  controller_.sampled(slot.index, std::move(s));
  run_commands();
}

// A hang is acted on when the run has been silent for watchdog.timeout, not
// at the next sampling tick after it. One timer per slot, moved lazily: a
// ping only moves the deadline, and a timer that fires before it waits for
// the rest. A millisecond past it, since the watchdog fires only past.
void ProgramMonitor::watch_silence(Slot& slot) {
  slot.silent_at = ctx_.timers.now() + *program_->watchdog_timeout + Duration{1};
  if (!slot.silence) arm_silence(slot);
}

void ProgramMonitor::arm_silence(Slot& slot) {
  auto left = std::chrono::duration_cast<Duration>(slot.silent_at - ctx_.timers.now());
  slot.silence = ctx_.timers.after(std::max(left, Duration{0}), [this, &slot] {
    if (ctx_.timers.now() < slot.silent_at) return arm_silence(slot);
    slot.silence.reset();
    sample(slot);  // of whichever run is there now: a new one is not armed yet
  });
}

bool ProgramMonitor::wants_gpu() const {
  return (controller_.needs() & policies::kNeedsGpu) || program_->timeline.has_value();
}

void ProgramMonitor::add_gpu(Slot& slot, policies::Sample& s, const std::vector<pid_t>& pids) {
  gpu::Usage u = ctx_.gpu->usage(pids);
  if (!u.gpu && ctx_.gpu->host_hidden() && !slot.pinned_gpus.empty()) {
    u = ctx_.gpu->device_usage(slot.pinned_gpus);
    if (u.gpu && !said_pinned_) {
      said_pinned_ = true;
      log::info(
          "{}: its workers' gpu figure is the used memory of the GPUs each slot has alone "
          "(devices: CUDA_VISIBLE_DEVICES), as NVML's pids cannot be seen from here",
          program_->name);
    }
  }
  s.gpu = u.gpu;
  s.gpu_capacity = u.gpu_capacity;
  s.gpu_total = u.gpu_total;
  s.gpu_total_capacity = u.gpu_total_capacity;
  for (policies::ProcessSample& p : s.processes) {
    gpu::Usage own = ctx_.gpu->usage(std::span<const pid_t>(&p.pid, 1));
    p.gpu = own.gpu;
    p.gpu_capacity = own.gpu_capacity;
  }
}

bool ProgramMonitor::recycle(unsigned slot, std::string reason) {
  if (slot >= slots_.size()) return false;
  bool asked = controller_.recycle_asked(slot, std::move(reason));
  run_commands();
  return asked;
}

bool ProgramMonitor::budget_recycle(unsigned slot, pid_t pid, std::string reason) {
  if (slot >= slots_.size()) return false;
  bool asked = controller_.budget_recycle(slot, pid, std::move(reason));
  run_commands();
  return asked;
}

void ProgramMonitor::on_notify(Worker& worker, engine::Generation generation, pid_t sender,
                               const notify::NotifyMessage& message) {
  Slot* slot = find(worker);
  if (!slot) return;
  switch (generation) {
    case engine::Generation::Current:
      if (message.checkpointed) worker.checkpoints().confirmed();
      controller_.notified(slot->index, sender, message);
      if (program_->watchdog_timeout && (message.watchdog || message.iteration))
        watch_silence(*slot);
      run_commands();
      return;
    case engine::Generation::Next:
      // Only its counts carry over into its run; the rest (an iteration,
      // device bytes) describes that run and comes again once it runs.
      if (message.requests && *message.requests > 0)
        controller_.next_requests(slot->index, worker.surge().next_generation(), sender,
                                  *message.requests);
      return;
    case engine::Generation::Retiring:
      return;
  }
}

notify::Answer ProgramMonitor::answer(Worker& worker, engine::Generation generation, pid_t sender,
                                      uint64_t requests) {
  Slot* slot = find(worker);
  if (!slot) return {};
  switch (generation) {
    case engine::Generation::Current:
      return controller_.answer(slot->index, sender);
    case engine::Generation::Next:
      return {};
    case engine::Generation::Retiring:
      return controller_.retiring_report(slot->index, sender, requests);
  }
  return {};
}

void ProgramMonitor::on_output(Worker& worker, pid_t pid, std::string_view line) {
  if (!matcher_) return;
  notify::OutputMatcher::Match m = matcher_->match(line);
  if (!m.matched) return;
  Slot* slot = find(worker);
  if (!slot) return;
  // During a surge and after one, two generations write: each counts in its
  // own run (as their notify reports do, on_notify).
  if (pid == worker.surge().next_pid()) {
    controller_.next_requests(slot->index, worker.surge().next_generation(), m.pid.value_or(pid),
                              1);
    return;
  }
  if (pid == worker.surge().retiring_pid()) return;
  if (!controller_.running(slot->index)) return;
  // The pid in a line is text the worker wrote: it names one of its
  // processes, or the request counts for the worker alone.
  if (m.pid && *m.pid != pid && !is_member(*slot, *m.pid)) {
    if (controller_.warn_stranger_once(slot->index))
      log::warn(
          "{}: its output names pid {} as serving a request, which is not one of its "
          "processes; such requests count for the worker, not for a process",
          worker.name(), *m.pid);
    controller_.requests(slot->index, std::nullopt, 1);
  } else {
    controller_.requests(slot->index, m.pid.value_or(pid), 1);
  }
  run_commands();
}

bool ProgramMonitor::is_member(Slot& slot, pid_t pid) {
  if (controller_.known_member(slot.index, pid)) return true;
  if (controller_.members_fresh(slot.index)) return false;
  std::vector<pid_t> pids = slot.worker->cgroup().pids();
  controller_.set_members(slot.index, pids);
  return controller_.known_member(slot.index, pid);
}

ProgramMonitor::Readiness ProgramMonitor::readiness(unsigned index) const {
  if (index >= slots_.size()) return {false, "no such slot"};
  const Slot& slot = *slots_[index];
  const Worker& w = *slot.worker;
  if (w.state() != WorkerState::Running) return {false, to_string(w.state())};
  if (slot.drain) return {false, "draining before its recycle"};
  switch (w.phase()) {
    case StopPhase::None:
    case StopPhase::Surging:
      break;
    default:
      return {false, to_string(w.phase())};
  }
  bool needs_ready = sends_ready_ || (program_->recycle.mode == config::RecycleMode::Surge &&
                                      !program_->recycle.ready_after);
  if (needs_ready && slot.ready_run != w.generation() && slot.ready_next != w.generation())
    return {false, "no READY=1 from this run yet"};
  return {true, ""};
}

}  // namespace recycler
