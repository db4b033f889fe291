// The second half of loading a config: the parser (parse.cpp) reads the file
// into plain data, and for what must become a live object (a policy, the
// request pattern) it leaves a spec: the name, the YAML it came from and
// where. compile() builds those objects, once, and reports what their
// factories reject at the spec's position.
#pragma once

#include <yaml-cpp/yaml.h>

#include <optional>
#include <string>
#include <vector>

#include "policies/base/fields.h"
#include "supervisor/config/config.h"

namespace recycler::config {

// One entry of a program's `policies:` list, checked for shape only: a
// single-key map whose key names a registered policy.
struct PolicySpec {
  std::string name;
  YAML::Node args;       // the settings; a fresh null node when empty
  std::string path;      // of the settings: "programs.api.policies[0].memory"
  YAML::Mark name_mark;  // the policy's name in the file
  std::string source;    // the entry re-emitted canonically (PolicyConfig::source)
};

// `requests.pattern`, not yet compiled.
struct RequestsSpec {
  std::string pattern;
  std::string path;  // "programs.api.requests.pattern"
  YAML::Mark mark;   // of the pattern's value
};

// What compile() needs for one program besides its ProgramConfig.
struct ProgramSpec {
  std::vector<PolicySpec> policies;
  std::optional<RequestsSpec> requests;
};

// Builds the policies of `spec` into program.policies and compiles the
// request pattern into program.requests (matcher included), reporting every
// problem to `errors`. Reads program.limits (a percentage limit needs
// memory_max).
// `container_limit`: the memory limit of the cgroup recycler runs in (its
// container), which a percentage limit is of where memory_max is not set.
void compile(const ProgramSpec& spec, ProgramConfig& program, fields::ErrorSink& errors,
             std::optional<uint64_t> container_limit = std::nullopt);

// The top-level budget, once the programs are compiled: the leak policy
// behind its horizon (projecting the scope's figure to its limit), and what
// each program's samples must carry for it (ProgramConfig::budget_needs).
void compile_budget(Config& config, fields::ErrorSink& errors);

}  // namespace recycler::config
