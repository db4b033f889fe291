#include "supervisor/control/cli.h"

#include "supervisor/control/client.h"

namespace recycler::control {

struct Cli::State {
  ClientOptions options;
  std::vector<std::string> names;
  bool follow = false;
  double interval = 2.0;
  unsigned count = 0;
  size_t lines = kDefaultLogLines;
  std::optional<size_t> events_lines;
  CLI::App* status = nullptr;
  CLI::App* logs = nullptr;
  CLI::App* reload = nullptr;
  CLI::App* events = nullptr;
  CLI::App* top = nullptr;
  CLI::App* signal = nullptr;
  std::vector<std::pair<CLI::App*, Command>> actions;
};

namespace {
void add_common(CLI::App* cmd, ClientOptions& o) {
  cmd->add_option("-c,--config", o.config_file,
                  "The config file of the recycler to ask (finds its control socket; without "
                  "-c or --socket: the one recycler running)");
  cmd->add_option("--socket", o.socket, "The control socket to ask");
  cmd->add_flag("--json", o.json, "Print JSON instead of text");
}
}  // namespace

Cli::Cli(CLI::App& app) : s_(std::make_unique<State>()) {
  State& s = *s_;
  s.status = app.add_subcommand(
      "status",
      "One line per worker slot of a running recycler (exit 0: all running, 3: not, "
      "4: no recycler answers)");
  add_common(s.status, s.options);
  s.status->add_option("programs", s.names, "Only these programs (or slots: api:1)");
  for (auto [name, command, help] :
       {std::tuple{"start", Command::Start, "Start stopped worker slots"},
        std::tuple{"stop", Command::Stop, "Stop worker slots (recycler keeps running)"},
        std::tuple{"restart", Command::Restart, "Stop, then start worker slots"},
        std::tuple{"recycle", Command::Recycle,
                   "Recycle worker slots the way a policy would (queue, checkpoint)"}}) {
    CLI::App* cmd = app.add_subcommand(name, help);
    add_common(cmd, s.options);
    cmd->add_option("targets", s.names, "Programs, or slots of them: api, api:1")->required();
    s.actions.emplace_back(cmd, command);
  }
  s.signal = app.add_subcommand("signal", "Send a signal to the main process of worker slots");
  add_common(s.signal, s.options);
  s.signal->add_option("targets", s.names, "Programs, or slots of them, then the signal: api HUP")
      ->required()
      ->expected(2, -1);
  s.reload = app.add_subcommand(
      "reload", "Reload the config file of a running recycler: what changed, or every error");
  add_common(s.reload, s.options);
  s.events = app.add_subcommand("events", "Recent decisions and lifecycle events");
  add_common(s.events, s.options);
  s.events->add_flag("-f,--follow", s.follow, "Then print live events as they come");
  s.events
      ->add_option("-n,--lines", s.events_lines,
                   "Only the last this many (default: all recycler keeps, " +
                       std::to_string(kEventRingSize) + ")")
      ->check(CLI::Range(size_t{0}, kEventRingSize));
  s.logs = app.add_subcommand(
      "logs", "What worker slots wrote lately (a ring of their last lines in recycler)");
  add_common(s.logs, s.options);
  s.logs->add_option("targets", s.names, "Programs, or slots of them: api, api:1")->required();
  s.logs->add_option("-n,--lines", s.lines, "Lines of each slot to show first")
      ->check(CLI::Range(size_t{0}, kLogRingLines))
      ->capture_default_str();
  s.logs->add_flag("-f,--follow", s.follow, "Then print what they write, as they write it");
  s.top = app.add_subcommand(
      "top",
      "A live view of the workers, largest memory first, with the processes of each (q quits)");
  add_common(s.top, s.options);
  s.top->add_option("--interval", s.interval, "Seconds between refreshes")
      ->check(CLI::Range(0.1, 3600.0))
      ->capture_default_str();
  s.top->add_option("-n,--count", s.count, "Stop after this many refreshes (default: never)");
}

Cli::~Cli() = default;

std::optional<int> Cli::run() const {
  const State& s = *s_;
  if (*s.status) return status_command(s.options, s.names);
  for (const auto& [cmd, command] : s.actions)
    if (*cmd) return action_command(s.options, command, s.names);
  if (*s.signal) {
    std::vector<std::string> targets(s.names.begin(), s.names.end() - 1);
    return action_command(s.options, Command::Signal, targets, s.names.back());
  }
  if (*s.reload) return reload_command(s.options);
  if (*s.events) return events_command(s.options, s.follow, s.events_lines);
  if (*s.logs) return logs_command(s.options, s.names, s.lines, s.follow);
  if (*s.top) return top_command(s.options, s.interval, s.count);
  return std::nullopt;
}

}  // namespace recycler::control
