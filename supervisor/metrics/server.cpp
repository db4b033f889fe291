#include "supervisor/metrics/server.h"

#include <netinet/in.h>

#include <cstring>

#include "supervisor/metrics/http.h"

namespace recycler::metrics {

// One connection. Freed in its handle's close callback, which libuv runs
// after the callbacks of a write or shutdown still in flight (cancelled):
// those find `server` null and return.
struct Server::Client {
  enum class Phase { Head, Writing, Lingering };

  Server* server = nullptr;
  uv_tcp_t tcp{};
  std::list<Client*>::iterator self;
  Phase phase = Phase::Head;
  TimePoint answered_at{};  // when its response began (Writing)
  bool eof = false;         // the client has shut down its side
  std::string received;
  std::string head;
  std::shared_ptr<const std::string> body;
  size_t pending = 0;  // bytes of this response counted in pending_output_
  uv_write_t write{};
  uv_shutdown_t shutdown{};
  std::unique_ptr<Timer> deadline;
  char buffer[4096];
};

namespace {

void free_client(uv_handle_t* h) {
  delete static_cast<Server::Client*>(h->data);
}

}  // namespace

Server::Server(uv_loop_t* loop, Timers& timers, config::ListenAddress address, Render render,
               Limits limits, Probe probe)
    : loop_(loop),
      timers_(timers),
      address_(std::move(address)),
      render_(std::move(render)),
      probe_(std::move(probe)),
      limits_(limits) {}

Server::~Server() {
  while (!clients_.empty()) close(*clients_.front(), false);
  listener_.reset();
}

Result<std::unique_ptr<Server>> Server::listen(uv_loop_t* loop, Timers& timers,
                                               const config::ListenAddress& address, Render render,
                                               Limits limits, Probe probe) {
  std::unique_ptr<Server> server(
      new Server(loop, timers, address, std::move(render), limits, std::move(probe)));
  auto fail = [&](int err) {
    return Error{"metrics: cannot listen on " + address.str() + ": " + uv_strerror(err), -err};
  };
  sockaddr_storage sa{};
  int err =
      address.v6
          ? uv_ip6_addr(address.host.c_str(), address.port, reinterpret_cast<sockaddr_in6*>(&sa))
          : uv_ip4_addr(address.host.c_str(), address.port, reinterpret_cast<sockaddr_in*>(&sa));
  if (err != 0) return fail(err);
  auto* tcp = new uv_tcp_t;
  if (err = uv_tcp_init(loop, tcp); err != 0) {
    delete tcp;
    return fail(err);
  }
  tcp->data = server.get();
  server->listener_ = uv::Handle<uv_tcp_t>(tcp);
  if (err = uv_tcp_bind(tcp, reinterpret_cast<const sockaddr*>(&sa),
                        address.v6 ? UV_TCP_IPV6ONLY : 0);
      err != 0)
    return fail(err);
  err = uv_listen(reinterpret_cast<uv_stream_t*>(tcp), 128, [](uv_stream_t* s, int status) {
    auto* self = static_cast<Server*>(s->data);
    if (self && status == 0) self->on_connection();
  });
  if (err != 0) return fail(err);
  sockaddr_storage bound{};
  int len = sizeof(bound);
  if (uv_tcp_getsockname(tcp, reinterpret_cast<sockaddr*>(&bound), &len) == 0)
    server->port_ =
        ntohs(bound.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port
                                          : reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
  return server;
}

std::string Server::url() const {
  config::ListenAddress bound = address_;
  bound.port = port_;
  return "http://" + bound.str() + "/metrics";
}

void Server::on_connection() {
  auto* c = new Client;
  uv_tcp_init(loop_, &c->tcp);
  c->tcp.data = c;
  auto* stream = reinterpret_cast<uv_stream_t*>(&c->tcp);
  if (uv_accept(reinterpret_cast<uv_stream_t*>(listener_.get()), stream) != 0) {
    uv_close(reinterpret_cast<uv_handle_t*>(&c->tcp), free_client);
    return;
  }
  if (clients_.size() >= limits_.max_clients) {
    Client* old = evictable();
    if (!old) {  // every place holds a response being written right now: come back later
      ++stats_.dropped;
      uv_close(reinterpret_cast<uv_handle_t*>(&c->tcp), free_client);
      return;
    }
    close(*old, old->phase != Client::Phase::Lingering);  // a lingering one had its answer
  }
  c->server = this;
  c->self = clients_.insert(clients_.end(), c);
  c->deadline = timers_.after(limits_.head_timeout, [this, c] { close(*c, true); });
  uv_read_start(
      stream,
      [](uv_handle_t* h, size_t, uv_buf_t* buf) {
        auto* client = static_cast<Client*>(h->data);
        *buf = uv_buf_init(client->buffer, sizeof(client->buffer));
      },
      [](uv_stream_t* s, ssize_t nread, const uv_buf_t* buf) {
        auto* client = static_cast<Client*>(s->data);
        if (client->server) client->server->on_read(*client, nread, buf);
      });
}

// The oldest connection that is still sending its request, or lingering (its
// whole response, and the end of it, are with the kernel: closing loses it
// nothing), or whose response is still being written after hold_grace (a
// scraper takes it within milliseconds: one still there reads slowly or not
// at all).
Server::Client* Server::evictable() const {
  TimePoint now = timers_.now();
  for (Client* c : clients_)
    if (c->phase != Client::Phase::Writing || now - c->answered_at >= limits_.hold_grace) return c;
  return nullptr;
}

void Server::on_read(Client& c, ssize_t nread, const uv_buf_t* buf) {
  if (nread == 0) return;
  if (nread < 0) {
    if (nread != UV_EOF || c.phase == Client::Phase::Head)
      return close(c, c.phase != Client::Phase::Lingering);
    if (c.phase == Client::Phase::Lingering) return close(c, false);
    // Done sending (a client that shuts down its side after the request):
    // the response still goes out.
    c.eof = true;
    uv_read_stop(reinterpret_cast<uv_stream_t*>(&c.tcp));
    return;
  }
  if (c.phase != Client::Phase::Head) return;  // after the head: dropped unread
  c.received.append(buf->base, static_cast<size_t>(nread));
  http::Parsed parsed = http::parse_head(c.received);
  switch (parsed.verdict) {
    case http::Verdict::Incomplete:
      return;
    case http::Verdict::Refused:
      ++stats_.refused;
      return respond(c, http::error_response(parsed.status), nullptr, nullptr);
    case http::Verdict::Get:
    case http::Verdict::Head: {
      bool get = parsed.verdict == http::Verdict::Get;
      if (parsed.path != http::Path::Metrics) {
        if (!probe_) {
          ++stats_.refused;
          return respond(c, http::error_response(404), nullptr, nullptr);
        }
        ProbeAnswer answer = probe_(parsed.path);
        auto text = std::make_shared<const std::string>(answer.text + "\n");
        std::string head =
            http::response_head(answer.ok ? 200 : 503, http::kProbeContentType, text->size());
        ++stats_.probes;
        return respond(c, std::move(head), get ? std::move(text) : nullptr, &stats_.probes);
      }
      std::shared_ptr<const std::string> rendered = body();
      std::string head = http::response_head(200, http::kMetricsContentType, rendered->size());
      ++stats_.scrapes;
      return respond(c, std::move(head), get ? std::move(rendered) : nullptr, &stats_.scrapes);
    }
  }
}

std::shared_ptr<const std::string> Server::body() {
  TimePoint now = timers_.now();
  if (!body_ || now - body_at_ >= limits_.reuse_body_for) {
    body_.reset();  // the old one goes first: at most one render in memory here
    body_ = std::make_shared<const std::string>(render_());
    body_at_ = now;
  }
  return body_;
}

void Server::respond(Client& c, std::string head, std::shared_ptr<const std::string> body,
                     uint64_t* served) {
  size_t size = head.size() + (body ? body->size() : 0);
  if (served && pending_output_ + size > limits_.max_pending_output) {
    --*served;  // not served after all
    ++stats_.refused;
    head = http::error_response(503);
    body = nullptr;
    size = head.size();
  }
  c.phase = Client::Phase::Writing;
  c.answered_at = timers_.now();
  c.received = std::string();
  c.head = std::move(head);
  c.body = std::move(body);
  c.pending = size;
  pending_output_ += size;
  c.deadline = timers_.after(limits_.write_timeout, [this, &c] { close(c, true); });
  uv_buf_t bufs[2] = {uv_buf_init(c.head.data(), static_cast<unsigned>(c.head.size())), {}};
  unsigned n = 1;
  if (c.body)
    bufs[n++] =
        uv_buf_init(const_cast<char*>(c.body->data()), static_cast<unsigned>(c.body->size()));
  c.write.data = &c;
  int err = uv_write(&c.write, reinterpret_cast<uv_stream_t*>(&c.tcp), bufs, n,
                     [](uv_write_t* req, int status) {
                       auto* client = static_cast<Client*>(req->data);
                       if (client->server) client->server->on_written(*client, status);
                     });
  if (err != 0) close(c, true);
}

void Server::on_written(Client& c, int status) {
  if (status != 0) return close(c, true);
  pending_output_ -= c.pending;
  c.pending = 0;
  c.head = std::string();
  c.body.reset();
  if (c.eof) return close(c, false);
  c.phase = Client::Phase::Lingering;
  c.deadline = timers_.after(limits_.linger_timeout, [this, &c] { close(c, false); });
  c.shutdown.data = &c;
  int err = uv_shutdown(&c.shutdown, reinterpret_cast<uv_stream_t*>(&c.tcp),
                        [](uv_shutdown_t* req, int result) {
                          auto* client = static_cast<Client*>(req->data);
                          if (client->server && result != 0) client->server->close(*client, false);
                        });
  if (err != 0) close(c, false);
}

void Server::close(Client& c, bool dropped) {
  if (dropped) ++stats_.dropped;
  pending_output_ -= c.pending;
  c.pending = 0;
  clients_.erase(c.self);
  c.server = nullptr;
  c.deadline.reset();
  uv_close(reinterpret_cast<uv_handle_t*>(&c.tcp), free_client);
}

}  // namespace recycler::metrics
