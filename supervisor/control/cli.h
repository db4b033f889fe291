// The control commands of recycler's command line (client.h does the work):
//   recycler status [PROGRAM...]        recycler restart|stop|start TARGET...
//   recycler recycle TARGET...          recycler signal TARGET... SIG
//   recycler reload                     recycler events [--follow]
//   recycler top [--interval S] [-n COUNT]
// TARGET is a program, or one slot of it: api, api:1. Each takes -c FILE or
// --socket PATH, and --json.
#pragma once

#include <CLI/CLI.hpp>
#include <memory>
#include <optional>

namespace recycler::control {

class Cli {
 public:
  // Adds the subcommands to `app`.
  explicit Cli(CLI::App& app);
  ~Cli();
  // The exit status of the control subcommand given, or nullopt when none was.
  std::optional<int> run() const;

 private:
  struct State;
  std::unique_ptr<State> s_;
};

}  // namespace recycler::control
