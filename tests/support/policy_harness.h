// Helpers for the policy tests: build a policy from YAML the way the config
// parser does, drive it with Samples on a clock the test moves by hand.
#pragma once

#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include <chrono>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "policies/base/time.h"
#include "policies/policy.h"

namespace recycler::testing {

using policies::Decision;
using policies::Outlook;
using policies::Policy;
using policies::PolicyState;
using policies::ProcessSample;
using policies::Sample;
using policies::TimePoint;
using policies::WorkerContext;

constexpr uint64_t operator""_KiB(unsigned long long n) {
  return n << 10;
}
constexpr uint64_t operator""_MiB(unsigned long long n) {
  return n << 20;
}
constexpr uint64_t operator""_GiB(unsigned long long n) {
  return n << 30;
}

// An ErrorSink that keeps what it is told.
class CapturingSink final : public policies::ErrorSink {
 public:
  struct Reported {
    YAML::Mark at;
    std::string message;
  };

  void error(const YAML::Mark& at, std::string message) override {
    reported.push_back({at, std::move(message)});
  }
  std::vector<std::string> messages() const {
    std::vector<std::string> out;
    for (const auto& r : reported) out.push_back(r.message);
    return out;
  }

  std::vector<Reported> reported;
};

// What a factory made of a YAML node, and what it reported.
struct Built {
  std::unique_ptr<Policy> policy;
  CapturingSink errors;
};

// Looks `name` up in the registry and hands it `yaml` ("" for no arguments,
// which the config passes as a fresh null node).
inline Built build(std::string_view name, const std::string& yaml) {
  Built out;
  const policies::Factory* factory = policies::Registry::instance().find(name);
  if (!factory) {
    ADD_FAILURE() << "no policy named " << name << " is registered";
    return out;
  }
  YAML::Node node = yaml.empty() ? YAML::Node() : YAML::Load(yaml);
  out.policy = (*factory)(node, out.errors);
  return out;
}

// build() that expects success.
inline std::unique_ptr<Policy> make(std::string_view name, const std::string& yaml) {
  Built b = build(name, yaml);
  EXPECT_TRUE(b.errors.reported.empty()) << "unexpected error: " << b.errors.messages().front();
  EXPECT_NE(b.policy, nullptr);
  return std::move(b.policy);
}

// The errors of a build that is expected to fail.
inline std::vector<std::string> errors_of(std::string_view name, const std::string& yaml) {
  Built b = build(name, yaml);
  EXPECT_EQ(b.policy, nullptr) << "a policy was built despite errors";
  return b.errors.messages();
}

// Time as the supervisor's Samples carry it, moved by the test.
class FakeClock {
 public:
  TimePoint now() const { return now_; }
  TimePoint advance(Duration d) { return now_ += d; }

 private:
  TimePoint now_{std::chrono::hours(1)};
};

// One worker watched by one policy: the state start() made and the policy.
class Watch {
 public:
  Watch(const Policy& policy, const WorkerContext& worker)
      : policy_(policy), state_(policy.start(worker)) {}

  Decision operator()(const Sample& sample) { return policy_.evaluate(sample, *state_); }
  const Outlook* outlook() const { return policy_.outlook(*state_); }
  std::optional<uint64_t> requests_left() const { return policy_.requests_left(*state_); }
  std::optional<uint64_t> process_request_limit(pid_t pid) const {
    return policy_.process_request_limit(*state_, pid);
  }

 private:
  const Policy& policy_;
  std::unique_ptr<PolicyState> state_;
};

inline WorkerContext worker_at(TimePoint started, uint64_t seed = 1) {
  WorkerContext w;
  w.started = started;
  w.seed = seed;
  return w;
}

inline ProcessSample proc(pid_t pid, bool main = false) {
  ProcessSample p;
  p.pid = pid;
  p.main = main;
  return p;
}

}  // namespace recycler::testing
