// The environment of one start of a worker slot: what it inherits, what its
// program sets, and recycler's own variables (RECYCLER_*, NOTIFY_SOCKET,
// LISTEN_FDS). Pure: the same inputs give the same environment.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "supervisor/config/config.h"
#include "supervisor/process/listen.h"

namespace recycler {

// Why a start follows a recycle, for the replacement's environment.
struct RecycleCause {
  std::string reason;   // RECYCLER_RECYCLE_REASON: "anon 612 MiB > 600 MiB (memory policy)"
  bool resume = false;  // RECYCLER_RESUME=1: the worker confirmed a checkpoint before it stopped
};

// The environment of one start of a slot: base, then the program's env, then
// the thread-count variables (unless env sets them), then RECYCLER_* (with
// RECYCLER_RECYCLE_REASON and RECYCLER_RESUME only after a recycle: never
// inherited from recycler's own environment).
// With `sockets` (listen:), LISTEN_FDS and LISTEN_FDNAMES (spawn adds
// LISTEN_PID in the child); never inherited from recycler's environment.
// `devices:` sets the slot's CUDA_VISIBLE_DEVICES and the frameworks'
// variables (config/devices.h) unless env sets them; `gpus_auto` is what
// `gpus: auto` shares out (runtime/gpu_pool.h).
std::vector<std::string> worker_environment(const std::vector<std::string>& base,
                                            const config::ProgramConfig& program, unsigned slot,
                                            unsigned generation,
                                            const std::string& notify_socket = "",
                                            const std::optional<RecycleCause>& cause = {},
                                            const listen::Set* sockets = nullptr,
                                            const std::vector<std::string>& gpus_auto = {});

}  // namespace recycler
