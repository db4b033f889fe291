// The operator's side of the control socket: `recycler status`, `restart`,
// `stop`, `start`, `recycle`, `signal`, `reload`, `events`, `logs` and `top`.
// Each connects to the socket of a running recycler (--socket PATH, or the one
// of the config given with -c FILE: its control.socket, else the default path
// of protocol.h; with neither, the one recycler that answers in the default
// socket directory), sends one request and prints the answer, as text or, with
// --json, as JSON. A CLI is allowed to wait: these block, with timeouts.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "supervisor/control/protocol.h"

namespace recycler::control {

// Exit statuses beside 0 (success) and 2 (usage).
constexpr int kExitFailed = 1;       // the supervisor refused or failed the command
constexpr int kExitNotRunning = 3;   // status: a slot is not running
constexpr int kExitUnreachable = 4;  // no supervisor answers

struct ClientOptions {
  std::string config_file;  // -c
  std::string socket;       // --socket
  bool json = false;
};

int status_command(const ClientOptions& o, const std::vector<std::string>& programs);
// start, stop, restart, recycle and signal (`signal` names the signal).
int action_command(const ClientOptions& o, Command command, const std::vector<std::string>& targets,
                   const std::string& signal = "");
int reload_command(const ClientOptions& o);
// The last `lines` events (all the ring holds when unset), then with
// `follow` the live ones.
int events_command(const ClientOptions& o, bool follow, std::optional<size_t> lines);
// Each slot's last `lines` output lines (targets: programs or slots, none:
// all), then with `follow` what they write next.
int logs_command(const ClientOptions& o, const std::vector<std::string>& targets, size_t lines,
                 bool follow);
// Refreshes every `interval_s`; stops after `count` refreshes (0: until
// interrupted). Not a terminal: plain text, no escapes.
int top_command(const ClientOptions& o, double interval_s, unsigned count);

}  // namespace recycler::control
