// Spawn-to-running latency: how long Worker::start() takes to bring a slot
// from stopped to running, for a trivial program (/bin/true).
//
// What one sample covers. A Worker reaches WorkerState::Running synchronously
// inside start(): it builds the worker's environment, opens the slot cgroup's
// join fds (v1 tasks, v2 cgroup.procs), makes the stdout/stderr pipes, forks through
// Boost.Process, runs the exec-setup hook in the child (joins the cgroup in
// every hierarchy, setsid, PR_SET_PDEATHSIG, stdio), waits until execve is
// confirmed through Boost's close-on-exec pipe (and recycler's report pipe),
// then opens a pidfd and the libuv handles that watch the process. One sample
// is one call to start(), timed with steady_clock around the call and handed
// to Google Benchmark with SetIterationTime (UseManualTime).
//
// Between samples, untimed: Worker::kill(done), then uv_run(UV_RUN_ONCE) until
// `done` has run (the exit reaped through the pidfd, the cgroup drained), then
// a UV_RUN_NOWAIT turn so that closed handles are freed; then, in the
// pause_ms:100 variants, 100 ms of doing nothing. Every sample starts from a
// stopped slot with an empty cgroup.
//
// Variants
//   BM_Start_ExistingCgroup/pause_ms:0    (a) the restart path, back to back:
//                            start() into the slot cgroup created once before
//                            the loop, the next start 1-3 ms after the last
//   BM_Start_ExistingCgroup/pause_ms:100  (a) the same, 100 ms apart: what a
//                            real restart costs (restarts come after a backoff
//                            of 1 s by default), see "cgroup v1 joins" below
//   BM_Start_CreateCgroup    (b) first start: manager->create() (libcgroup:
//                            mkdir and limits in every hierarchy) + start();
//                            the worker is destroyed (removing its cgroup)
//                            untimed; create_p50_us/create_p99_us: create alone
//   BM_Start_NoCgroup/pause_ms:0|100      (c) cgroup::open_fallback: no cgroup
//                            (workers tracked by session), the cost of cgroups
//   Breakdown, not recycler's figures:
//   BM_SpawnProcess_JoinCgroup|NoCgroup   spawn_process() alone (Boost fork,
//                            exec-setup hook, exec confirmation), no Worker, no
//                            output pipes, no libuv; back to back
//   BM_JoinCgroup_Write/gap_ms:0|100      a parent-side join, for contrast: a
//                            paused helper process is moved by pid into the
//                            slot's cgroup.procs in every hierarchy (timed),
//                            then back (untimed)
//   BM_ForkExec_Baseline     the floor: plain fork + execve(/bin/true),
//                            confirmed by a close-on-exec pipe
//
// cgroup v1 joins. Writing to cgroup.procs (or moving any other process)
// takes the kernel's global cgroup_threadgroup_rwsem for writing; unless
// another writer held it within about one RCU grace period, that waits for a
// grace period (rcu_sync_enter -> synchronize_rcu), 5-15 ms on this 2-vCPU
// HZ=250 VM. Back to back the semaphore stays warm; starts 100 ms apart, like
// every real restart after a backoff, would pay it each time. That is why the
// exec-setup hook joins on v1 by writing "0" to tasks: a thread moving itself
// skips that semaphore, and right after fork the child has one thread. The
// pause_ms:100 variant shows the restart path; BM_JoinCgroup_Write shows what
// a cgroup.procs join costs.
//
// Statistics. Each benchmark runs a fixed number of iterations, one spawn
// each, once (no calibration runs): BENCH_SPAWNS (default 2000) back to back,
// BENCH_IDLE_SPAWNS (default 1000) for BM_Start_ExistingCgroup/pause_ms:100;
// the other pausing variants do 300. Every sample is kept; at the end the
// function reports, as counters in microseconds, nearest-rank percentiles of
// the individual spawns (p50_us, p90_us, p99_us), min_us, max_us and first_us
// (the first spawn of the benchmark). Google Benchmark's Time column is the
// mean. Repetitions would only give percentiles of means, which hide the tail.
// others_cpu_pct is the share of the machine's CPUs that other processes used
// during the benchmark (/proc/stat minus our own rusage): spawn latency is
// partly scheduling latency, and a busy machine inflates the tail. Trust
// figures from runs where it is near 0.
//
// Cgroups: the real variants use cgroup::open(cgroup::detect(root)) with root
// "recycler-bench-<pid>" and memory_max 64MiB, as recycler itself does. Not
// root (or no cgroupfs), open() falls back to no cgroups: the label of each
// benchmark says which mode was measured. The root is removed at the end.
//
// Run as root from a Release (or RelWithDebInfo) build (see bench/README.md):
//   build-bench/bench/bench_spawn_latency
//   build-bench/bench/bench_spawn_latency --benchmark_filter='BM_Start_'
#include <benchmark/benchmark.h>
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <uv.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "supervisor/cgroup/cgroup.h"
#include "supervisor/config/config.h"
#include "supervisor/log/log.h"
#include "supervisor/process/process.h"
#include "supervisor/process/spawn.h"
#include "supervisor/util/uv.h"
#include "supervisor/worker/worker.h"

extern char** environ;

namespace {

using namespace recycler;
using Clock = std::chrono::steady_clock;

int64_t env_count(const char* name, int64_t fallback) {
  const char* n = std::getenv(name);
  int64_t v = n ? std::atoll(n) : 0;
  return v > 0 ? v : fallback;
}
int64_t spawns() {
  return env_count("BENCH_SPAWNS", 2000);
}
int64_t idle_spawns() {
  return env_count("BENCH_IDLE_SPAWNS", 1000);
}

void pause_for(std::chrono::milliseconds ms) {
  if (ms.count() <= 0) return;
  timespec ts{static_cast<time_t>(ms.count() / 1000),
              static_cast<long>(ms.count() % 1000) * 1000000L};
  while (::nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

std::string bench_root() {
  return "recycler-bench-" + std::to_string(::getpid());
}

std::vector<std::string> environment() {
  std::vector<std::string> env;
  for (char** e = environ; e && *e; ++e) env.emplace_back(*e);
  return env;
}

std::shared_ptr<const config::ProgramConfig> true_program() {
  auto p = std::make_shared<config::ProgramConfig>();
  p->name = "bench";
  p->command = {"/bin/true"};
  p->restart.mode = config::RestartMode::Never;
  p->limits.memory_max = uint64_t{64} << 20;
  return p;
}

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// CPU time used on the whole machine, and by this process and its reaped
// children, in seconds: the difference is what other processes used.
struct CpuUse {
  double machine = 0;  // busy time of all CPUs (/proc/stat, all but idle and iowait)
  double ours = 0;     // getrusage: self + reaped children
  static CpuUse now() {
    CpuUse u;
    if (std::FILE* f = std::fopen("/proc/stat", "r")) {
      unsigned long long v[8] = {};
      if (std::fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2], &v[3],
                      &v[4], &v[5], &v[6], &v[7]) == 8)
        u.machine = static_cast<double>(v[0] + v[1] + v[2] + v[5] + v[6] + v[7]) /
                    static_cast<double>(::sysconf(_SC_CLK_TCK));
      std::fclose(f);
    }
    for (int who : {RUSAGE_SELF, RUSAGE_CHILDREN}) {
      rusage r{};
      ::getrusage(who, &r);
      for (const timeval& t : {r.ru_utime, r.ru_stime})
        u.ours += static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_usec) / 1e6;
    }
    return u;
  }
};

// Started when the benchmark function starts; report() turns it into the
// counter others_cpu_pct: the share of the machine's CPUs that other processes
// used meanwhile. Spawn latency is scheduling latency too: on a busy machine
// the child waits for a CPU, and the tail grows. Compare runs with this near 0.
class Contention {
 public:
  Contention() : t0_(Clock::now()), u0_(CpuUse::now()) {}
  double others_pct() const {
    CpuUse u1 = CpuUse::now();
    double wall = seconds_since(t0_) * static_cast<double>(::sysconf(_SC_NPROCESSORS_ONLN));
    double others = (u1.machine - u0_.machine) - (u1.ours - u0_.ours);
    return wall > 0 ? std::max(0.0, others) / wall * 100.0 : 0.0;
  }

 private:
  Clock::time_point t0_;
  CpuUse u0_;
};

// Nearest-rank percentile: the smallest sample with at least p% of the samples
// at or below it.
double percentile(std::vector<double> samples, double p) {
  if (samples.empty()) return 0;
  std::sort(samples.begin(), samples.end());
  auto rank = static_cast<size_t>(std::ceil(p / 100.0 * static_cast<double>(samples.size())));
  return samples[std::max<size_t>(rank, 1) - 1];
}

// Per-spawn statistics as counters, in microseconds: p50/p90/p99 (nearest
// rank), min, max, and the very first sample (first_us: cold caches and, with
// cgroups, a join that waits for an RCU grace period), plus others_cpu_pct.
void report(benchmark::State& state, std::vector<double> samples_s, const Contention& contention) {
  state.counters["others_cpu_pct"] = contention.others_pct();
  if (samples_s.empty()) return;
  state.counters["first_us"] = samples_s.front() * 1e6;
  state.counters["p50_us"] = percentile(samples_s, 50) * 1e6;
  state.counters["p90_us"] = percentile(samples_s, 90) * 1e6;
  state.counters["p99_us"] = percentile(samples_s, 99) * 1e6;
  state.counters["min_us"] = *std::min_element(samples_s.begin(), samples_s.end()) * 1e6;
  state.counters["max_us"] = *std::max_element(samples_s.begin(), samples_s.end()) * 1e6;
}

// The supervisor's runtime minus the Supervisor: a loop, its timers, the
// process table and a cgroup manager.
class Rig {
 public:
  enum class Cgroups { Real, None };

  explicit Rig(Cgroups cgroups) : base_env_(environment()) {
    uv_loop_init(&loop_);
    cgroup::Layout layout = cgroup::detect(bench_root());
    if (cgroups == Cgroups::None) {
      manager_ = cgroup::open_fallback(layout);
    } else {
      auto opened = cgroup::open(layout);
      if (opened) {
        manager_ = std::move(opened.value());
      } else {
        error_ = opened.error().message;
        return;
      }
    }
    if (manager_->enforcing())
      label_ = std::string("cgroup ") + cgroup::to_string(manager_->layout().mode) + " (" +
               manager_->layout().display_root() + ")";
    else if (cgroups == Cgroups::None)
      label_ = "no cgroups (fallback manager)";
    else
      label_ = "no cgroups: " + manager_->layout().not_enforced.value_or("fallback");
  }

  ~Rig() {
    if (manager_) manager_->close();
    uv_run(&loop_, UV_RUN_DEFAULT);  // frees closed handles; nothing else is left
    uv_loop_close(&loop_);
  }

  Rig(const Rig&) = delete;
  Rig& operator=(const Rig&) = delete;

  bool ok() const { return error_.empty(); }
  const std::string& error() const { return error_; }
  const std::string& label() const { return label_; }
  uv_loop_t* loop() { return &loop_; }
  WorkerServices& context() { return context_; }
  cgroup::Manager& manager() { return *manager_; }

  // Kills the worker and runs the loop until it is stopped and its cgroup is
  // empty, then lets libuv free the handles it closed.
  bool stop(Worker& w) {
    bool done = false;
    w.kill([&done] { done = true; });
    auto deadline = Clock::now() + std::chrono::seconds(10);
    while (!done && Clock::now() < deadline) uv_run(&loop_, UV_RUN_ONCE);
    uv_run(&loop_, UV_RUN_NOWAIT);
    return done && w.state() == WorkerState::Stopped;
  }

 private:
  uv_loop_t loop_{};
  uv::LoopTimers timers_{&loop_};
  ProcessTable processes_{&loop_};
  std::mt19937_64 rng_{1};
  std::vector<std::string> base_env_;
  WorkerServices context_{timers_, processes_, rng_, base_env_, {}};
  std::unique_ptr<cgroup::Manager> manager_;
  std::string label_;
  std::string error_;
};

// (a) and (c): start() of a slot whose cgroup (if any) already exists;
// state.range(0): milliseconds to pause between a stop and the next start.
void start_existing(benchmark::State& state, Rig::Cgroups cgroups) {
  const std::chrono::milliseconds pause(state.range(0));
  Contention contention;
  Rig rig(cgroups);
  if (!rig.ok()) {
    state.SkipWithError(rig.error().c_str());
    return;
  }
  auto program = true_program();
  auto cg = rig.manager().create(program->name, 0, program->limits);
  if (!cg) {
    state.SkipWithError(cg.error().message.c_str());
    return;
  }
  std::vector<double> samples;
  samples.reserve(static_cast<size_t>(state.max_iterations));
  {
    Worker worker(rig.context(), program, 0, std::move(cg.value()));
    for (auto _ : state) {
      auto t0 = Clock::now();
      worker.start();
      double s = seconds_since(t0);
      state.SetIterationTime(s);
      samples.push_back(s);
      if (worker.state() != WorkerState::Running) {
        state.SkipWithError("the worker did not reach running (see the log)");
        break;
      }
      state.PauseTiming();
      bool stopped = rig.stop(worker);
      pause_for(pause);
      state.ResumeTiming();
      if (!stopped) {
        state.SkipWithError("the worker did not stop within 10 s");
        break;
      }
    }
  }  // ~Worker removes the slot's cgroup
  rig.manager().remove_program(program->name);
  state.SetLabel(rig.label());
  report(state, std::move(samples), contention);
}

void BM_Start_ExistingCgroup(benchmark::State& state) {
  start_existing(state, Rig::Cgroups::Real);
}
void BM_Start_NoCgroup(benchmark::State& state) {
  start_existing(state, Rig::Cgroups::None);
}

// (b) first start: create the slot's cgroup, then start().
void BM_Start_CreateCgroup(benchmark::State& state) {
  Contention contention;
  Rig rig(Rig::Cgroups::Real);
  if (!rig.ok()) {
    state.SkipWithError(rig.error().c_str());
    return;
  }
  auto program = true_program();
  std::vector<double> samples, creates;
  samples.reserve(static_cast<size_t>(state.max_iterations));
  creates.reserve(static_cast<size_t>(state.max_iterations));
  int64_t left_behind = 0;
  for (auto _ : state) {
    auto t0 = Clock::now();
    auto cg = rig.manager().create(program->name, 0, program->limits);
    creates.push_back(seconds_since(t0));
    if (!cg) {
      state.SkipWithError(cg.error().message.c_str());
      break;
    }
    auto worker = std::make_unique<Worker>(rig.context(), program, 0, std::move(cg.value()));
    worker->start();
    double s = seconds_since(t0);
    state.SetIterationTime(s);
    samples.push_back(s);
    if (worker->state() != WorkerState::Running) {
      state.SkipWithError("the worker did not reach running (see the log)");
      break;
    }
    state.PauseTiming();
    bool stopped = rig.stop(*worker);
    std::string dir = worker->cgroup().path();
    worker.reset();  // removes its cgroup
    struct stat st;
    if (rig.manager().enforcing() && ::stat(dir.c_str(), &st) == 0) ++left_behind;
    state.ResumeTiming();
    if (!stopped) {
      state.SkipWithError("the worker did not stop within 10 s");
      break;
    }
  }
  rig.manager().remove_program(program->name);
  state.SetLabel(rig.label());
  state.counters["cgroups_left"] = static_cast<double>(left_behind);
  // How much of each sample manager->create() took.
  state.counters["create_p50_us"] = percentile(creates, 50) * 1e6;
  state.counters["create_p99_us"] = percentile(creates, 99) * 1e6;
  report(state, std::move(samples), contention);
}

// Breakdown: spawn_process() alone, as ProcessTable::launch calls it (minus the
// output pipes and the libuv handles), with the slot's join fds or without.
void spawn_process_only(benchmark::State& state, bool join) {
  Contention contention;
  Rig rig(join ? Rig::Cgroups::Real : Rig::Cgroups::None);
  if (!rig.ok()) {
    state.SkipWithError(rig.error().c_str());
    return;
  }
  auto program = true_program();
  auto cg = rig.manager().create(program->name, 0, program->limits);
  if (!cg) {
    state.SkipWithError(cg.error().message.c_str());
    return;
  }
  std::vector<std::string> env = environment();
  std::vector<double> samples;
  samples.reserve(static_cast<size_t>(state.max_iterations));
  for (auto _ : state) {
    auto t0 = Clock::now();
    LaunchSpec spec;
    spec.argv = program->command;
    spec.env = env;
    spec.join_fds = cg.value()->open_join_fds();
    auto pid = spawn_process(spec);
    double s = seconds_since(t0);
    state.SetIterationTime(s);
    samples.push_back(s);
    if (!pid) {
      state.SkipWithError(pid.error().message.c_str());
      break;
    }
    state.PauseTiming();
    int status;
    while (::waitpid(*pid, &status, 0) < 0 && errno == EINTR) {
    }
    state.ResumeTiming();
  }
  Status removed = cg.value()->remove();
  if (!removed) state.SkipWithError(removed.error().message.c_str());
  cg.value().reset();
  rig.manager().remove_program(program->name);
  state.SetLabel(rig.label());
  report(state, std::move(samples), contention);
}

void BM_SpawnProcess_JoinCgroup(benchmark::State& state) {
  spawn_process_only(state, true);
}
void BM_SpawnProcess_NoCgroup(benchmark::State& state) {
  spawn_process_only(state, false);
}

// For contrast, a parent-side join: a paused helper process is moved by pid
// into the slot's cgroup.procs in every hierarchy (timed), then back to the
// root (untimed), then nothing happens for state.range(0) milliseconds
// (untimed). Moving another process takes cgroup_threadgroup_rwsem for
// writing, which waits for an RCU grace period unless another writer held it
// moments ago: with a gap longer than a grace period every join pays one. The
// hook avoids this (see "cgroup v1 joins" above).
void BM_JoinCgroup_Write(benchmark::State& state) {
  Contention contention;
  Rig rig(Rig::Cgroups::Real);
  if (!rig.ok() || !rig.manager().enforcing()) {
    state.SkipWithError(rig.ok() ? "needs real cgroups (run as root)" : rig.error().c_str());
    return;
  }
  auto program = true_program();
  auto cg = rig.manager().create(program->name, 0, program->limits);
  if (!cg) {
    state.SkipWithError(cg.error().message.c_str());
    return;
  }
  const cgroup::Layout& layout = rig.manager().layout();
  std::vector<UniqueFd> out_fds;
  for (const cgroup::Hierarchy& h : layout.hierarchies)
    out_fds.emplace_back(::open((layout.dir(h) + "/cgroup.procs").c_str(), O_WRONLY | O_CLOEXEC));
  pid_t helper = ::fork();
  if (helper == 0) {
    ::pause();
    ::_exit(0);
  }
  std::string pid_text = std::to_string(helper);
  auto move = [&](const std::vector<UniqueFd>& fds) {
    for (const UniqueFd& fd : fds)
      if (::write(fd.get(), pid_text.data(), pid_text.size()) < 0) return false;
    return true;
  };
  std::vector<double> samples;
  samples.reserve(static_cast<size_t>(state.max_iterations));
  const std::chrono::milliseconds gap(state.range(0));
  std::vector<UniqueFd> in_fds;
  for (const cgroup::Hierarchy& h : layout.hierarchies)
    in_fds.emplace_back(::open((layout.dir(h) + "/" + program->name + "/0/cgroup.procs").c_str(),
                               O_WRONLY | O_CLOEXEC));
  for (auto _ : state) {
    auto t0 = Clock::now();
    bool moved = move(in_fds);
    double s = seconds_since(t0);
    state.SetIterationTime(s);
    samples.push_back(s);
    state.PauseTiming();
    moved = move(out_fds) && moved;
    pause_for(gap);
    state.ResumeTiming();
    if (!moved) {
      state.SkipWithError("cannot write to cgroup.procs");
      break;
    }
  }
  ::kill(helper, SIGKILL);
  ::waitpid(helper, nullptr, 0);
  Status removed = cg.value()->remove();
  if (!removed) state.SkipWithError(removed.error().message.c_str());
  cg.value().reset();
  rig.manager().remove_program(program->name);
  state.SetLabel(rig.label() + ", " + std::to_string(layout.hierarchies.size()) + " hierarchies");
  report(state, std::move(samples), contention);
}

// The floor: fork + execve(/bin/true), execve confirmed by a close-on-exec pipe
// reaching EOF, as Boost does, without anything else.
void BM_ForkExec_Baseline(benchmark::State& state) {
  Contention contention;
  char arg0[] = "/bin/true";
  char* argv[] = {arg0, nullptr};
  std::vector<double> samples;
  samples.reserve(static_cast<size_t>(state.max_iterations));
  for (auto _ : state) {
    auto t0 = Clock::now();
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0) {
      state.SkipWithError("pipe2");
      break;
    }
    pid_t pid = ::fork();
    if (pid == 0) {
      ::execve(argv[0], argv, environ);
      ::_exit(127);
    }
    ::close(fds[1]);
    char c;
    while (::read(fds[0], &c, 1) < 0 && errno == EINTR) {
    }
    ::close(fds[0]);
    double s = seconds_since(t0);
    state.SetIterationTime(s);
    samples.push_back(s);
    if (pid < 0) {
      state.SkipWithError("fork");
      break;
    }
    state.PauseTiming();
    int status;
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    state.ResumeTiming();
  }
  state.SetLabel("no recycler code");
  report(state, std::move(samples), contention);
}

}  // namespace

int main(int argc, char** argv) {
  // The worker logs a line per start and per stop: keep warnings and errors only.
  recycler::log::init(recycler::log::Level::Warn, recycler::config::LogFormat::Text);
  // Each benchmark runs exactly that many iterations, one spawn each, once:
  // the percentiles come from those samples.
  auto add = [](const char* name, void (*fn)(benchmark::State&), int64_t iterations) {
    return benchmark::RegisterBenchmark(name, fn)
        ->UseManualTime()
        ->Iterations(iterations)
        ->Unit(benchmark::kMicrosecond);
  };
  add("BM_Start_ExistingCgroup", BM_Start_ExistingCgroup, spawns())->ArgName("pause_ms")->Arg(0);
  add("BM_Start_ExistingCgroup", BM_Start_ExistingCgroup, idle_spawns())
      ->ArgName("pause_ms")
      ->Arg(100);
  add("BM_Start_CreateCgroup", BM_Start_CreateCgroup, spawns());
  add("BM_Start_NoCgroup", BM_Start_NoCgroup, spawns())->ArgName("pause_ms")->Arg(0);
  add("BM_Start_NoCgroup", BM_Start_NoCgroup, 300)->ArgName("pause_ms")->Arg(100);
  add("BM_SpawnProcess_JoinCgroup", BM_SpawnProcess_JoinCgroup, spawns());
  add("BM_SpawnProcess_NoCgroup", BM_SpawnProcess_NoCgroup, spawns());
  add("BM_JoinCgroup_Write", BM_JoinCgroup_Write, 500)->ArgName("gap_ms")->Arg(0);
  add("BM_JoinCgroup_Write", BM_JoinCgroup_Write, 300)->ArgName("gap_ms")->Arg(100);
  add("BM_ForkExec_Baseline", BM_ForkExec_Baseline, spawns());
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
