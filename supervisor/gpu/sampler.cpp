#include "supervisor/gpu/sampler.h"

#include <fcntl.h>

#include <utility>

#include "supervisor/log/log.h"

namespace recycler::gpu {

struct Sampler::Query {
  uv_work_t req{};
  Sampler* owner = nullptr;
  std::unique_ptr<Nvml>* nvml = nullptr;
  std::string library;
  std::optional<Result<Snapshot>> result;
  TimePoint queued{};
};

Sampler::Sampler(uv_loop_t* loop, Timers& timers, std::string library, const std::string& proc_root,
                 pid_t self)
    : loop_(loop),
      timers_(timers),
      library_(std::move(library)),
      proc_(::open(proc_root.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC)) {
  if (proc_) {
    nested_ = nested_pid_namespace(proc_.get(), self);
    host_hidden_ = !nested_ && !host_pid_namespace(proc_.get());
  }
}

Sampler::~Sampler() {
  timer_.reset();
  // The thread pool still holds the request: let it finish and call back.
  while (in_flight_) uv_run(loop_, UV_RUN_ONCE);
}

void Sampler::want(Duration interval) {
  if (interval_ && *interval_ <= interval) return;
  interval_ = interval;
  tick();  // re-arms at the new interval; queries now unless one is under way
}

void Sampler::tick() {
  timer_ = timers_.after(*interval_, [this] { tick(); });
  if (in_flight_) return;  // a slow driver: skip a beat rather than queue up
  in_flight_ = std::make_unique<Query>();
  Query& q = *in_flight_;
  q.req.data = &q;
  q.owner = this;
  q.nvml = &nvml_;
  q.library = library_;
  q.queued = timers_.now();
  int err = uv_queue_work(
      loop_, &q.req,
      [](uv_work_t* req) {
        // On the thread pool: only the Query and the Nvml it points at.
        auto& work = *static_cast<Query*>(req->data);
        if (!*work.nvml) {
          auto opened = Nvml::open(work.library);
          if (!opened) {
            work.result.emplace(opened.error());
            return;
          }
          *work.nvml = std::move(*opened);
        }
        work.result.emplace((*work.nvml)->query());
      },
      [](uv_work_t* req, int) {
        auto& answered = *static_cast<Query*>(req->data);
        answered.owner->done(answered);
      });
  if (err != 0) {
    log::warn("GPU: cannot queue an NVML query: {}", uv_strerror(err));
    in_flight_.reset();
  }
}

void Sampler::done(Query& q) {
  std::unique_ptr<Query> finished = std::move(in_flight_);
  if (!q.result || !*q.result) {
    std::string why = q.result ? q.result->error().message : "cancelled";
    latest_.reset();
    if (!failing_)
      log::warn(
          "GPU: {}; GPU figures stay empty (policies on gpu have no opinion, host memory is "
          "still supervised); trying again every {} ms",
          why,
          std::chrono::duration_cast<std::chrono::milliseconds>(interval_.value_or(Duration{}))
              .count());
    failing_ = why;
    return;
  }
  Snapshot& snap = q.result->value();
  if (failing_)
    log::info("GPU: NVML answers again: {} device{}", snap.devices.size(),
              snap.devices.size() == 1 ? "" : "s");
  failing_.reset();
  for (const std::string& note : snap.notes)
    if (noted_.size() < 64 && noted_.insert(note).second) log::warn("GPU: {}", note);
  if (host_hidden_ && !snap.uses.empty() && !said_hidden_) {
    said_hidden_ = true;
    log::warn(
        "GPU: NVML numbers processes in the host's pid namespace, which recycler cannot see "
        "from here (a container's own): every worker's gpu figure is unknown while any process "
        "holds GPU memory (policies on gpu have no opinion; host memory is still supervised). "
        "Share the host's pid namespace (hostPID, --pid=host) for per-worker GPU figures");
  }
  latest_ = std::move(snap);
  ++answered_;
}

std::optional<TimePoint> Sampler::in_flight_since() const {
  if (!in_flight_) return std::nullopt;
  return in_flight_->queued;
}

Usage Sampler::usage(std::span<const pid_t> pids) const {
  if (!latest_) return {};
  if (!nested_ || !proc_) return attribute(*latest_, pids, host_hidden_);
  std::vector<pid_t> host;
  host.reserve(pids.size());
  for (pid_t p : pids) host.push_back(host_pid(proc_.get(), p));
  return attribute(*latest_, host);
}

}  // namespace recycler::gpu
