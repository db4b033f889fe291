// The periodic escape scan (supervisor/process/escapes.h): one walk of recycler's
// process tree, as the supervisor does every EscapeTracker::kScanInterval and
// whenever a run ends. It reads /proc/PID/stat of every process on the host
// and asks the cgroup layer about each process below recycler.
//
//   BM_EscapeScan/workers:N   N children of this process stand for N worker
//                             processes; a fake cgroup layer places them in
//                             workers, so that nothing is reported.
// The cost grows with the processes on the host (all are read) and with the
// workers' processes (each one's owner is asked). Run from a Release build:
//   build-bench/bench/bench_escape
#include <benchmark/benchmark.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <map>
#include <vector>

#include "supervisor/cgroup/cgroup.h"
#include "supervisor/process/escapes.h"
#include "supervisor/util/fd.h"

namespace {

using namespace recycler;

// owner_of as the real manager does it (one read of /proc/PID/cgroup), then
// the answer from a table.
class TableManager final : public cgroup::Manager {
 public:
  const cgroup::Layout& layout() const override { return layout_; }
  bool enforcing() const override { return true; }
  Result<std::unique_ptr<cgroup::WorkerCgroup>> create(const std::string&, unsigned,
                                                       const config::Limits&, unsigned) override {
    return Error{"not here"};
  }
  void remove_program(const std::string&) override {}
  void close() override {}
  std::optional<cgroup::WorkerId> owner_of(pid_t pid) const override {
    auto text = read_file("/proc/" + std::to_string(pid) + "/cgroup");
    auto it = owners.find(pid);
    if (!text || it == owners.end()) return std::nullopt;
    return it->second;
  }
  std::map<pid_t, cgroup::WorkerId> owners;

 private:
  cgroup::Layout layout_;
};

void BM_EscapeScan(benchmark::State& state) {
  TableManager manager;
  std::vector<pid_t> children;
  for (int i = 0; i < state.range(0); ++i) {
    pid_t pid = ::fork();
    if (pid == 0) {
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      ::pause();
      ::_exit(0);
    }
    children.push_back(pid);
    manager.owners[pid] = {"idle", static_cast<unsigned>(i)};
  }
  EscapeTracker tracker("/proc", ::getpid(), manager);
  for (auto _ : state) tracker.scan();
  if (tracker.escapees() != 0) state.SkipWithError("escapees found");
  size_t host = 0;
  for (const auto& e : std::filesystem::directory_iterator("/proc"))
    host += e.path().filename().string().find_first_not_of("0123456789") == std::string::npos;
  state.counters["host_processes"] = static_cast<double>(host);
  for (pid_t pid : children) {
    ::kill(pid, SIGKILL);
    ::waitpid(pid, nullptr, 0);
  }
}
BENCHMARK(BM_EscapeScan)
    ->ArgName("workers")
    ->Arg(0)
    ->Arg(50)
    ->Arg(500)
    ->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
