#include "supervisor/config/compile.h"

#include <exception>
#include <memory>
#include <optional>
#include <utility>

#include "policies/base/units.h"
#include "policies/policy.h"
#include "supervisor/notify/output_match.h"

namespace recycler::config {
namespace {

using units::quote;

// A factory's complaints, with the policy's path in front; those without a
// position land on the policy's name.
class PolicyErrors : public policies::ErrorSink {
 public:
  PolicyErrors(fields::ErrorSink& errors, std::string prefix, YAML::Mark fallback)
      : errors_(errors), prefix_(std::move(prefix)), fallback_(fallback) {}

  void error(const YAML::Mark& at, std::string message) override {
    errors_.error(at.is_null() ? fallback_ : at, prefix_ + message);
    ++count_;
  }
  int count() const { return count_; }

 private:
  fields::ErrorSink& errors_;
  std::string prefix_;
  YAML::Mark fallback_;
  int count_ = 0;
};

std::shared_ptr<const policies::Policy> build_policy(const PolicySpec& spec,
                                                     fields::ErrorSink& errors) {
  // The parser checked that the name is registered.
  const policies::Factory* factory = policies::Registry::instance().find(spec.name);
  if (!factory) {
    errors.error(spec.name_mark, spec.path + ": the policy could not be created");
    return nullptr;
  }
  PolicyErrors sink(errors, spec.path + ": ", spec.name_mark);
  std::unique_ptr<policies::Policy> policy;
  try {
    policy = (*factory)(spec.args, sink);
  } catch (const YAML::Exception& e) {
    // A factory that reads its node with as<T>() throws on a wrong type.
    sink.error(e.mark, e.msg);
  } catch (const std::exception& e) {
    sink.error(spec.name_mark, e.what());
  }
  if (sink.count() > 0) return nullptr;
  if (!policy) {
    errors.error(spec.name_mark, spec.path + ": the policy could not be created");
    return nullptr;
  }
  return policy;
}

// Host memory a limit on which the kernel enforces at limits.memory_max.
bool host_memory(std::string_view metric) {
  return metric != "device" && metric != "gpu" && metric != "gpu_total";
}

// A policy that decides nothing for a while after each start (the leak
// policy's warm-up and first third of its window), and no policy that
// watches memory from the first sample: a fast leak meets the kernel's OOM
// killer at memory_max first, with no word (wrap mode adds a backstop for
// --leak; a config is told).
void warn_late_first_decision(const ProgramSpec& spec, const ProgramConfig& program,
                              fields::ErrorSink& errors) {
  if (!program.limits.memory_max || spec.policies.size() != program.policies.size()) return;
  std::optional<size_t> late;
  for (size_t i = 0; i < program.policies.size(); ++i) {
    const policies::Policy& p = *program.policies[i].policy;
    auto metric = p.metric();
    if (!metric || !host_memory(*metric) || !p.limit(program.limits.memory_max)) continue;
    if (!p.first_decision()) return;  // watched from the first sample
    if (!late) late = i;
  }
  if (!late) return;
  const PolicySpec& s = spec.policies[*late];
  auto first = program.policies[*late].policy->first_decision();
  errors.warning(s.name_mark,
                 s.path + ": decides nothing for " + units::format_duration(first->after) +
                     " after each start (" + first->why +
                     "), and no other policy watches memory meanwhile: a leak that fills "
                     "limits.memory_max sooner is killed by the kernel first; a backstop such as "
                     "`- memory: {limit: 95%}` restarts it first");
}

}  // namespace

void compile(const ProgramSpec& spec, ProgramConfig& program, fields::ErrorSink& errors,
             std::optional<uint64_t> container_limit) {
  for (const PolicySpec& p : spec.policies) {
    auto policy = build_policy(p, errors);
    if (!policy) continue;
    if (policy->needs_memory_max() && !program.limits.memory_max && !container_limit)
      errors.error(p.name_mark, p.path +
                                    ": a percentage limit needs limits.memory_max, which is not "
                                    "set (nor has the container recycler runs in a memory limit "
                                    "for it to be of)");
    program.policies.push_back(PolicyConfig{p.name, p.source, std::move(policy)});
  }
  warn_late_first_decision(spec, program, errors);
  if (spec.requests) {
    const RequestsSpec& r = *spec.requests;
    std::string why;
    auto matcher = notify::OutputMatcher::compile(r.pattern, &why);
    if (!matcher)
      errors.error(r.mark, r.path + ": invalid pattern " + quote(r.pattern) + ": " + why);
    else
      program.requests = RequestsConfig{
          r.pattern, std::make_shared<const notify::OutputMatcher>(std::move(*matcher))};
  }
}

void compile_budget(Config& config, fields::ErrorSink& errors) {
  if (!config.budget) return;
  BudgetConfig& b = *config.budget;
  for (ProgramConfig& p : config.programs) p.budget_needs = b.worker_needs(p.budget_processes());
  if (!b.horizon) return;
  // The scope's figure goes into each Sample's `current`, and its limit is
  // the worker context's memory_max (engine/budget.cpp).
  YAML::Node args;
  args["metric"] = "current";
  args["limit"] = "100%";
  args["horizon"] = std::to_string(b.horizon->count()) + "ms";
  args["window"] = std::to_string(b.window.count()) + "ms";
  args["warmup"] = std::to_string(b.warmup.count()) + "ms";
  PolicySpec spec{"leak", args, "budget.horizon", YAML::Mark::null_mark(), ""};
  b.trend = build_policy(spec, errors);
}

}  // namespace recycler::config
