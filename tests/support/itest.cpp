#include "tests/support/itest.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <net/if.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <thread>

#include "supervisor/process/spawn.h"
#include "supervisor/util/pidfd.h"

extern char** environ;

namespace recycler::testing {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

std::string unique_suffix() {
  static std::atomic<int> n{0};
  return std::to_string(::getpid()) + "-" + std::to_string(n++);
}

// cgroup v2: tests need the test process out of its cgroup so that each
// recycler can get a delegated cgroup of its own next to it. Done once.
struct V2Base {
  std::optional<std::string> base;  // relative to the mount
  std::string error;
};

const V2Base& v2_base(const cgroup::Layout& layout) {
  static V2Base result = [&] {
    V2Base r;
    const std::string& mount = layout.hierarchies.front().mount;
    std::string own = layout.own == "/" ? "" : layout.own;
    auto procs = read_file(mount + own + "/cgroup.procs");
    if (!procs) {
      r.error = procs.error().message;
      return r;
    }
    std::istringstream in(*procs);
    pid_t p;
    while (in >> p)
      if (p != ::getpid()) {
        r.error = "the test process shares its cgroup " + layout.own +
                  " with other processes (run it alone in a cgroup, as the VM runner does)";
        return r;
      }
    std::string leaf = mount + own + "/itest-harness";
    ::mkdir(leaf.c_str(), 0755);
    if (Status s = write_file(leaf + "/cgroup.procs", std::to_string(::getpid())); !s) {
      r.error = s.error().message;
      return r;
    }
    for (const char* c : cgroup::kControllers)
      static_cast<void>(write_file(mount + own + "/cgroup.subtree_control", std::string("+") + c));
    r.base = own;
    return r;
  }();
  return result;
}

// Kills whatever is left in a cgroup subtree and removes it, deepest first.
void remove_tree(const std::string& dir, bool v2) {
  if (::access(dir.c_str(), F_OK) != 0) return;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec))
    if (e.is_directory()) remove_tree(e.path().string(), v2);
  if (v2) static_cast<void>(write_file(dir + "/cgroup.kill", "1"));
  for (int i = 0; i < 200; ++i) {
    for (pid_t p : cgroup_pids(dir)) ::kill(p, SIGKILL);
    if (::rmdir(dir.c_str()) == 0 || errno == ENOENT) return;
    std::this_thread::sleep_for(10ms);  // cleanup only: dying processes take a moment
  }
}

std::string strip_slash(const std::string& s) {
  return s.empty() || s[0] != '/' ? s : s.substr(1);
}

}  // namespace

Millis scaled(Millis base) {
  const char* s = std::getenv("RECYCLER_TEST_TIME_SCALE");
  double scale = s ? std::atof(s) : 1.0;
  if (scale < 1) scale = 1;
  return Millis(static_cast<Millis::rep>(static_cast<double>(base.count()) * scale));
}

std::string recycler_bin() {
  const char* e = std::getenv("RECYCLER_BIN");
  return e && *e ? e : RECYCLER_BIN_DEFAULT;
}

std::string leaky_bin() {
  const char* e = std::getenv("RECYCLER_LEAKY_BIN");
  return e && *e ? e : RECYCLER_LEAKY_BIN_DEFAULT;
}

std::string listen_server_bin() {
  const char* e = std::getenv("RECYCLER_LISTEN_SERVER_BIN");
  return e && *e ? e : RECYCLER_LISTEN_SERVER_DEFAULT;
}

std::string hostile_client_bin() {
  const char* e = std::getenv("RECYCLER_HOSTILE_CLIENT_BIN");
  return e && *e ? e : RECYCLER_HOSTILE_CLIENT_DEFAULT;
}

std::optional<std::string> vm_guest_skip() {
  const char* e = std::getenv("RECYCLER_VM_GUEST");
  if (!e || !*e) return std::nullopt;
  return "no cgroup in play: this test runs on the host only (the v2 VM's time goes to what "
         "differs on cgroup v2)";
}

std::string fake_nvml_lib() {
  const char* e = std::getenv("RECYCLER_FAKE_NVML");
  return e && *e ? e : RECYCLER_FAKE_NVML_DEFAULT;
}

std::optional<std::string> python_bin() {
  const char* e = std::getenv("RECYCLER_PYTHON");
  std::string python = e && *e ? e : "/usr/bin/python3";
  if (::access(python.c_str(), X_OK) != 0) return std::nullopt;
  return python;
}

std::string examples_dir() {
  return RECYCLER_EXAMPLES_DIR;
}

std::optional<uint64_t> oom_kills(const Sandbox& sandbox, const std::string& program,
                                  unsigned slot) {
  std::string dir = sandbox.worker_dir(program, slot);
  return find_keyed_value(
      read_text(dir + (sandbox.v2() ? "/memory.events" : "/memory.oom_control")), "oom_kill");
}

std::string read_text(const std::string& path) {
  return read_file(path).value_or("<unreadable>");
}

bool process_exists(pid_t pid) {
  // A zombie no longer runs anything: count it as gone.
  auto stat = read_file("/proc/" + std::to_string(pid) + "/stat");
  if (!stat) return false;
  size_t close = stat->rfind(')');
  return close != std::string::npos && close + 2 < stat->size() && (*stat)[close + 2] != 'Z';
}

bool wait_gone(pid_t pid, Millis timeout) {
  UniqueFd pidfd(pidfd_open(pid));
  if (!pidfd) return !process_exists(pid);  // ESRCH: gone already
  pollfd p{pidfd.get(), POLLIN, 0};
  return ::poll(&p, 1, static_cast<int>(scaled(timeout).count())) == 1;
}

std::vector<pid_t> cgroup_pids(const std::string& dir) {
  std::vector<pid_t> out;
  auto text = read_file(dir + "/cgroup.procs");
  if (!text) return out;
  std::istringstream in(*text);
  pid_t p;
  while (in >> p) out.push_back(p);
  return out;
}

std::optional<std::string> Sandbox::skip_reason() {
  if (::geteuid() != 0) return "needs root: these tests create cgroups";
  cgroup::Layout layout = cgroup::detect("x");
  if (layout.hierarchies.empty())
    return "no cgroup hierarchy here: " + layout.not_enforced.value_or("");
  if (layout.mode == cgroup::Mode::V2) {
    const V2Base& b = v2_base(layout);
    if (!b.base) return "cgroup v2 delegation for tests: " + b.error;
  }
  return std::nullopt;
}

Sandbox::Sandbox() : layout_(cgroup::detect("x")) {
  char tmpl[] = "/tmp/recycler-itest-XXXXXX";
  tmp_ = ::mkdtemp(tmpl);
  ::chmod(tmp_.c_str(), 0755);
  if (v2()) {
    const std::string& mount = layout_.hierarchies.front().mount;
    service_ = v2_base(layout_).base.value_or("") + "/itest-" + unique_suffix();
    ::mkdir((mount + service_).c_str(), 0755);
    root_ = "recycler";
  } else {
    root_ = "recycler-test-" + unique_suffix();
  }
}

Sandbox::~Sandbox() {
  if (v2()) {
    const std::string& mount = layout_.hierarchies.front().mount;
    remove_tree(mount + service_, true);
    if (root_.front() == '/') remove_tree(mount + root_, true);
  } else {
    for (const cgroup::Hierarchy& h : layout_.hierarchies)
      remove_tree(h.mount + "/" + strip_slash(root_), false);
  }
  std::error_code ec;
  fs::remove_all(tmp_, ec);
}

void Sandbox::use_absolute_root() {
  root_ = "/recycler-test-" + unique_suffix();
}

std::string Sandbox::root_dir(const std::string& controller) const {
  if (v2()) {
    const std::string& mount = layout_.hierarchies.front().mount;
    return mount + (root_.front() == '/' ? root_ : service_ + "/" + root_);
  }
  for (const cgroup::Hierarchy& h : layout_.hierarchies)
    if (h.controller == controller) return h.mount + "/" + strip_slash(root_);
  ADD_FAILURE() << "no " << controller << " hierarchy";
  return "";
}

std::string Sandbox::worker_dir(const std::string& program, unsigned slot,
                                const std::string& controller) const {
  return root_dir(controller) + "/" + program + "/" + std::to_string(slot);
}

std::string Sandbox::worker_cgroup(const std::string& program, unsigned slot) const {
  std::string dir = worker_dir(program, slot);
  for (const cgroup::Hierarchy& h : layout_.hierarchies)
    if (dir.rfind(h.mount + "/", 0) == 0) return dir.substr(h.mount.size());
  return dir;
}

std::vector<UniqueFd> Sandbox::join_fds() const {
  std::vector<UniqueFd> fds;
  if (v2() && root_.front() != '/') {
    std::string procs = layout_.hierarchies.front().mount + service_ + "/cgroup.procs";
    fds.emplace_back(::open(procs.c_str(), O_WRONLY | O_CLOEXEC));
  }
  return fds;
}

std::string Sandbox::write(const std::string& name, const std::string& content) const {
  std::string path = tmp_ + "/" + name;
  std::ofstream(path) << content;
  return path;
}

Recycler::Recycler(const std::vector<std::string>& args, const Sandbox& sandbox)
    : Recycler(args, Options{sandbox.join_fds(), std::nullopt, std::nullopt, "", {}, {}, "", ""}) {}

Recycler::Recycler(const std::vector<std::string>& args, Options options)
    : discard_(options.discard_lines_with) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) {
    ADD_FAILURE() << "pipe2: " << std::strerror(errno);
    return;
  }
  out_.reset(fds[0]);
  UniqueFd write_end(fds[1]);
  LaunchSpec spec;
  spec.argv.push_back(options.binary.empty() ? recycler_bin() : options.binary);
  spec.argv.insert(spec.argv.end(), args.begin(), args.end());
  // The test's environment, with options.env replacing what it names.
  auto name_of = [](const std::string& kv) { return kv.substr(0, kv.find('=')); };
  for (char** e = environ; *e; ++e) {
    std::string kv = *e;
    bool replaced = std::any_of(options.env.begin(), options.env.end(),
                                [&](const std::string& o) { return name_of(o) == name_of(kv); });
    if (!replaced) spec.env.push_back(std::move(kv));
  }
  spec.env.insert(spec.env.end(), options.env.begin(), options.env.end());
  spec.rlimits = options.rlimits;
  spec.cwd = options.cwd;
  spec.uid = options.uid;
  spec.gid = options.gid;
  spec.join_fds = std::move(options.join_fds);
  spec.stdout_fd = write_end.get();
  spec.stderr_fd = write_end.get();
  auto pid = spawn_process(spec);
  if (!pid) {
    ADD_FAILURE() << "cannot start " << spec.argv[0] << ": " << pid.error().message;
    return;
  }
  pid_ = *pid;
  pidfd_.reset(pidfd_open(pid_));
  ::fcntl(out_.get(), F_SETFL, O_NONBLOCK);
}

Recycler::~Recycler() {
  if (pid_ > 0 && !status_) {
    ::kill(pid_, SIGKILL);  // not reaped yet, so still ours
    int st;
    ::waitpid(pid_, &st, 0);
  }
}

bool Recycler::wait_readable(int fd, Millis timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (true) {
    collect();
    auto left = std::chrono::duration_cast<Millis>(deadline - std::chrono::steady_clock::now());
    pollfd p[2] = {{fd, POLLIN, 0}, {out_.get(), POLLIN, 0}};
    int n = ::poll(p, out_ ? 2 : 1, static_cast<int>(std::max<Millis::rep>(0, left.count())));
    if (n > 0 && (p[0].revents & POLLIN)) return true;
    if (n < 0 && errno != EINTR) return false;
    if (std::chrono::steady_clock::now() >= deadline) return false;
  }
}

void Recycler::collect() {
  while (read_some(Millis{0})) {
  }
}

bool Recycler::read_some(Millis timeout) {
  if (!out_) return false;
  pollfd p{out_.get(), POLLIN, 0};
  int r = ::poll(&p, 1, static_cast<int>(std::max<Millis::rep>(0, timeout.count())));
  if (r <= 0) return false;
  char buf[65536];
  ssize_t n = ::read(out_.get(), buf, sizeof buf);
  if (n <= 0) {
    if (n == 0) {  // EOF: the recycler (and anything that shared its stderr) is gone
      if (!partial_.empty()) lines_.push_back(std::move(partial_));
      partial_.clear();
      out_.reset();
    }
    return n < 0 && errno == EAGAIN;
  }
  partial_.append(buf, static_cast<size_t>(n));
  size_t nl;
  size_t start = 0;
  while ((nl = partial_.find('\n', start)) != std::string::npos) {
    std::string_view line(partial_.data() + start, nl - start);
    if (!discard_.empty() && line.find(discard_) != std::string_view::npos)
      ++discarded_;
    else
      lines_.emplace_back(line);
    start = nl + 1;
  }
  partial_.erase(0, start);
  return true;
}

std::optional<std::string> Recycler::scan(const std::function<bool(const std::string&)>& match) {
  for (size_t i = cursor_; i < lines_.size(); ++i)
    if (match(lines_[i])) {
      cursor_ = i + 1;
      return lines_[i];
    }
  return std::nullopt;
}

std::optional<std::string> Recycler::wait_for(const std::string& needle, Millis timeout) {
  auto deadline = Clock::now() + scaled(timeout);
  auto match = [&](const std::string& l) { return l.find(needle) != std::string::npos; };
  for (;;) {
    if (auto line = scan(match)) return line;
    auto left = std::chrono::duration_cast<Millis>(deadline - Clock::now());
    if (left <= Millis{0} || (!read_some(left) && !out_)) break;
  }
  ADD_FAILURE() << "no line with \"" << needle << "\" within " << scaled(timeout).count()
                << " ms; recycler output:\n"
                << output();
  return std::nullopt;
}

bool Recycler::wait_for(const std::regex& re, std::smatch* match, Millis timeout) {
  auto deadline = Clock::now() + scaled(timeout);
  for (;;) {
    for (size_t i = cursor_; i < lines_.size(); ++i)
      if (std::regex_search(lines_[i], *match, re)) {
        cursor_ = i + 1;
        return true;
      }
    auto left = std::chrono::duration_cast<Millis>(deadline - Clock::now());
    if (left <= Millis{0} || (!read_some(left) && !out_)) break;
  }
  ADD_FAILURE() << "no line matching the expected pattern within " << scaled(timeout).count()
                << " ms; recycler output:\n"
                << output();
  return false;
}

bool Recycler::wait_for_count(const std::string& needle, size_t n, Millis timeout) {
  auto deadline = Clock::now() + scaled(timeout);
  while (count(needle) < n) {
    auto left = std::chrono::duration_cast<Millis>(deadline - Clock::now());
    if (left <= Millis{0} || (!read_some(left) && !out_)) {
      ADD_FAILURE() << "fewer than " << n << " lines with \"" << needle << "\" within "
                    << scaled(timeout).count() << " ms; recycler output:\n"
                    << output();
      return false;
    }
  }
  return true;
}

size_t Recycler::count(const std::string& needle) const {
  size_t n = 0;
  for (const std::string& l : lines_)
    if (l.find(needle) != std::string::npos) ++n;
  return n;
}

std::string Recycler::output() const {
  std::string out;
  for (const std::string& l : lines_) out += l + "\n";
  return out + partial_;
}

void Recycler::signal(int sig) {
  if (pid_ > 0 && !status_) ::kill(pid_, sig);
}

std::optional<int> Recycler::wait_exit(Millis timeout) {
  if (status_ || pid_ <= 0) return status_;
  // Read its output meanwhile: a recycler that is stopping writes its last
  // lines, and a reader that stopped reading would hold them up.
  auto deadline = Clock::now() + scaled(timeout);
  for (;;) {  // one look at least, even with no time to wait
    auto left = std::max(Millis{0}, std::chrono::duration_cast<Millis>(deadline - Clock::now()));
    pollfd p[2] = {{pidfd_.get(), POLLIN, 0}, {out_ ? out_.get() : -1, POLLIN, 0}};
    if (::poll(p, 2, static_cast<int>(left.count())) < 0 && errno != EINTR) return std::nullopt;
    if (p[0].revents & POLLIN) break;
    if (p[1].revents) read_some(Millis{0});
    if (left == Millis{0}) return std::nullopt;
  }
  int st = 0;
  if (::waitpid(pid_, &st, 0) != pid_) return std::nullopt;
  status_ = st;
  while (read_some(Millis{200})) {
  }
  return status_;
}

int Recycler::exit_code(Millis timeout) {
  auto st = wait_exit(timeout);
  if (!st) {
    ADD_FAILURE() << "recycler did not exit within " << scaled(timeout).count() << " ms; output:\n"
                  << output();
    return -1;
  }
  return WIFEXITED(*st) ? WEXITSTATUS(*st) : 128 + WTERMSIG(*st);
}

pid_t started_pid(const std::string& line) {
  std::smatch m;
  static const std::regex re("started: pid ([0-9]+)");
  if (!std::regex_search(line, m, re)) return -1;
  return static_cast<pid_t>(std::stol(m[1]));
}

SystemdSocket::SystemdSocket(const std::string& path) {
  fd_.reset(::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::snprintf(addr.sun_path, sizeof addr.sun_path, "%s", path.c_str());
  bound_ = fd_ && ::bind(fd_.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
}

std::string SystemdSocket::receive(Millis timeout) {
  pollfd p{fd_.get(), POLLIN, 0};
  if (::poll(&p, 1, static_cast<int>(scaled(timeout).count())) != 1) return "";
  char buf[4096];
  ssize_t n = ::recv(fd_.get(), buf, sizeof buf, 0);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : "";
}

std::optional<std::string> pid_namespace_skip() {
  if (::access("/usr/bin/unshare", X_OK) != 0) return "no /usr/bin/unshare (util-linux)";
  if (::geteuid() != 0) return "a pid namespace of its own needs root";
  return std::nullopt;
}

Recycler::Options in_pid_namespace(Recycler::Options options) {
  options.binary = "/usr/bin/unshare";
  return options;
}

std::vector<std::string> in_pid_namespace_args(std::vector<std::string> recycler_args) {
  std::vector<std::string> args{"--pid", "--fork", "--mount-proc", recycler_bin()};
  args.insert(args.end(), recycler_args.begin(), recycler_args.end());
  return args;
}

pid_t child_of(pid_t parent) {
  std::string children = read_text("/proc/" + std::to_string(parent) + "/task/" +
                                   std::to_string(parent) + "/children");
  return static_cast<pid_t>(std::atoi(children.c_str()));
}

Recycler::Options in_sandbox(const Sandbox& sandbox) {
  Recycler::Options o;
  o.join_fds = sandbox.join_fds();
  return o;
}

Recycler::Options as_nobody(const Sandbox& sandbox) {
  constexpr uid_t kNobody = 65534;
  Recycler::Options o = in_sandbox(sandbox);
  o.uid = kNobody;
  o.gid = kNobody;
  o.cwd = sandbox.tmp();
  return o;
}

Recycler::Options with_honest_rss(Recycler::Options options) {
  const char* asan = std::getenv("ASAN_OPTIONS");
  options.env.push_back(std::string("ASAN_OPTIONS=") + (asan ? asan : "") +
                        ":quarantine_size_mb=1");
  return options;
}

uint64_t rss_kib(pid_t pid) {
  std::string status = read_text("/proc/" + std::to_string(pid) + "/status");
  std::smatch m;
  static const std::regex re(R"(VmRSS:\s+([0-9]+) kB)");
  return std::regex_search(status, m, re) ? std::stoull(m[1]) : 0;
}

size_t open_fds(pid_t pid) {
  size_t fewest = SIZE_MAX;
  for (auto until = std::chrono::steady_clock::now() + 200ms;
       std::chrono::steady_clock::now() < until;) {
    size_t n = 0;
    std::error_code ec;
    for (auto it = fs::directory_iterator("/proc/" + std::to_string(pid) + "/fd", ec);
         !ec && it != fs::directory_iterator(); it.increment(ec))
      ++n;
    fewest = std::min(fewest, n);
  }
  return fewest;
}

std::string leaking_neighbour() {
  return R"(  leak:
    command: [")" +
         leaky_bin() + R"(", "--rate", "64MiB", "--max", "1GiB"]
    limits: {memory_max: 160MiB}
    policies:
      - memory: {metric: anon, limit: 64MiB}
    stop: {timeout: 2s}
)";
}

size_t neighbour_recycles_in_time(const Recycler& r) {
  static const std::regex recycle(R"(leak\[0\] recycle: anon ([0-9.]+) MiB > 64 MiB)");
  size_t n = 0;
  for (const std::string& line : r.lines()) {
    std::smatch m;
    if (!std::regex_search(line, m, recycle)) continue;
    ++n;
    EXPECT_LT(std::stod(m[1]), 96.0) << line;
  }
  return n;
}

std::string config_yaml(const Sandbox& sandbox, const std::string& programs,
                        const std::string& extra_top_level) {
  // Its own control socket: tests run side by side, and the default one is
  // named after the config file (the same r.yaml in many tests).
  std::string control = extra_top_level.find("control:") == std::string::npos
                            ? "control: {socket: " + sandbox.tmp() + "/control.sock}\n"
                            : "";
  return "cgroup_root: " + sandbox.cgroup_root() + "\n" + control + extra_top_level +
         "programs:\n" + programs;
}

Child spawn_cli(const std::vector<std::string>& args) {
  int out[2], err[2];
  EXPECT_EQ(::pipe2(out, O_CLOEXEC), 0);
  EXPECT_EQ(::pipe2(err, O_CLOEXEC), 0);
  std::vector<std::string> argv{recycler_bin()};
  argv.insert(argv.end(), args.begin(), args.end());
  pid_t pid = ::fork();
  if (pid == 0) {
    ::dup2(out[1], 1);
    ::dup2(err[1], 2);
    std::vector<char*> a;
    for (auto& s : argv) a.push_back(s.data());
    a.push_back(nullptr);
    ::execv(a[0], a.data());
    ::_exit(127);
  }
  ::close(out[1]);
  ::close(err[1]);
  return {pid, UniqueFd(out[0]), UniqueFd(err[0])};
}

Ran run_command(const std::vector<std::string>& argv, Millis timeout) {
  int pipefd[2];
  if (::pipe2(pipefd, O_CLOEXEC) != 0) return {};
  pid_t pid = ::fork();
  if (pid == 0) {
    ::dup2(pipefd[1], 1);
    ::dup2(pipefd[1], 2);
    std::vector<char*> a;
    for (const std::string& s : argv) a.push_back(const_cast<char*>(s.c_str()));
    a.push_back(nullptr);
    ::execvp(a[0], a.data());
    ::_exit(127);
  }
  ::close(pipefd[1]);
  UniqueFd out(pipefd[0]);
  Ran r;
  r.out = read_until_eof(out.get(), timeout);
  int status = 0;
  ::waitpid(pid, &status, 0);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return r;
}

std::vector<std::pair<std::string, int>> read_progress(const std::string& path) {
  std::vector<std::pair<std::string, int>> out;
  std::ifstream in(path);
  std::string generation;
  int step = 0;
  while (in >> generation >> step) out.emplace_back(generation, step);
  return out;
}

int global_step(const std::string& line) {
  std::smatch m;
  static const std::regex re("global step ([0-9]+)");
  return std::regex_search(line, m, re) ? std::stoi(m[1]) : -1;
}

bool eventually(const std::function<bool()>& check, Millis timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!check()) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(50ms);
  }
  return true;
}

std::string read_until_eof(int fd, Millis timeout) {
  std::string s;
  auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    auto left = std::chrono::duration_cast<Millis>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) break;
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) break;
    char buf[65536];
    ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n <= 0) break;
    s.append(buf, static_cast<size_t>(n));
  }
  return s;
}

Cli cli(const std::vector<std::string>& args) {
  Child c = spawn_cli(args);
  Cli r;
  r.out = read_until_eof(c.out.get(), scaled(30s));
  r.err = read_until_eof(c.err.get(), scaled(5s));
  int status = 0;
  ::waitpid(c.pid, &status, 0);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

UniqueFd connect_unix(const std::string& path) {
  UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_un a{};
  if (path.size() >= sizeof(a.sun_path)) return UniqueFd();
  a.sun_family = AF_UNIX;
  std::memcpy(a.sun_path, path.data(), path.size());
  if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) return UniqueFd();
  return fd;
}

bool closed_within(int fd, Millis timeout, std::string* got) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    auto left = std::chrono::duration_cast<Millis>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return false;
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) return false;
    char buf[4096];
    ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n <= 0) return true;
    if (got) got->append(buf, static_cast<size_t>(n));
  }
}

int free_port() {
  UniqueFd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) return -1;
  socklen_t len = sizeof addr;
  ::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&addr), &len);
  return ntohs(addr.sin_port);
}

uint16_t metrics_port(Recycler& r) {
  std::smatch m;
  if (!r.wait_for(std::regex(R"(metrics: serving http://127\.0\.0\.1:([0-9]+)/metrics)"), &m))
    return 0;
  return static_cast<uint16_t>(std::stoi(m[1]));
}

std::optional<double> metric_value(const std::string& body, const std::string& series) {
  size_t at = 0;
  while ((at = body.find(series + " ", at)) != std::string::npos) {
    if (at == 0 || body[at - 1] == '\n') {
      size_t start = at + series.size() + 1;
      return std::stod(body.substr(start, body.find('\n', start) - start));
    }
    ++at;
  }
  return std::nullopt;
}

std::optional<std::string> promtool() {
  for (const char* dir : {"/usr/bin", "/usr/local/bin", "/bin"}) {
    std::string path = std::string(dir) + "/promtool";
    if (::access(path.c_str(), X_OK) == 0) return path;
  }
  return std::nullopt;
}

std::pair<int, std::string> promtool_check(const std::string& tool, const std::string& body,
                                           const std::string& tmp) {
  std::string out = tmp + "/promtool.out";
  FILE* p = ::popen((tool + " check metrics > " + out + " 2>&1").c_str(), "w");
  if (!p) return {-1, "popen failed"};
  std::fwrite(body.data(), 1, body.size(), p);
  int status = ::pclose(p);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, read_text(out)};
}

Response get(int port, const std::string& path) {
  UniqueFd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) return {};
  std::string request = "GET " + path + " HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n";
  if (::send(fd.get(), request.data(), request.size(), MSG_NOSIGNAL) !=
      static_cast<ssize_t>(request.size()))
    return {};
  timeval tv{10, 0};
  ::setsockopt(fd.get(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  std::string raw;
  char buf[4096];
  while (true) {
    ssize_t n = ::recv(fd.get(), buf, sizeof buf, 0);
    if (n < 0) return {};
    if (n == 0) break;
    raw.append(buf, static_cast<size_t>(n));
  }
  Response r;
  if (raw.rfind("HTTP/1.", 0) != 0 || raw.size() < 12) return {};
  r.status = std::atoi(raw.c_str() + 9);
  size_t body = raw.find("\r\n\r\n");
  if (body != std::string::npos) r.body = raw.substr(body + 4);
  return r;
}

Load::Load(int port, int threads, std::string path) {
  for (int i = 0; i < threads; ++i)
    threads_.emplace_back([this, port, path] {
      while (!stop_) {
        Response r = get(port, path);
        (r.status == 200 ? ok_ : failed_)++;
        if (r.status != 200 && !stop_) std::this_thread::yield();
      }
    });
}

void Load::finish() {
  stop_ = true;
  for (auto& t : threads_)
    if (t.joinable()) t.join();
}

bool Load::served_more(int n, Recycler& r, Millis timeout) {
  int target = ok_ + n;
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (ok_ < target) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    r.read_some(50ms);
  }
  return true;
}

NetNamespace::NetNamespace(unsigned max_dgram_qlen) {
  original_ = UniqueFd(::open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC));
  if (!original_) {
    why_ = std::string("cannot open /proc/thread-self/ns/net: ") + std::strerror(errno);
    return;
  }
  if (::unshare(CLONE_NEWNET) != 0) {
    why_ = std::string("unshare(CLONE_NEWNET): ") + std::strerror(errno);
    original_.reset();
    return;
  }
  ok_ = true;  // from here on the destructor must go back
  UniqueFd sock(::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  ifreq lo{};
  std::strncpy(lo.ifr_name, "lo", IFNAMSIZ - 1);
  if (!sock || ::ioctl(sock.get(), SIOCGIFFLAGS, &lo) != 0 ||
      (lo.ifr_flags |= IFF_UP, ::ioctl(sock.get(), SIOCSIFFLAGS, &lo) != 0)) {
    why_ = std::string("bringing loopback up: ") + std::strerror(errno);
    ok_ = false;
    return;
  }
  // /proc/sys/net is the namespace of whoever opens it: this one's.
  std::ofstream qlen("/proc/sys/net/unix/max_dgram_qlen");
  qlen << max_dgram_qlen << "\n";
  qlen.close();
  if (!qlen) {
    why_ = "cannot set net.unix.max_dgram_qlen in the namespace";
    ok_ = false;
  }
}

NetNamespace::~NetNamespace() {
  if (original_ && ::setns(original_.get(), CLONE_NEWNET) != 0)
    ADD_FAILURE() << "setns back to the original network namespace: " << std::strerror(errno);
}

int failures_across_restarts(const RestartsUnderLoad& run) {
  Sandbox sb;
  int port = free_port();
  EXPECT_GT(port, 0);
  std::string cfg = sb.write("r.yaml", config_yaml(sb, run.program(port)));
  Recycler r({"run", "-c", cfg}, sb);
  EXPECT_TRUE(run.booted(r)) << r.output();
  Load load(port, 4);
  EXPECT_TRUE(load.served_more(20, r, scaled(20s))) << r.output();
  // Two restarts, each followed by requests served by the new server.
  EXPECT_TRUE(r.wait_for_count("web[0] started: pid", 3, scaled(30s))) << r.output();
  EXPECT_TRUE(load.served_more(run.after_restarts, r, scaled(20s))) << r.output();
  load.finish();
  if (run.check) run.check(r, port);
  r.signal(SIGTERM);
  EXPECT_EQ(r.exit_code(20s), 0);
  return load.failed();
}

}  // namespace recycler::testing
