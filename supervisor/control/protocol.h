// The control socket's protocol (docs/control.md), without any I/O: one JSON
// object per line each way. What a request may say, how big it may be, where
// the socket is by default, the ring of recent events, and the JSON of the
// status snapshot (status.h). The server (server.h) and the CLI (client.h)
// both use it.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <deque>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "supervisor/control/status.h"
#include "supervisor/util/result.h"

namespace recycler::control {

using Json = nlohmann::json;

// Limits of the server (docs/control.md says them too).
constexpr size_t kMaxRequestBytes = 64 * 1024;         // one request line, newline excluded
constexpr size_t kMaxClients = 64;                     // connections at once
constexpr size_t kMaxPendingOutput = 8 * 1024 * 1024;  // unread output of one client
constexpr size_t kMaxTotalPendingOutput = 32 << 20;    // all clients' unread output
constexpr size_t kEventRingSize = 1000;                // recent events kept for `events`
constexpr size_t kMaxTargets = 4096;                   // programs or slots named in one request
constexpr size_t kLogRingLines = 1000;          // recent output lines kept per slot, for `logs`
constexpr size_t kLogRingBytes = 256 * 1024;    // and at most these bytes of them per slot,
constexpr size_t kLogTotalBytes = 64 << 20;     // and of all slots (past 256 slots: less each)
constexpr size_t kMaxLogAnswerBytes = 4 << 20;  // of lines in one `logs` answer (the newest)
constexpr size_t kDefaultLogLines = 50;         // `logs` without "lines"

enum class Command { Status, Start, Stop, Restart, Recycle, Signal, Reload, Events, Logs };
const char* to_string(Command command);
std::optional<Command> parse_command(std::string_view name);
// Every command's name, in the order the docs list them.
std::vector<std::string> command_names();

// A program, or one slot of it: "api" or "api:1".
struct Target {
  std::string program;
  std::optional<unsigned> slot;
  std::string str() const;  // as written back: "api", "api:1"
};
Result<Target> parse_target(std::string_view text);

struct Request {
  Command command = Command::Status;
  std::vector<Target> targets;  // status: a filter (empty: all); start...signal: what to act on
  int signal = 0;               // signal
  bool follow = false;          // events, logs
  // logs: the last this many lines of each slot (unset: kDefaultLogLines);
  // events: the last this many events (unset: all the ring holds).
  std::optional<size_t> lines;
};
// Whether `target` names `program`'s slot `slot`.
bool matches(const Target& target, std::string_view program, unsigned slot);

// One request line (without its newline). The error is what the response
// says: "not JSON: ...", "unknown command \"x\"", "\"targets\": ...".
Result<Request> parse_request(std::string_view line);
// The line a client sends (no newline).
std::string request_line(const Request& request);

// {"ok":false,"error":MESSAGE} (and "errors" when given), one line.
std::string error_line(std::string_view message, const std::vector<std::string>& errors = {});

// The socket of the supervisor that runs the config `config_name` (the
// config file's basename without its extension; wrap mode: the program's
// name): /run/recycler/NAME.sock as root (euid 0), else
// $XDG_RUNTIME_DIR/recycler/NAME.sock; nullopt without a runtime directory.
std::optional<std::string> default_socket_path(std::string_view config_name, uid_t euid,
                                               const char* xdg_runtime_dir);
// "/etc/recycler/api.yaml" -> "api".
std::string config_name(std::string_view config_path);

// The status snapshot as JSON: one object per worker slot, and the totals.
Json to_json(const WorkerStatus& worker);
Json to_json(const SupervisorStatus& status);  // {"supervisor": {...}, "workers": [...]}
// Back from JSON, for the CLI's table (what it needs of each slot).
WorkerStatus worker_from_json(const Json& j);

// The most recent lines, oldest first: at most `capacity` of them and, when
// max_bytes is set, at most that many bytes in all (the oldest go first).
// `events`: each the JSON line of one event; `logs`: of one output line.
class EventRing {
 public:
  explicit EventRing(size_t capacity = kEventRingSize, size_t max_bytes = 0)
      : capacity_(capacity), max_bytes_(max_bytes) {}
  void push(std::string line);
  const std::deque<std::string>& lines() const { return lines_; }
  // A new bound in bytes, applied from the next push.
  void set_max_bytes(size_t max_bytes) { max_bytes_ = max_bytes; }
  size_t bytes() const { return bytes_; }

 private:
  size_t capacity_;
  size_t max_bytes_;
  size_t bytes_ = 0;
  std::deque<std::string> lines_;
};

// Now, as events and output lines carry it: "2026-11-28T05:32:08.123Z" (UTC,
// to the millisecond).
std::string timestamp();

// One line a worker wrote, as `logs` sends it: {"time", "program", "slot",
// "pid", "stream", "line"} (and "partial": true for a piece of an over-long
// line). `line` is any bytes: invalid UTF-8 becomes U+FFFD.
// Its first bytes, {"time":"2026-11-28T05:32:08.123Z", sort lines by time.
constexpr size_t kOutputTimePrefix = 33;
std::string output_line(std::string_view time, std::string_view program, unsigned slot, pid_t pid,
                        std::string_view stream, std::string_view line, bool partial);

}  // namespace recycler::control
