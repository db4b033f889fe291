#include "supervisor/control/protocol.h"

#include <fmt/chrono.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <limits>

#include "policies/base/escape.h"
#include "policies/base/units.h"
#include "supervisor/config/parse.h"

namespace recycler::control {
namespace {

constexpr std::pair<Command, const char*> kCommands[] = {
    {Command::Status, "status"},   {Command::Start, "start"},     {Command::Stop, "stop"},
    {Command::Restart, "restart"}, {Command::Recycle, "recycle"}, {Command::Signal, "signal"},
    {Command::Reload, "reload"},   {Command::Events, "events"},   {Command::Logs, "logs"}};

constexpr std::string_view kRequestKeys[] = {"command", "targets", "signal", "follow", "lines"};

// Text a client sent, quoted for an error line (the line is JSON: escaped there).
std::string shown(std::string_view s) {
  return units::quote(s.substr(0, 64));
}

template <typename T>
Json optional_json(const std::optional<T>& v) {
  return v ? Json(*v) : Json(nullptr);
}

// A key said twice (nlohmann keeps the last) is refused: what recycler
// reads must be what a log or a proxy in front of it reads too.
Result<Json> parse_request_object(std::string_view line) {
  std::vector<std::vector<std::string>> seen;  // the keys of each object open
  std::string twice;
  auto keys = [&](int, Json::parse_event_t event, Json& parsed) {
    if (event == Json::parse_event_t::object_start) seen.emplace_back();
    if (event == Json::parse_event_t::object_end && !seen.empty()) seen.pop_back();
    if (event == Json::parse_event_t::key && !seen.empty() && parsed.is_string()) {
      const auto& key = parsed.get_ref<const std::string&>();
      auto& in = seen.back();
      if (twice.empty() && std::find(in.begin(), in.end(), key) != in.end()) twice = key;
      in.push_back(key);
    }
    return true;
  };
  Json j = Json::parse(line.begin(), line.end(), keys, /*allow_exceptions=*/false);
  if (j.is_discarded()) return Error{"not JSON: expected one JSON object per line"};
  if (!j.is_object()) return Error{"not a JSON object: expected {\"command\": ...}"};
  if (!twice.empty()) return Error{"key " + shown(twice) + " given twice"};
  return j;
}

Status check_request_keys(const Json& j) {
  for (const auto& [key, value] : j.items())
    if (std::find(std::begin(kRequestKeys), std::end(kRequestKeys), key) == std::end(kRequestKeys))
      return Error{"unknown key " + shown(key)};
  return Ok{};
}

Result<Command> request_command(const Json& j) {
  auto command = j.find("command");
  if (command == j.end() || !command->is_string())
    return Error{"\"command\" is missing or not a string"};
  auto c = parse_command(command->get_ref<const std::string&>());
  if (!c) return Error{"unknown command " + shown(command->get_ref<const std::string&>())};
  return *c;
}

Status read_targets(const Json& j, Request& r) {
  auto targets = j.find("targets");
  if (targets == j.end()) return Ok{};
  if (!targets->is_array()) return Error{"\"targets\" must be an array of strings"};
  if (targets->size() > kMaxTargets)
    return Error{"\"targets\": at most " + std::to_string(kMaxTargets)};
  for (const Json& t : *targets) {
    if (!t.is_string()) return Error{"\"targets\" must be an array of strings"};
    auto target = parse_target(t.get_ref<const std::string&>());
    if (!target) return Error{"\"targets\": " + target.error().message};
    r.targets.push_back(std::move(*target));
  }
  return Ok{};
}

// The commands that act on programs need targets; status and logs may take
// some; the others take none.
Status check_targets_fit(const Request& r) {
  bool acts = r.command == Command::Start || r.command == Command::Stop ||
              r.command == Command::Restart || r.command == Command::Recycle ||
              r.command == Command::Signal;
  if (acts && r.targets.empty())
    return Error{std::string(to_string(r.command)) + ": name at least one program in \"targets\""};
  if (!acts && r.command != Command::Status && r.command != Command::Logs && !r.targets.empty())
    return Error{std::string(to_string(r.command)) + " takes no \"targets\""};
  return Ok{};
}

Status read_signal(const Json& j, Request& r) {
  auto signal = j.find("signal");
  if (signal == j.end()) {
    if (r.command == Command::Signal) return Error{"signal: \"signal\" is missing"};
    return Ok{};
  }
  if (r.command != Command::Signal) return Error{"\"signal\" is for the signal command only"};
  if (!signal->is_string()) return Error{"\"signal\" must be a signal name such as \"HUP\""};
  std::string why;
  auto sig = units::parse_signal(signal->get_ref<const std::string&>(), &why);
  if (!sig) return Error{"\"signal\": " + why};
  r.signal = *sig;
  return Ok{};
}

// "follow" and "lines": of the events and logs commands only.
Status read_follow_and_lines(const Json& j, Request& r) {
  bool reads_ring = r.command == Command::Events || r.command == Command::Logs;
  if (auto follow = j.find("follow"); follow != j.end()) {
    if (!reads_ring || !follow->is_boolean())
      return Error{"\"follow\" is a boolean of the events and logs commands"};
    r.follow = follow->get<bool>();
  }
  if (auto lines = j.find("lines"); lines != j.end()) {
    if (!reads_ring || !lines->is_number_unsigned())
      return Error{"\"lines\" is a count (0 or more) of the events and logs commands"};
    size_t most = r.command == Command::Logs ? kLogRingLines : kEventRingSize;
    r.lines = static_cast<size_t>(std::min<uint64_t>(lines->get<uint64_t>(), most));
  }
  return Ok{};
}

std::optional<uint64_t> unsigned_at(const Json& o, const char* key) {
  auto it = o.find(key);
  if (it == o.end() || !it->is_number_unsigned()) return std::nullopt;
  return it->get<uint64_t>();
}

// One entry of a status's "processes"; a pid out of range is left unset.
ProcessStatus process_from_json(const Json& o) {
  constexpr int64_t kMaxPid = std::numeric_limits<pid_t>::max();
  ProcessStatus p;
  if (auto it = o.find("pid"); it != o.end() && it->is_number_integer()) {
    int64_t pid = it->get<int64_t>();
    if (pid > 0 && pid <= kMaxPid) p.pid = static_cast<pid_t>(pid);
  }
  if (auto it = o.find("main"); it != o.end() && it->is_boolean()) p.main = it->get<bool>();
  if (auto it = o.find("recycling"); it != o.end() && it->is_boolean())
    p.recycling = it->get<bool>();
  p.memory = unsigned_at(o, "memory");
  p.requests = unsigned_at(o, "requests");
  p.request_limit = unsigned_at(o, "request_limit");
  return p;
}

}  // namespace

const char* to_string(Command command) {
  for (const auto& [c, name] : kCommands)
    if (c == command) return name;
  return "?";
}

std::optional<Command> parse_command(std::string_view name) {
  for (const auto& [c, n] : kCommands)
    if (name == n) return c;
  return std::nullopt;
}

std::vector<std::string> command_names() {
  std::vector<std::string> out;
  for (const auto& [c, name] : kCommands) out.emplace_back(name);
  return out;
}

std::string Target::str() const {
  return slot ? program + ":" + std::to_string(*slot) : program;
}

Result<Target> parse_target(std::string_view text) {
  Target t;
  size_t colon = text.rfind(':');
  std::string_view name = text.substr(0, colon);
  if (colon != std::string_view::npos) {
    std::string_view digits = text.substr(colon + 1);
    unsigned slot = 0;
    auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), slot);
    if (digits.empty() || ec != std::errc() || end != digits.data() + digits.size())
      return Error{"invalid slot in " + shown(text) + ": expected PROGRAM or PROGRAM:SLOT"};
    t.slot = slot;
  }
  if (!config::valid_program_name(name))
    return Error{"invalid program name " + shown(name) +
                 " (letters, digits, '_', '-', '.'; at most 64)"};
  t.program = std::string(name);
  return t;
}

Result<Request> parse_request(std::string_view line) {
  if (line.size() > kMaxRequestBytes)
    return Error{"request too long (at most " + std::to_string(kMaxRequestBytes) + " bytes)"};
  Result<Json> j = parse_request_object(line);
  if (!j) return j.error();
  if (Status known = check_request_keys(*j); !known) return known.error();
  Result<Command> command = request_command(*j);
  if (!command) return command.error();
  Request r;
  r.command = *command;
  if (Status s = read_targets(*j, r); !s) return s.error();
  if (Status s = check_targets_fit(r); !s) return s.error();
  if (Status s = read_signal(*j, r); !s) return s.error();
  if (Status s = read_follow_and_lines(*j, r); !s) return s.error();
  return r;
}

std::string request_line(const Request& request) {
  Json j{{"command", to_string(request.command)}};
  if (!request.targets.empty()) {
    Json targets = Json::array();
    for (const Target& t : request.targets) targets.push_back(t.str());
    j["targets"] = std::move(targets);
  }
  if (request.command == Command::Signal) j["signal"] = units::signal_name(request.signal);
  if (request.command == Command::Events || request.command == Command::Logs)
    j["follow"] = request.follow;
  if (request.lines) j["lines"] = *request.lines;
  return j.dump();
}

std::string error_line(std::string_view message, const std::vector<std::string>& errors) {
  Json j{{"ok", false}, {"error", message}};
  if (!errors.empty()) j["errors"] = errors;
  // Text from clients and files: replaced, never an exception, if not UTF-8.
  return j.dump(-1, ' ', false, Json::error_handler_t::replace);
}

std::optional<std::string> default_socket_path(std::string_view name, uid_t euid,
                                               const char* xdg_runtime_dir) {
  std::string file = std::string(name) + ".sock";
  if (euid == 0) return "/run/recycler/" + file;
  if (xdg_runtime_dir && xdg_runtime_dir[0] == '/')
    return std::string(xdg_runtime_dir) + "/recycler/" + file;
  return std::nullopt;
}

std::string config_name(std::string_view path) {
  std::string_view base = path.substr(path.rfind('/') + 1);
  size_t dot = base.rfind('.');
  if (dot != std::string_view::npos && dot > 0) base = base.substr(0, dot);
  return base.empty() ? std::string("recycler") : std::string(base);
}

Json to_json(const WorkerStatus& w) {
  Json outlooks = Json::array();
  for (const OutlookStatus& o : w.outlooks)
    outlooks.push_back({{"policy", o.policy},
                        {"slope_bytes_per_s", o.slope_bytes_per_s},
                        {"seconds_to_limit", o.seconds_to_limit}});
  Json processes = Json::array();
  for (const ProcessStatus& p : w.processes)
    processes.push_back({{"pid", p.pid},
                         {"main", p.main},
                         {"recycling", p.recycling},
                         {"memory", optional_json(p.memory)},
                         {"requests", optional_json(p.requests)},
                         {"request_limit", optional_json(p.request_limit)}});
  return {{"program", w.program},
          {"slot", w.slot},
          {"state", w.state},
          {"phase", w.phase.empty() ? Json(nullptr) : Json(w.phase)},
          {"pid", optional_json(w.pid)},
          {"uptime_s", w.uptime_s},
          {"start_time", optional_json(w.start_time)},
          {"generation", w.generation},
          {"restarts",
           {{"recycles", w.restarts_recycles},
            {"process_recycles", w.process_recycles},
            {"crashes", w.restarts_crashes}}},
          {"memory", w.memory},
          {"memory_metric", w.memory_metric},
          {"memory_scope", w.memory_scope},
          {"limit", optional_json(w.limit)},
          {"process_memory", optional_json(w.process_memory)},
          {"processes", std::move(processes)},
          {"requests", optional_json(w.requests)},
          {"threads", optional_json(w.threads)},
          {"outlooks", std::move(outlooks)},
          {"last_recycle_reason",
           w.last_recycle_reason.empty() ? Json(nullptr) : Json(w.last_recycle_reason)},
          {"status_text", w.status_text.empty() ? Json(nullptr) : Json(w.status_text)},
          {"ready", w.ready},
          {"not_ready", w.not_ready.empty() ? Json(nullptr) : Json(w.not_ready)}};
}

Json to_json(const SupervisorStatus& s) {
  Json exits = Json::object();
  for (const auto& [reason, n] : s.exits) exits[to_string(reason)] = n;
  Json recycles_by = Json::array();
  for (const auto& [key, n] : s.recycles_by)
    recycles_by.push_back(
        {{"program", key.program}, {"policy", key.policy}, {"action", key.action}, {"count", n}});
  Json programs = Json::array();
  Json workers = Json::array();
  for (const ProgramStatus& p : s.programs) {
    programs.push_back({{"name", p.name}, {"instances", p.instances}, {"running", p.running}});
    if (p.gang)
      programs.back()["gang"] = {
          {"recycles", p.gang_recycles},
          {"last_reason", p.gang_last_reason.empty() ? Json(nullptr) : Json(p.gang_last_reason)}};
    for (const WorkerStatus& w : p.workers) workers.push_back(to_json(w));
  }
  Json supervisor{{"pid", s.pid},
                  {"uptime_s", s.uptime_s},
                  {"config", s.config_path.empty() ? Json(nullptr) : Json(s.config_path)},
                  {"programs", std::move(programs)},
                  {"workers", s.workers},
                  {"workers_running", s.workers_running},
                  {"recycles", s.recycles},
                  {"oom_kills", s.oom_kills},
                  {"exits", std::move(exits)},
                  {"recycles_by", std::move(recycles_by)},
                  {"summary", summary_line(s)}};
  if (const auto& b = s.budget) {
    auto text = [](const std::string& t) { return t.empty() ? Json(nullptr) : Json(t); };
    supervisor["budget"] = {{"scope", b->scope},
                            {"metric", b->metric},
                            {"used_bytes", optional_json(b->used)},
                            {"limit_bytes", optional_json(b->limit)},
                            {"pressure", optional_json(b->pressure)},
                            {"pressure_kind", text(b->pressure_kind)},
                            {"slope_bytes_per_s", optional_json(b->slope_bytes_per_s)},
                            {"crosses_in_s", optional_json(b->crosses_in_s)},
                            {"state", b->state},
                            {"recycles", b->recycles},
                            {"last_choice", text(b->last_choice)},
                            {"last_ago_s", optional_json(b->last_ago_s)}};
  }
  if (const auto& c = s.container)
    supervisor["container"] = {{"cgroup", c->dir},
                               {"limit_bytes", optional_json(c->limit)},
                               {"current_bytes", optional_json(c->current)},
                               {"oom_kills", optional_json(c->oom_kills)},
                               {"pressure", optional_json(c->pressure)}};
  return {{"supervisor", std::move(supervisor)}, {"workers", std::move(workers)}};
}

WorkerStatus worker_from_json(const Json& j) {
  WorkerStatus w;
  auto get = [&](const char* key) -> const Json* {
    auto it = j.find(key);
    return it == j.end() || it->is_null() ? nullptr : &*it;
  };
  if (auto* v = get("program"); v && v->is_string()) w.program = v->get<std::string>();
  if (auto* v = get("slot"); v && v->is_number_unsigned()) w.slot = v->get<unsigned>();
  if (auto* v = get("state"); v && v->is_string()) w.state = v->get<std::string>();
  if (auto* v = get("phase"); v && v->is_string()) w.phase = v->get<std::string>();
  if (auto* v = get("pid"); v && v->is_number_integer()) w.pid = v->get<pid_t>();
  if (auto* v = get("uptime_s"); v && v->is_number()) w.uptime_s = v->get<double>();
  if (auto* v = get("start_time"); v && v->is_number_integer()) w.start_time = v->get<int64_t>();
  if (auto* v = get("generation"); v && v->is_number_unsigned()) w.generation = v->get<unsigned>();
  if (auto* v = get("restarts"); v && v->is_object()) {
    w.restarts_recycles = v->value("recycles", uint64_t{0});
    w.restarts_crashes = v->value("crashes", uint64_t{0});
    w.process_recycles = v->value("process_recycles", uint64_t{0});
  }
  if (auto* v = get("memory_scope"); v && v->is_string()) w.memory_scope = v->get<std::string>();
  if (auto* v = get("process_memory"); v && v->is_number_unsigned())
    w.process_memory = v->get<uint64_t>();
  if (auto* v = get("processes"); v && v->is_array())
    for (const Json& o : *v)
      if (o.is_object() && w.processes.size() < kMaxStatusProcesses)
        w.processes.push_back(process_from_json(o));
  if (auto* v = get("memory"); v && v->is_object())
    for (const auto& [k, n] : v->items())
      if (n.is_number_unsigned()) w.memory[k] = n.get<uint64_t>();
  if (auto* v = get("memory_metric"); v && v->is_string()) w.memory_metric = v->get<std::string>();
  if (auto* v = get("limit"); v && v->is_number_unsigned()) w.limit = v->get<uint64_t>();
  if (auto* v = get("requests"); v && v->is_number_unsigned()) w.requests = v->get<uint64_t>();
  if (auto* v = get("threads"); v && v->is_number_unsigned()) w.threads = v->get<uint32_t>();
  if (auto* v = get("outlooks"); v && v->is_array())
    for (const Json& o : *v)
      if (o.is_object())
        w.outlooks.push_back({o.value("policy", std::string()), o.value("slope_bytes_per_s", 0.0),
                              o.value("seconds_to_limit", 0.0)});
  if (auto* v = get("last_recycle_reason"); v && v->is_string())
    w.last_recycle_reason = v->get<std::string>();
  if (auto* v = get("status_text"); v && v->is_string()) w.status_text = v->get<std::string>();
  if (auto* v = get("ready"); v && v->is_boolean()) w.ready = v->get<bool>();
  if (auto* v = get("not_ready"); v && v->is_string()) w.not_ready = v->get<std::string>();
  return w;
}

bool matches(const Target& target, std::string_view program, unsigned slot) {
  return target.program == program && (!target.slot || *target.slot == slot);
}

void EventRing::push(std::string line) {
  bytes_ += line.size();
  lines_.push_back(std::move(line));
  while (lines_.size() > capacity_ || (max_bytes_ && bytes_ > max_bytes_ && lines_.size() > 1)) {
    bytes_ -= lines_.front().size();
    lines_.pop_front();
  }
}

// Once per line of a chatty worker: the date and time to the second are
// formatted once a second.
std::string timestamp() {
  auto now = std::chrono::system_clock::now();
  auto second = std::chrono::floor<std::chrono::seconds>(now);
  thread_local std::chrono::system_clock::time_point cached_second{};
  thread_local std::string cached;
  if (cached.empty() || second != cached_second) {
    cached = fmt::format("{:%Y-%m-%dT%H:%M:%S}", second);
    cached_second = second;
  }
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(now - second).count();
  return fmt::format("{}.{:03}Z", cached, ms);
}

// Built by hand rather than through a Json object: a chatty worker sends
// hundreds of thousands of lines a second (bench/output_bench.cpp).
std::string output_line(std::string_view time, std::string_view program, unsigned slot, pid_t pid,
                        std::string_view stream, std::string_view line, bool partial) {
  std::string out;
  out.reserve(line.size() + program.size() + 112);
  out += R"({"time":")";
  json_escape_to(out, time);
  out += R"(","program":")";
  json_escape_to(out, program);
  out += R"(","slot":)";
  out += std::to_string(slot);
  out += R"(,"pid":)";
  out += std::to_string(pid);
  out += R"(,"stream":")";
  json_escape_to(out, stream);
  out += R"(","line":")";
  json_escape_to(out, line);
  out += partial ? R"(","partial":true})" : R"("})";
  return out;
}

}  // namespace recycler::control
