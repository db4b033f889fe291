#include "supervisor/runtime/control_actions.h"

#include <fmt/chrono.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>

#include "policies/base/units.h"

namespace recycler {
namespace {

using control::Json;

std::string dump(const Json& j) {
  return j.dump(-1, ' ', false, Json::error_handler_t::replace);
}

// An event as the JSON log writes it: time, level, event, msg, then its fields.
std::string event_line(log::Level level, std::string_view name, std::string_view message,
                       const log::Fields& fields) {
  Json j{{"time", control::timestamp()},
         {"level", config::to_string(level)},
         {"event", name},
         {"msg", message}};
  for (const log::Field& f : fields) {
    if (j.contains(f.key)) continue;
    std::visit([&](const auto& v) { j[f.key] = v; }, f.value);
  }
  return dump(j);
}

// Stopped or failed: nothing to stop, and `start` starts it now.
bool at_rest(WorkerState state) {
  return state == WorkerState::Stopped || state == WorkerState::Failed;
}

}  // namespace

OperatorCommands::OperatorCommands(uv_loop_t* loop, Timers& timers, const Programs& programs,
                                   DeferredQueue& deferred, Hooks hooks)
    : loop_(loop),
      timers_(timers),
      programs_(programs),
      deferred_(deferred),
      hooks_(std::move(hooks)) {}

bool OperatorCommands::open(const config::Config& config, const std::string& config_path,
                            bool wrap_mode) {
  std::string path = config.control.socket;
  if (path.empty()) {
    std::string name = wrap_mode && !config.programs.empty() ? config.programs.front().name
                                                             : control::config_name(config_path);
    auto found = control::default_socket_path(name, ::geteuid(), std::getenv("XDG_RUNTIME_DIR"));
    if (!found) {
      log::warn("no control socket: no runtime directory (not root and XDG_RUNTIME_DIR unset)");
      return true;
    }
    path = *found;
  }
  auto server =
      control::Server::open(loop_, timers_, {path, config.control.mode, config.control.gid},
                            [this](const control::Request& r) { return answer(r); });
  if (!server) {
    // Another recycler of this config, or a socket the config asks for and
    // cannot have: an error. A wrapped command, or a default place that
    // cannot hold one (a runtime directory of another user), runs on without.
    bool asked = !config.control.socket.empty() || server.error().code == EADDRINUSE;
    if (!wrap_mode && asked) {
      log::error("{}", server.error().message);
      return false;
    }
    log::warn("no control socket: {}", server.error().message);
    return true;
  }
  server_ = std::move(*server);
  log::info("control socket: {}", server_->path());
  log::observe_output([this](std::string_view program, unsigned slot, pid_t pid, log::Stream stream,
                             std::string_view line, bool partial) {
    if (!server_) return;
    const char* name = stream == log::Stream::Stdout ? "stdout" : "stderr";
    server_->publish_output(
        std::string(program), slot,
        control::output_line(control::timestamp(), program, slot, pid, name, line, partial));
  });
  return true;
}

void OperatorCommands::publish_event(log::Level level, std::string_view name,
                                     std::string_view message, const log::Fields& fields) {
  if (server_) server_->publish(event_line(level, name, message, fields));
}

std::string OperatorCommands::answer(const control::Request& r) {
  using control::Command;
  if (hooks_.stopping()) return control::error_line("recycler is stopping");
  switch (r.command) {
    case Command::Status:
      return answer_status(r);
    case Command::Reload:
      return answer_reload();
    case Command::Events:  // answered by the server
      return control::error_line("events: not here");
    case Command::Logs:
      return check_logs_targets(r);
    default:
      if (hooks_.starting())
        return control::error_line("recycler is starting; try again once it has");
      return act(r);
  }
}

std::string OperatorCommands::answer_status(const control::Request& r) {
  SupervisorStatus s = hooks_.status();
  if (!r.targets.empty()) {
    for (const control::Target& t : r.targets)
      if (!programs_.count(t.program))
        return control::error_line("no program " + units::quote(t.program));
    for (ProgramStatus& p : s.programs)
      std::erase_if(p.workers, [&](const WorkerStatus& w) {
        for (const control::Target& t : r.targets)
          if (t.program == w.program && (!t.slot || *t.slot == w.slot)) return false;
        return true;
      });
  }
  Json j = control::to_json(s);
  j["ok"] = true;
  return dump(j);
}

std::string OperatorCommands::answer_reload() {
  if (hooks_.starting()) return control::error_line("recycler is starting; reload once it has");
  ReloadOutcome o = hooks_.reload();
  Json j{{"ok", o.ok}, {"message", o.message}, {"warnings", o.warnings}};
  if (!o.ok) {
    j["error"] = o.message;
    j["errors"] = o.errors;
  } else {
    j["changes"] = {{"unchanged", o.unchanged},
                    {"restarted", o.restarted},
                    {"stopped", o.stopped},
                    {"started", o.started}};
  }
  return dump(j);
}

std::string OperatorCommands::check_logs_targets(const control::Request& r) {
  for (const control::Target& t : r.targets) {
    auto it = programs_.find(t.program);
    if (it == programs_.end()) return control::error_line("no program " + units::quote(t.program));
    if (t.slot && *t.slot >= it->second.workers.size())
      return control::error_line(
          fmt::format("no slot {} ({} has {})", *t.slot, t.program, it->second.workers.size()));
  }
  return "";
}

// A slot named twice is acted on once.
std::string OperatorCommands::act(const control::Request& r) {
  Json results = Json::array();
  bool all_ok = true;
  auto result = [&](const std::string& target, const Outcome& o) {
    results.push_back({{"target", target}, {"ok", o.ok}, {"message", o.message}});
    all_ok = all_ok && o.ok;
  };
  std::set<SlotKey> done;
  for (const control::Target& t : r.targets) {
    std::string refusal;
    const Program* program = target_program(t, refusal);
    if (!program) {
      result(t.str(), {false, refusal});
      continue;
    }
    for (const auto& w : program->workers) {
      if (t.slot && w->slot() != *t.slot) continue;
      SlotKey key{t.program, w->slot()};
      if (!done.insert(key).second) continue;
      if (std::optional<Outcome> o = act_on(r, *program, key, *w))
        result(t.program + ":" + std::to_string(w->slot()), *o);
    }
  }
  Json j{{"ok", all_ok}, {"results", std::move(results)}};
  if (!all_ok) j["error"] = std::string(to_string(r.command)) + ": not every target succeeded";
  return dump(j);
}

const Program* OperatorCommands::target_program(const control::Target& t,
                                                std::string& refusal) const {
  auto it = programs_.find(t.program);
  if (it == programs_.end()) {
    refusal = "no program " + units::quote(t.program);
    return nullptr;
  }
  const Program& program = it->second;
  if (program.replacing) {
    refusal = "being replaced by a reload; try again once it has started";
    return nullptr;
  }
  if (t.slot && *t.slot >= program.workers.size()) {
    refusal = fmt::format("no slot {} ({} has {})", *t.slot, t.program, program.workers.size());
    return nullptr;
  }
  return &program;
}

std::optional<OperatorCommands::Outcome> OperatorCommands::act_on(const control::Request& r,
                                                                  const Program& program,
                                                                  const SlotKey& key, Worker& w) {
  using control::Command;
  switch (r.command) {
    case Command::Start:
      return start(key, w);
    case Command::Stop:
      return stop(key, w);
    case Command::Restart:
      return restart(key, w);
    case Command::Recycle:
      return recycle(program, w);
    case Command::Signal:
      return signal(w, r.signal);
    default:
      return std::nullopt;
  }
}

// `start`: a slot at rest starts now; one an operator is stopping, once
// stopped.
OperatorCommands::Outcome OperatorCommands::start(const SlotKey& key, Worker& w) {
  WorkerState state = w.state();
  if (at_rest(state)) {
    held_.erase(key);
    w.start();
    return {true, "started"};
  }
  if (held_.count(key)) {
    restart_when_stopped(key, w);
    return {true, "starting once stopped"};
  }
  return {true, std::string("already ") + to_string(state)};
}

// `stop`: the slot stops and stays stopped (held), a restart under way or not.
OperatorCommands::Outcome OperatorCommands::stop(const SlotKey& key, Worker& w) {
  WorkerState state = w.state();
  restarting_.erase(key);
  if (at_rest(state)) return {true, std::string("already ") + to_string(state)};
  held_.insert(key);
  w.stop(nullptr);
  return {true, "stopping"};
}

// `restart`: a slot at rest starts now; a running one stops, then starts.
OperatorCommands::Outcome OperatorCommands::restart(const SlotKey& key, Worker& w) {
  if (at_rest(w.state())) {
    held_.erase(key);
    w.start();
    return {true, "started"};
  }
  restart_when_stopped(key, w);
  return {true, "restarting"};
}

// `recycle`: asked of the program's controller, as a policy's decision is,
// so the same queue and checkpoint rules apply.
OperatorCommands::Outcome OperatorCommands::recycle(const Program& program, Worker& w) {
  WorkerState state = w.state();
  if (program.monitor && program.monitor->recycle(w.slot(), "asked by recycler recycle"))
    return {true, "recycling"};
  return {false, std::string("not recycled: it is ") + to_string(state) +
                     (w.recycling() ? " (a recycle is under way)" : "")};
}

// `signal`: to the slot's main process.
OperatorCommands::Outcome OperatorCommands::signal(Worker& w, int signum) {
  WorkerState state = w.state();
  if (w.signal(signum))
    return {true,
            units::signal_name(signum) + " sent to pid " + std::to_string(w.pid().value_or(0))};
  return {false, std::string("not signalled: it is ") + to_string(state)};
}

// Held while it stops, so that recycler does not take the stop for the end
// of every program; started again once stopped (slot_stopped).
void OperatorCommands::restart_when_stopped(const SlotKey& key, Worker& worker) {
  held_.insert(key);
  restarting_.insert(key);
  worker.stop(nullptr);
}

void OperatorCommands::slot_stopped(const Worker& worker) {
  SlotKey key{worker.program().name, worker.slot()};
  if (!restarting_.count(key)) return;
  // Not from inside the worker's own callback: a later turn, and only if no
  // stop came meanwhile and the program was not replaced.
  deferred_.defer([this, key] {
    if (!restarting_.erase(key)) return;
    held_.erase(key);
    auto it = programs_.find(key.first);
    if (it == programs_.end() || it->second.replacing) return;
    Worker* again = find_worker(key.first, key.second);
    if (again && again->state() == WorkerState::Stopped) again->start();
  });
}

Worker* OperatorCommands::find_worker(const std::string& program, unsigned slot) const {
  auto it = programs_.find(program);
  if (it == programs_.end() || slot >= it->second.workers.size()) return nullptr;
  return it->second.workers[slot].get();
}

void OperatorCommands::reloaded(const std::vector<std::string>& unchanged) {
  auto replaced = [&](const SlotKey& key) {
    return std::find(unchanged.begin(), unchanged.end(), key.first) == unchanged.end();
  };
  std::erase_if(held_, replaced);
  std::erase_if(restarting_, replaced);
}

}  // namespace recycler
