// listen_server: a small pre-fork HTTP server for the listen:/surge tests,
// where Python and gunicorn may be missing (the cgroup v2 VM).
//
//   listen_server [--workers N] [--boot-ms MS] [--ready main|child|none] [--bind PORT]
//                 [--report 1] [--respawn 1]
//
// Takes its sockets the systemd way (LISTEN_FDS from fd 3, LISTEN_PID must be
// its own pid), or binds 127.0.0.1:PORT itself with --bind. The main process
// waits --boot-ms (a slow app import), forks N workers and, with --ready,
// sends READY=1 to NOTIFY_SOCKET from itself (main) or from each worker once
// it is about to accept (child). Each worker answers every request with
// "pid <its pid>" on a fresh connection. SIGTERM: workers finish the request
// in hand and exit; the main process waits for them and exits 0.
// --report 1: each worker reports every request it served to NOTIFY_SOCKET
// (RECYCLER_REQUESTS=1, from an unbound socket: no answers) and prints
// "listen_server: pid P served N requests" as it exits. --respawn 1: the main
// process forks a new worker for each one that exits (a pre-fork server's
// master, as gunicorn's), until it is told to stop.
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

volatile sig_atomic_t g_stop = 0;

void on_term(int) {
  g_stop = 1;
}

void on_child(int) {}  // wakes the main process's sigsuspend

void notify(const char* text) {
  const char* path = std::getenv("NOTIFY_SOCKET");
  if (!path || !*path) return;
  sockaddr_un un{};
  un.sun_family = AF_UNIX;
  size_t len = std::strlen(path);
  if (len >= sizeof un.sun_path) return;
  std::memcpy(un.sun_path, path, len);
  if (un.sun_path[0] == '@') un.sun_path[0] = '\0';
  static int fd = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);  // one a process
  if (fd < 0) return;
  ::sendto(fd, text, std::strlen(text), 0, reinterpret_cast<sockaddr*>(&un),
           static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + len));
}

void serve(const std::vector<int>& fds, bool ready, bool report) {
  struct sigaction sa {};
  sa.sa_handler = on_term;  // no SA_RESTART: accept() returns EINTR
  ::sigaction(SIGTERM, &sa, nullptr);
  sigset_t all;
  ::sigemptyset(&all);
  ::sigprocmask(SIG_SETMASK, &all, nullptr);  // the main process blocks SIGTERM
  if (ready) notify("READY=1");
  int fd = fds.front();
  unsigned long served = 0;
  while (!g_stop) {
    int c = ::accept4(fd, nullptr, nullptr, SOCK_CLOEXEC);
    if (c < 0) {
      if (errno == EINTR) continue;
      std::perror("accept");
      ::_exit(1);
    }
    char buf[4096];
    std::string head;
    while (head.find("\r\n\r\n") == std::string::npos && head.size() < 65536) {
      ssize_t n = ::read(c, buf, sizeof buf);
      if (n < 0 && errno == EINTR) continue;  // SIGTERM: the request in hand is still served
      if (n <= 0) break;
      head.append(buf, static_cast<size_t>(n));
    }
    std::string body = "pid " + std::to_string(::getpid()) + "\n";
    std::string resp = "HTTP/1.0 200 OK\r\nContent-Length: " + std::to_string(body.size()) +
                       "\r\nConnection: close\r\n\r\n" + body;
    ssize_t ignored = ::send(c, resp.data(), resp.size(), MSG_NOSIGNAL);
    (void)ignored;
    ::close(c);
    ++served;
    if (report) notify("RECYCLER_REQUESTS=1");
  }
  if (report) {
    std::printf("listen_server: pid %d served %lu requests\n", ::getpid(), served);
    std::fflush(stdout);
  }
  ::_exit(0);
}

}  // namespace

int main(int argc, char** argv) {
  int workers = 2, boot_ms = 0, bind_port = 0;
  bool report = false, respawn = false;
  std::string ready = "none";
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string k = argv[i], v = argv[i + 1];
    if (k == "--workers")
      workers = std::atoi(v.c_str());
    else if (k == "--boot-ms")
      boot_ms = std::atoi(v.c_str());
    else if (k == "--ready")
      ready = v;
    else if (k == "--bind")
      bind_port = std::atoi(v.c_str());
    else if (k == "--report")
      report = v == "1";
    else if (k == "--respawn")
      respawn = v == "1";
  }
  std::vector<int> fds;
  if (bind_port) {
    int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    int on = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof on);
    sockaddr_in in{};
    in.sin_family = AF_INET;
    in.sin_port = htons(static_cast<uint16_t>(bind_port));
    in.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::bind(fd, reinterpret_cast<sockaddr*>(&in), sizeof in) != 0 || ::listen(fd, 128) != 0) {
      std::perror("bind");
      return 2;
    }
    fds.push_back(fd);
  } else {
    const char* pid = std::getenv("LISTEN_PID");
    const char* n = std::getenv("LISTEN_FDS");
    if (!pid || !n || std::atoi(pid) != ::getpid()) {
      std::fprintf(stderr, "listen_server: no LISTEN_FDS for pid %d\n", ::getpid());
      return 3;
    }
    for (int i = 0; i < std::atoi(n); ++i) fds.push_back(3 + i);
    std::printf("listen_server: %zu socket(s) from LISTEN_FDS, names %s\n", fds.size(),
                std::getenv("LISTEN_FDNAMES") ? std::getenv("LISTEN_FDNAMES") : "-");
    std::fflush(stdout);
  }
  struct sigaction sa {};
  sa.sa_handler = on_term;
  ::sigaction(SIGTERM, &sa, nullptr);
  if (boot_ms > 0) ::usleep(static_cast<useconds_t>(boot_ms) * 1000);
  if (ready == "main") notify("READY=1");
  sa.sa_handler = on_child;
  ::sigaction(SIGCHLD, &sa, nullptr);
  // SIGTERM and SIGCHLD come only in sigsuspend: nothing is missed between
  // a look and the wait.
  sigset_t blocked, others;
  ::sigemptyset(&blocked);
  ::sigaddset(&blocked, SIGTERM);
  ::sigaddset(&blocked, SIGCHLD);
  ::sigprocmask(SIG_BLOCK, &blocked, &others);
  std::vector<pid_t> children;
  auto fork_worker = [&] {
    pid_t c = ::fork();
    if (c == 0) serve(fds, ready == "child", report);
    if (c > 0) children.push_back(c);
  };
  for (int i = 0; i < workers && !g_stop; ++i) fork_worker();
  if (!respawn)
    for (int fd : fds) ::close(fd);  // only the workers accept
  while (!g_stop) {
    ::sigsuspend(&others);
    for (pid_t c; !g_stop && (c = ::waitpid(-1, nullptr, WNOHANG)) > 0;) {
      std::erase(children, c);
      if (respawn) fork_worker();
    }
  }
  for (pid_t c : children) ::kill(c, SIGTERM);
  for (pid_t c : children) ::waitpid(c, nullptr, 0);
  return 0;
}
