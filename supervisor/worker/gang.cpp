#include "supervisor/worker/gang.h"

#include <algorithm>
#include <utility>

#include "policies/base/units.h"
#include "supervisor/log/log.h"
#include "supervisor/worker/worker_checkpoints.h"

namespace recycler {

using log::Level;
using units::format_duration;

Gang::Gang(Timers& timers, std::vector<Worker*> workers)
    : timers_(timers), workers_(std::move(workers)), crashes_seen_(workers_.size(), 0) {
  for (size_t i = 0; i < workers_.size(); ++i) crashes_seen_[i] = workers_[i]->record().crashes();
}

Gang::~Gang() {
  // Hooks the workers still hold reach nothing from now on.
  *self_ = nullptr;
}

bool Gang::recycle(unsigned slot, RecycleCause cause, bool checkpoint, Duration delay) {
  if (busy()) return true;  // every rank is on its way already
  if (slot >= workers_.size() || worker(slot).state() != WorkerState::Running) return false;
  begin(slot, std::move(cause), checkpoint, true);
  delay_ = delay;
  return true;
}

void Gang::begin(unsigned trigger, RecycleCause cause, bool checkpoint, bool others_checkpoint) {
  const config::ProgramConfig& p = worker(trigger).program();
  Duration window = p.checkpoint.timeout;
  bool checkpoints = p.checkpoints();
  phase_ = Phase::Checkpointing;
  delay_ = Duration{0};
  members_.clear();
  since_ = timers_.now();
  ++recycles_;
  trigger_name_ = worker(trigger).name();
  std::vector<unsigned> ranks;
  for (unsigned i = 0; i < workers_.size(); ++i)
    if (i == trigger || worker(i).state() == WorkerState::Running) ranks.push_back(i);
  auto asks = [&](unsigned i) {
    return checkpoints && (i == trigger ? checkpoint : others_checkpoint);
  };
  bool asking = std::any_of(ranks.begin(), ranks.end(), asks);
  log::event(
      Level::Info, "gang_recycle",
      fmt::format("{} gang recycle: {}: {}; {} rank{} {}", p.name, trigger_name_, cause.reason,
                  ranks.size(), ranks.size() == 1 ? "" : "s",
                  asking ? "checkpoint, then stop and start together" : "stop and start together"),
      {{"program", p.name},
       {"slot", trigger},
       {"worker", trigger_name_},
       {"reason", cause.reason},
       {"ranks", ranks.size()},
       {"checkpoint", asking}});
  acting_ = true;
  for (unsigned i : ranks) {
    bool ask = asks(i);
    RecycleCause c{
        i == trigger ? cause.reason : "gang recycle: " + trigger_name_ + " " + cause.reason,
        cause.resume};
    std::weak_ptr<Gang*> self = self_;
    GangHooks hooks{[self, i] {
                      if (auto g = self.lock(); g && *g) (*g)->confirmed(i);
                    },
                    [self] {
                      if (auto g = self.lock(); g && *g) (*g)->maybe_release_starts();
                    }};
    if (worker(i).checkpoints().recycle_in_gang(std::move(c), ask ? window : Duration{0},
                                                std::move(hooks)))
      members_.push_back({i, ask, false});
  }
  acting_ = false;
  if (std::any_of(members_.begin(), members_.end(), [](const Member& m) { return m.asked; }))
    deadline_ = timers_.after(window, [this, window] {
      deadline_.reset();
      std::string late;
      for (const Member& m : members_)
        if (m.asked && !m.confirmed) late += (late.empty() ? "" : ", ") + worker(m.slot).name();
      if (!late.empty())
        log::warn("{} gang: {} did not confirm a checkpoint within {}; stopping every rank",
                  worker(members_.front().slot).program().name, late, format_duration(window));
      release_stops();
    });
  maybe_release_stops();
}

void Gang::confirmed(unsigned slot) {
  for (Member& m : members_)
    if (m.slot == slot) m.confirmed = true;
  maybe_release_stops();
}

void Gang::maybe_release_stops() {
  if (phase_ != Phase::Checkpointing) return;
  for (const Member& m : members_) {
    const Worker& w = worker(m.slot);
    bool saving = m.asked && !m.confirmed && w.state() == WorkerState::Stopping &&
                  w.phase() == StopPhase::StopCheckpoint;
    if (saving) return;
  }
  release_stops();
}

void Gang::release_stops() {
  if (phase_ != Phase::Checkpointing) return;
  deadline_.reset();  // the checkpoint's
  phase_ = Phase::Stopping;
  acting_ = true;
  for (const Member& m : members_) worker(m.slot).checkpoints().release_stop();
  acting_ = false;
  maybe_release_starts();
}

void Gang::maybe_release_starts() {
  if (phase_ != Phase::Stopping) return;
  std::string stopped;
  for (const Member& m : members_) {
    const Worker& w = worker(m.slot);
    if (w.checkpoints().parked()) continue;
    if (w.state() != WorkerState::Stopped && w.state() != WorkerState::Failed) return;
    stopped += (stopped.empty() ? "" : ", ") + w.name();
  }
  if (!stopped.empty()) {
    // A rank stopped for good (an operator's stop, a shutdown): the others
    // would wait for it forever.
    phase_ = Phase::Idle;
    deadline_.reset();
    log::info("{} gang: {} stopped during the gang's recycle; the other ranks stay stopped",
              worker(members_.front().slot).program().name, stopped);
    acting_ = true;
    for (const Member& m : members_)
      if (worker(m.slot).checkpoints().parked()) worker(m.slot).stop(nullptr);
    acting_ = false;
    return;
  }
  if (delay_ > Duration{0}) {  // a recycle loop's: the whole gang waits
    if (!deadline_) deadline_ = timers_.after(delay_, [this] { release_starts(); });
    return;
  }
  release_starts();
}

void Gang::release_starts() {
  deadline_.reset();
  phase_ = Phase::Starting;
  acting_ = true;
  for (const Member& m : members_) worker(m.slot).checkpoints().release_start();
  acting_ = false;
  maybe_done();
}

void Gang::maybe_done() {
  if (phase_ != Phase::Starting) return;
  unsigned running = 0;
  for (const Member& m : members_) {
    const Worker& w = worker(m.slot);
    if (w.checkpoints().parked() || w.state() == WorkerState::Starting) return;
    if (w.state() == WorkerState::Running) ++running;
  }
  phase_ = Phase::Idle;
  auto took = std::chrono::duration_cast<Duration>(timers_.now() - since_);
  const std::string& program = worker(members_.front().slot).program().name;
  log::event(
      Level::Info, "gang_restarted",
      fmt::format("{} gang restarted: {} of {} rank{} running, {} after the decision", program,
                  running, members_.size(), members_.size() == 1 ? "" : "s", format_duration(took)),
      {{"program", program},
       {"ranks", members_.size()},
       {"running", running},
       {"took_s", static_cast<double>(took.count()) / 1000.0}});
}

void Gang::on_state_change(Worker& w) {
  unsigned slot = w.slot();
  if (slot >= workers_.size() || workers_[slot] != &w) return;
  bool crash = w.record().crashes() > crashes_seen_[slot];
  crashes_seen_[slot] = w.record().crashes();
  if (acting_) return;  // its own step; it looks again once that is done
  switch (phase_) {
    case Phase::Idle:
      if (crash && w.state() == WorkerState::Exited) crashed(w);
      return;
    case Phase::Checkpointing:
      return maybe_release_stops();
    case Phase::Stopping:
      // A rank that parks says so through its hook, once it is done.
      if (!w.checkpoints().parked()) maybe_release_starts();
      return;
    case Phase::Starting:
      return maybe_done();
  }
}

// A rank crashed: the others wait in a collective for a peer that is gone.
void Gang::crashed(Worker& w) {
  unsigned others = 0;
  for (Worker* o : workers_)
    if (o != &w && o->state() == WorkerState::Running) ++others;
  if (others == 0) return;
  auto exit = w.record().last_exit();
  std::string reason = "a rank crashed: " + w.name() + " " + (exit ? exit->describe() : "exited");
  // The crashed rank restarts after its own backoff; the rest go together,
  // without a checkpoint: their collectives cannot complete.
  begin(w.slot(), RecycleCause{std::move(reason), false}, false, false);
}

}  // namespace recycler
