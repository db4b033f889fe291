#include "supervisor/worker/environment.h"

#include <chrono>
#include <map>

#include "supervisor/config/allocator.h"
#include "supervisor/config/devices.h"

namespace recycler {

namespace {
// A gang's ranks, as torchrun gives them (torch.distributed's env://), unless
// the program's env: sets them.
void add_gang(const config::GangConfig& gang, const config::ProgramConfig& program, unsigned slot,
              std::map<std::string, std::string>& env) {
  auto set = [&](const char* var, std::string value) {
    if (!program.env.count(var)) env[var] = std::move(value);
  };
  set("RANK", std::to_string(slot));
  set("LOCAL_RANK", std::to_string(slot));
  set("WORLD_SIZE", std::to_string(program.instances));
  set("LOCAL_WORLD_SIZE", std::to_string(program.instances));
  if (gang.master) {
    set("MASTER_ADDR", gang.master->host);
    set("MASTER_PORT", std::to_string(gang.master->port));
  }
}
}  // namespace

std::vector<std::string> worker_environment(const std::vector<std::string>& base,
                                            const config::ProgramConfig& program, unsigned slot,
                                            unsigned generation, const std::string& notify_socket,
                                            const std::optional<RecycleCause>& cause,
                                            const listen::Set* sockets,
                                            const std::vector<std::string>& gpus_auto) {
  std::map<std::string, std::string> env;
  for (const std::string& kv : base) {
    size_t eq = kv.find('=');
    if (eq != std::string::npos) env[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  // A recycler run as another recycler's worker must not pass its own on.
  env.erase("RECYCLER_RESUME");
  env.erase("RECYCLER_RECYCLE_REASON");
  env.erase(config::kRequestsBatchBelowVar);
  for (const auto& [k, v] : program.env) env[k] = v;
  if (program.threads) {
    for (const char* var : config::kThreadEnvVars)
      if (!program.env.count(var)) env[var] = std::to_string(*program.threads);
  }
  config::apply_allocator(program.allocator, program.env, env);
  if (program.gang) add_gang(*program.gang, program, slot, env);
  config::apply_devices(program.devices, program.env, slot, gpus_auto, env);
  env["RECYCLER_PROGRAM"] = program.name;
  env["RECYCLER_SLOT"] = std::to_string(slot);
  env["RECYCLER_GENERATION"] = std::to_string(generation);
  // sd_notify(3) senders (READY=1, STATUS=...) and RECYCLER_REQUESTS=N reach recycler.
  if (!notify_socket.empty()) env["NOTIFY_SOCKET"] = notify_socket;
  // How many requests each process may report in batches, not one by one.
  if (!program.env.count(config::kRequestsBatchBelowVar)) {
    auto below = program.requests_batch_below();
    env[config::kRequestsBatchBelowVar] = below ? std::to_string(*below) : "unlimited";
  }
  if (cause) {
    env["RECYCLER_RECYCLE_REASON"] = cause->reason;
    if (cause->resume)
      env["RECYCLER_RESUME"].assign(1, '1');  // not = "1": GCC 12 -O3 -Wrestrict false positive
  }
  // As systemd gives a service with WatchdogSec=: the interval, and (spawn
  // writes it in the child) the pid that is to send WATCHDOG=1.
  if (program.watchdog_timeout && !program.env.count("WATCHDOG_USEC"))
    env["WATCHDOG_USEC"] = std::to_string(
        std::chrono::duration_cast<std::chrono::microseconds>(*program.watchdog_timeout).count());
  env.erase("WATCHDOG_PID");
  // The signal diagnose: sends, for the Python helper to dump every thread's
  // stack on (faulthandler); never a recycler's own, inherited.
  env.erase("RECYCLER_DIAGNOSE_SIGNAL");
  if (program.diagnose && program.diagnose->signal)
    env["RECYCLER_DIAGNOSE_SIGNAL"] = std::to_string(*program.diagnose->signal);
  for (const char* var : {"LISTEN_FDS", "LISTEN_PID", "LISTEN_FDNAMES"}) env.erase(var);
  if (sockets)
    for (auto& [k, v] : sockets->environment()) env[k] = v;
  std::vector<std::string> out;
  out.reserve(env.size());
  for (const auto& [k, v] : env) out.push_back(k + "=" + v);
  return out;
}

}  // namespace recycler
