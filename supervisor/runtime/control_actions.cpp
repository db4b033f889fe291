// The supervisor's side of the control socket (control/server.h): where the
// socket goes, and what each command does to the programs it owns. Kept out
// of supervisor.cpp so that the lifecycle there stays readable.
#include <fmt/chrono.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>

#include "policies/base/units.h"
#include "supervisor/control/protocol.h"
#include "supervisor/log/log.h"
#include "supervisor/runtime/supervisor.h"

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

}  // namespace

void Supervisor::open_control() {
  std::string path = config_.control.socket;
  if (path.empty()) {
    std::string name = options_.wrap_mode && !config_.programs.empty()
                           ? config_.programs.front().name
                           : control::config_name(options_.config_path);
    auto found = control::default_socket_path(name, ::geteuid(), std::getenv("XDG_RUNTIME_DIR"));
    if (!found) {
      log::warn("no control socket: no runtime directory (not root and XDG_RUNTIME_DIR unset)");
      return;
    }
    path = *found;
  }
  auto server =
      control::Server::open(&loop_, timers_, {path, config_.control.mode, config_.control.gid},
                            [this](const control::Request& r) { return on_control(r); });
  if (!server) {
    // Another recycler of this config, or a socket the config asks for and
    // cannot have: an error. A wrapped command, or a default place that
    // cannot hold one (a runtime directory of another user), runs on without.
    bool asked = !config_.control.socket.empty() || server.error().code == EADDRINUSE;
    if (!options_.wrap_mode && asked) {
      log::error("{}", server.error().message);
      exit_code_ = 1;
    } else {
      log::warn("no control socket: {}", server.error().message);
    }
    return;
  }
  control_ = std::move(*server);
  log::info("control socket: {}", control_->path());
  log::observe_events([this](log::Level level, std::string_view name, std::string_view message,
                             const log::Fields& fields) {
    counters_.observe(name, fields);
    if (control_) control_->publish(event_line(level, name, message, fields));
  });
  log::observe_output([this](std::string_view program, unsigned slot, pid_t pid, log::Stream stream,
                             std::string_view line, bool partial) {
    if (!control_) return;
    const char* name = stream == log::Stream::Stdout ? "stdout" : "stderr";
    control_->publish_output(
        std::string(program), slot,
        control::output_line(control::timestamp(), program, slot, pid, name, line, partial));
  });
}

Worker* Supervisor::find_worker(const std::string& program, unsigned slot) {
  auto it = programs_.find(program);
  if (it == programs_.end() || slot >= it->second.workers.size()) return nullptr;
  return it->second.workers[slot].get();
}

std::string Supervisor::on_control(const control::Request& r) {
  using control::Command;
  if (shutting_down_) return control::error_line("recycler is stopping");
  switch (r.command) {
    case Command::Status: {
      SupervisorStatus s = status();
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
    case Command::Reload: {
      if (start_up_) return control::error_line("recycler is starting; reload once it has");
      ReloadOutcome o = reload();
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
    case Command::Events:  // answered by the server
      return control::error_line("events: not here");
    case Command::Logs:  // answered by the server, once its targets are known
      for (const control::Target& t : r.targets) {
        auto it = programs_.find(t.program);
        if (it == programs_.end())
          return control::error_line("no program " + units::quote(t.program));
        if (t.slot && *t.slot >= it->second.workers.size())
          return control::error_line(
              fmt::format("no slot {} ({} has {})", *t.slot, t.program, it->second.workers.size()));
      }
      return "";
    default:
      if (start_up_) return control::error_line("recycler is starting; try again once it has");
      return control_act(r);
  }
}

// Held while it stops, so that recycler does not take the stop for the end
// of every program; started again once stopped (restarted_slot_stopped).
void Supervisor::restart_when_stopped(const std::pair<std::string, unsigned>& key, Worker& worker) {
  held_.insert(key);
  restarting_.insert(key);
  worker.stop(nullptr);
}

void Supervisor::restarted_slot_stopped(const Worker& worker) {
  std::pair<std::string, unsigned> key{worker.program().name, worker.slot()};
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

// start, stop, restart, recycle, signal: one result per slot named (a slot
// named twice, once).
std::string Supervisor::control_act(const control::Request& r) {
  using control::Command;
  Json results = Json::array();
  bool all_ok = true;
  auto result = [&](const std::string& target, bool ok, const std::string& message) {
    results.push_back({{"target", target}, {"ok", ok}, {"message", message}});
    all_ok = all_ok && ok;
  };
  std::set<std::pair<std::string, unsigned>> done;  // a slot named twice is acted on once
  for (const control::Target& t : r.targets) {
    auto it = programs_.find(t.program);
    if (it == programs_.end()) {
      result(t.str(), false, "no program " + units::quote(t.program));
      continue;
    }
    Program& program = it->second;
    if (program.replacing) {
      result(t.str(), false, "being replaced by a reload; try again once it has started");
      continue;
    }
    if (t.slot && *t.slot >= program.workers.size()) {
      result(t.str(), false,
             fmt::format("no slot {} ({} has {})", *t.slot, t.program, program.workers.size()));
      continue;
    }
    for (auto& w : program.workers) {
      if (t.slot && w->slot() != *t.slot) continue;
      std::pair<std::string, unsigned> key{t.program, w->slot()};
      if (!done.insert(key).second) continue;
      std::string name = t.program + ":" + std::to_string(w->slot());
      WorkerState state = w->state();
      bool idle = state == WorkerState::Stopped || state == WorkerState::Failed;
      switch (r.command) {
        case Command::Start:
          if (idle) {
            held_.erase(key);
            w->start();
            result(name, true, "started");
          } else if (held_.count(key)) {  // an operator's stop under way: start after it
            restart_when_stopped(key, *w);
            result(name, true, "starting once stopped");
          } else {
            result(name, true, std::string("already ") + to_string(state));
          }
          break;
        case Command::Stop:
          restarting_.erase(key);
          if (idle) {
            result(name, true, std::string("already ") + to_string(state));
          } else {
            held_.insert(key);
            w->stop(nullptr);
            result(name, true, "stopping");
          }
          break;
        case Command::Restart:
          if (idle) {
            held_.erase(key);
            w->start();
            result(name, true, "started");
            break;
          }
          restart_when_stopped(key, *w);
          result(name, true, "restarting");
          break;
        case Command::Recycle:
          if (program.monitor && program.monitor->recycle(w->slot(), "asked by recycler recycle"))
            result(name, true, "recycling");
          else
            result(name, false,
                   std::string("not recycled: it is ") + to_string(state) +
                       (w->recycling() ? " (a recycle is under way)" : ""));
          break;
        case Command::Signal:
          if (w->signal(r.signal))
            result(name, true,
                   units::signal_name(r.signal) + " sent to pid " +
                       std::to_string(w->pid().value_or(0)));
          else
            result(name, false, std::string("not signalled: it is ") + to_string(state));
          break;
        default:
          break;
      }
    }
  }
  Json j{{"ok", all_ok}, {"results", std::move(results)}};
  if (!all_ok) j["error"] = std::string(to_string(r.command)) + ": not every target succeeded";
  return dump(j);
}

}  // namespace recycler
