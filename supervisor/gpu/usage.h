// Whose GPU memory is it: a Snapshot (gpu/nvml.h) attributed to one worker's
// processes. Pure, apart from reading NSpid from a proc root.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <span>
#include <string>

#include "supervisor/gpu/nvml.h"

namespace recycler::gpu {

// A worker's (or one process's) GPU figures, bytes.
struct Usage {
  // On the device where it holds the most (a device runs out on its own),
  // and that device's total: what `limit: 90%` of metric gpu is a share of.
  std::optional<uint64_t> gpu, gpu_capacity;
  // Summed over devices, and the totals of the devices it holds memory on.
  std::optional<uint64_t> gpu_total, gpu_total_capacity;
};

// The usage of the processes `pids` (as NVML numbers them: host pids, see
// host_pid). A process NVML does not list holds nothing: 0 bytes. Empty
// figures when they cannot be known: the snapshot is incomplete, or NVML
// lists one of these processes without its figure, or `host_hidden` (the
// host's pids cannot be seen from here: a pod) and NVML lists any process
// at all, which may be one of these under a number recycler cannot map: an
// unknown figure, never a 0 a policy would read as healthy.
Usage attribute(const Snapshot& snapshot, std::span<const pid_t> pids, bool host_hidden = false);

// The usage of whole GPUs (NVML's indexes `devices`, a slot's
// CUDA_VISIBLE_DEVICES) from their used memory, every process's: what stands
// in for a worker's own figure where its pids cannot be mapped (a pod) and
// the GPUs are its alone. Empty figures when the snapshot is incomplete or
// does not have each of them as a whole GPU.
Usage attribute_devices(const Snapshot& snapshot, std::span<const unsigned> devices);

// The pid NVML reports for `pid`: NVML numbers processes in the host's pid
// namespace. When recycler runs in a container whose /proc shows the outer
// namespaces too, /proc/PID/status's NSpid lists the pid from the outermost
// visible namespace first; that is the one. `pid` itself when NSpid has one
// entry (no nesting visible) or cannot be read. `proc_dirfd`: an O_PATH fd
// of the proc root.
pid_t host_pid(int proc_dirfd, pid_t pid);

// Whether processes under this proc root can be in a nested pid namespace
// that it shows (NSpid of `self` with more than one entry): only then is
// host_pid worth a read per process.
bool nested_pid_namespace(int proc_dirfd, pid_t self);

// Whether this proc root shows the host's pid namespace: the kernel's own
// threads (kthreadd, pid 2) are visible only there. False in a container's
// pid namespace (a pod), where NVML's host pids name nothing recycler sees.
bool host_pid_namespace(int proc_dirfd);

}  // namespace recycler::gpu
