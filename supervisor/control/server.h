// The control socket's server (docs/control.md): a unix stream socket in the
// supervisor's loop, one JSON request per line in, one JSON response per line
// out, the live events for `events --follow`, and each slot's recent output
// for `logs` (a ring per slot: kLogRingLines, kLogRingBytes) and `logs -f`.
//
// recycler runs as root over clients it does not trust, and supervision
// (sampling, deciding, stopping) must never wait on one, so:
//   - who: the peer's credentials (SO_PEERCRED, SO_PEERGROUPS) must be root,
//     recycler's own user, or a member of control.group when one is set;
//     anyone else gets one error line and is closed. The socket file is
//     owner-only (0600) unless the config opens it to that group.
//   - how much per turn of the loop: one read (kReadChunk) and at most
//     kRequestsPerTurn requests per client; what is left waits for the next
//     turn (an idle handle), after every other client, timer and event.
//   - how much held: a request line is at most kMaxRequestBytes; a client's
//     next request is not read while its last answer is unsent (a client
//     that pipelines and does not read holds one answer, not thousands); a
//     follower whose unread events pass kMaxPendingOutput is dropped, and
//     when all clients' unsent output passes kMaxTotalPendingOutput, the one
//     with the most is dropped.
//   - how many: at most kMaxClients connections; a newcomer past that evicts
//     the oldest idle or half-sent one, else the oldest follower; only when
//     every client is being answered is it refused (one error line).
//   - how long: a request must be complete kRequestTimeout after its first
//     byte (more bytes do not extend it); output must make progress within
//     kWriteTimeout; an idle connection (not following) is closed after
//     kIdleTimeout.
//   - reloads coalesce: every reload asked while one waits gets that one's
//     answer, and reloads run at most once per kReloadInterval.
//   - followers only listen: one that sends anything is closed.
//   - nothing blocks: every socket is non-blocking and watched by the loop.
//   - bad input: not JSON, not an object, an unknown command or key, a key
//     given twice: one error line, then the connection is closed.
// The socket is created where util/safe_dir.h allows, in a directory that no
// other user may write to (a sticky /tmp is refused: anyone could bind the
// name first), bound through the directory's fd; a stale socket of a
// recycler that is gone is replaced, a live one (it accepts a connection) is
// an error.
#pragma once

#include <sys/types.h>
#include <uv.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "supervisor/control/protocol.h"
#include "supervisor/util/fd.h"
#include "supervisor/util/result.h"
#include "supervisor/util/timers.h"
#include "supervisor/util/uv.h"

namespace recycler::control {

struct ServerOptions {
  std::string path;          // where the socket goes
  mode_t mode = 0600;        // of the socket file
  std::optional<gid_t> gid;  // its group, whose members may connect
};

class Server {
 public:
  // One request in, its response line out (no newline), from the loop.
  // `events` requests are answered by the server itself; `logs` requests
  // too, once the handler has checked their targets: for those it returns
  // an error line, or "" when every target names a program.
  using Handler = std::function<std::string(const Request&)>;

  // The error's code is EADDRINUSE when another recycler answers there.
  static Result<std::unique_ptr<Server>> open(uv_loop_t* loop, Timers& timers,
                                              ServerOptions options, Handler handler);
  ~Server();  // closes every client and removes the socket file
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // An event (one JSON object, no newline): into the ring, and to followers.
  void publish(std::string line);
  // A worker's output line (output_line()): into its slot's ring, and to
  // the `logs -f` clients that follow that slot.
  void publish_output(const std::string& program, unsigned slot, std::string line);
  const std::string& path() const { return options_.path; }
  size_t clients() const { return clients_.size(); }

  static constexpr Duration kRequestTimeout{5000};
  static constexpr Duration kWriteTimeout{10000};
  static constexpr Duration kIdleTimeout{60000};
  static constexpr Duration kReloadInterval{500};
  static constexpr size_t kReadChunk = 16 * 1024;
  static constexpr int kRequestsPerTurn = 4;

 private:
  struct Client;
  Server(uv_loop_t* loop, Timers& timers, ServerOptions options, Handler handler);

  void on_accept();
  bool admitted(int fd, std::string& why) const;
  Client* evictable() const;
  void on_client(Client& c, int events);
  void read_from(Client& c);
  void serve(Client& c);
  void handle_line(Client& c, std::string_view line);
  void answer_events(Client& c, bool follow, std::optional<size_t> last);
  void answer_logs(Client& c, const Request& request);
  void ask_reload(Client& c);
  void run_reload();
  void later(Client& c);
  void on_idle();
  void send(Client& c, std::string line);
  void flush(Client& c);
  void cap_total_output();
  void settle(Client& c);
  void arm(Client& c);
  void update_poll(Client& c);
  void drop(Client& c, const char* why);

  uv_loop_t* loop_;
  Timers& timers_;
  ServerOptions options_;
  Handler handler_;
  UniqueFd dir_;      // the socket's directory (O_PATH)
  std::string name_;  // the socket's name in it
  ino_t inode_ = 0;   // of the socket file recycler bound
  UniqueFd listen_fd_;
  uv::Handle<uv_poll_t> listen_poll_;  // after listen_fd_: closed first
  EventRing ring_;
  std::map<std::pair<std::string, unsigned>, EventRing> output_;  // by program, slot
  uint64_t next_id_ = 0;
  std::map<uint64_t, std::unique_ptr<Client>> clients_;  // by id: oldest first
  std::vector<uint64_t> next_turn_;                      // clients with requests left
  uv::Handle<uv_idle_t> idle_;                           // runs next_turn_
  std::vector<uint64_t> reload_waiters_;                 // clients whose reload is coming
  std::unique_ptr<Timer> reload_timer_;
  std::optional<TimePoint> last_reload_;
};

}  // namespace recycler::control
