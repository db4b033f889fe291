// What `recycler status` and `recycler top` print: aligned columns, one line
// per worker slot, like `supervisorctl status` or `pm2 ls`. Pure: figures in,
// text out; every text that came from a worker or a file is escaped.
#pragma once

#include <string>
#include <vector>

#include "supervisor/control/status.h"

namespace recycler::control {

// "3d4h", "2h5m", "4m12s", "12s"; "-" below 0.
std::string format_uptime(double seconds);
// "+12 MiB/min, limit in 1h4m" of the first outlook; "-" when none.
std::string format_outlook(const WorkerStatus& w);
// "uss 150 MiB largest, 408 MiB sum" where a policy watches each process,
// else "anon 120 MiB"; "-" when unknown.
std::string format_memory(const WorkerStatus& w);
// "200 MiB each" for a per-process limit, "512 MiB", or "-".
std::string format_limit(const WorkerStatus& w);
// The table: a header, then one line per slot, in the order given; with
// `processes`, each slot's processes on lines of their own beneath it (a
// pre-fork server under scope: process). Then, for each slot whose run said
// something with STATUS=, a line "api[0] status: TEXT".
std::string status_table(const std::vector<WorkerStatus>& workers, bool processes = false);
// Slots sorted by the figure their policies watch, largest first (top).
std::vector<WorkerStatus> by_memory(std::vector<WorkerStatus> workers);
// Exit status of `recycler status`: 0 when every slot runs, else 3.
int status_exit_code(const std::vector<WorkerStatus>& workers);

}  // namespace recycler::control
