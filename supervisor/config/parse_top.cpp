// The top-level sections besides programs: log, cgroup_root, gpu, control
// and metrics. The control socket's directory and group are looked at on the
// host by check.cpp, from the Sites left here.
#include <sys/stat.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <csignal>
#include <iterator>

#include "supervisor/config/parse_util.h"

namespace recycler::config {
namespace detail {

void parse_log(const Field& f, LogConfig& log, Report& r) {
  auto map = read_map(f, r, kLogKeys);
  if (!map) return;
  if (auto* v = map->get("level")) set(log.level, read_choice(*v, kLogLevels, r));
  if (auto* v = map->get("format")) set(log.format, read_choice(*v, kLogFormats, r));
}

void parse_cgroup_root(const Field& f, std::string& root, Report& r) {
  auto text = read_scalar(f, "a string", r);
  if (!text) return;
  if (std::string why = cgroup_root_problem(*text); !why.empty())
    return r.error(f.mark(), f.path + ": " + why);
  root = *text;
}

// gpu: {nvml: PATH}; a bare `gpu:` turns GPU figures on with the default library.
void parse_gpu(const Field& f, const fs::path& base, std::optional<GpuConfig>& gpu, Report& r) {
  gpu.emplace();
  if (f.null()) return;
  auto map = read_map(f, r, kGpuKeys);
  if (!map) return;
  if (auto* v = map->get("nvml")) {
    auto text = read_scalar(*v, "a string", r);
    if (!text) return;
    if (text->empty()) return r.error(v->mark(), v->path + ": must not be empty");
    // A soname is searched like dlopen does; a relative path is the config's.
    if (text->find('/') == std::string::npos || fs::path(*text).is_absolute())
      gpu->nvml = *text;
    else
      gpu->nvml = (base / *text).lexically_normal().string();
  }
}

namespace {

void parse_control_mode(const Field& v, ControlConfig& control, Report& r) {
  auto text = read_scalar(v, "an octal mode such as 0600", r);
  if (!text) return;
  bool octal = octal_mode(*text);
  mode_t mode = octal ? static_cast<mode_t>(std::stoul(*text, nullptr, 8)) : 0;
  if (!octal)
    r.error(v.mark(), v.path + ": expected an octal mode such as 0600, got " + quote(*text));
  else if (mode & 0117)
    r.error(v.mark(), v.path + ": " + quote(*text) +
                          " would let others connect or mark the socket executable; use "
                          "0600, or 0660 with a group");
  else if ((mode & 0600) != 0600)
    r.error(v.mark(), v.path + ": " + quote(*text) + " must give its owner read and write");
  else
    control.mode = mode;
}

}  // namespace

// control: {socket: PATH, mode: 0660, group: NAME}
void parse_control(const Field& f, const fs::path& base, ControlConfig& control,
                   ControlSites& sites, Report& r) {
  if (f.null()) return;
  auto map = read_map(f, r, kControlKeys);
  if (!map) return;
  if (auto* v = map->get("socket")) {
    auto text = read_scalar(*v, "a path", r);
    if (text && text->empty()) {
      r.error(v->mark(), v->path + ": must not be empty");
    } else if (text && text->find('\0') != std::string::npos) {
      r.error(v->mark(), v->path + ": must not contain a NUL byte");
    } else if (text) {
      control.socket =
          fs::path(*text).is_absolute() ? *text : (base / *text).lexically_normal().string();
      sites.socket = Site{v->path, v->mark(), r.reserve(), {}};
    }
  }
  if (auto* v = map->get("mode")) parse_control_mode(*v, control, r);
  if (auto* v = map->get("group")) {
    if (auto name = read_scalar(*v, "a group name", r))
      sites.group = Site{v->path, v->mark(), r.reserve(), *name};
  }
}

// metrics: {listen: HOST:PORT}; a bare `metrics:` listens on the default.
void parse_metrics(const Field& f, std::optional<MetricsConfig>& metrics, Report& r) {
  metrics.emplace();
  if (f.null()) return;
  auto map = read_map(f, r, kMetricsKeys);
  if (!map) return;
  if (auto* v = map->get("listen")) {
    auto text = read_scalar(*v, "HOST:PORT", r);
    if (!text) return;
    std::string why;
    if (auto address = parse_listen_address(*text, &why))
      metrics->listen = *address;
    else
      r.error(v->mark(), v->path + ": " + why);
  }
}

// preempt: {signal: USR1, deadline: 90s, then: exit|requeue, exit_code: N}
void parse_preempt(const Field& f, std::optional<PreemptConfig>& preempt, Report& r) {
  preempt.emplace();
  if (f.null()) return;
  auto map = read_map(f, r, kPreemptKeys);
  if (!map) return;
  if (auto* v = map->get("signal")) {
    std::optional<int> sig = read_signal(*v, r);
    // recycler's own: HUP reloads, CHLD reaps, PIPE is ignored (a closed
    // client must not preempt anything); KILL and STOP cannot be caught; a
    // fault signal (SEGV, BUS, ...) is the kernel's, not a scheduler's.
    static constexpr int kRefused[] = {SIGHUP, SIGCHLD, SIGPIPE, SIGKILL, SIGSTOP, SIGSEGV,
                                       SIGBUS, SIGFPE,  SIGILL,  SIGABRT, SIGTRAP, SIGSYS};
    if (sig && std::find(std::begin(kRefused), std::end(kRefused), *sig) != std::end(kRefused))
      r.error(v->mark(), v->path + ": " + units::signal_name(*sig) +
                             " cannot be the preemption signal (recycler reloads on SIGHUP, "
                             "reaps on SIGCHLD, ignores SIGPIPE, cannot catch SIGKILL or "
                             "SIGSTOP, and leaves fault signals to the kernel); Slurm's usual "
                             "choice is USR1 (sbatch --signal=B:USR1@90)");
    else
      set(preempt->signal, sig);
  }
  if (auto* v = map->get("deadline"))
    set(preempt->deadline,
        read_positive_duration(*v, r,
                               ": the time from the signal to the end of the job, as sbatch "
                               "--signal=B:SIG@T gives it"));
  if (auto* v = map->get("then")) set(preempt->then, read_choice(*v, kPreemptThens, r));
  if (auto* v = map->get("exit_code")) {
    if (auto code = fields::read_integer(*v, 0, 255, r))
      preempt->exit_code = static_cast<int>(*code);
  }
}

// exit: {when: all_exited | any_failed | never}
void parse_exit(const Field& f, ExitConfig& exit, Report& r) {
  auto map = read_map(f, r, kExitKeys);
  if (!map) return;
  if (auto* v = map->get("when")) set(exit.when, read_choice(*v, kExitWhens, r));
}

namespace {

// "512MiB", or "90%" of the scope's capacity.
std::optional<BudgetLimit> read_budget_limit(const Field& f, Report& r) {
  auto text = read_scalar(f, "a size or a percentage", r);
  if (!text) return std::nullopt;
  if (text->ends_with('%')) {
    auto pct = read_percent(f, *text, r);
    if (!pct) return std::nullopt;
    return BudgetLimit{0, *pct};
  }
  auto bytes = read_size(f, r);
  if (!bytes) return std::nullopt;
  if (*bytes == 0) {
    r.error(f.mark(), f.path + " must be greater than 0");
    return std::nullopt;
  }
  return BudgetLimit{*bytes, std::nullopt};
}

// After scope: rss, pss and uss are the workers' processes' alone.
void read_budget_metric(const Field& v, BudgetConfig& b, Report& r) {
  static constexpr std::string_view kMetrics[] = {"current", "anon", "rss", "pss", "uss"};
  auto m = read_choice(v, kMetrics, r);
  if (!m) return;
  if (*m != "current" && *m != "anon" && b.scope != BudgetScope::Workers)
    r.error(v.mark(), v.path + ": " + *m +
                          " is summed over the workers' processes: "
                          "scope: workers only (the host and a container have current "
                          "and anon)");
  else
    b.metric = *m;
}

// pressure: {some_avg10|full_avg10, for}: exactly one of the two thresholds.
void parse_budget_pressure(const Field& p, BudgetConfig& b, Report& r) {
  auto pm = read_map(p, r, kBudgetPressureKeys);
  if (!pm) return;
  const Field* some = pm->get("some_avg10");
  const Field* full = pm->get("full_avg10");
  if (some && full)
    return r.error(full->mark(), full->path + ": give some_avg10 or full_avg10, not both");
  if (!some && !full)
    return r.error(p.mark(), p.path +
                                 ": needs some_avg10 or full_avg10, e.g. "
                                 "pressure: {some_avg10: 20%, for: 30s}");
  const Field* v = some ? some : full;
  auto text = read_scalar(*v, "a percentage", r);
  if (!text) return;
  auto pct = read_percent(*v, *text, r);
  if (!pct) return;
  BudgetPressure pressure;
  pressure.full = full != nullptr;
  pressure.percent = *pct;
  if (auto* d = pm->get("for")) set(pressure.held, read_duration(*d, r));
  b.pressure = pressure;
}

}  // namespace

// "20%" or 20: a share in (0, 100].
std::optional<double> read_percent(const Field& f, std::string text, Report& r) {
  const std::string written = text;
  if (text.ends_with('%')) text.pop_back();
  double v = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  bool plain = !text.empty() && text.find_first_not_of("0123456789.") == std::string::npos;
  if (!plain || ec != std::errc() || end != text.data() + text.size() || !(v > 0) || v > 100) {
    r.error(f.mark(), f.path + ": invalid percentage " + quote(written) +
                          ": expected a number above 0 and at most 100, e.g. " + quote("20%"));
    return std::nullopt;
  }
  return v;
}

// budget: {scope, metric, limit, for, pressure: {some_avg10|full_avg10, for},
//          horizon, window, warmup, choose, growth_window, cooldown, interval}
void parse_budget(const Field& f, const fs::path& base, std::optional<BudgetConfig>& budget,
                  Report& r) {
  budget.emplace();
  BudgetConfig& b = *budget;
  auto map = read_map(f, r, kBudgetKeys);
  if (!map) {
    if (f.null())
      r.error(f.mark(), f.path +
                            ": needs a limit, a pressure threshold or both, e.g. "
                            "budget: {limit: 90%, pressure: {some_avg10: 20%}}");
    return;
  }
  if (auto* v = map->get("scope")) set(b.scope, read_choice(*v, kBudgetScopes, r));
  if (auto* v = map->get("metric")) read_budget_metric(*v, b, r);
  if (auto* v = map->get("limit")) b.limit = read_budget_limit(*v, r);
  if (auto* v = map->get("for")) set(b.held, read_duration(*v, r));
  if (auto* p = map->find("pressure")) parse_budget_pressure(*p, b, r);
  if (auto* v = map->get("horizon")) {
    b.horizon = read_positive_duration(*v, r, ": how far ahead the trend is projected");
    if (!map->get("limit"))
      r.error(v->mark(), v->path + ": a projection needs a limit to reach: set budget.limit");
  }
  if (auto* v = map->get("window")) set(b.window, read_positive_duration(*v, r));
  if (auto* v = map->get("warmup")) set(b.warmup, read_duration(*v, r));
  if (auto* v = map->get("choose")) set(b.choose, read_choice(*v, kBudgetChooses, r));
  if (auto* v = map->get("growth_window")) set(b.growth_window, read_positive_duration(*v, r));
  if (auto* v = map->get("cooldown")) set(b.cooldown, read_duration(*v, r));
  if (auto* v = map->get("interval")) set(b.interval, read_positive_duration(*v, r));
  if (auto* v = map->find("timeline")) parse_timeline(*v, base, b.timeline, r);
  if (!map->find("limit") && !map->find("pressure"))
    r.error(f.mark(), f.path +
                          ": needs a limit, a pressure threshold or both, e.g. "
                          "budget: {limit: 90%, pressure: {some_avg10: 20%}}");
}

}  // namespace detail

namespace {

bool cgroup_char(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || detail::one_of(c, "_.@/-");
}

}  // namespace

// The root ends up in paths handed to the kernel, so nothing that could
// climb out of the intended subtree or name the same directory twice.
std::string cgroup_root_problem(std::string_view text) {
  using units::quote;
  if (text.empty()) return "must not be empty";
  auto bad = std::find_if_not(text.begin(), text.end(), cgroup_char);
  if (bad != text.end())
    return "invalid character " + quote(std::string(1, *bad)) + " in " + quote(text) +
           "; use letters, digits and _ . @ / -";
  std::string_view rest = text;
  if (rest.front() == '/') rest.remove_prefix(1);
  while (true) {
    size_t slash = rest.find('/');
    std::string_view part = rest.substr(0, slash);
    if (part.empty()) return "empty path component in " + quote(text);
    if (part == "." || part == "..") return "\".\" and \"..\" are not allowed in " + quote(text);
    if (slash == std::string_view::npos) break;
    rest.remove_prefix(slash + 1);
  }
  return "";
}

}  // namespace recycler::config
