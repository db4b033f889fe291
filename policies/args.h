// Reading a policy factory's YAML node: a map of settings, each checked on its
// own and reported at its own mark, in the words the config parser uses (both
// read with policies/base/fields.h). The parser puts the policy's path in
// front ("programs.api.policies[0].memory: "), so messages start at the
// setting: `limit: invalid size "12XB": ...`.
#pragma once

#include <yaml-cpp/yaml.h>

#include <chrono>
#include <csignal>
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "policies/base/fields.h"
#include "policies/base/units.h"
#include "policies/policy.h"

namespace recycler::policies {

// A memory limit as written: a size, or a percentage of the worker's
// memory_max that is only known once the worker has a cgroup.
struct SizeLimit {
  uint64_t bytes = 0;             // when percent is empty
  std::optional<double> percent;  // (0, 100]

  // The limit in bytes; nullopt for a percentage without a memory_max.
  std::optional<uint64_t> resolve(const std::optional<uint64_t>& memory_max) const;
  // " (90% of 512 MiB)" for a percentage, "" otherwise: the tail of a reason.
  std::string origin(const std::optional<uint64_t>& memory_max) const;
};

// A growth rate in bytes per second (policies/base/units.h).
using units::parse_rate;

class Args {
 public:
  // Reads the keys of `node`; a null node is an empty map. Keys outside
  // `known` are errors, as are non-string and duplicate keys.
  Args(const YAML::Node& node, ErrorSink& errors, fields::Keys known);
  Args(const YAML::Node& node, ErrorSink& errors, std::initializer_list<std::string_view> known)
      : Args(node, errors, fields::Keys(known.begin(), known.size())) {}

  // Present with a value: a null value means "the default", as in the config.
  bool has(std::string_view key) const;
  // Reports a missing or empty key; true when it has a value.
  bool required(std::string_view key);

  // Each getter returns nullopt, silently, for an absent or null key, and
  // after reporting an error at the value for a bad one.
  std::optional<uint64_t> integer(std::string_view key, uint64_t lo, uint64_t hi);
  std::optional<uint64_t> size(std::string_view key);
  std::optional<Duration> duration(std::string_view key);
  std::optional<int> signal(std::string_view key);
  std::optional<std::string> choice(std::string_view key,
                                    std::initializer_list<std::string_view> names);
  // A size above 0 ("600MiB") or a percentage of memory_max ("90%", "12.5%").
  std::optional<SizeLimit> limit(std::string_view key);
  // A growth rate above 0 (parse_rate), in bytes per second.
  std::optional<double> rate(std::string_view key);

  // Reports `message` at the key's value, or at the node when it is absent.
  void error(std::string_view key, std::string message);
  // Nothing was reported: the factory may build its policy.
  bool ok() const { return errors_.count() == 0; }

 private:
  // Counts what the readers report, so that ok() can tell.
  class Counter final : public fields::ErrorSink {
   public:
    explicit Counter(ErrorSink& errors) : errors_(errors) {}
    void error(const YAML::Mark& at, std::string message) override {
      errors_.error(at, std::move(message));
      ++count_;
    }
    int count() const { return count_; }

   private:
    ErrorSink& errors_;
    int count_ = 0;
  };

  // Present and not null.
  const fields::Field* get(std::string_view key) const { return entries_.get(key); }
  void report(const YAML::Mark& at, std::string message) { errors_.error(at, std::move(message)); }

  Counter errors_;
  YAML::Mark node_mark_;
  fields::MapView entries_;  // the known keys, each once; the settings' path is ""
  bool malformed_ = false;   // not a map
};

// `scope: worker|process` and `signal:`, shared by the threshold policies.
// Worker scope restarts the whole worker; process scope signals the one
// process over its limit.
struct Scope {
  bool process = false;
  int signal = SIGTERM;
  // Worker scope: Restart, or Checkpoint (ask the worker to save its work first).
  Decision::Action action = Decision::Action::Restart;

  // `action` for worker scope; for process scope, `signal` to `pid`.
  Decision decide(std::string reason, pid_t pid) const;
};

// Reads `scope` and `signal`, reporting a signal given without scope: process.
Scope read_scope(Args& args);
// Reads `action: restart|checkpoint` into `scope`; checkpoint is for the
// whole worker only (a pre-fork server's child has no checkpoint to save).
void read_action(Args& args, Scope& scope);

}  // namespace recycler::policies
