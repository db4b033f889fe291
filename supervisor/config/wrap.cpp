#include "supervisor/config/wrap.h"

#include <yaml-cpp/yaml.h>

#include <cstdlib>

#include "policies/base/units.h"
#include "supervisor/config/parse.h"

namespace recycler::config {
namespace {

// A scalar as YAML writes it: double-quoted and escaped, so that a value is
// always one string on its own line, whatever it holds.
std::string yaml_quoted(const std::string& value) {
  YAML::Emitter e;
  e << YAML::DoubleQuoted << value;
  return e.c_str();
}

// "N+J" -> {"N", "J"}; "N" -> {"N", ""}.
std::pair<std::string, std::string> with_jitter(const std::string& value) {
  size_t plus = value.find('+');
  if (plus == std::string::npos) return {value, ""};
  return {value.substr(0, plus), value.substr(plus + 1)};
}

class Lines {
 public:
  void add(std::string line, std::string flag = "") {
    text_ += line + "\n";
    flags_.push_back(std::move(flag));
  }
  WrapYaml done() && { return {std::move(text_), std::move(flags_)}; }

 private:
  std::string text_;
  std::vector<std::string> flags_;
};

// --leak decides nothing during its warm-up (2m) and the first third of its
// window, and a command that ignores its checkpoint signal waits out
// checkpoint.timeout: either way a fast leak meets the OOM killer first
// (a 20 MB/s leaker under 512MiB was killed at 26 s, with no word). A plain
// memory policy at 95% of --memory-max restarts it before then, unless
// --recycle-at already does at least as early without a checkpoint.
bool backstop(const WrapFlags& f) {
  if (!(f.leak || !f.checkpoint.empty()) || f.memory_max.empty()) return false;
  if (f.recycle_at.empty()) return true;
  // --recycle-at without --checkpoint is a plain restart already.
  if (f.checkpoint.empty()) return false;
  // With it, --recycle-at asks for a checkpoint: the backstop restarts above it.
  if (f.recycle_at.ends_with('%')) return std::strtod(f.recycle_at.c_str(), nullptr) < 95;
  auto max = units::parse_size(f.memory_max, nullptr);
  auto at = units::parse_size(f.recycle_at, nullptr);
  return max && at && *at < *max / 100 * 95;
}

}  // namespace

WrapYaml wrap_yaml(const WrapFlags& f) {
  Lines y;
  y.add("programs:");
  y.add("  " + yaml_quoted(f.name) + ":");
  std::string command;
  for (const std::string& arg : f.command)
    command += (command.empty() ? "" : ", ") + yaml_quoted(arg);
  y.add("    command: [" + command + "]");
  if (!f.memory_max.empty())
    y.add("    limits: {memory_max: " + yaml_quoted(f.memory_max) + "}",
          "--memory-max " + f.memory_max);
  if (f.threads) y.add("    threads: " + std::to_string(f.threads), "--threads");
  y.add("    restart: {mode: " + yaml_quoted(f.restart) + "}", "--restart " + f.restart);
  if (!f.checkpoint.empty()) {
    y.add("    checkpoint:", "--checkpoint " + f.checkpoint);
    y.add("      signal: " + yaml_quoted(f.checkpoint), "--checkpoint " + f.checkpoint);
    if (!f.checkpoint_timeout.empty())
      y.add("      timeout: " + yaml_quoted(f.checkpoint_timeout),
            "--checkpoint-timeout " + f.checkpoint_timeout);
  }
  if (!f.timeline.empty())
    y.add("    timeline: {dir: " + yaml_quoted(f.timeline) + "}", "--timeline " + f.timeline);
  const std::string action = f.checkpoint.empty() ? "" : ", action: checkpoint";
  const bool any_policy =
      !f.recycle_at.empty() || f.leak || !f.max_requests.empty() || !f.max_lifetime.empty();
  if (any_policy) y.add("    policies:");
  if (!f.recycle_at.empty())
    y.add("      - memory: {limit: " + yaml_quoted(f.recycle_at) + action + "}",
          "--recycle-at " + f.recycle_at);
  if (f.leak) {
    // The leak policy's own defaults, but min_slope: 1 MiB/min at 1 GiB, a
    // growth that fills --memory-max in about 17 hours, at any size.
    std::string slope;
    if (auto max = units::parse_size(f.memory_max, nullptr))
      slope = ", min_slope: " +
              yaml_quoted(std::to_string(std::max<uint64_t>(*max / 1024, 1)) + "B/min");
    y.add("      - leak: {limit: \"90%\"" + slope + action + "}", "--leak");
  }
  if (backstop(f))
    y.add("      - memory: {limit: \"95%\"}", f.leak ? "--leak" : "--checkpoint " + f.checkpoint);
  if (!f.max_requests.empty()) {
    auto [limit, jitter] = with_jitter(f.max_requests);
    y.add("      - max_requests: {limit: " + yaml_quoted(limit) +
              (jitter.empty() ? "" : ", jitter: " + yaml_quoted(jitter)) + "}",
          "--max-requests " + f.max_requests);
  }
  if (!f.max_lifetime.empty()) {
    auto [after, jitter] = with_jitter(f.max_lifetime);
    y.add("      - max_lifetime: {after: " + yaml_quoted(after) +
              (jitter.empty() ? "" : ", jitter: " + yaml_quoted(jitter)) + "}",
          "--max-lifetime " + f.max_lifetime);
  }
  return std::move(y).done();
}

WrapResult config_from_flags(const WrapFlags& f, const HostLookup& host) {
  WrapResult result;
  if (f.recycle_at.ends_with('%') && f.memory_max.empty())
    result.errors.push_back("--recycle-at " + f.recycle_at +
                            ": a percentage needs --memory-max (a percentage of what?)");
  if (f.leak && f.memory_max.empty())
    result.errors.push_back("--leak: needs --memory-max (it predicts when 90% of it is reached)");
  if (!f.checkpoint_timeout.empty() && f.checkpoint.empty())
    result.errors.push_back("--checkpoint-timeout " + f.checkpoint_timeout +
                            ": needs --checkpoint (the signal that asks for the checkpoint)");
  if (!f.checkpoint.empty() && f.recycle_at.empty() && !f.leak)
    result.errors.push_back(
        "--checkpoint " + f.checkpoint +
        ": needs --recycle-at or --leak (their policies ask for the checkpoint before they "
        "restart the command)");
  if (!result.errors.empty()) return result;

  WrapYaml yaml = wrap_yaml(f);
  LoadResult loaded = parse_string(yaml.text, "", host);
  for (const Diagnostic& d : loaded.errors) {
    size_t line = d.line > 0 ? static_cast<size_t>(d.line - 1) : yaml.flag_of_line.size();
    std::string flag = line < yaml.flag_of_line.size() ? yaml.flag_of_line[line] : "";
    // "programs.NAME.policies[0].memory: limit: ..." -> "limit: ...": the
    // flag says where, the rest says what.
    std::string what = d.message;
    if (size_t colon = what.find(": "); what.starts_with("programs.") && colon != std::string::npos)
      what.erase(0, colon + 2);
    result.errors.push_back((flag.empty() ? std::string("the command line") : flag) + ": " + what);
  }
  if (result.errors.empty()) result.config = std::move(loaded.config);
  return result;
}

}  // namespace recycler::config
