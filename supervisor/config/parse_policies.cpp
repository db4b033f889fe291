// What decides that a worker is recycled and how a recycle goes: a
// program's policies (their settings are checked when compile() builds
// them), requests, checkpoint, timeline and recycle sections.
#include "policies/policy.h"
#include "supervisor/config/parse_util.h"

namespace recycler::config::detail {
namespace {

constexpr uint64_t kMinTimelineSize = 64 << 10;  // a header and some rows
constexpr unsigned kMaxTimelineKeep = 1000;

// Re-emits a node in one fixed form: flow style, map keys sorted, scalars
// as plain text. Block vs flow, quoting and key order then make no difference
// to whether a reload sees the policy as changed.
void emit_canonical(YAML::Emitter& out, const YAML::Node& node) {
  switch (node.Type()) {
    case YAML::NodeType::Map: {
      // Sort positions, not nodes (see Field on assigning nodes).
      std::vector<std::pair<YAML::Node, YAML::Node>> entries;
      std::vector<std::pair<std::string, size_t>> order;
      for (const auto& entry : node) {
        YAML::Emitter key;
        emit_canonical(key, entry.first);
        order.emplace_back(key.c_str(), entries.size());
        entries.emplace_back(entry.first, entry.second);
      }
      std::stable_sort(order.begin(), order.end());
      out << YAML::BeginMap;
      for (const auto& [text, index] : order) {
        out << YAML::Key;
        emit_canonical(out, entries[index].first);
        out << YAML::Value;
        emit_canonical(out, entries[index].second);
      }
      out << YAML::EndMap;
      return;
    }
    case YAML::NodeType::Sequence:
      out << YAML::BeginSeq;
      for (const auto& item : node) emit_canonical(out, item);
      out << YAML::EndSeq;
      return;
    case YAML::NodeType::Scalar:
      out << node.Scalar();
      return;
    default:
      out << YAML::Null;
  }
}

std::string canonical(const YAML::Node& node) {
  YAML::Emitter out;
  out.SetMapFormat(YAML::Flow);
  out.SetSeqFormat(YAML::Flow);
  emit_canonical(out, node);
  return out.c_str();
}

// Policies read their own arguments with yaml-cpp lookups, which silently take
// the first of two equal keys; catch those here, at every depth.
void check_duplicate_keys(const Field& f, Report& r) {
  if (f.value.IsMap()) {
    if (auto map = read_map(f, r, std::nullopt))
      for (const auto& entry : map->entries()) check_duplicate_keys(entry.second, r);
  } else if (f.value.IsSequence()) {
    for (size_t i = 0; i < f.value.size(); ++i) check_duplicate_keys(f.item(i, f.value[i]), r);
  }
}

std::string unknown_policy(const std::string& name) {
  auto names = policies::Registry::instance().names();
  std::string message = "unknown policy " + quote(name);
  if (auto hint = suggest(name, names); !hint.empty())
    return message + "; did you mean " + quote(hint) + "?";
  std::string list;
  for (const auto& n : names) list += (list.empty() ? "" : ", ") + n;
  return message + " (available: " + list + ")";
}

// Checks an entry's shape and name; its settings are the factory's business,
// at compile().
std::optional<PolicySpec> parse_policy(const Field& item, Report& r) {
  if (!item.value.IsMap() || item.value.size() != 1) {
    r.error(item.mark(), item.path + " must be a map with a single key, the policy name");
    return std::nullopt;
  }
  auto entry = *item.value.begin();
  if (!entry.first.IsScalar()) {
    r.error(entry.first.Mark(), item.path + ": the policy name must be a string");
    return std::nullopt;
  }
  const std::string name = entry.first.Scalar();
  Field args = item.child(name, entry.second, entry.first.Mark());
  if (name == "watchdog") {  // one spelling: the program's own key
    r.error(entry.first.Mark(), item.path +
                                    ": watchdog is a setting of the program, beside policies: "
                                    "(e.g. `watchdog: {timeout: 30s}`), not a policy in the list");
    return std::nullopt;
  }
  if (!policies::Registry::instance().find(name)) {
    r.error(entry.first.Mark(), item.path + ": " + unknown_policy(name));
    return std::nullopt;
  }
  // The factory reports duplicates among the policy's own keys (policies/args.h);
  // nested maps are checked here.
  if (args.value.IsMap())
    for (const auto& arg : args.value)
      if (arg.first.IsScalar())
        check_duplicate_keys(args.child(arg.first.Scalar(), arg.second, arg.first.Mark()), r);
  // An empty node carries the mark of the next token, possibly lines below;
  // a fresh null node has none, so its errors land on the policy name.
  return PolicySpec{name, args.null() ? YAML::Node() : args.value, args.path, args.key_mark,
                    canonical(item.value)};
}

}  // namespace

void parse_policies(const Field& f, ProgramSpec& spec, Report& r) {
  if (f.null()) return;
  if (!f.value.IsSequence()) return r.error(f.mark(), f.path + " must be a list");
  for (size_t i = 0; i < f.value.size(); ++i)
    if (auto policy = parse_policy(f.item(i, f.value[i]), r))
      spec.policies.push_back(std::move(*policy));
}

// The program's `watchdog:` becomes the watchdog policy (policies/watchdog.cpp),
// after the listed ones; its settings are checked when compile() builds it.
void parse_watchdog(const Field& f, ProgramConfig& p, ProgramSpec& spec, Report& r) {
  if (f.null())
    return r.error(f.mark(), f.path + " must not be empty: give timeout, progress or both");
  if (!f.value.IsMap()) return r.error(f.mark(), f.path + " must be a map");
  check_duplicate_keys(f, r);
  // A bad value is the factory's to report, at compile().
  if (const YAML::Node timeout = f.value["timeout"]; timeout && timeout.IsScalar())
    p.watchdog_timeout = units::parse_duration(timeout.Scalar());
  YAML::Node entry(YAML::NodeType::Map);
  entry["watchdog"] = f.value;
  spec.policies.push_back(PolicySpec{"watchdog", f.value, f.path, f.key_mark, canonical(entry)});
}

void parse_requests(const Field& f, ProgramSpec& spec, Report& r) {
  auto map = read_map(f, r, kRequestsKeys);
  if (!map) return;
  const Field* v = map->get("pattern");
  if (!v) return r.error(f.mark(), f.path + ".pattern is required");
  auto text = read_scalar(*v, "a string", r);
  if (!text) return;
  spec.requests = RequestsSpec{*text, v->path, v->mark()};
}

void parse_checkpoint(const Field& f, CheckpointConfig& checkpoint, Report& r) {
  checkpoint.given = true;
  if (f.null()) return;  // a bare `checkpoint:`: the defaults
  auto map = read_map(f, r, kCheckpointKeys);
  if (!map) return;
  if (auto* v = map->get("signal")) set(checkpoint.signal, read_signal(*v, r));
  if (auto* v = map->get("signal_to")) set(checkpoint.signal_to, read_choice(*v, kSignalTos, r));
  if (auto* v = map->get("timeout")) set(checkpoint.timeout, read_positive_duration(*v, r));
  if (auto* v = map->get("on_timeout"))
    set(checkpoint.on_timeout, read_choice(*v, kCheckpointTimeouts, r));
}

// diagnose: {signal: USR2, command: "gdb -p $RECYCLER_PID ...", timeout: 30s,
//            max_output: 1MiB, policies: [watchdog, leak]}
void parse_diagnose(const Field& f, std::optional<DiagnoseConfig>& diagnose, Report& r) {
  auto map = read_map(f, r, kDiagnoseKeys);
  if (!map) return;
  DiagnoseConfig d;
  if (auto* v = map->get("signal")) {
    d.signal = read_signal(*v, r);
    if (d.signal && (*d.signal == SIGKILL || *d.signal == SIGSTOP)) {
      r.error(v->mark(), v->path + ": " + units::signal_name(*d.signal) +
                             " would end or freeze the worker before it says anything; use a "
                             "signal it can answer (USR2, QUIT)");
      d.signal.reset();
    }
  }
  if (auto* v = map->get("command")) {
    if (auto argv = read_command(*v, r)) {
      d.command = std::move(*argv);
      d.shell = v->value.IsScalar();
    }
  }
  if (auto* v = map->get("timeout")) set(d.timeout, read_positive_duration(*v, r));
  if (auto* v = map->get("max_output")) {
    auto size = read_size(*v, r);
    if (size && (*size < 1024 || *size > (64u << 20)))
      r.error(v->mark(), v->path + ": " + format_size(*size) + " is out of range (1KiB to 64MiB)");
    else
      set(d.max_output, size);
  }
  if (auto* v = map->get("policies")) {
    d.policies.clear();
    if (!v->value.IsSequence() || v->value.size() == 0)
      r.error(v->mark(), v->path + " must be a non-empty list of policy names");
    for (size_t i = 0; v->value.IsSequence() && i < v->value.size(); ++i) {
      Field item = v->item(i, v->value[i]);
      auto name = read_scalar(item, "a policy name", r);
      if (!name) continue;
      if (!policies::Registry::instance().find(*name))
        r.error(item.mark(), item.path + ": " + unknown_policy(*name));
      else
        d.policies.push_back(*name);
    }
  }
  if (!d.signal && d.command.empty())
    r.error(f.mark(), f.path + " needs a signal, a command, or both");
  diagnose = std::move(d);
}

// The directory is created when the program starts (it may be on a volume
// mounted later); relative paths are relative to the config file, like cwd.
void parse_timeline(const Field& f, const fs::path& base, std::optional<TimelineConfig>& out,
                    Report& r) {
  auto map = read_map(f, r, kTimelineKeys);
  if (!map) return;
  TimelineConfig timeline;
  const Field* dir = map->get("dir");
  if (!dir) return r.error(f.mark(), f.path + ".dir is required");
  auto text = read_scalar(*dir, "a string", r);
  if (!text) return;
  if (text->empty()) return r.error(dir->mark(), dir->path + " must not be empty");
  std::error_code ec;
  timeline.dir = fs::absolute(base / *text, ec).lexically_normal().string();
  if (auto* v = map->get("max_size")) {
    if (auto size = read_size(*v, r); size && *size < kMinTimelineSize)
      r.error(v->mark(), v->path + ": " + format_size(*size) + " is too small; at least " +
                             format_size(kMinTimelineSize));
    else
      set(timeline.max_size, size);
  }
  if (auto* v = map->get("keep")) set(timeline.keep, read_integer(*v, 0, kMaxTimelineKeep, r));
  out = std::move(timeline);
}

// recycle: {mode: surge, ready_timeout: 60s, ready_from: main|child}
//       or {mode: surge, ready_after: 5s} for a program that never sends READY=1
void parse_recycle(const Field& f, RecycleConfig& recycle, Report& r) {
  auto map = read_map(f, r, kRecycleKeys);
  if (!map) return;
  if (auto* v = map->get("mode")) set(recycle.mode, read_choice(*v, kRecycleModes, r));
  for (const char* key : {"ready_timeout", "ready_after"}) {
    const Field* v = map->get(key);
    if (!v) continue;
    auto d = read_positive_duration(*v, r);
    if (d && std::string_view(key) == "ready_timeout")
      recycle.ready_timeout = *d;
    else if (d)
      recycle.ready_after = *d;
  }
  if (auto* v = map->get("ready_from")) {
    auto from = read_scalar(*v, "main or child", r);
    if (from && *from != "main" && *from != "child")
      r.error(v->mark(), v->path + ": expected main or child, got " + quote(*from));
    else if (from)
      recycle.ready_from_child = *from == "child";
  }
  if (map->get("ready_after") && map->get("ready_from"))
    r.warning(map->get("ready_from")->mark(),
              f.path + ".ready_from does nothing with ready_after: readiness is a delay then");
  if (recycle.mode != RecycleMode::Surge)
    for (const char* key : {"ready_timeout", "ready_after", "ready_from"})
      if (const Field* v = map->get(key))
        r.warning(v->mark(), v->path + " applies to mode: surge only");
}

// drain: {unready_for: DUR}: before a whole-worker recycle, the slot is not
// ready (/readyz) for that long, so that load balancers stop sending first.
void parse_drain(const Field& f, ProgramConfig& p, ProgramSites& sites, Report& r) {
  auto map = read_map(f, r, kDrainKeys);
  if (!map) return;
  if (auto* v = map->get("unready_for")) {
    if (auto d = read_duration(*v, r); d && *d > std::chrono::minutes(10)) {
      r.error(v->mark(), v->path + ": " + format_duration(*d) +
                             " is too long: a recycle would wait that long; at most 10m");
    } else if (d && d->count() > 0) {
      p.drain_unready_for = *d;
      sites.drain = Site{v->path, v->mark(), r.reserve(), ""};
    }
  }
}

// gang: true | false | {master: HOST:PORT}: the instances are ranks of one
// job. Their recycles go together, which a surge (two generations of one
// rank side by side) cannot.
void parse_gang(const Field& f, ProgramConfig& p, Report& r) {
  if (f.value.IsScalar()) {
    static constexpr std::string_view kBools[] = {"true", "false"};
    auto on = read_choice(f, kBools, r);
    if (on && *on == "true") p.gang.emplace();
  } else if (auto map = read_map(f, r, kGangKeys)) {
    p.gang.emplace();
    if (auto* v = map->get("master")) {
      auto text = read_scalar(*v, "HOST:PORT", r);
      std::string why;
      if (!text) return;
      if (auto address = parse_listen_address(*text, &why); address && address->port != 0)
        p.gang->master = *address;
      else
        r.error(v->mark(), v->path + ": " + (address ? "a port other than 0 is needed" : why));
    }
  }
  if (p.gang && p.recycle.mode == RecycleMode::Surge)
    r.error(f.mark(), f.path +
                          ": a gang's ranks stop and start together; recycle.mode: surge runs "
                          "two generations of one rank side by side: use recycle.mode: restart");
  if (p.gang && p.checkpoint.on_timeout == CheckpointTimeout::Wait)
    r.warning(f.mark(), f.path +
                            ": a gang stops every rank at checkpoint.timeout (no rank waits "
                            "alone while the others wait in a collective): "
                            "checkpoint.on_timeout: wait does not apply to it");
}

// A surge runs two generations of a slot at once: without listen, both bind
// the same port (check.cpp also checks that both fit in memory).
void warn_surge_without_listen(const ProgramConfig& p, const MapView& map, Report& r) {
  if (p.recycle.mode != RecycleMode::Surge) return;
  const Field* recycle = map.get("recycle");
  if (!recycle || !p.listen.empty()) return;
  r.warning(recycle->mark(), recycle->path +
                                 ".mode: surge without listen: the next generation starts while "
                                 "the old one still holds its port, so it must bind with "
                                 "SO_REUSEPORT; with listen: both serve the same sockets");
}

}  // namespace recycler::config::detail
