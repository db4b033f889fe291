// The sd_notify(3) datagram format: newline-separated KEY=VALUE assignments.
// The systemd keys a supervisor acts on, plus recycler's extensions for what
// systemd has no word for. Pure: no I/O, safe on any bytes a worker sends.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace recycler::notify {

inline constexpr std::size_t kMaxStatusBytes = 1024;           // longer STATUS= values are cut
inline constexpr uint64_t kMaxRequestsPerMessage = 1'000'000;  // RECYCLER_REQUESTS= above: rejected
inline constexpr std::size_t kMaxProblems = 8;                 // then one "N more problems" entry
// RECYCLER_ITERATION= above: rejected. Far past any run, and exact as a double
// (JSON, the timeline's readers).
inline constexpr uint64_t kMaxIteration = uint64_t{1} << 53;

// What one datagram said. A key given twice counts as its last valid value.
struct NotifyMessage {
  bool ready = false;         // READY=1: startup finished
  bool stopping = false;      // STOPPING=1: shutting down of its own accord
  bool watchdog = false;      // WATCHDOG=1: still alive
  bool checkpointed = false;  // RECYCLER_CHECKPOINTED=1: the requested checkpoint is on disk
  std::optional<std::string> status;  // STATUS=...: free text, at most kMaxStatusBytes
  std::optional<pid_t> mainpid;       // MAINPID=N: the service's main process
  // RECYCLER_REQUESTS=N: requests completed since the sender's previous message.
  std::optional<uint64_t> requests;
  // RECYCLER_DEVICE_BYTES=N: accelerator memory in use, for devices without a vendor API.
  std::optional<uint64_t> device_bytes;
  // RECYCLER_ITERATION=N: the worker is at the boundary before its iteration N
  // (a decode, a training step, a batch); the leak policy projects the growth
  // per iteration from the metric's level at each boundary.
  std::optional<uint64_t> iteration;
  // The first key in recycler's namespace it does not know (RECYCLER_REQUEST,
  // a typo for RECYCLER_REQUESTS), as quote() prints it: the sender meant
  // something recycler will never act on.
  std::optional<std::string> unknown_key;
  // One short description per skipped line, e.g. `RECYCLER_REQUESTS: "abc" is not a number`.
  std::vector<std::string> problems;
};

// Unknown keys are ignored (systemd defines many: EXTEND_TIMEOUT_USEC, ERRNO,
// FDSTORE, ...); the first unknown RECYCLER_* key is kept in `unknown_key`. A line without '=',
// with an empty key, with a NUL byte or with a bad value is recorded in `problems` and skipped; the
// others count. Values are taken verbatim: a CRLF sender's "\r" stays part of the value.
NotifyMessage parse_message(std::string_view datagram);

// What recycler answers a process that reports requests from a socket with
// an address of its own (an autobound abstract one: NotifySocket::Datagram::
// from), in the same KEY=VALUE format. A process whose requests a
// policy counts one by one (max_requests, scope: process) hears its drawn
// limit once; it may then hold its counts until it reaches that limit,
// report them in one message and wait for the second answer, which comes
// only after recycler has acted on that report (signalled the process, when
// its turn has come): the limit holds to the request, with one message a
// process instead of one a request near its limit.
struct Answer {
  // RECYCLER_REQUEST_LIMIT=N: the limit drawn for this process.
  std::optional<uint64_t> request_limit;
  // RECYCLER_REQUESTS_SEEN=N: its count, N >= its limit, reported and acted on.
  std::optional<uint64_t> requests_seen;
  explicit operator bool() const { return request_limit || requests_seen; }
};
// "RECYCLER_REQUEST_LIMIT=237\nRECYCLER_REQUESTS_SEEN=237"; empty for an empty Answer.
std::string format_answer(const Answer& answer);

}  // namespace recycler::notify
