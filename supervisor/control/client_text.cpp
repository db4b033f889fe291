// The text the client makes of the supervisor's JSON answers: the lines
// under the status table (a gang's recycles, the budget, the container) and
// an event as recycler's log writes it. Pure formatting, kept apart from
// client.cpp's sockets and terminal handling.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <ctime>

#include "policies/base/escape.h"
#include "policies/base/units.h"
#include "supervisor/control/client_internal.h"

namespace recycler::control::detail {

// Below the table, each gang program's recycles (its ranks', together).
std::string gang_lines(const Json& j) {
  auto member = [](const Json& o, const char* key) -> const Json* {
    if (!o.is_object()) return nullptr;
    auto it = o.find(key);
    return it == o.end() ? nullptr : &*it;
  };
  std::string out;
  const Json* s = member(j, "supervisor");
  const Json* programs = s ? member(*s, "programs") : nullptr;
  if (!programs || !programs->is_array()) return out;
  for (const Json& p : *programs) {
    const Json* g = member(p, "gang");
    const Json* name = member(p, "name");
    const Json* instances = member(p, "instances");
    const Json* n = g ? member(*g, "recycles") : nullptr;
    const Json* last = g ? member(*g, "last_reason") : nullptr;
    if (!name || !name->is_string() || !n || !n->is_number_unsigned() || !instances ||
        !instances->is_number_unsigned())
      continue;
    uint64_t count = n->get<uint64_t>();
    out += fmt::format(
        "{}: gang of {} ranks, {} recycle{} together{}\n", escape_text(name->get<std::string>()),
        instances->get<uint64_t>(), count, count == 1 ? "" : "s",
        last && last->is_string() ? "; last: " + escape_text(last->get<std::string>())
                                  : std::string());
  }
  return out;
}

// Below the table, the top-level budget (config budget:), when there is one:
// "budget: workers current 310 MiB of 400 MiB, +38 MiB/min, at the limit in
// 2m; ok; 1 recycle, the last 45s ago: ..."
std::string budget_line(const Json& j) {
  auto member = [](const Json& o, const char* key) -> const Json* {
    if (!o.is_object()) return nullptr;
    auto it = o.find(key);
    return it == o.end() || it->is_null() ? nullptr : &*it;
  };
  const Json* s = member(j, "supervisor");
  const Json* b = s ? member(*s, "budget") : nullptr;
  if (!b) return "";
  auto str = [&](const char* key) {
    const Json* v = member(*b, key);
    return v && v->is_string() ? escape_text(v->get<std::string>()) : std::string();
  };
  auto num = [&](const char* key) -> std::optional<double> {
    const Json* v = member(*b, key);
    if (!v || !v->is_number()) return std::nullopt;
    return v->get<double>();
  };
  auto size = [](std::optional<double> v) {
    return v ? units::format_size(static_cast<uint64_t>(std::max(0.0, *v))) : std::string("-");
  };
  std::string out = "budget: " + str("scope") + " " + str("metric") + " " + size(num("used_bytes"));
  if (auto limit = num("limit_bytes")) out += " of " + size(limit);
  if (auto slope = num("slope_bytes_per_s"))
    out += fmt::format(", {}{}/min", *slope < 0 ? "-" : "+", size(std::abs(*slope) * 60));
  if (auto eta = num("crosses_in_s"))
    out += ", at the limit in " + units::format_duration(std::chrono::duration_cast<Duration>(
                                      std::chrono::seconds(static_cast<int64_t>(*eta))));
  if (auto p = num("pressure"))
    out += fmt::format(", pressure {} {:.1f}%", str("pressure_kind"), *p);
  out += "; " + str("state");
  const Json* n = member(*b, "recycles");
  uint64_t count = n && n->is_number_unsigned() ? n->get<uint64_t>() : 0;
  out += fmt::format("; {} recycle{}", count, count == 1 ? "" : "s");
  if (auto ago = num("last_ago_s"))
    out += ", the last " +
           units::format_duration(std::chrono::duration_cast<Duration>(
               std::chrono::seconds(static_cast<int64_t>(*ago)))) +
           " ago: " + str("last_choice");
  return out + "\n";
}

// Below the table, the container recycler runs in, when it has a memory
// limit: "container: 312 MiB of 512 MiB, 0 OOM kills, pressure 0.0%".
std::string container_line(const Json& j) {
  const Json* c = nullptr;
  if (j.is_object() && j.contains("supervisor") && j["supervisor"].is_object() &&
      j["supervisor"].contains("container"))
    c = &j["supervisor"]["container"];
  if (!c || !c->is_object()) return "";
  auto num = [&](const char* key) -> std::optional<double> {
    auto it = c->find(key);
    if (it == c->end() || !it->is_number()) return std::nullopt;
    return it->get<double>();
  };
  auto size = [](std::optional<double> v) {
    return v ? units::format_size(static_cast<uint64_t>(std::max(0.0, *v))) : std::string("-");
  };
  std::string out = "container: " + size(num("current_bytes")) + " of " + size(num("limit_bytes"));
  if (auto kills = num("oom_kills"))
    out += fmt::format(", {} OOM kill{}", *kills, *kills == 1 ? "" : "s");
  if (auto p = num("pressure")) out += fmt::format(", pressure {:.1f}%", *p);
  return out + "\n";
}

// An event's or output line's time ("2026-11-28T05:32:08.123Z") as recycler's
// own log writes its lines: "2026-11-28 05:32:08.123", local time.
std::string log_time(const Json& e) {
  std::string iso = e.value("time", std::string());
  std::tm tm{};
  const char* rest = ::strptime(iso.c_str(), "%Y-%m-%dT%H:%M:%S", &tm);
  if (!rest || iso.back() != 'Z') return escape_text(iso);
  std::time_t t = ::timegm(&tm);
  std::tm local{};
  ::localtime_r(&t, &local);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S", &local);
  std::string ms =
      *rest == '.' ? std::string(rest + 1, std::min<size_t>(3, std::strlen(rest + 1))) : "000";
  return std::string(buf) + "." + escape_text(ms);
}

// The log's text style: time, the level padded to 7, the message.
std::string event_text(const Json& e) {
  std::string level = escape_text(e.value("level", std::string()));
  level.resize(std::max<size_t>(level.size(), 7), ' ');
  return log_time(e) + " " + level + " " + escape_text(e.value("event", std::string())) + ": " +
         escape_text(e.value("msg", std::string()));
}

}  // namespace recycler::control::detail
