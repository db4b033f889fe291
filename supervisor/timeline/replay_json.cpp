#include "supervisor/timeline/replay_json.h"

#include <fmt/format.h>

#include <cmath>
#include <csignal>

#include "policies/base/units.h"
#include "supervisor/util/escape.h"

namespace recycler::timeline {
namespace {

// Seconds to the millisecond, always with a fraction: 997 -> "997.0", 12.34 -> "12.34".
std::string seconds_json(double s) {
  std::string out = fmt::format("{:.3f}", s);
  while (out.back() == '0' && out[out.size() - 2] != '.') out.pop_back();
  return out;
}

// "TERM" for SIGTERM; the number for a signal without a name.
std::string signal_json(int sig) {
  std::string name = units::signal_name(sig == 0 ? SIGTERM : sig);
  return name.starts_with("SIG") ? name.substr(3) : std::to_string(sig);
}

}  // namespace

std::string to_json(const Replayed& r) {
  const policies::Decision& d = r.decision;
  std::string out =
      fmt::format(R"({{"t": {}, "policy": "{}", "action": "{}", "reason": "{}")", seconds_json(r.t),
                  json_escape(r.policy), policies::to_string(d.action), json_escape(d.reason));
  if (d.predicted_s && std::isfinite(*d.predicted_s))
    out += R"(, "predicted_s": )" + seconds_json(*d.predicted_s);
  if (d.action == policies::Decision::Action::Signal)
    out += fmt::format(R"(, "pid": {}, "signal": "{}")", d.pid, signal_json(d.signal));
  out += '}';
  return out;
}

}  // namespace recycler::timeline
