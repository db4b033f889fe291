// The metrics endpoint: a TCP server on the supervisor's libuv loop that
// answers GET /metrics (http.h) with what `render` returns, and the probes'
// GET /healthz and /readyz with what `probe` says (200 or 503, and its
// line). A probe is answered by the loop itself: one that is blocked does
// not answer, and the prober's timeout says so. One thread, no
// blocking call: scrapers are strangers, so everything they can make recycler
// hold is bounded.
//
//   - At most Limits::max_clients connections. One more evicts the oldest
//     that is still sending its request, or lingering (its response and its
//     end are with the kernel, which delivers them after a close), or whose
//     response is still being written hold_grace after it began (a scraper
//     takes it within milliseconds). So no client can keep scrapers out by
//     holding every slot: neither a slow or silent one, nor one that sends a
//     request and then neither reads nor closes. Only when every slot holds
//     a response being written for less than hold_grace is the newcomer
//     closed at once.
//   - A request head is at most http::kMaxHead bytes and must be complete
//     within head_timeout of the connection (a byte a second does not keep
//     it open); the response must be taken within write_timeout.
//   - Responses not yet taken by their clients hold at most
//     max_pending_output bytes in all; past that a scrape gets 503.
//   - A rendered body is reused for reuse_body_for: scrapers that come
//     together cost one render, and no scraper can make recycler render more
//     than about 1 / reuse_body_for times a second.
//   - Every response closes the connection (Connection: close). After it,
//     the server shuts down its side and reads (and drops) what the client
//     still sends until it closes, at most linger_timeout: closing a socket
//     with unread input would reset it and could lose the response.
#pragma once

#include <uv.h>

#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <string>

#include "supervisor/config/config.h"
#include "supervisor/metrics/http.h"
#include "supervisor/util/result.h"
#include "supervisor/util/timers.h"
#include "supervisor/util/uv.h"

namespace recycler::metrics {

class Server {
 public:
  struct Limits {
    size_t max_clients = 16;
    Duration head_timeout = std::chrono::seconds(5);
    Duration write_timeout = std::chrono::seconds(5);
    Duration linger_timeout = std::chrono::seconds(2);
    Duration hold_grace = std::chrono::milliseconds(250);
    size_t max_pending_output = 64 << 20;
    Duration reuse_body_for = std::chrono::milliseconds(100);
  };
  // The body of GET /metrics, in the text exposition format.
  using Render = std::function<std::string()>;
  // A probe's answer: 200 when `ok`, else 503; `text` is its body's line.
  struct ProbeAnswer {
    bool ok = false;
    std::string text;
  };
  // Answers /healthz and /readyz (null: those paths are 404).
  using Probe = std::function<ProbeAnswer(http::Path)>;

  struct Stats {
    uint64_t scrapes = 0;  // 200 responses to /metrics
    uint64_t probes = 0;   // answers to /healthz and /readyz (200 or 503)
    uint64_t refused = 0;  // 4xx/5xx responses
    uint64_t dropped = 0;  // connections closed without a response (timeouts, evictions, full)
  };

  // Binds and listens; an error names the address and why ("address already
  // in use"). Nothing is left open on error.
  static Result<std::unique_ptr<Server>> listen(uv_loop_t* loop, Timers& timers,
                                                const config::ListenAddress& address, Render render,
                                                Limits limits, Probe probe = nullptr);
  static Result<std::unique_ptr<Server>> listen(uv_loop_t* loop, Timers& timers,
                                                const config::ListenAddress& address,
                                                Render render) {
    return listen(loop, timers, address, std::move(render), Limits{});
  }
  // Closes the listening socket and every connection.
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  const config::ListenAddress& address() const { return address_; }
  // The port bound: the configured one, or the kernel's pick for port 0.
  uint16_t port() const { return port_; }
  // http://HOST:PORT/metrics
  std::string url() const;
  const Stats& stats() const { return stats_; }
  size_t clients() const { return clients_.size(); }

  struct Client;  // one connection (server.cpp)

 private:
  Server(uv_loop_t* loop, Timers& timers, config::ListenAddress address, Render render,
         Limits limits, Probe probe);

  void on_connection();
  Client* evictable() const;
  void on_read(Client& c, ssize_t nread, const uv_buf_t* buf);
  // `served`: the counter this answer went into (scrapes, probes), taken
  // back when it turns into a 503 for want of room; null for a refusal.
  void respond(Client& c, std::string head, std::shared_ptr<const std::string> body,
               uint64_t* served);
  void on_written(Client& c, int status);
  void close(Client& c, bool dropped);
  std::shared_ptr<const std::string> body();

  uv_loop_t* loop_;
  Timers& timers_;
  config::ListenAddress address_;
  uint16_t port_ = 0;
  Render render_;
  Probe probe_;
  Limits limits_;
  uv::Handle<uv_tcp_t> listener_;
  std::list<Client*> clients_;  // in order of arrival; each freed when its handle closes
  size_t pending_output_ = 0;
  std::shared_ptr<const std::string> body_;
  TimePoint body_at_{};
  Stats stats_;
};

}  // namespace recycler::metrics
