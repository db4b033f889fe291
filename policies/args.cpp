#include "policies/args.h"

#include <algorithm>
#include <charconv>
#include <cstdlib>

#include "supervisor/config/units.h"

namespace recycler::policies {
namespace {

using config::quote;
using config::suggest;

// "a, b or c"
std::string join_or(const std::vector<std::string>& words) {
  std::string out;
  for (size_t i = 0; i < words.size(); ++i) {
    if (i > 0) out += i + 1 == words.size() ? " or " : ", ";
    out += words[i];
  }
  return out;
}

bool all_digits(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

// "12" or "12.5": no sign, exponent, "inf" or hex, which strtod would take.
bool plain_decimal(std::string_view s) {
  size_t dot = s.find('.');
  if (dot == std::string_view::npos) return all_digits(s);
  return all_digits(s.substr(0, dot)) && all_digits(s.substr(dot + 1));
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
  return " (" + shortest(*percent) + "% of " + config::format_size(*memory_max) + ")";
}

Args::Args(const YAML::Node& node, ErrorSink& errors, std::initializer_list<std::string_view> known)
    : errors_(errors) {
  bool null = !node.IsDefined() || node.IsNull();
  // A null node may be a fresh one without a mark; the config parser places
  // errors with a null mark at the policy's name.
  node_mark_ = null ? YAML::Mark::null_mark() : node.Mark();
  if (null) return;
  if (!node.IsMap()) {
    report(node_mark_, "must be a map of settings");
    malformed_ = true;
    return;
  }
  std::vector<std::string> names(known.begin(), known.end());
  for (const auto& entry : node) {
    const YAML::Node& key = entry.first;
    if (!key.IsScalar()) {
      report(key.Mark(), "keys must be strings");
      continue;
    }
    const std::string& name = key.Scalar();
    if (const Entry* first = find(name)) {
      report(key.Mark(), "duplicate key " + quote(name) + " (first at line " +
                             std::to_string(first->key_mark.line + 1) + ")");
      continue;
    }
    if (std::find(names.begin(), names.end(), name) == names.end()) {
      std::string hint = suggest(name, names);
      report(key.Mark(), "unknown key " + quote(name) + "; " +
                             (hint.empty() ? "expected " + join_or(names)
                                           : "did you mean " + quote(hint) + "?"));
      continue;
    }
    entries_.push_back(Entry{name, entry.second, key.Mark()});
  }
}

const Args::Entry* Args::find(std::string_view key) const {
  for (const auto& e : entries_)
    if (e.key == key) return &e;
  return nullptr;
}

const Args::Entry* Args::get(std::string_view key) const {
  const Entry* e = find(key);
  return e && e->value.IsDefined() && !e->value.IsNull() ? e : nullptr;
}

bool Args::has(std::string_view key) const {
  return get(key) != nullptr;
}

bool Args::required(std::string_view key) {
  if (has(key)) return true;
  if (malformed_) return false;  // its keys cannot be told apart: said once already
  if (const Entry* e = find(key))
    report(e->key_mark, std::string(key) + " must not be empty");
  else
    report(node_mark_, "missing required key " + quote(key));
  return false;
}

void Args::report(const YAML::Mark& at, std::string message) {
  errors_.error(at, std::move(message));
  ++count_;
}

void Args::error(std::string_view key, std::string message) {
  const Entry* e = find(key);
  if (!e) return report(node_mark_, std::move(message));
  // yaml-cpp gives an empty value the mark of whatever follows it, possibly
  // lines below, so errors about it point at its key.
  report(get(key) ? e->value.Mark() : e->key_mark, std::move(message));
}

std::optional<std::string> Args::scalar(const Entry& e, std::string_view kind) {
  if (e.value.IsScalar()) return e.value.Scalar();
  report(e.value.Mark(), e.key + " must be " + std::string(kind));
  return std::nullopt;
}

std::optional<uint64_t> Args::integer(std::string_view key, uint64_t lo, uint64_t hi) {
  const Entry* e = get(key);
  if (!e) return std::nullopt;
  auto text = scalar(*e, "an integer");
  if (!text) return std::nullopt;
  std::string expected =
      "expected an integer from " + std::to_string(lo) + " to " + std::to_string(hi);
  uint64_t v = 0;
  bool digits = all_digits(*text);
  bool overflow =
      digits && std::from_chars(text->data(), text->data() + text->size(), v).ec != std::errc();
  bool negative = text->starts_with('-') && all_digits(std::string_view(*text).substr(1));
  if (overflow || negative || (digits && (v < lo || v > hi))) {
    report(e->value.Mark(), e->key + ": " + *text + " is out of range; " + expected);
    return std::nullopt;
  }
  if (!digits) {
    report(e->value.Mark(), e->key + ": invalid value " + quote(*text) + "; " + expected);
    return std::nullopt;
  }
  return v;
}

template <typename T>
std::optional<T> Args::parse(const Entry& e, const std::string& text, std::string_view kind,
                             Parser<T> parser) {
  std::string why;
  auto v = parser(text, &why);
  if (!v)
    report(e.value.Mark(),
           e.key + ": invalid " + std::string(kind) + " " + quote(text) + ": " + why);
  return v;
}

template <typename T>
std::optional<T> Args::unit(std::string_view key, std::string_view kind, Parser<T> parser) {
  const Entry* e = get(key);
  if (!e) return std::nullopt;
  auto text = scalar(*e, "a " + std::string(kind));
  if (!text) return std::nullopt;
  return parse(*e, *text, kind, parser);
}

std::optional<uint64_t> Args::size(std::string_view key) {
  return unit<uint64_t>(key, "size", config::parse_size);
}

std::optional<Duration> Args::duration(std::string_view key) {
  return unit<Duration>(key, "duration", config::parse_duration);
}

std::optional<int> Args::signal(std::string_view key) {
  return unit<int>(key, "signal", config::parse_signal);
}

std::optional<std::string> Args::choice(std::string_view key,
                                        std::initializer_list<std::string_view> names) {
  const Entry* e = get(key);
  if (!e) return std::nullopt;
  auto text = scalar(*e, "a string");
  if (!text) return std::nullopt;
  if (std::find(names.begin(), names.end(), *text) != names.end()) return text;
  report(e->value.Mark(), e->key + ": invalid value " + quote(*text) + "; expected " +
                              join_or(std::vector<std::string>(names.begin(), names.end())));
  return std::nullopt;
}

std::optional<SizeLimit> Args::limit(std::string_view key) {
  const Entry* e = get(key);
  if (!e) return std::nullopt;
  auto text = scalar(*e, "a size or a percentage");
  if (!text) return std::nullopt;
  const YAML::Mark at = e->value.Mark();
  if (text->ends_with('%')) {
    std::string number = text->substr(0, text->size() - 1);
    if (!plain_decimal(number)) {
      report(at, e->key + ": invalid percentage " + quote(*text) + ": expected a number, e.g. " +
                     quote("90%"));
      return std::nullopt;
    }
    double percent = std::strtod(number.c_str(), nullptr);
    if (percent <= 0 || percent > 100) {
      report(at, e->key + ": " + *text +
                     " is out of range; expected a percentage above 0 and at most 100");
      return std::nullopt;
    }
    return SizeLimit{0, percent};
  }
  auto bytes = parse<uint64_t>(*e, *text, "size", config::parse_size);
  if (!bytes) return std::nullopt;
  if (*bytes == 0) {
    report(at, e->key + " must be greater than 0");
    return std::nullopt;
  }
  return SizeLimit{*bytes, std::nullopt};
}

std::optional<double> Args::rate(std::string_view key) {
  auto v = unit<double>(key, "rate", parse_rate);
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
