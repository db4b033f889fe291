// Integration-test support: runs the real recycler binary against real
// processes and real cgroups, and waits for what it does through its log
// (poll on its output, bounded by a deadline), never through sleeps.
//
// Sandbox gives each test its own cgroup root. On cgroup v2 each recycler
// starts alone in a fresh delegated cgroup, as under systemd's Delegate=yes.
// Timeouts are multiplied by RECYCLER_TEST_TIME_SCALE (the v2 VM is slow).
#pragma once

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <optional>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "supervisor/cgroup/cgroup.h"
#include "supervisor/util/fd.h"

// Skips the calling test when cgroup integration tests cannot run here.
#define RECYCLER_REQUIRE_CGROUPS() \
  if (auto why = ::recycler::testing::Sandbox::skip_reason(); why.has_value()) GTEST_SKIP() << *why
// Skips the calling test inside the v2 VM: it tests nothing of cgroups.
#define RECYCLER_HOST_ONLY() \
  if (auto why = ::recycler::testing::vm_guest_skip(); why.has_value()) GTEST_SKIP() << *why

namespace recycler::testing {

using namespace std::chrono_literals;
using Millis = std::chrono::milliseconds;

// `base` scaled by RECYCLER_TEST_TIME_SCALE.
Millis scaled(Millis base);

std::string recycler_bin();       // RECYCLER_BIN, else the build tree's
std::string leaky_bin();          // RECYCLER_LEAKY_BIN, else the build tree's
std::string listen_server_bin();  // RECYCLER_LISTEN_SERVER_BIN, else the build tree's
// tests/support/hostile_client: RECYCLER_HOSTILE_CLIENT_BIN, else the build tree's.
std::string hostile_client_bin();
// Why a test that does not depend on the cgroup hierarchy skips inside the
// v2 VM (RECYCLER_VM_GUEST, set by tests/vm/run-v2-tests); nullopt elsewhere.
std::optional<std::string> vm_guest_skip();
// The fake NVML driver (tests/support/fake_nvml): RECYCLER_FAKE_NVML, else the build tree's.
std::string fake_nvml_lib();
// Debian's python3 for the example workers written in Python: RECYCLER_PYTHON
// (the VM's staged copy), else /usr/bin/python3; nullopt when not there.
std::optional<std::string> python_bin();
std::string examples_dir();  // the source tree's examples/

// A small file's contents, or "<unreadable>" (so that a comparison fails
// with something to read in its message).
std::string read_text(const std::string& path);

bool process_exists(pid_t pid);
// Waits (on a pidfd, any process) until `pid` has exited; false on timeout.
bool wait_gone(pid_t pid, Millis timeout = 5s);

// From construction until destruction this thread (and what it starts: the
// recycler under test, its workers, Load's clients) lives in a network
// namespace of its own, with loopback up and net.unix.max_dgram_qlen set to
// `max_dgram_qlen` there: a per-namespace setting a test may change without
// touching the host's. ok() is false, with why(), where the machine refuses
// (no root, no CLONE_NEWNET); the test should skip then.
class NetNamespace {
 public:
  explicit NetNamespace(unsigned max_dgram_qlen);
  ~NetNamespace();  // back to the namespace the thread was in
  NetNamespace(const NetNamespace&) = delete;
  NetNamespace& operator=(const NetNamespace&) = delete;
  bool ok() const { return ok_; }
  const std::string& why() const { return why_; }

 private:
  UniqueFd original_;
  bool ok_ = false;
  std::string why_;
};

class Sandbox {
 public:
  // Skips the test (GTEST_SKIP from the caller; see skip_reason) without root.
  Sandbox();
  ~Sandbox();
  Sandbox(const Sandbox&) = delete;
  Sandbox& operator=(const Sandbox&) = delete;

  // Why cgroup tests cannot run here, if they cannot.
  static std::optional<std::string> skip_reason();

  bool v2() const { return layout_.mode == cgroup::Mode::V2; }
  // The config's cgroup_root for this test.
  const std::string& cgroup_root() const { return root_; }
  // Use an absolute cgroup_root from the top of the hierarchy instead.
  void use_absolute_root();
  // The worker's cgroup directory in the hierarchy of `controller` (v1).
  std::string worker_dir(const std::string& program, unsigned slot,
                         const std::string& controller = "memory") const;
  std::string root_dir(const std::string& controller = "memory") const;
  // The worker's cgroup as /proc/PID/cgroup names it (relative to the mount).
  std::string worker_cgroup(const std::string& program, unsigned slot) const;
  // Where the recycler process must start (v2: the delegated cgroup).
  std::vector<UniqueFd> join_fds() const;
  const std::string& tmp() const { return tmp_; }
  // Writes a file under tmp(); returns its path.
  std::string write(const std::string& name, const std::string& content) const;

  // The limit file names of this mode.
  std::string memory_max_file() const { return v2() ? "memory.max" : "memory.limit_in_bytes"; }

 private:
  cgroup::Layout layout_;
  std::string root_;
  std::string service_;  // v2: the delegated cgroup, relative to the mount
  std::string tmp_;
};

// One recycler process, with its stdout and stderr merged into lines.
class Recycler {
 public:
  struct Options {
    std::vector<UniqueFd> join_fds;
    std::optional<uid_t> uid;
    std::optional<gid_t> gid;
    std::string cwd;
    std::vector<std::string> env;  // "NAME=value", replacing or added to the test's own
    std::vector<config::Rlimit> rlimits;
    // Lines containing this (e.g. "app[0] err | ") are counted, not kept:
    // for workers that flood their output.
    std::string discard_lines_with;
    // Another program to run the same way ("": recycler), e.g. hostile_client_bin().
    std::string binary;
  };
  Recycler(const std::vector<std::string>& args, Options options);
  Recycler(const std::vector<std::string>& args, const Sandbox& sandbox);
  ~Recycler();  // SIGKILL if still running
  Recycler(const Recycler&) = delete;
  Recycler& operator=(const Recycler&) = delete;

  pid_t pid() const { return pid_; }

  // The first line (after the last match) containing `needle`; nullopt and a
  // test failure with the whole output on timeout.
  std::optional<std::string> wait_for(const std::string& needle, Millis timeout = 10s);
  // Same with a regular expression; fills `match`.
  bool wait_for(const std::regex& re, std::smatch* match, Millis timeout = 10s);
  // Waits until `n` lines in all contain `needle`, in whatever order they came.
  bool wait_for_count(const std::string& needle, size_t n, Millis timeout = 10s);
  // Waits until `fd` is readable (e.g. a FIFO a worker writes to: worker
  // output may be dropped when the test reads too slowly, this never is),
  // reading recycler's output meanwhile; false on timeout.
  bool wait_readable(int fd, Millis timeout);
  // Reads whatever output is there now, without waiting: a test that keeps
  // busy for long must call it, or recycler drops worker output once its
  // stderr pipe is full (its own lines wait, up to 16 MiB).
  void collect();
  // How many lines so far contain `needle`.
  size_t count(const std::string& needle) const;
  const std::vector<std::string>& lines() const { return lines_; }
  // Lines not kept (see Options::discard_lines_with).
  size_t discarded() const { return discarded_; }
  std::string output() const;

  void signal(int sig);
  // The exit status (as from waitpid) once it exits; nullopt on timeout.
  std::optional<int> wait_exit(Millis timeout = 10s);
  // Waits for exit and returns the exit code; -1 (and a test failure) otherwise.
  int exit_code(Millis timeout = 10s);

  // Waits up to `timeout` for output and reads what came; false when none did.
  bool read_some(Millis timeout);

 private:
  std::optional<std::string> scan(const std::function<bool(const std::string&)>& match);

  pid_t pid_ = -1;
  UniqueFd pidfd_;
  UniqueFd out_;
  std::string partial_;
  std::vector<std::string> lines_;
  size_t cursor_ = 0;  // wait_for searches from here
  std::string discard_;
  size_t discarded_ = 0;
  std::optional<int> status_;
};

// What systemd's side of NOTIFY_SOCKET sees: a datagram socket bound at
// `path`, owned by the test.
class SystemdSocket {
 public:
  explicit SystemdSocket(const std::string& path);
  bool bound() const { return bound_; }
  // The next datagram, or "" after `timeout` (scaled).
  std::string receive(Millis timeout = 10s);

 private:
  UniqueFd fd_;
  bool bound_ = false;
};

// The pid in a "NAME started: pid N, generation G" line.
pid_t started_pid(const std::string& line);

// A config file with one program per entry of `programs` (YAML snippets,
// indented under the program name), using the sandbox's cgroup_root and a
// control socket in its tmp() (unless `extra_top_level` has a `control:`).
std::string config_yaml(const Sandbox& sandbox, const std::string& programs,
                        const std::string& extra_top_level = "");

// The worker cgroup's OOM-kill counter (v1 memory.oom_control, v2
// memory.events); nullopt when unreadable (the cgroup is gone).
std::optional<uint64_t> oom_kills(const Sandbox& sandbox, const std::string& program,
                                  unsigned slot = 0);

// cgroup.procs of a directory.
std::vector<pid_t> cgroup_pids(const std::string& dir);

// recycler as PID 1 of a pid namespace of its own (a container's), started
// through `unshare --pid --fork --mount-proc`: why it cannot be here, or
// nullopt; the Recycler::Options and arguments that do it; and the pid of
// recycler itself (unshare's child) once it runs, 0 until then.
std::optional<std::string> pid_namespace_skip();
Recycler::Options in_pid_namespace(Recycler::Options options);
std::vector<std::string> in_pid_namespace_args(std::vector<std::string> recycler_args);
pid_t child_of(pid_t parent);

// recycler started where the sandbox's recycler would be (v2: its delegated cgroup).
Recycler::Options in_sandbox(const Sandbox& sandbox);
// The same, as the unprivileged user nobody (so without cgroups), in its tmp().
Recycler::Options as_nobody(const Sandbox& sandbox);
// Under AddressSanitizer freed memory waits in a 256 MB quarantine and RSS
// grows with any allocation: a small one makes RSS mean growth.
Recycler::Options with_honest_rss(Recycler::Options options);

// A process's VmRSS (kB).
uint64_t rss_kib(pid_t pid);
// The files a process keeps open: the fewest seen while looking without
// pause for 200 ms. A restart in flight holds up to a dozen more for a few
// ms (the child's pipes, its pidfd, /dev/null); 200 ms of looks always
// catch a moment between two, even when a worker restarts every few ms.
size_t open_fds(pid_t pid);

// The program `leak` (YAML, indented under `programs:`): a worker leaking
// 64 MiB/s, recycled at anon 64 MiB, in a cgroup allowing 160 MiB. The
// neighbour that tests of faults and floods keep an eye on.
std::string leaking_neighbour();
// Checks that each of its recycles in `r`'s log came in time (below 96 MiB,
// half a second of leaking past the limit); how many there were.
size_t neighbour_recycles_in_time(const Recycler& r);

// --- The CLI and raw clients of the control socket ---

// `recycler ARGS...` run to its end: its exit code, stdout and stderr apart.
struct Cli {
  int code = -1;
  std::string out, err;
};
Cli cli(const std::vector<std::string>& args);

// A child process (recycler ARGS...) with its stdout and stderr on pipes.
struct Child {
  pid_t pid = -1;
  UniqueFd out, err;
};
Child spawn_cli(const std::vector<std::string>& args);

// Reads `fd` until EOF or the deadline.
std::string read_until_eof(int fd, Millis timeout);

// Any program (`argv[0]` searched on PATH) run to its end, its output read
// for at most `timeout`: its exit code (128 + N when killed by signal N) and
// its stdout and stderr together.
struct Ran {
  int code = -1;
  std::string out;
};
Ran run_command(const std::vector<std::string>& argv, Millis timeout = 30s);

// A trainer's --progress file (examples/trainer, examples/pytorch):
// "GENERATION STEP" per finished training step.
std::vector<std::pair<std::string, int>> read_progress(const std::string& path);
// N of "global step N" in a trainer's line; -1 when it has none.
int global_step(const std::string& line);

// Polls `check` every 50 ms until it holds or `timeout` has passed: for the
// state of what says nothing when it changes (a daemon's, a file another
// program writes); false on timeout.
bool eventually(const std::function<bool()>& check, Millis timeout);

// A raw client of a unix stream socket; an empty fd when it cannot connect.
UniqueFd connect_unix(const std::string& path);

// Whether the server closed `fd` (EOF) within `timeout`, whatever it sent first.
bool closed_within(int fd, Millis timeout, std::string* got = nullptr);

// --- Prometheus text (the metrics endpoint) ---

// The port of `metrics: {listen: 127.0.0.1:0}`, from recycler's log; 0 when
// it never says.
uint16_t metrics_port(Recycler& r);
// The value of the sample whose name and labels are `series` exactly
// (`recycler_worker_up{program="web",slot="0"}`); nullopt when absent.
std::optional<double> metric_value(const std::string& body, const std::string& series);
// Debian's promtool (package prometheus), where installed.
std::optional<std::string> promtool();
// `promtool check metrics` on `body`: its exit status and what it printed
// (a scratch file in `tmp`).
std::pair<int, std::string> promtool_check(const std::string& tool, const std::string& body,
                                           const std::string& tmp);

// --- HTTP on 127.0.0.1, for the serving tests ---

// A port nobody listens on right now (the kernel's choice); -1 on failure.
int free_port();

struct Response {
  int status = 0;  // 0: the request failed (refused, reset, timed out)
  std::string body;
};
// One HTTP/1.0 GET to 127.0.0.1:PORT on a fresh connection (10 s to answer).
Response get(int port, const std::string& path);

// Clients on `threads` threads, each sending the next GET `path` as soon as
// the last one ended, until finish(): what a server under steady load sees.
class Load {
 public:
  Load(int port, int threads, std::string path = "/");
  ~Load() { finish(); }
  Load(const Load&) = delete;
  Load& operator=(const Load&) = delete;
  void finish();
  int ok() const { return ok_; }
  int failed() const { return failed_; }
  // Waits (reading `r`'s output meanwhile) until `n` more requests than now
  // have succeeded: the server answers again. False after `timeout`.
  bool served_more(int n, Recycler& r, Millis timeout);

 private:
  std::atomic<bool> stop_{false};
  std::atomic<int> ok_{0}, failed_{0};
  std::vector<std::thread> threads_;
};

// Whole-worker restarts of a program under 4 concurrent clients: recycler runs
// the config `program(port)` makes (its policies restart the worker); the
// load starts once `booted` holds and goes on until 20 requests were served,
// the worker started 3 times, and `after_restarts` more were served (the last
// server answers). `check` looks at the run before recycler stops. Returns
// how many requests failed (refused, reset, not 200).
struct RestartsUnderLoad {
  std::function<std::string(int port)> program;
  std::function<bool(Recycler&)> booted;
  int after_restarts = 20;
  std::function<void(Recycler&, int port)> check;
};
int failures_across_restarts(const RestartsUnderLoad& run);

}  // namespace recycler::testing
