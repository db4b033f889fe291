#include "policies/args.h"

#include <algorithm>
#include <charconv>
#include <cstdlib>

#include "policies/base/units.h"

namespace recycler::policies {
namespace {

using units::quote;

// "12" or "12.5": no sign, exponent, "inf" or hex, which strtod would take.
bool plain_decimal(std::string_view s) {
  size_t dot = s.find('.');
  if (dot == std::string_view::npos) return fields::all_digits(s);
  return fields::all_digits(s.substr(0, dot)) && fields::all_digits(s.substr(dot + 1));
}

// The shortest text that reads back as `v`: 90 -> "90", 12.5 -> "12.5".
std::string shortest(double v) {
  char buf[32];
  auto end = std::to_chars(buf, buf + sizeof buf, v).ptr;
  return std::string(buf, end);
}

}  // namespace

std::optional<uint64_t> SizeLimit::resolve(const std::optional<uint64_t>& memory_max) const {
  if (!percent) return bytes;
  if (!memory_max) return std::nullopt;
  // long double keeps all 64 bits of the limit; the result rounds down.
  return static_cast<uint64_t>(static_cast<long double>(*memory_max) * *percent / 100);
}

std::string SizeLimit::origin(const std::optional<uint64_t>& memory_max) const {
  if (!percent || !memory_max) return "";
  return " (" + shortest(*percent) + "% of " + units::format_size(*memory_max) + ")";
}

Args::Args(const YAML::Node& node, ErrorSink& errors, fields::Keys known) : errors_(errors) {
  bool null = !node.IsDefined() || node.IsNull();
  // A null node may be a fresh one without a mark; the config parser places
  // errors with a null mark at the policy's name.
  node_mark_ = null ? YAML::Mark::null_mark() : node.Mark();
  if (null) return;
  auto map = fields::read_map(fields::Field{"", node}, errors_, known, fields::MapStyle::Settings);
  if (map)
    entries_ = std::move(*map);
  else
    malformed_ = true;
}

bool Args::has(std::string_view key) const {
  return get(key) != nullptr;
}

bool Args::required(std::string_view key) {
  if (has(key)) return true;
  if (malformed_) return false;  // its keys cannot be told apart: said once already
  if (const fields::Field* f = entries_.find(key))
    report(f->key_mark, std::string(key) + " must not be empty");
  else
    report(node_mark_, "missing required key " + quote(key));
  return false;
}

void Args::error(std::string_view key, std::string message) {
  const fields::Field* f = entries_.find(key);
  // An empty value points at its key (fields::Field::mark()).
  report(f ? f->mark() : node_mark_, std::move(message));
}

std::optional<uint64_t> Args::integer(std::string_view key, uint64_t lo, uint64_t hi) {
  const fields::Field* f = get(key);
  return f ? fields::read_integer(*f, lo, hi, errors_) : std::nullopt;
}

std::optional<uint64_t> Args::size(std::string_view key) {
  const fields::Field* f = get(key);
  return f ? fields::read_size(*f, errors_) : std::nullopt;
}

std::optional<Duration> Args::duration(std::string_view key) {
  const fields::Field* f = get(key);
  return f ? fields::read_duration(*f, errors_) : std::nullopt;
}

std::optional<int> Args::signal(std::string_view key) {
  const fields::Field* f = get(key);
  return f ? fields::read_signal(*f, errors_) : std::nullopt;
}

std::optional<std::string> Args::choice(std::string_view key,
                                        std::initializer_list<std::string_view> names) {
  const fields::Field* f = get(key);
  if (!f) return std::nullopt;
  return fields::read_choice(*f, std::span<const std::string_view>(names.begin(), names.size()),
                             errors_);
}

std::optional<SizeLimit> Args::limit(std::string_view key) {
  const fields::Field* e = get(key);
  if (!e) return std::nullopt;
  auto text = fields::read_scalar(*e, "a size or a percentage", errors_);
  if (!text) return std::nullopt;
  const YAML::Mark at = e->mark();
  if (text->ends_with('%')) {
    std::string number = text->substr(0, text->size() - 1);
    if (!plain_decimal(number)) {
      report(at, e->path + ": invalid percentage " + quote(*text) + ": expected a number, e.g. " +
                     quote("90%"));
      return std::nullopt;
    }
    double percent = std::strtod(number.c_str(), nullptr);
    if (percent <= 0 || percent > 100) {
      report(at, e->path + ": " + *text +
                     " is out of range; expected a percentage above 0 and at most 100");
      return std::nullopt;
    }
    return SizeLimit{0, percent};
  }
  auto bytes = fields::parse_as<uint64_t>(*e, *text, "size", units::parse_size, errors_);
  if (!bytes) return std::nullopt;
  if (*bytes == 0) {
    report(at, e->path + " must be greater than 0");
    return std::nullopt;
  }
  return SizeLimit{*bytes, std::nullopt};
}

std::optional<double> Args::rate(std::string_view key) {
  const fields::Field* f = get(key);
  auto v = f ? fields::read_rate(*f, errors_) : std::nullopt;
  if (v && *v == 0) {
    error(key, std::string(key) + " must be greater than 0");
    return std::nullopt;
  }
  return v;
}

Decision Scope::decide(std::string reason, pid_t pid) const {
  Decision d;
  d.action = process ? Decision::Action::Signal : action;
  d.reason = std::move(reason);
  if (process) {
    d.pid = pid;
    d.signal = signal;
  }
  return d;
}

Scope read_scope(Args& args) {
  Scope scope;
  bool scope_read = true;
  if (args.has("scope")) {
    auto v = args.choice("scope", {"worker", "process"});
    scope_read = v.has_value();
    scope.process = v == "process";
  }
  if (!args.has("signal")) return scope;
  auto sig = args.signal("signal");
  // A bad scope was reported already; whether a signal fits it is moot.
  if (scope_read && !scope.process)
    args.error("signal",
               "signal: only applies with scope: process; scope: worker restarts the whole worker");
  else if (sig)
    scope.signal = *sig;
  return scope;
}

void read_action(Args& args, Scope& scope) {
  auto v = args.choice("action", {"restart", "checkpoint"});
  if (!v) return;
  if (*v == "checkpoint" && scope.process) {
    args.error(
        "action",
        "action: checkpoint applies to the whole worker; scope: process signals one process");
    return;
  }
  scope.action = *v == "checkpoint" ? Decision::Action::Checkpoint : Decision::Action::Restart;
}

}  // namespace recycler::policies
