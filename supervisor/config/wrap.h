// Wrap mode's configuration: `recycler run [OPTIONS] -- CMD [ARG...]` builds
// the one-program config that a file would give, through the same parser and
// compile step: each flag becomes the YAML it stands for, one line per flag,
// and what the parser or a policy's factory rejects comes back naming the
// flag and its value (`--recycle-at 5XB: limit: invalid size ...`).
//
//   --memory-max SIZE            limits: {memory_max: SIZE}
//   --threads N                  threads: N
//   --restart MODE               restart: {mode: MODE}
//   --recycle-at SIZE|PCT        policies: [memory: {limit: SIZE|PCT}] (metric anon)
//   --leak                       policies: [leak: {limit: 90%, min_slope: M/1024 per min}]
//                                (M: --memory-max, which it needs; the rest are the
//                                policy's defaults: window 10m, warmup 2m, horizon 15m)
//   --checkpoint SIG             checkpoint: {signal: SIG}, and action: checkpoint on
//                                --recycle-at's and --leak's policies (which it needs)
//   --checkpoint-timeout DUR     checkpoint: {timeout: DUR} (needs --checkpoint)
//   (--leak or --checkpoint)     also a backstop, policies: [memory: {limit: 95%}]: the
//                                leak policy decides nothing during its warm-up, and a
//                                command that never confirms its checkpoint would meet
//                                the OOM killer; with --memory-max, and not where
//                                --recycle-at restarts it without a checkpoint already
//                                (with one, only where --recycle-at is under 95%)
//   --max-requests N[+JITTER]    policies: [max_requests: {limit: N, jitter: JITTER}]
//   --max-lifetime DUR[+JITTER]  policies: [max_lifetime: {after: DUR, jitter: JITTER}]
//   --timeline DIR               timeline: {dir: DIR} (relative to the current directory)
// Anything more (several policies of a kind, scope: process, requests by
// output pattern, ...) is what the YAML file is for.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "supervisor/config/config.h"
#include "supervisor/config/host.h"

namespace recycler::config {

struct WrapFlags {
  std::vector<std::string> command;
  std::string name;        // the program's name (already checked)
  std::string memory_max;  // "" when not given, like every string below
  std::string restart = "on-failure";
  unsigned threads = 0;  // 0: not given
  std::string recycle_at;
  bool leak = false;
  std::string checkpoint;
  std::string checkpoint_timeout;
  std::string max_requests;
  std::string max_lifetime;
  std::string timeline;
};

struct WrapResult {
  std::optional<Config> config;     // set when there are no errors
  std::vector<std::string> errors;  // "--flag VALUE: what is wrong", in flag order
};

// The config the flags stand for; the cgroup_root is left to the caller.
WrapResult config_from_flags(const WrapFlags& flags, const HostLookup& host);

// The YAML document the flags stand for, and which flag each line is from
// ("" for lines no flag wrote). For tests and error messages.
struct WrapYaml {
  std::string text;
  std::vector<std::string> flag_of_line;  // by 0-based line
};
WrapYaml wrap_yaml(const WrapFlags& flags);

}  // namespace recycler::config
