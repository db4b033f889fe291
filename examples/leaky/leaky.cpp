// leaky: a worker that leaks memory on purpose, for recycler's demo and tests.
//
//   leaky [--rate SIZE/s] [--step MS] [--max SIZE] [--hold] [--requests N]
//
// Every --step milliseconds it allocates rate*step bytes and touches every
// page (so the memory is really resident and charged to its cgroup), printing
// how much it holds. With --max it stops growing there; with --hold it then
// sleeps instead of exiting. With --requests it also reports N requests served
// per step to $NOTIFY_SOCKET (RECYCLER_REQUESTS=N), like a server would.
// SIGTERM makes it exit 0.
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <csignal>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <string>
#include <vector>

namespace {

volatile std::sig_atomic_t g_stop = 0;

// "64MiB", "512K", "1G", "1048576": binary units, like recycler's config.
long long parse_size(const char* text) {
  char* end = nullptr;
  double v = std::strtod(text, &end);
  std::string unit = end;
  if (!unit.empty() && unit.back() == 'B') unit.pop_back();
  if (!unit.empty() && unit.back() == 'i') unit.pop_back();
  double mult = 1;
  if (unit == "K" || unit == "k")
    mult = 1024.0;
  else if (unit == "M" || unit == "m")
    mult = 1024.0 * 1024;
  else if (unit == "G" || unit == "g")
    mult = 1024.0 * 1024 * 1024;
  else if (!unit.empty()) {
    std::fprintf(stderr, "leaky: bad size \"%s\"\n", text);
    std::exit(2);
  }
  return static_cast<long long>(v * mult);
}

// One sd_notify(3)-style datagram to $NOTIFY_SOCKET ("@name": abstract namespace).
void notify(const std::string& message) {
  const char* path = std::getenv("NOTIFY_SOCKET");
  if (!path || !*path) return;
  sockaddr_un addr{};
  size_t len = std::strlen(path);
  if (len >= sizeof addr.sun_path) return;
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, path, len);
  if (path[0] == '@') addr.sun_path[0] = '\0';
  int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return;
  sendto(fd, message.data(), message.size(), MSG_NOSIGNAL, reinterpret_cast<sockaddr*>(&addr),
         static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + len));
  close(fd);
}

void sleep_ms(long ms) {
  timespec ts{ms / 1000, (ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) != 0 && !g_stop) {
  }
}

}  // namespace

int main(int argc, char** argv) {
  long long rate = 32LL << 20;  // bytes per second
  long step_ms = 100;
  long long max = 0;
  bool hold = false;
  long requests = 0;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--rate" && i + 1 < argc)
      rate = parse_size(argv[++i]);
    else if (a == "--step" && i + 1 < argc)
      step_ms = std::atol(argv[++i]);
    else if (a == "--max" && i + 1 < argc)
      max = parse_size(argv[++i]);
    else if (a == "--hold")
      hold = true;
    else if (a == "--requests" && i + 1 < argc)
      requests = std::atol(argv[++i]);
    else {
      std::fprintf(stderr,
                   "usage: leaky [--rate SIZE] [--step MS] [--max SIZE] [--hold] [--requests N]\n");
      return 2;
    }
  }
  std::signal(SIGTERM, [](int) { g_stop = 1; });
  const char* generation = std::getenv("RECYCLER_GENERATION");
  std::printf("leaky: generation %s, leaking %lld MiB/s\n", generation ? generation : "?",
              rate >> 20);
  std::fflush(stdout);

  long long chunk = rate * step_ms / 1000;
  long long held = 0, reported = 0;
  std::vector<char*> blocks;
  long page = sysconf(_SC_PAGESIZE);
  while (!g_stop) {
    if (max == 0 || held < max) {
      char* p = static_cast<char*>(std::malloc(static_cast<size_t>(chunk)));
      if (!p) {
        std::fprintf(stderr, "leaky: malloc failed at %lld MiB\n", held >> 20);
        return 1;
      }
      for (long long off = 0; off < chunk; off += page) p[off] = 1;
      blocks.push_back(p);
      held += chunk;
      if (held - reported >= (32LL << 20)) {
        std::printf("leaky: holding %lld MiB\n", held >> 20);
        std::fflush(stdout);
        reported = held;
      }
    } else if (!hold) {
      std::printf("leaky: reached %lld MiB, exiting\n", held >> 20);
      return 0;
    }
    if (requests > 0) notify("RECYCLER_REQUESTS=" + std::to_string(requests));
    sleep_ms(step_ms);
  }
  std::printf("leaky: SIGTERM, exiting with %lld MiB held\n", held >> 20);
  return 0;
}
