// fragment: a worker whose malloc fragments, for `allocator:` and
// bench/fragmentation.sh.
//
//   fragment [--threads N] [--request SIZE] [--big SIZE] [--big-every MS]
//            [--keep K] [--hold N] [--pause MS] [--report MS]
//
// Like the request threads of a threaded server or the workers of a data
// loader: each of N threads (8) serves a request every --pause ms (50) by
// allocating --request bytes (256KiB) of small objects (16 to 512 bytes,
// touched) and freeing all but one object in K (256); the survivors stay for
// the thread's next --hold requests (64), like a cache. Now and then a
// request is big (--big, 32MiB): one thread at a time, in turn, every
// --big-every ms (1000). The live data stays small (about 1 MiB), but under
// glibc's defaults each thread has its own arena, a big request's memory is
// reused only by the thread that freed it, and the survivors scattered
// through it keep glibc from giving it back: RSS climbs to about threads *
// big and stays there. Fewer arenas (MALLOC_ARENA_MAX) share that memory
// between threads; jemalloc gives back the pages that fall empty (after
// its dirty_decay_ms). Every --report ms (1000) it prints its live data and
// RSS. SIGTERM makes it exit 0.
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <deque>
#include <string>
#include <thread>
#include <vector>

namespace {

volatile std::sig_atomic_t g_stop = 0;
std::atomic<long long> g_live{0};      // bytes held by survivors
std::atomic<long long> g_requests{0};  // requests served, all threads

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
    std::fprintf(stderr, "fragment: bad size \"%s\"\n", text);
    std::exit(2);
  }
  return static_cast<long long>(v * mult);
}

void sleep_ms(long ms) {
  timespec ts{ms / 1000, (ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) != 0 && !g_stop) {
  }
}

long long rss_bytes() {
  long long pages_total = 0, pages_resident = 0;
  FILE* f = std::fopen("/proc/self/statm", "r");
  if (!f) return 0;
  if (std::fscanf(f, "%lld %lld", &pages_total, &pages_resident) != 2) pages_resident = 0;
  std::fclose(f);
  return pages_resident * sysconf(_SC_PAGESIZE);
}

struct Object {
  void* p;
  size_t size;
};

struct Settings {
  int threads = 8;
  long long request = 256LL << 10;  // allocated per ordinary request
  long long big = 32LL << 20;       // allocated per big request
  long big_every_ms = 1000;         // one thread at a time serves a big request
  long keep = 256;                  // one object in `keep` survives a request...
  int hold = 64;                    // ...for the thread's next `hold` requests
  long pause_ms = 50;               // between a thread's requests
  long report_ms = 1000;
};

using Clock = std::chrono::steady_clock;

class Thread {
 public:
  Thread(const Settings& s, int index)
      : s_(s), index_(index), state_(0x9e3779b97f4a7c15ULL * (index + 1)) {}

  void run() {
    // Big requests come round in turn: thread i's at i, i + threads, ...
    // times big_every, so they never overlap and every thread gets some.
    auto start = Clock::now();
    auto period = std::chrono::milliseconds(s_.big_every_ms * s_.threads);
    auto next_big = start + std::chrono::milliseconds(s_.big_every_ms * index_);
    while (!g_stop) {
      if (Clock::now() >= next_big) {
        serve(s_.big);
        next_big += period;
      } else {
        serve(s_.request);
      }
      ++g_requests;
      sleep_ms(s_.pause_ms);
    }
    for (const auto& batch : held_)
      for (const Object& o : batch) std::free(o.p);
  }

 private:
  // Small objects (16 to 512 bytes, touched) until `bytes`, then all but one
  // in `keep` freed.
  void serve(long long bytes) {
    burst_.clear();
    for (long long total = 0; total < bytes;) {
      size_t size = 16 + next() % 497;
      void* p = std::malloc(size);
      if (!p) {
        std::fprintf(stderr, "fragment: malloc failed\n");
        std::exit(1);
      }
      std::memset(p, index_, size);
      burst_.push_back({p, size});
      total += static_cast<long long>(size);
    }
    std::vector<Object> survivors;
    for (size_t i = 0; i < burst_.size(); ++i) {
      if (i % static_cast<size_t>(s_.keep) == 0) {
        survivors.push_back(burst_[i]);
        g_live += static_cast<long long>(burst_[i].size);
      } else {
        std::free(burst_[i].p);
      }
    }
    held_.push_back(std::move(survivors));
    if (held_.size() > static_cast<size_t>(s_.hold)) {
      for (const Object& o : held_.front()) {
        std::free(o.p);
        g_live -= static_cast<long long>(o.size);
      }
      held_.pop_front();
    }
  }

  uint64_t next() {  // xorshift64: the same sizes on every run
    state_ ^= state_ << 13;
    state_ ^= state_ >> 7;
    state_ ^= state_ << 17;
    return state_;
  }

  const Settings& s_;
  int index_;
  uint64_t state_;
  std::deque<std::vector<Object>> held_;  // the survivors of the last requests
  std::vector<Object> burst_;
};

}  // namespace

int main(int argc, char** argv) {
  Settings s;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    bool value = i + 1 < argc;
    if (a == "--threads" && value)
      s.threads = std::atoi(argv[++i]);
    else if (a == "--request" && value)
      s.request = parse_size(argv[++i]);
    else if (a == "--big" && value)
      s.big = parse_size(argv[++i]);
    else if (a == "--big-every" && value)
      s.big_every_ms = std::atol(argv[++i]);
    else if (a == "--keep" && value)
      s.keep = std::atol(argv[++i]);
    else if (a == "--hold" && value)
      s.hold = std::atoi(argv[++i]);
    else if (a == "--pause" && value)
      s.pause_ms = std::atol(argv[++i]);
    else if (a == "--report" && value)
      s.report_ms = std::atol(argv[++i]);
    else
      s.threads = 0;
  }
  if (s.threads < 1 || s.request < 1 || s.big < 1 || s.big_every_ms < 1 || s.keep < 1 ||
      s.hold < 0 || s.pause_ms < 0 || s.report_ms < 1) {
    std::fprintf(stderr,
                 "usage: fragment [--threads N] [--request SIZE] [--big SIZE] [--big-every MS] "
                 "[--keep K] [--hold N] [--pause MS] [--report MS]\n");
    return 2;
  }
  std::signal(SIGTERM, [](int) { g_stop = 1; });
  const char* arenas = std::getenv("MALLOC_ARENA_MAX");
  const char* preload = std::getenv("LD_PRELOAD");
  std::printf(
      "fragment: %d threads, requests of %lld KiB, one of %lld MiB every %ld ms, "
      "keeping 1 object in %ld; MALLOC_ARENA_MAX=%s LD_PRELOAD=%s\n",
      s.threads, s.request >> 10, s.big >> 20, s.big_every_ms, s.keep, arenas ? arenas : "",
      preload ? preload : "");
  std::fflush(stdout);

  std::vector<Thread> workers;
  workers.reserve(static_cast<size_t>(s.threads));
  for (int i = 0; i < s.threads; ++i) workers.emplace_back(s, i);
  std::vector<std::thread> threads;
  for (Thread& w : workers) threads.emplace_back([&w] { w.run(); });
  while (!g_stop) {
    sleep_ms(s.report_ms);
    std::printf("fragment: live %.1f MiB, rss %.1f MiB, %lld requests\n",
                static_cast<double>(g_live.load()) / (1 << 20),
                static_cast<double>(rss_bytes()) / (1 << 20), g_requests.load());
    std::fflush(stdout);
  }
  for (std::thread& t : threads) t.join();
  std::printf("fragment: SIGTERM, exiting\n");
  return 0;
}
