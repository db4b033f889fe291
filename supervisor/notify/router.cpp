#include "supervisor/notify/router.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <utility>

#include "supervisor/log/log.h"
#include "supervisor/notify/read_pacer.h"

namespace recycler::notify {
namespace {

// Senders remembered (workers and strangers alike), at most.
constexpr size_t kMaxRemembered = 4096;
// How long a sender found to be no worker is taken at its word.
constexpr std::chrono::seconds kStrangerMemory{1};
// Whatever a process sends costs at most one warning this often.
constexpr std::chrono::seconds kWarnEvery{10};

}  // namespace

Router::Router(uv_loop_t* loop, Lookup lookup, std::string proc)
    : loop_(loop), lookup_(std::move(lookup)), proc_(std::move(proc)) {
  struct stat s {};
  if (::stat((proc_ + "/self/ns/net").c_str(), &s) == 0) own_net_.emplace(s.st_dev, s.st_ino);
}

void Router::open_runtime_dir() {
  std::optional<std::string> base = default_runtime_base();
  std::string why = "no runtime directory (not root and XDG_RUNTIME_DIR unset)";
  if (base) {
    auto opened = RuntimeDir::open(*base);
    if (opened) {
      runtime_.emplace(std::move(*opened));
      return;
    }
    why = opened.error().message;
  }
  log::warn(
      "notify sockets are in the abstract namespace, where any local process can send to "
      "them: {}",
      why);
}

std::string Router::open_socket(const SocketSpec& spec) {
  const std::string& name = spec.program;
  // The router owns its sockets: the handler's `this` outlives them.
  auto handler = [this, name](const NotifySocket::Datagram& d) {
    if (auto it = sockets_.find(name); it != sockets_.end()) route(name, d, *it->second);
  };
  Result<std::unique_ptr<NotifySocket>> opened = Error{"no runtime directory"};
  if (runtime_) {
    auto dir = runtime_->make_private_dir(name, spec.access);
    opened = dir ? NotifySocket::open_in(loop_, dir->get(), runtime_->path() + "/" + name, "notify",
                                         spec.access, handler)
                 : Result<std::unique_ptr<NotifySocket>>(dir.error());
    if (!opened)
      log::warn("{}: notify socket in the abstract namespace instead: {}", name,
                opened.error().message);
  }
  if (!opened) opened = NotifySocket::open(loop_, handler);
  if (!opened) {
    log::warn(
        "{}: no notify socket for its workers (request counts and READY=1 will not reach "
        "recycler): {}",
        name, opened.error().message);
    return "";
  }
  std::optional<unsigned> queue = kernel_queue_limit();
  if (spec.counts_requests && !warned_short_queue_) {
    warned_short_queue_ = true;
    if (auto warning = short_queue_warning(queue)) log::warn("{}", *warning);  // host-wide: once
  }
  // A worker that reports every request would wake the loop once per request:
  // while reports come fast and every request limit is far, the socket rests
  // between reads and each read takes a batch.
  auto pace = [this, name, queue, pacer = ReadPacer{}](const NotifySocket::Drained& d) mutable {
    const Receiver* r = lookup_.receiver(name);
    return pacer.after({.at = ReadPacer::Clock::now(),
                        .datagrams = d.datagrams,
                        .emptied = d.emptied,
                        .requests = r ? r->requests_counted() : 0,
                        .requests_left = r ? r->requests_left() : std::nullopt,
                        .queue_limit = queue});
  };
  if (!(*opened)->set_pacing(loop_, std::move(pace)))
    log::debug("{}: its notify socket is read on every wake-up (no timerfd)", name);
  std::string address = (*opened)->address();
  sockets_[name] = std::move(opened.value());
  return address;
}

void Router::remove(const std::string& program) {
  auto it = sockets_.find(program);
  if (it == sockets_.end()) return;
  sockets_.erase(it);
  if (runtime_) runtime_->remove(program);
}

const NotifySocket* Router::socket(const std::string& program) const {
  auto it = sockets_.find(program);
  return it == sockets_.end() ? nullptr : it->second.get();
}

void Router::route(const std::string& program, const NotifySocket::Datagram& d,
                   NotifySocket& socket) {
  std::optional<Origin> origin = origin_of(d.pid);
  if (!origin) origin = origin_of_gone(program, d.pid, d.data);
  Receiver* receiver = origin ? lookup_.receiver(origin->place.program) : nullptr;
  // A worker of another program that can reach this socket speaks for that
  // program only on its own.
  bool foreign = receiver == nullptr || origin->place.program != program;
  NotifyMessage message;
  if (!foreign) message = parse_message(d.data);
  if (foreign) ++foreign_;
  if (!message.problems.empty()) ++malformed_;
  if (foreign || !message.problems.empty())
    warn(program, d, foreign, message, receiver, origin ? &*origin : nullptr);
  if (foreign) return;
  // A worker that says RECYCLER_REQUEST=1 (not ..._REQUESTS) is never
  // recycled by its request count: tell the operator, once per program.
  if (message.unknown_key && warned_unknown_key_.insert(program).second)
    log::warn(
        "notify socket: {}: pid {} sent the key {}, which recycler does not know: it is "
        "ignored (recycler's keys: RECYCLER_REQUESTS, RECYCLER_ITERATION, "
        "RECYCLER_DEVICE_BYTES, RECYCLER_CHECKPOINTED; warned once per program)",
        receiver->worker_name(origin->place.slot), d.pid, *message.unknown_key);
  // A process that can hear answers (an autobound socket, as recycler_notify
  // has) learns its request limit and, at it, that its report was acted on:
  // what the report led to (a signal) has been done by now.
  bool answer_wanted = d.from && message.requests;
  Answer answer = receiver->receive(*origin, d.pid, message, answer_wanted);
  if (!answer_wanted || !answer || !same_network_namespace(d.pid)) return;
  socket.answer(*d.from, format_answer(answer));
}

void Router::warn(const std::string& program, const NotifySocket::Datagram& d, bool foreign,
                  const NotifyMessage& message, Receiver* receiver, const Origin* origin) {
  TimePoint now = lookup_.now();
  if (now - warned_ < kWarnEvery) return;
  warned_ = now;
  if (foreign)
    log::warn(
        "notify socket of {}: ignored a message from pid {}, which is not one of its workers "
        "({} so far)",
        program, d.pid, foreign_);
  else
    log::warn("notify socket: {}: malformed message from pid {} ({} so far): {}",
              receiver->worker_name(origin->place.slot), d.pid, malformed_,
              message.problems.front());
}

// An abstract socket address means something in one network namespace only:
// a sender in another one (it reached the socket by its path) would have
// recycler's answer land on whatever socket holds that name in recycler's.
bool Router::same_network_namespace(pid_t pid) const {
  struct stat theirs {};
  if (!own_net_) return false;
  std::string path = fmt::format("{}/{}/ns/net", proc_, pid);
  return ::stat(path.c_str(), &theirs) == 0 && std::pair{theirs.st_dev, theirs.st_ino} == *own_net_;
}

// systemd-notify sends and exits: by the time its datagram is read its
// /proc entry, and so its cgroup, may be gone (systemd has the same race;
// see its NotifyAccess= and systemd-notify --pid=). A program's socket is
// its own, in a directory only its workers' user can reach: a sender that
// is gone speaks for the program it wrote to. For the worker process its
// MAINPID= names (systemd-notify --pid=), when that is one of this
// program's; else for the program's slot when it has only one. Never with
// abstract sockets (no runtime directory), which anyone can reach.
std::optional<Origin> Router::origin_of_gone(const std::string& program, pid_t pid,
                                             std::string_view data) {
  if (!runtime_ || pid <= 0) return std::nullopt;
  std::string entry = fmt::format("{}/{}", proc_, pid);
  if (::access(entry.c_str(), F_OK) == 0 || errno != ENOENT) return std::nullopt;
  const Receiver* r = lookup_.receiver(program);
  if (!r) return std::nullopt;
  if (std::optional<pid_t> main = parse_message(data).mainpid) {
    std::optional<Origin> named = origin_of(*main);
    if (named && named->place.program == program) return named;
    return std::nullopt;
  }
  if (r->slot_count() != 1) return std::nullopt;
  std::optional<unsigned> generation = r->live_generation(0);
  if (!generation) return std::nullopt;
  return Origin{Place{program, 0, 0}, *generation};
}

std::optional<Origin> Router::origin_of(pid_t pid) {
  if (auto it = senders_.find(pid); it != senders_.end()) {
    const Origin& o = it->second;
    const Receiver* r = lookup_.receiver(o.place.program);
    if (r && r->live_generation(o.place.slot) == o.generation) return o;
    senders_.erase(it);
  }
  if (pid <= 0) return std::nullopt;
  TimePoint now = lookup_.now();
  if (auto it = strangers_.find(pid); it != strangers_.end()) {
    if (now < it->second) return std::nullopt;
    strangers_.erase(it);
  }
  std::optional<Origin> found;
  if (std::optional<Place> place = lookup_.place(pid)) {
    const Receiver* r = lookup_.receiver(place->program);
    if (auto generation = r ? r->live_generation(place->slot) : std::nullopt)
      found = Origin{std::move(*place), *generation};
  }
  if (!found) {
    // Bounded: a stranger with many pids refills it at one /proc read each.
    if (strangers_.size() >= kMaxRemembered) strangers_.clear();
    strangers_[pid] = now + kStrangerMemory;
    return std::nullopt;
  }
  if (senders_.size() >= kMaxRemembered) senders_.clear();  // refilled on demand
  senders_[pid] = *found;
  return found;
}

}  // namespace recycler::notify
