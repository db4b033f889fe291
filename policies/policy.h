// The recycling-policy interface. Policies are pure: a Sample and the worker's
// own state in, a Decision out; time comes from the Sample, never from a clock
// of their own; no I/O and no event loop. The supervisor builds Samples from its
// probes, owns one PolicyState per (policy, worker) and acts on Decisions.
//
// A policy is one file in policies/ that registers a factory by name:
//
//   constexpr std::string_view kKeys[] = {"after", "jitter", "scope", "signal"};
//   RECYCLER_REGISTER_POLICY("max_lifetime", MaxLifetime::create, kKeys);
//
// The config parser looks the name up, hands the factory the policy's YAML node
// and an ErrorSink, and reports whatever the factory rejects with file:line.
// The keys are the settings the factory reads (the same table it gives Args):
// the documentation is checked against them (tests/unit/docs_keys_test.cpp).
#pragma once

#include <sys/types.h>
#include <yaml-cpp/yaml.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "policies/base/fields.h"
#include "policies/base/sample.h"

namespace recycler::policies {

struct Decision {
  enum class Action {
    None,
    Restart,     // stop the worker gracefully and start its replacement
    Checkpoint,  // ask the worker to checkpoint, then restart it
    Signal,      // signal one process inside the worker (scope: process)
  };
  Action action = Action::None;
  std::string reason;  // a sentence with the figures: "uss 612 MiB > 600 MiB for 10s"
  pid_t pid = 0;       // Signal: which process
  int signal = 0;      // Signal: which signal (0 means SIGTERM)
  std::optional<double> predicted_s;  // seconds until the limit, where a policy predicts one

  static Decision none() { return {}; }
  explicit operator bool() const { return action != Action::None; }
};

const char* to_string(Decision::Action action);  // "none", "restart", "checkpoint", "signal"

// What a policy may know about the worker it watches, fixed at spawn.
struct WorkerContext {
  TimePoint started;
  std::optional<uint64_t> memory_max;  // the cgroup's hard limit, when one is set
  // Jitter is drawn from a generator seeded with this, once per worker (at
  // start) or once per process (when the process is first seen), so a state
  // is deterministic given its seed.
  uint64_t seed = 0;
  // Below how many requests served each of its processes may hold its counts
  // back (RECYCLER_REQUESTS_BATCH_BELOW, as its environment has it:
  // config::ProgramConfig::requests_held_below); 1: none held, every request
  // reported as served; UINT64_MAX: "unlimited".
  uint64_t requests_held_below = 1;
};

class PolicyState {
 public:
  virtual ~PolicyState() = default;
};

// What a predicting policy makes of a worker's trend as of its last
// evaluate(): the leak policy's growth and the time it projects to the limit.
// The supervisor logs when one appears or goes away; metrics export it.
struct Outlook {
  double slope = 0;        // bytes per second, > 0
  double predicted_s = 0;  // seconds until the limit at that slope, as of the last sample
  // As of the last estimate (the figures change less often than samples come):
  // "anon +38 MiB/min over 10m, 2.1 GiB of 2.7 GiB (90% of 3 GiB), limit in 1h4m"
  std::string summary;
};

class Policy {
 public:
  virtual ~Policy() = default;
  virtual std::string_view name() const = 0;
  // Which parts of a Sample this policy reads (Needs bits).
  virtual unsigned needs() const = 0;
  // True when a limit is a percentage of memory_max: the config must set one.
  virtual bool needs_memory_max() const { return false; }
  // True when a fresh worker could trip it at once because of what it
  // measures (memory, threads), as opposed to its age or work done. A
  // replacement tripping such a policy again within min_uptime is a recycle
  // loop, and the supervisor backs off instead of recycling it in a loop.
  virtual bool may_loop() const { return false; }
  // The memory level (bytes of the cgroup's `current`) above which this policy
  // may fire without a `for:` delay, so the kernel can wake the supervisor
  // when a spike crosses it (the fast path); nullopt when it has none.
  virtual std::optional<uint64_t> fast_threshold(const WorkerContext&) const {
    return std::nullopt;
  }
  // Called when a worker starts; the returned state lives as long as the worker.
  virtual std::unique_ptr<PolicyState> start(const WorkerContext& worker) const = 0;
  // Called on every Sample (in time order). Per-process state is created when
  // a pid first appears and forgotten when it is no longer in the Sample.
  virtual Decision evaluate(const Sample& sample, PolicyState& state) const = 0;
  // The current outlook of a policy that predicts, held in `state` (valid
  // until the next evaluate); nullptr while it sees no growth to project
  // (warming up, flat, a sawtooth, a step), and always for the others.
  virtual const Outlook* outlook(const PolicyState&) const { return nullptr; }
  // For a policy that counts requests: as of its last evaluate() (or its
  // start), the fewest requests the worker, or any one of its processes,
  // may still serve before it acts (counting, for a process below
  // WorkerContext::requests_held_below, all it may hold back as served);
  // nullopt for the others. While every limit
  // is far, the notify socket may rest between reads (notify/read_pacer.h).
  virtual std::optional<uint64_t> requests_left(const PolicyState&) const { return std::nullopt; }
  // For a policy that counts requests: the fewest requests one process must
  // have served before the policy may act on it, or 1 where every request
  // counts (a whole worker's limit adds up its processes' counts); nullopt
  // for the others. Below it a process may report in batches
  // (RECYCLER_REQUESTS_BATCH_BELOW: config::ProgramConfig::requests_batch_below).
  virtual std::optional<uint64_t> requests_exact_from() const { return std::nullopt; }
  // For a policy that counts each process's requests (scope: process): the
  // limit drawn for `pid` (jitter included) once the policy has seen it, as
  // of its last evaluate(); nullopt for the others and for a process not seen
  // yet. recycler tells a process its limit when it asks (the notify
  // socket's answers, notify/message.h), so that the process can report once,
  // at its limit, and wait there until recycler has acted on that report.
  virtual std::optional<uint64_t> process_request_limit(const PolicyState&, pid_t) const {
    return std::nullopt;
  }
  // What `recycler status` shows of it: the memory figure it watches
  // (metric.h's name: "anon", "uss", ...) and its limit in bytes for a worker
  // whose memory_max is `memory_max` (empty where it is a share of a GPU);
  // empty for policies that watch no memory figure.
  virtual std::optional<std::string_view> metric() const { return std::nullopt; }
  // That figure and limit are each process's (scope: process), not the
  // worker's: status compares the largest process with the limit.
  virtual bool per_process() const { return false; }
  virtual std::optional<uint64_t> limit(const std::optional<uint64_t>& memory_max) const {
    (void)memory_max;
    return std::nullopt;
  }
  // How long after a start it needs samples before it can decide at all,
  // and why (replay says so when a trace ends sooner); nullopt: from the
  // first sample.
  struct FirstDecision {
    Duration after;
    std::string why;
  };
  virtual std::optional<FirstDecision> first_decision() const { return std::nullopt; }
  // Its whole-worker decisions ask for a checkpoint first (action:
  // checkpoint): a recycle asked from the control socket does the same.
  virtual bool checkpoints() const { return false; }
  // It watches for hangs (the watchdog, from Sample::alive): its restart
  // neither asks a hung worker for a checkpoint nor cuts one under way short
  // (checkpoint.timeout bounds that); the replacement resumes from the slot's
  // last confirmed checkpoint, where it has one.
  virtual bool watches_hangs() const { return false; }
};

// Where a factory reports what is wrong with its YAML node.
using fields::ErrorSink;

using Factory = std::function<std::unique_ptr<Policy>(const YAML::Node& args, ErrorSink& errors)>;

class Registry {
 public:
  static Registry& instance();
  void add(std::string name, Factory factory, std::span<const std::string_view> keys = {});
  const Factory* find(std::string_view name) const;
  // The settings its factory accepts; empty for an unknown name. The views
  // point into the policy's own static table.
  std::span<const std::string_view> keys(std::string_view name) const;
  std::vector<std::string> names() const;  // sorted

 private:
  struct Entry {
    std::string name;
    Factory factory;
    std::span<const std::string_view> keys;
  };
  std::vector<Entry> factories_;
};

struct Registration {
  Registration(std::string name, Factory factory, std::span<const std::string_view> keys) {
    Registry::instance().add(std::move(name), std::move(factory), keys);
  }
};

// KEYS: a static array of the settings the factory accepts.
#define RECYCLER_REGISTER_POLICY(NAME, FACTORY, KEYS)                             \
  static const ::recycler::policies::Registration recycler_policy_registration_ { \
    NAME, FACTORY, KEYS                                                           \
  }

}  // namespace recycler::policies
