// Sends notify datagrams to a NOTIFY_SOCKET address at a steady rate: the
// foreign sender of bench/hostile.sh.
//
//   bench_notify_flood ADDRESS RATE SECONDS [MESSAGE]
//
// RATE datagrams per second (0: as fast as the receiver takes them: the
// socket blocks when its queue is full), for SECONDS; MESSAGE defaults to
// RECYCLER_REQUESTS=1. Prints how many went. Exit status 1 when none did.
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "supervisor/notify/socket.h"

namespace {

double now_s() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) / 1e9;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: %s ADDRESS RATE SECONDS [MESSAGE]\n", argv[0]);
    return 2;
  }
  auto addr = recycler::notify::unix_address(argv[1]);
  double rate = std::atof(argv[2]);
  double seconds = std::atof(argv[3]);
  std::string message = argc > 4 ? argv[4] : "RECYCLER_REQUESTS=1";
  int fd = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (!addr || fd < 0) return 2;
  unsigned long long sent = 0;
  double start = now_s();
  for (double t = start; t - start < seconds; t = now_s()) {
    if (rate > 0) {
      // Catch up to where the rate says we should be, then sleep 1 ms.
      auto due = static_cast<unsigned long long>((t - start) * rate);
      for (; sent < due; ++sent)
        if (::sendto(fd, message.data(), message.size(), 0, addr->get(), addr->len) < 0) break;
      timespec pause{0, 1000000};
      nanosleep(&pause, nullptr);
    } else if (::sendto(fd, message.data(), message.size(), 0, addr->get(), addr->len) > 0) {
      ++sent;
    }
  }
  std::printf("%llu\n", sent);
  return sent > 0 ? 0 : 1;
}
