// The recycling-policy interface. Policies are pure: a Sample and the worker's
// own state in, a Decision out; time comes from the Sample, never from a clock
// of their own; no I/O and no event loop. The supervisor builds Samples from its
// probes, owns one PolicyState per (policy, worker) and acts on Decisions.
//
// A policy is one file in policies/ that registers a factory by name:
//
//   RECYCLER_REGISTER_POLICY("max_lifetime", MaxLifetime::create);
//
// The config parser looks the name up, hands the factory the policy's YAML node
// and an ErrorSink, and reports whatever the factory rejects with file:line.
#pragma once

#include <sys/types.h>
#include <yaml-cpp/yaml.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <vector>

namespace recycler::policies {

using Clock = std::chrono::steady_clock;
using TimePoint = Clock::time_point;

// Memory and activity of one worker at one instant. Fields a probe could not
// measure stay empty; policies decide what an empty field means for them.
struct ProcessSample {
  pid_t pid = 0;
  std::optional<uint64_t> rss, pss, uss;
  std::optional<uint32_t> threads;
};

struct Sample {
  TimePoint t;
  std::optional<uint64_t> current, anon, file, kernel, shmem;  // the worker's cgroup, bytes
  std::optional<uint32_t> threads;
  std::optional<uint64_t> requests;  // cumulative since the worker started
  std::vector<ProcessSample> processes;
};

struct Decision {
  enum class Action { None, Recycle, SignalProcess };
  Action action = Action::None;
  std::string reason;  // a sentence with the figures that led to the decision
  pid_t pid = 0;       // SignalProcess: which process

  static Decision none() { return {}; }
  explicit operator bool() const { return action != Action::None; }
};

// What a policy may know about the worker it watches, fixed at spawn.
struct WorkerContext {
  TimePoint started;
  std::optional<uint64_t> memory_max;
  std::mt19937_64* rng = nullptr;  // for jitter drawn once at spawn
};

class PolicyState {
 public:
  virtual ~PolicyState() = default;
};

class Policy {
 public:
  virtual ~Policy() = default;
  virtual std::string_view name() const = 0;
  // Called when a worker starts; the returned state lives as long as the worker.
  virtual std::unique_ptr<PolicyState> start(const WorkerContext& worker) const = 0;
  virtual Decision evaluate(const Sample& sample, PolicyState& state) const = 0;
};

// Where a factory reports what is wrong with its YAML node.
class ErrorSink {
 public:
  virtual ~ErrorSink() = default;
  virtual void error(const YAML::Mark& at, std::string message) = 0;
};

using Factory = std::function<std::unique_ptr<Policy>(const YAML::Node& args, ErrorSink& errors)>;

class Registry {
 public:
  static Registry& instance();
  void add(std::string name, Factory factory);
  const Factory* find(std::string_view name) const;
  std::vector<std::string> names() const;  // sorted

 private:
  std::vector<std::pair<std::string, Factory>> factories_;
};

struct Registration {
  Registration(std::string name, Factory factory) {
    Registry::instance().add(std::move(name), std::move(factory));
  }
};

#define RECYCLER_REGISTER_POLICY(NAME, FACTORY)                                   \
  static const ::recycler::policies::Registration recycler_policy_registration_ { \
    NAME, FACTORY                                                                 \
  }

}  // namespace recycler::policies
