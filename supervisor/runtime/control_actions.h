// The operator's commands (the control socket, control/server.h): where the
// socket goes, what each command does to the programs' workers, and the
// slots an operator holds stopped or restarts. Out of Supervisor, which
// owns the programs and hands this class what the commands need: the
// programs, its deferred queue, and callbacks for its status, a reload and
// whether it is starting or stopping. In turn it tells this class when a
// slot stops and what a reload replaced, and asks it, before exiting,
// whether an operator holds a slot stopped.
#pragma once

#include <uv.h>

#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "supervisor/config/config.h"
#include "supervisor/control/protocol.h"
#include "supervisor/control/server.h"
#include "supervisor/control/status.h"
#include "supervisor/log/log.h"
#include "supervisor/runtime/program.h"
#include "supervisor/util/deferred_queue.h"
#include "supervisor/util/timers.h"
#include "supervisor/worker/worker.h"

namespace recycler {

// What a reload did (SIGHUP or `recycler reload`): the reload command's
// answer.
struct ReloadOutcome {
  bool ok = false;
  std::string message;
  std::vector<std::string> errors, warnings;  // file:line:col: ...
  std::vector<std::string> unchanged, restarted, stopped, started;
};

class OperatorCommands {
 public:
  struct Hooks {
    std::function<SupervisorStatus()> status;  // every program and worker
    std::function<ReloadOutcome()> reload;     // rereads the config file
    std::function<bool()> starting;            // start-up under way: status and logs only
    std::function<bool()> stopping;            // recycler is stopping: nothing
  };
  // `loop`, `timers`, `programs` and `deferred` outlive this.
  OperatorCommands(uv_loop_t* loop, Timers& timers, const Programs& programs,
                   DeferredQueue& deferred, Hooks hooks);

  // Opens the control socket: config.control.socket, else the default place
  // for the config's name (`config_path`'s, or in wrap mode the wrapped
  // program's). False when recycler must not run (logged: another recycler
  // of this config, or a socket the config asks for and cannot have).
  bool open(const config::Config& config, const std::string& config_path, bool wrap_mode);
  void close() { server_.reset(); }

  // An event of recycler's log, for `recycler events` while the socket is
  // open.
  void publish_event(log::Level level, std::string_view name, std::string_view message,
                     const log::Fields& fields);

  // A slot has stopped (the workers' state hook): it starts again, on a
  // later turn, if an operator restarts it.
  void slot_stopped(const Worker& worker);
  // Whether an operator holds a slot stopped (`recycler stop`): recycler
  // does not exit while one is, as it does when every program has exited.
  bool holding() const { return !held_.empty(); }
  // A reload replaced every program but `unchanged`: what replaces a
  // program starts afresh, an operator's stop or restart does not hold it.
  void reloaded(const std::vector<std::string>& unchanged);

 private:
  using SlotKey = std::pair<std::string, unsigned>;
  // What a command did to one slot.
  struct Outcome {
    bool ok = true;
    std::string message;
  };

  std::string answer(const control::Request& request);
  std::string answer_status(const control::Request& request);
  std::string answer_reload();
  // `logs` is answered by the server, once its targets are known.
  std::string check_logs_targets(const control::Request& request);
  // start, stop, restart, recycle, signal: one result per slot named.
  std::string act(const control::Request& request);
  // The program a target names, or null and why it cannot be acted on.
  const Program* target_program(const control::Target& target, std::string& refusal) const;
  std::optional<Outcome> act_on(const control::Request& request, const Program& program,
                                const SlotKey& key, Worker& worker);
  Outcome start(const SlotKey& key, Worker& worker);
  Outcome stop(const SlotKey& key, Worker& worker);
  Outcome restart(const SlotKey& key, Worker& worker);
  Outcome recycle(const Program& program, Worker& worker);
  Outcome signal(Worker& worker, int signum);
  // Stops the slot, then starts it once stopped (slot_stopped). Last
  // operator command wins: a `stop` meanwhile cancels the start.
  void restart_when_stopped(const SlotKey& key, Worker& worker);
  Worker* find_worker(const std::string& program, unsigned slot) const;

  uv_loop_t* loop_;
  Timers& timers_;
  const Programs& programs_;
  DeferredQueue& deferred_;
  Hooks hooks_;
  std::unique_ptr<control::Server> server_;
  // Slots an operator stopped (`recycler stop`), or is restarting.
  std::set<SlotKey> held_;
  // Slots to start once stopped (`recycler restart`): one entry however
  // often it is asked, dropped by a later `stop`.
  std::set<SlotKey> restarting_;
};

}  // namespace recycler
