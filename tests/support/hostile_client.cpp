// hostile_client: clients of recycler's control socket and metrics endpoint
// that behave as an attacker would, for the hardening tests
// (tests/integration/clients_itest.cpp) and bench/hostile.sh, part 3. Each
// mode stops by itself after --seconds (or its --requests), or early on
// SIGTERM, and prints one summary line, "hostile_client: ...", that the
// callers read.
//
//   hostile_client MODE (--socket PATH | --port N) [--seconds S] [--clients N]
//                  [--requests N] [--every S] [--target T] [--repeat N]
//
// Control socket (--socket):
//   pipeline-status  one connection: a thread writes {"command":"status"}
//                    lines back to back, another reads the answers
//   pipeline-reload  the same with reload requests
//   restart-storm    --requests restart requests, each naming --target
//                    --repeat times, one after the other on one connection,
//                    each answer read: "answered N, results per answer at most M"
//   slow-bytes       --clients connections, each sending one byte of a
//                    request every --every seconds: how many the server closed
//                    and after how long
//   hoard-events     --clients connections, each sending --requests events
//                    requests at once and reading nothing until the end
//   follow-write     `events --follow`, then writes without pause: whether
//                    and when the server closed the connection
//   busy             --clients connections, each pipelining --requests
//                    status requests and reading nothing: "N busy" once each
//                    has had an answer, then held until the end
// Metrics endpoint (--port, 127.0.0.1 only):
//   hold-metrics     --clients connections that send a whole GET /metrics,
//                    then neither read nor close; reopened every --every s
//   scrape           --requests scrapes, one every --every s, each given 2 s:
//                    "N of M scrapes answered"
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

struct Options {
  std::string mode;
  std::string socket;
  int port = 0;
  double seconds = 10;
  int clients = 1;
  int requests = 1;
  double every = 1;
  std::string target = "app:0";
  int repeat = 1;
};

[[noreturn]] void usage(const char* why) {
  std::fprintf(stderr, "hostile_client: %s (see the header of tests/support/hostile_client.cpp)\n",
               why);
  std::exit(2);
}

Options parse(int argc, char** argv) {
  if (argc < 2) usage("no mode");
  Options o;
  o.mode = argv[1];
  for (int i = 2; i < argc; i += 2) {
    if (i + 1 >= argc) usage("an option without its value");
    std::string key = argv[i], value = argv[i + 1];
    if (key == "--socket")
      o.socket = value;
    else if (key == "--port")
      o.port = std::atoi(value.c_str());
    else if (key == "--seconds")
      o.seconds = std::atof(value.c_str());
    else if (key == "--clients")
      o.clients = std::atoi(value.c_str());
    else if (key == "--requests")
      o.requests = std::atoi(value.c_str());
    else if (key == "--every")
      o.every = std::atof(value.c_str());
    else if (key == "--target")
      o.target = value;
    else if (key == "--repeat")
      o.repeat = std::atoi(value.c_str());
    else
      usage("unknown option");
  }
  return o;
}

Clock::duration seconds(double s) {
  return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
}

// SIGTERM or SIGINT ends a mode early, with its summary.
volatile sig_atomic_t g_stop = 0;

void on_stop(int) {
  g_stop = 1;
}

bool running(Clock::time_point end) {
  return !g_stop && Clock::now() < end;
}

double since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

int connect_control(const std::string& path, bool nonblocking = false) {
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | (nonblocking ? SOCK_NONBLOCK : 0), 0);
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  if (fd < 0 || path.size() >= sizeof a.sun_path) return -1;
  std::memcpy(a.sun_path, path.data(), path.size());
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 && errno != EINPROGRESS) {
    ::close(fd);
    return -1;
  }
  return fd;
}

int connect_metrics(int port) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (fd < 0 || ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    if (fd >= 0) ::close(fd);
    return -1;
  }
  return fd;
}

bool write_all(int fd, const std::string& data) {
  for (size_t done = 0; done < data.size();) {
    ssize_t n = ::send(fd, data.data() + done, data.size() - done, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    done += static_cast<size_t>(n);
  }
  return true;
}

// Waits up to `timeout` for `fd` to become readable (or closed).
bool readable(int fd, Clock::duration timeout) {
  pollfd p{fd, POLLIN, 0};
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(timeout).count();
  return ::poll(&p, 1, static_cast<int>(ms < 0 ? 0 : ms)) > 0;
}

int pipeline(const Options& o, const char* line) {
  int fd = connect_control(o.socket);
  if (fd < 0) usage("cannot connect");
  timeval tv{0, 200 * 1000};  // the reader looks at the clock between reads
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  auto end = Clock::now() + seconds(o.seconds);
  std::atomic<long> sent{0}, answers{0};
  std::printf("hostile_client: flooding\n");
  std::thread writer([&] {
    std::string batch;
    for (int i = 0; i < 256; ++i) batch += line;
    while (running(end)) {
      ssize_t n = ::send(fd, batch.data(), batch.size(), MSG_NOSIGNAL);
      if (n < 0 && (errno == EAGAIN || errno == EINTR)) continue;
      if (n <= 0) break;
      sent += n / static_cast<long>(std::strlen(line));
    }
  });
  char buf[65536];
  while (running(end)) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) continue;
    if (n <= 0) break;
    for (ssize_t i = 0; i < n; ++i) answers += buf[i] == '\n';
  }
  writer.join();
  ::close(fd);
  std::printf("hostile_client: sent %ld requests, got %ld answers in %.1f s\n", sent.load(),
              answers.load(), o.seconds);
  return 0;
}

int restart_storm(const Options& o) {
  int fd = connect_control(o.socket);
  if (fd < 0) usage("cannot connect");
  std::string line = "{\"command\":\"restart\",\"targets\":[";
  for (int i = 0; i < o.repeat; ++i) line += (i ? ",\"" : "\"") + o.target + "\"";
  line += "]}\n";
  int answered = 0, most = 0;
  std::string in;
  char buf[65536];
  auto start = Clock::now();
  for (int r = 0; r < o.requests && !g_stop; ++r) {
    if (!write_all(fd, line)) break;
    size_t nl;
    while ((nl = in.find('\n')) == std::string::npos) {
      ssize_t n = ::read(fd, buf, sizeof buf);
      if (n <= 0) goto done;
      in.append(buf, static_cast<size_t>(n));
    }
    {
      std::string answer = in.substr(0, nl);
      in.erase(0, nl + 1);
      int results = 0;
      for (size_t at = 0; (at = answer.find("\"target\"", at)) != std::string::npos; ++at)
        ++results;
      most = std::max(most, results);
      ++answered;
    }
  }
done:
  ::close(fd);
  std::printf("hostile_client: answered %d of %d, results per answer at most %d, in %.1f s\n",
              answered, o.requests, most, since(start));
  return 0;
}

int slow_bytes(const Options& o) {
  std::vector<int> fds;
  for (int i = 0; i < o.clients; ++i) {
    int fd = connect_control(o.socket);
    if (fd < 0) usage("cannot connect");
    fds.push_back(fd);
  }
  std::printf("hostile_client: %d connected\n", o.clients);
  auto start = Clock::now(), end = start + seconds(o.seconds);
  std::vector<double> closed_after(fds.size(), -1);
  const char request[] = "{\"command\":\"status\"}";
  for (size_t byte = 0; running(end); ++byte) {
    auto next = start + seconds(o.every * static_cast<double>(byte + 1));
    for (size_t i = 0; i < fds.size(); ++i) {
      if (closed_after[i] >= 0) continue;
      char c = request[byte % (sizeof request - 1)];
      if (::send(fds[i], &c, 1, MSG_NOSIGNAL | MSG_DONTWAIT) != 1) closed_after[i] = since(start);
    }
    // Until the next byte is due, notice each connection the server closes.
    while (Clock::now() < std::min(next, end)) {
      std::vector<pollfd> p;
      for (size_t i = 0; i < fds.size(); ++i)
        if (closed_after[i] < 0) p.push_back({fds[i], POLLIN, 0});
      if (p.empty()) break;
      auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(std::min(next, end) - Clock::now());
      if (::poll(p.data(), p.size(), static_cast<int>(std::max<long>(0, left.count()))) <= 0)
        continue;
      for (const pollfd& one : p)
        if (one.revents)
          for (size_t i = 0; i < fds.size(); ++i)
            if (fds[i] == one.fd) closed_after[i] = since(start);  // its error line, then EOF
    }
  }
  int closed = 0;
  double first = -1, last = -1;
  for (double t : closed_after)
    if (t >= 0) {
      ++closed;
      first = first < 0 ? t : std::min(first, t);
      last = std::max(last, t);
    }
  for (int fd : fds) ::close(fd);
  std::printf("hostile_client: %d clients, %d closed by the server, after %.1f to %.1f s\n",
              o.clients, closed, first, last);
  return 0;
}

// Clients that send and then read nothing until the end.
int send_and_hold(const Options& o, const std::string& line, bool wait_busy) {
  std::string batch;
  for (int i = 0; i < o.requests; ++i) batch += line;
  std::vector<int> fds;
  for (int i = 0; i < o.clients; ++i) {
    int fd = connect_control(o.socket, true);
    if (fd < 0) usage("cannot connect");
    // As much as the socket takes: a server that stops reading does not stop this one.
    ::send(fd, batch.data(), batch.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    fds.push_back(fd);
  }
  auto end = Clock::now() + seconds(o.seconds);
  if (wait_busy) {
    int busy = 0;
    for (int fd : fds) busy += readable(fd, std::min(seconds(10), end - Clock::now()));
    std::printf("hostile_client: %d busy\n", busy);
    std::fflush(stdout);
  }
  while (running(end))
    std::this_thread::sleep_for(std::min(seconds(0.1), end - Clock::now()));  // the hold itself
  for (int fd : fds) ::close(fd);
  std::printf("hostile_client: %d clients held for %.1f s\n", o.clients, o.seconds);
  return 0;
}

int follow_write(const Options& o) {
  int fd = connect_control(o.socket);
  if (fd < 0 || !write_all(fd, "{\"command\":\"events\",\"follow\":true}\n"))
    usage("cannot connect");
  ::fcntl(fd, F_SETFL, O_NONBLOCK);
  auto start = Clock::now(), end = start + seconds(o.seconds);
  std::string junk(4096, 'x');
  char buf[65536];
  double closed = -1;
  long written = 0;
  while (closed < 0 && running(end)) {
    ssize_t n = ::send(fd, junk.data(), junk.size(), MSG_NOSIGNAL);
    if (n > 0) written += n;
    if (n < 0 && errno != EAGAIN && errno != EINTR) closed = since(start);
    for (;;) {  // the events it is sent, and the end
      ssize_t r = ::read(fd, buf, sizeof buf);
      if (r == 0 || (r < 0 && errno != EAGAIN && errno != EINTR)) closed = since(start);
      if (r <= 0) break;
    }
    if (n < 0 && errno == EAGAIN) readable(fd, seconds(0.01));
  }
  ::close(fd);
  if (closed >= 0)
    std::printf("hostile_client: closed by the server after %.2f s, %ld bytes written\n", closed,
                written);
  else
    std::printf("hostile_client: still open after %.1f s, %ld bytes written\n", o.seconds, written);
  return 0;
}

int hold_metrics(const Options& o) {
  const std::string request = "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";
  auto end = Clock::now() + seconds(o.seconds);
  long opened = 0;
  while (running(end)) {
    std::vector<int> fds;
    for (int i = 0; i < o.clients; ++i) {
      int fd = connect_metrics(o.port);
      if (fd < 0) continue;
      write_all(fd, request);
      fds.push_back(fd);
      ++opened;
    }
    if (opened == static_cast<long>(fds.size())) std::printf("hostile_client: holding\n");
    auto next = Clock::now() + seconds(o.every);
    std::this_thread::sleep_for(std::min(next, end) - Clock::now());  // the hold itself
    for (int fd : fds) ::close(fd);
  }
  std::printf("hostile_client: %ld connections held\n", opened);
  return 0;
}

int scrape(const Options& o) {
  const std::string request = "GET /metrics HTTP/1.0\r\n\r\n";
  int answered = 0;
  auto start = Clock::now();
  for (int i = 0; i < o.requests; ++i) {
    std::this_thread::sleep_until(start + seconds(o.every * i));  // the scrape interval
    int fd = connect_metrics(o.port);
    if (fd < 0) continue;
    timeval tv{2, 0};
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    std::string response;
    char buf[65536];
    if (write_all(fd, request))
      for (ssize_t n; (n = ::read(fd, buf, sizeof buf)) > 0;) response.append(buf, n);
    ::close(fd);
    answered +=
        response.rfind("HTTP/1.1 200 ", 0) == 0 && response.find("recycler_") != std::string::npos;
  }
  std::printf("hostile_client: %d of %d scrapes answered\n", answered, o.requests);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  ::signal(SIGPIPE, SIG_IGN);
  struct sigaction stop {};
  stop.sa_handler = on_stop;  // no SA_RESTART: a blocked read or send returns
  ::sigaction(SIGTERM, &stop, nullptr);
  ::sigaction(SIGINT, &stop, nullptr);
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  Options o = parse(argc, argv);
  bool control = o.mode != "hold-metrics" && o.mode != "scrape";
  if (control ? o.socket.empty() : o.port <= 0)
    usage(control ? "--socket PATH needed" : "--port N needed");
  if (o.mode == "pipeline-status") return pipeline(o, "{\"command\":\"status\"}\n");
  if (o.mode == "pipeline-reload") return pipeline(o, "{\"command\":\"reload\"}\n");
  if (o.mode == "restart-storm") return restart_storm(o);
  if (o.mode == "slow-bytes") return slow_bytes(o);
  if (o.mode == "hoard-events") return send_and_hold(o, "{\"command\":\"events\"}\n", false);
  if (o.mode == "busy") return send_and_hold(o, "{\"command\":\"status\"}\n", true);
  if (o.mode == "follow-write") return follow_write(o);
  if (o.mode == "hold-metrics") return hold_metrics(o);
  if (o.mode == "scrape") return scrape(o);
  usage("unknown mode");
}
