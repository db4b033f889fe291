#include "supervisor/process/process.h"

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>

#include "policies/base/units.h"
#include "supervisor/log/log.h"
#include "supervisor/util/pidfd.h"
#include "supervisor/util/uv.h"

namespace recycler {
namespace {

// One buffer for every pipe: the loop is single-threaded and libuv hands the
// bytes to the read callback before it allocates again.
char g_read_buffer[64 * 1024];

// A worker (or what it left behind) that writes without pause must not keep
// the loop from its timers: each pipe gets at most this much per turn of the
// loop, then waits for the next turn (the pipe fills and the writer blocks).
constexpr size_t kReadPerTurn = 16 * 1024;
// What is still read once the main process is gone: whatever it wrote before
// it went, but not the endless output of a daemon that kept the pipe. Then
// the pipe is closed and such a writer gets EPIPE.
constexpr size_t kFinalDrain = 64 * 1024;

}  // namespace

ExitStatus ExitStatus::from_wait(int wstatus) {
  ExitStatus s;
  if (WIFSIGNALED(wstatus)) {
    s.signaled = true;
    s.signal = WTERMSIG(wstatus);
    s.core_dumped = WCOREDUMP(wstatus);
  } else {
    s.code = WEXITSTATUS(wstatus);
  }
  return s;
}

std::string ExitStatus::describe() const {
  if (!signaled) return "exited with status " + std::to_string(code);
  return "killed by " + units::signal_name(signal) + (core_dumped ? " (core dumped)" : "");
}

class ProcessTable::Child final : public Process {
 public:
  Child(ProcessTable& table, pid_t pid, OutputTag tag, ExitCallback on_exit, UniqueFd out,
        UniqueFd err)
      : table_(&table), pid_(pid), tag_(std::move(tag)), on_exit_(std::move(on_exit)) {
    out_.emplace(this, log::Stream::Stdout, std::move(out));
    err_.emplace(this, log::Stream::Stderr, std::move(err));
    pidfd_.reset(pidfd_open(pid));
    if (pidfd_) {
      auto poll =
          uv::poll(table.loop_, pidfd_.get(), this, UV_READABLE, [](uv_poll_t* h, int, int) {
            if (auto* self = static_cast<Child*>(h->data)) self->try_reap();
          });
      if (poll) poll_ = std::move(*poll);
    }
    // Without a pidfd (kernels before 5.3) SIGCHLD tells us; see reap_children.
  }

  ~Child() override {
    if (!reaped_) table_->children_.erase(pid_);
    // Whatever the process wrote before it went is still in the pipes: log it.
    out_->drain();
    err_->drain();
  }

  pid_t pid() const override { return pid_; }

  bool signal(int sig) override {
    if (reaped_) return false;
    if (pidfd_) return pidfd_send_signal(pidfd_.get(), sig) == 0;
    return ::kill(pid_, sig) == 0;  // unreaped, so the pid is still ours
  }

  // Unreaped, the leader's pid is still ours, and so is its group's.
  bool signal_group(int sig) override {
    if (reaped_) return false;
    return ::kill(-pid_, sig) == 0;
  }

  void try_reap() {
    if (reaped_) return;
    int wstatus = 0;
    pid_t r;
    do r = ::waitpid(pid_, &wstatus, WNOHANG);
    while (r < 0 && errno == EINTR);
    if (r == 0) return;
    reaped_ = true;
    poll_.reset();
    pidfd_.reset();
    table_->children_.erase(pid_);
    if (r < 0) {
      log::error("{}[{}] pid {} vanished (waitpid: {})", tag_.program, tag_.slot, pid_,
                 std::strerror(errno));
      wstatus = W_EXITCODE(255, 0);
    }
    auto on_exit = std::move(on_exit_);
    on_exit(ExitStatus::from_wait(wstatus));  // may lead to this Child's destruction: last
  }

 private:
  // One output stream: a pipe read by libuv, split into lines for the log.
  class Output {
   public:
    Output(Child* owner, log::Stream stream, UniqueFd fd) : owner_(owner), stream_(stream) {
      uv_loop_t* loop = owner->table_->loop_;
      auto* pipe = new uv_pipe_t;
      uv_pipe_init(loop, pipe, 0);
      pipe->data = this;
      pipe_ = uv::Handle<uv_pipe_t>(pipe);
      if (uv_pipe_open(pipe, fd.get()) == 0) fd.release();  // the pipe owns it now
      auto* resume = new uv_check_t;
      uv_check_init(loop, resume);
      resume->data = this;
      resume_ = uv::Handle<uv_check_t>(resume);
      start_reading();
    }

    // Reads what is left, at most kFinalDrain bytes and without waiting (the
    // fd is non-blocking), then closes.
    void drain() {
      if (!pipe_) return;
      uv_os_fd_t fd;
      if (uv_fileno(reinterpret_cast<uv_handle_t*>(pipe_.get()), &fd) == 0) {
        size_t left = kFinalDrain;
        ssize_t n;
        while (left > 0 &&
               (n = ::read(fd, g_read_buffer, std::min(left, sizeof g_read_buffer))) > 0) {
          feed(std::string_view(g_read_buffer, static_cast<size_t>(n)));
          left -= static_cast<size_t>(n);
        }
      }
      close();
    }

   private:
    void start_reading() {
      this_turn_ = 0;
      uv_read_start(
          reinterpret_cast<uv_stream_t*>(pipe_.get()),
          [](uv_handle_t*, size_t, uv_buf_t* buf) {
            *buf = uv_buf_init(g_read_buffer, kReadPerTurn);
          },
          [](uv_stream_t* s, ssize_t n, const uv_buf_t* buf) {
            auto* self = static_cast<Output*>(s->data);
            if (!self) return;
            if (n > 0) self->on_data(std::string_view(buf->base, static_cast<size_t>(n)));
            if (n < 0) self->close();  // EOF (every writer is gone) or error
          });
    }
    void on_data(std::string_view data) {
      feed(data);
      this_turn_ += data.size();
      if (this_turn_ < kReadPerTurn || !pipe_) return;
      // Enough for this turn: read again after the loop has polled (timers
      // and other handles first).
      uv_read_stop(reinterpret_cast<uv_stream_t*>(pipe_.get()));
      uv_check_start(resume_.get(), [](uv_check_t* h) {
        auto* self = static_cast<Output*>(h->data);
        if (!self) return;
        uv_check_stop(h);
        if (self->pipe_) self->start_reading();
      });
    }
    void feed(std::string_view data) {
      splitter_.feed(data, [this](std::string_view line, bool partial) { emit(line, partial); });
    }
    void close() {
      splitter_.finish([this](std::string_view line, bool partial) { emit(line, partial); });
      pipe_.reset();
      resume_.reset();
    }
    void emit(std::string_view line, bool partial) {
      log::output(owner_->tag_.program, owner_->tag_.slot, owner_->pid_, stream_, line, partial);
      if (!partial && owner_->tag_.observe) owner_->tag_.observe(owner_->pid_, line);
    }

    Child* owner_;
    log::Stream stream_;
    log::LineSplitter splitter_;
    uv::Handle<uv_pipe_t> pipe_;
    uv::Handle<uv_check_t> resume_;
    size_t this_turn_ = 0;
  };

  ProcessTable* table_;
  pid_t pid_;
  OutputTag tag_;
  ExitCallback on_exit_;
  UniqueFd pidfd_;
  uv::Handle<uv_poll_t> poll_;
  bool reaped_ = false;
  std::optional<Output> out_;
  std::optional<Output> err_;
};

ProcessTable::ProcessTable(uv_loop_t* loop) : loop_(loop) {}
ProcessTable::~ProcessTable() = default;

Result<std::unique_ptr<Process>> ProcessTable::launch(LaunchSpec spec, OutputTag tag,
                                                      ExitCallback on_exit) {
  int out[2], err[2];
  if (::pipe2(out, O_CLOEXEC) != 0) return errno_error("pipe2");
  UniqueFd out_read(out[0]), out_write(out[1]);
  if (::pipe2(err, O_CLOEXEC) != 0) return errno_error("pipe2");
  UniqueFd err_read(err[0]), err_write(err[1]);
  spec.stdout_fd = out_write.get();
  spec.stderr_fd = err_write.get();

  auto pid = spawn_process(spec);
  if (!pid) return pid.error();
  auto child = std::make_unique<Child>(*this, *pid, std::move(tag), std::move(on_exit),
                                       std::move(out_read), std::move(err_read));
  children_[*pid] = child.get();
  return std::unique_ptr<Process>(std::move(child));
}

void ProcessTable::reap_children() {
  // Look before reaping (WNOWAIT): a child we know goes through its own
  // try_reap, which reports its exit; anything else is an orphan to bury.
  for (int guard = 0; guard < 4096; ++guard) {
    siginfo_t info{};
    if (::waitid(P_ALL, 0, &info, WEXITED | WNOHANG | WNOWAIT) != 0 || info.si_pid == 0) return;
    auto it = children_.find(info.si_pid);
    if (it != children_.end()) {
      it->second->try_reap();
    } else {
      ::waitpid(info.si_pid, nullptr, WNOHANG);
      log::debug("reaped orphaned process {}", info.si_pid);
    }
  }
}

}  // namespace recycler
