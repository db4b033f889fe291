#include "supervisor/process/spawn.h"

// Boost.Process offers vfork (bp::posix::use_vfork) only where the feature
// macros still declare it (POSIX removed vfork in 2008); glibc has it, and
// Linux's vfork is what posix_spawn itself uses.
#define BOOST_POSIX_HAS_VFORK 1

#include <fcntl.h>
#include <grp.h>
#include <linux/close_range.h>
#include <pwd.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <boost/process/child.hpp>
#include <boost/process/exe.hpp>
#include <boost/process/extend.hpp>
#include <boost/process/posix.hpp>
#include <cerrno>
#include <csignal>
#include <cstring>

#include "policies/base/enums.h"

namespace recycler {
namespace {

namespace bp = boost::process;

// What the child reports when a setup step fails before exec.
enum class Step : int {
  JoinCgroup = 1,
  Session,
  DeathSignal,
  Rlimit,
  Stdio,
  ListenFds,
  Chdir,
  Groups,
  Gid,
  Uid
};

inline constexpr EnumName<Step> kStepDescriptions[] = {
    {Step::JoinCgroup, "cannot join its cgroup"},
    {Step::Session, "cannot start a session"},
    {Step::DeathSignal, "cannot set PR_SET_PDEATHSIG"},
    {Step::Rlimit, "cannot set an rlimit"},
    {Step::Stdio, "cannot set up stdin/stdout/stderr"},
    {Step::ListenFds, "cannot pass its listening sockets"},
    {Step::Chdir, "cannot change to its working directory"},
    {Step::Groups, "cannot set supplementary groups"},
    {Step::Gid, "cannot switch group"},
    {Step::Uid, "cannot switch user"}};

struct Report {
  Step step;
  int err;
};

// Everything the child needs, prepared in the parent: after vfork the child may
// only make async-signal-safe calls (no allocation, no locks).
struct ChildPlan {
  std::string exe;
  std::vector<char*> argv;
  std::vector<char*> envp;
  std::vector<int> join_fds;
  std::vector<rlimit> limits;
  std::vector<int> limit_resources;
  std::vector<gid_t> groups;
  bool set_groups = false;
  const char* cwd = nullptr;
  std::optional<uid_t> uid;
  std::optional<gid_t> gid;
  int stdin_fd = -1, stdout_fd = -1, stderr_fd = -1;
  std::vector<int> listen_fds;
  // Written in the child (its copy of the plan): where the report pipe and
  // the sockets are moved out of the way of fds 3.., and the digits of
  // LISTEN_PID (envp points at it).
  mutable std::vector<int> listen_moved;
  mutable char listen_pid[32] = "LISTEN_PID=";
  // WATCHDOG_PID=<its pid>, with LaunchSpec::watchdog_pid.
  bool watchdog = false;
  mutable char watchdog_pid[32] = "WATCHDOG_PID=";
  mutable int report_fd = -1;
  pid_t parent = 0;
};

constexpr int kFirstListenFd = 3;  // SD_LISTEN_FDS_START

// The child's pid in decimal at `out` (after "LISTEN_PID=" and the like):
// digits written in place, no allocation; async-signal-safe.
void write_own_pid(char* out) {
  char digits[16];
  int len = 0;
  for (pid_t pid = ::getpid(); pid > 0 && len < 15; pid /= 10)
    digits[len++] = static_cast<char>('0' + pid % 10);
  while (len > 0) *out++ = digits[--len];
  *out = '\0';
}

// The sockets onto fds 3..; async-signal-safe. Every fd that must survive
// (the report pipe, the sockets) is first moved above the range, since any
// of them may sit inside it; dup2 then clears close-on-exec on the targets.
bool place_listen_fds(const ChildPlan& plan) {
  size_t n = plan.listen_fds.size();
  if (n == 0) return true;
  int above = kFirstListenFd + static_cast<int>(n);
  int report = ::fcntl(plan.report_fd, F_DUPFD_CLOEXEC, above);
  if (report < 0) return false;
  plan.report_fd = report;
  for (size_t i = 0; i < n; ++i)
    if ((plan.listen_moved[i] = ::fcntl(plan.listen_fds[i], F_DUPFD_CLOEXEC, above)) < 0)
      return false;
  for (size_t i = 0; i < n; ++i)
    if (::dup2(plan.listen_moved[i], kFirstListenFd + static_cast<int>(i)) < 0) return false;
  write_own_pid(plan.listen_pid + sizeof("LISTEN_PID=") - 1);
  return true;
}

[[noreturn]] void fail(const ChildPlan& plan, Step step) {
  Report r{step, errno};
  ssize_t ignored = ::write(plan.report_fd, &r, sizeof r);
  (void)ignored;
  ::_exit(127);
}

// The child starts with every signal blocked (spawn_process blocks them
// around the vfork) and recycler's handlers still installed: running one of
// them in the child would act on the parent's memory. Like posix_spawn: each
// caught signal back to its default, SIGPIPE too (recycler ignores it, and an
// ignored signal survives exec), then nothing blocked.
void reset_signals() {
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  for (int sig = 1; sig < NSIG; ++sig) {
    struct sigaction current {};
    if (::sigaction(sig, nullptr, &current) != 0) continue;  // glibc's own, or none
    if (current.sa_handler != SIG_DFL && (current.sa_handler != SIG_IGN || sig == SIGPIPE))
      ::sigaction(sig, &dfl, nullptr);
  }
  sigset_t none;
  ::sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
}

// Runs in the child, between vfork and exec, on the parent's memory and
// stack while the parent waits: async-signal-safe calls only, no allocation,
// nothing written but the plan's mutable fields. The order matters.
void child_setup(const ChildPlan& plan) {
  // Joining first: from here on everything, exec included, is charged to and
  // limited by the worker's cgroup.
  for (int fd : plan.join_fds)
    if (::write(fd, "0", 1) != 1) fail(plan, Step::JoinCgroup);
  reset_signals();
  if (::setsid() < 0) fail(plan, Step::Session);
  // Raising a hard limit needs privileges: before dropping them.
  for (size_t i = 0; i < plan.limits.size(); ++i)
    if (::setrlimit(static_cast<__rlimit_resource>(plan.limit_resources[i]), &plan.limits[i]) != 0)
      fail(plan, Step::Rlimit);
  if (::dup2(plan.stdin_fd, 0) < 0 || ::dup2(plan.stdout_fd, 1) < 0 ||
      ::dup2(plan.stderr_fd, 2) < 0)
    fail(plan, Step::Stdio);
  if (!place_listen_fds(plan)) fail(plan, Step::ListenFds);
  if (plan.watchdog) write_own_pid(plan.watchdog_pid + sizeof("WATCHDOG_PID=") - 1);
  // Nothing else reaches the program: an fd recycler itself inherited without
  // close-on-exec (from whatever started it) is closed by the exec.
  ::close_range(kFirstListenFd + static_cast<unsigned>(plan.listen_fds.size()), ~0U,
                CLOSE_RANGE_CLOEXEC);
  // The system calls, not glibc's wrappers: in a multi-threaded process those
  // ask every thread to switch too, and a vfork child would ask the parent's.
  if (plan.set_groups && ::syscall(SYS_setgroups, plan.groups.size(), plan.groups.data()) != 0)
    fail(plan, Step::Groups);
  if (plan.gid && ::syscall(SYS_setgid, *plan.gid) != 0) fail(plan, Step::Gid);
  if (plan.uid && ::syscall(SYS_setuid, *plan.uid) != 0) fail(plan, Step::Uid);
  // As the target user, so that its permissions decide, as with systemd.
  if (plan.cwd && ::chdir(plan.cwd) != 0) fail(plan, Step::Chdir);
  // After the credentials: changing them clears the parent-death signal.
  if (::prctl(PR_SET_PDEATHSIG, SIGKILL) != 0) fail(plan, Step::DeathSignal);
  if (::getppid() != plan.parent) ::_exit(127);  // the recycler died before prctl
}

struct SetupHook : bp::extend::handler {
  const ChildPlan* plan;
  pid_t* failed_pid;

  template <typename Executor>
  void on_setup(Executor& e) const {
    // Our own argv (argv[0] as the user wrote it) and environment.
    e.exe = plan->exe.c_str();
    e.cmd_line = plan->argv.data();
    e.env = const_cast<char**>(plan->envp.data());
  }
  template <typename Executor>
  void on_exec_setup(Executor&) const {
    child_setup(*plan);
  }
  template <typename Executor>
  void on_error(Executor& e, const std::error_code&) const {
    *failed_pid = e.pid;  // Boost does not reap a child whose execve failed
  }
};

int dev_null() {
  static int fd = ::open("/dev/null", O_RDWR | O_CLOEXEC);
  return fd;
}

void reap(pid_t pid) {
  int status;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
}

// The plan's argv, environment, fds and limits, pointing into `spec` and
// `env` (which must outlive it).
ChildPlan make_plan(const LaunchSpec& spec, const std::string& exe, std::vector<std::string>& env) {
  ChildPlan plan;
  plan.exe = exe;
  for (const std::string& a : spec.argv) plan.argv.push_back(const_cast<char*>(a.c_str()));
  plan.argv.push_back(nullptr);
  plan.watchdog = spec.watchdog_pid;
  for (std::string& kv : env)
    if ((spec.listen_fds.empty() || !kv.starts_with("LISTEN_PID=")) &&
        (!plan.watchdog || !kv.starts_with("WATCHDOG_PID=")))
      plan.envp.push_back(kv.data());
  plan.listen_fds = spec.listen_fds;
  plan.listen_moved.assign(spec.listen_fds.size(), -1);
  if (!spec.listen_fds.empty()) plan.envp.push_back(plan.listen_pid);
  if (plan.watchdog) plan.envp.push_back(plan.watchdog_pid);
  plan.envp.push_back(nullptr);
  for (const UniqueFd& fd : spec.join_fds) plan.join_fds.push_back(fd.get());
  for (const config::Rlimit& r : spec.rlimits) {
    plan.limit_resources.push_back(r.resource);
    plan.limits.push_back(rlimit{static_cast<rlim_t>(r.soft), static_cast<rlim_t>(r.hard)});
  }
  plan.cwd = spec.cwd.empty() ? nullptr : spec.cwd.c_str();
  plan.stdin_fd = dev_null();
  plan.stdout_fd = spec.stdout_fd >= 0 ? spec.stdout_fd : dev_null();
  plan.stderr_fd = spec.stderr_fd >= 0 ? spec.stderr_fd : dev_null();
  plan.parent = ::getpid();
  return plan;
}

// User, group and supplementary groups, looked up here: the child cannot
// read /etc/passwd or /etc/group.
void set_credentials(ChildPlan& plan, const LaunchSpec& spec) {
  plan.uid = spec.uid;
  plan.gid = spec.gid;
  if (spec.uid && *spec.uid != ::geteuid()) {
    passwd* pw = ::getpwuid(*spec.uid);
    if (pw) {
      int n = 64;
      plan.groups.resize(n);
      gid_t base = spec.gid.value_or(pw->pw_gid);
      if (::getgrouplist(pw->pw_name, base, plan.groups.data(), &n) < 0) {
        plan.groups.resize(n);
        ::getgrouplist(pw->pw_name, base, plan.groups.data(), &n);
      }
      plan.groups.resize(n);
    }
    plan.set_groups = true;
    if (!plan.gid && pw) plan.gid = pw->pw_gid;
  } else if (spec.gid && *spec.gid != ::getegid()) {
    plan.set_groups = true;
    plan.groups = {*spec.gid};
  }
}

// vfork and exec: the child borrows recycler's memory until it execs, so
// nothing is copied. A fork copied the page tables and made every heap page
// copy-on-write for the parent: a cost that grew with recycler's heap, so
// with the number of workers (bench/README.md, start-up). Every signal is
// blocked meanwhile (reset_signals). The child's pid, or execve's error.
Result<pid_t> start_child(const ChildPlan& plan) {
  pid_t failed_pid = -1;
  std::error_code ec;
  SetupHook hook;
  hook.plan = &plan;
  hook.failed_pid = &failed_pid;
  sigset_t all, previous;
  ::sigfillset(&all);
  ::pthread_sigmask(SIG_SETMASK, &all, &previous);
  bp::child child(bp::exe = plan.exe, ec, hook, bp::posix::use_vfork);
  ::pthread_sigmask(SIG_SETMASK, &previous, nullptr);
  if (ec) {
    if (failed_pid > 0) reap(failed_pid);
    int err = ec.value();
    return Error{plan.exe + ": " + ec.message(), err,
                 err == ENOENT || err == EACCES || err == ENOEXEC};
  }
  pid_t pid = child.id();
  child.detach();  // the supervisor watches and reaps it, not Boost
  return pid;
}

}  // namespace

Result<std::string> resolve_executable(const std::string& name,
                                       const std::vector<std::string>& env) {
  if (name.empty()) return Error{"empty command"};
  if (name.find('/') != std::string::npos) return name;
  std::string path = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
  for (const std::string& kv : env)
    if (kv.rfind("PATH=", 0) == 0) path = kv.substr(5);
  size_t start = 0;
  while (start <= path.size()) {
    size_t end = path.find(':', start);
    if (end == std::string::npos) end = path.size();
    std::string dir = path.substr(start, end - start);
    std::string candidate = (dir.empty() ? "." : dir) + "/" + name;
    struct stat st;
    if (::access(candidate.c_str(), X_OK) == 0 && ::stat(candidate.c_str(), &st) == 0 &&
        S_ISREG(st.st_mode))
      return candidate;
    start = end + 1;
  }
  return Error{name + ": command not found (PATH=" + path + ")", ENOENT, true};
}

int exec_failure_status(const Error& e) {
  return e.code == ENOENT ? 127 : 126;
}

Result<pid_t> spawn_process(const LaunchSpec& spec) {
  if (spec.argv.empty()) return Error{"empty command"};
  auto exe = resolve_executable(spec.argv.front(), spec.env);
  if (!exe) return exe.error();
  std::vector<std::string> env = spec.env;  // keeps the strings alive for the plan
  ChildPlan plan = make_plan(spec, *exe, env);
  set_credentials(plan, spec);

  int report[2];
  if (::pipe2(report, O_CLOEXEC) != 0) return errno_error("pipe2");
  UniqueFd report_read(report[0]);
  UniqueFd report_write(report[1]);
  plan.report_fd = report_write.get();
  Result<pid_t> pid = start_child(plan);
  report_write.reset();
  if (!pid) return pid;

  // Boost returns once the child has exec'd or died. Our report pipe is
  // close-on-exec: empty means the setup went through.
  Report r{};
  ssize_t n;
  do n = ::read(report_read.get(), &r, sizeof r);
  while (n < 0 && errno == EINTR);
  if (n == static_cast<ssize_t>(sizeof r)) {
    reap(*pid);
    return Error{std::string(enum_name(kStepDescriptions, r.step)) + ": " + std::strerror(r.err),
                 r.err};
  }
  return pid;
}

}  // namespace recycler
