// GPU memory per process, from NVIDIA's NVML, loaded with dlopen only when a
// config asks for it (a policy with metric gpu or gpu_total, or a top-level
// `gpu:` section): recycler neither links against nor ships NVML.
//
// The library needs only nvmlInit_v2, nvmlShutdown, nvmlErrorString,
// nvmlDeviceGetCount_v2, nvmlDeviceGetHandleByIndex_v2,
// nvmlDeviceGetMemoryInfo and nvmlDeviceGetComputeRunningProcesses_v3; the
// MIG functions (nvmlDeviceGetMigMode, nvmlDeviceGetMaxMigDeviceCount,
// nvmlDeviceGetMigDeviceHandleByIndex) are used when present, so that a
// MIG-enabled GPU is read instance by instance (each instance is its own
// memory, and only there does NVML report per-process figures).
//
// A query blocks (milliseconds per device on real drivers): the runtime runs
// it off the loop thread (gpu/sampler.h), once per interval for all workers.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "supervisor/util/result.h"

namespace recycler::gpu {

// The soname looked up on the normal search path (LD_LIBRARY_PATH works).
inline constexpr const char* kDefaultLibrary = "libnvidia-ml.so.1";

// One memory pool: a GPU, or one MIG instance of it.
struct Device {
  unsigned index = 0;  // NVML's device index
  int instance = -1;   // MIG instance (position), -1: the whole GPU
  uint64_t total = 0;  // bytes
  uint64_t used = 0;   // bytes, by every process on it (what nvidia-smi shows)
  // NVML lists processes here but cannot say how much each holds (a MIG
  // parent read without the MIG functions, or a driver that does not know).
  bool per_process_unavailable = false;
  std::string label() const;  // "GPU 0", "GPU 0 MIG 2"
};

// What one process holds on one device.
struct ProcessUse {
  pid_t pid = 0;                  // as NVML reports it: a pid of the host's pid namespace
  size_t device = 0;              // index into Snapshot::devices
  std::optional<uint64_t> bytes;  // empty: NVML_VALUE_NOT_AVAILABLE
};

// Every device and every process using one, at one moment.
struct Snapshot {
  std::vector<Device> devices;
  std::vector<ProcessUse> uses;
  // A device whose process list could not be read: nobody's figure is known.
  bool complete = true;
  // Why not, or what else is worth saying once ("GPU 1: MIG is enabled ...").
  std::vector<std::string> notes;
};

class Nvml {
 public:
  // Loads `path` (a soname searched the usual way, or a path), resolves the
  // functions above and initialises NVML. The error says which step failed.
  // A path is loaded only if util/safe_dir.h's open_trusted_file accepts it
  // (no other user could have written the file or a directory on its way):
  // loading runs the library's code as recycler's user. `check` and
  // `replay` never load it (config/host.h's nvml_error looks without).
  static Result<std::unique_ptr<Nvml>> open(const std::string& path = kDefaultLibrary);
  ~Nvml();
  Nvml(const Nvml&) = delete;
  Nvml& operator=(const Nvml&) = delete;

  // Reads every device's memory and processes. Blocks; call from one thread
  // at a time. After the driver went away (GPU lost, not initialised) the
  // next query initialises NVML again first.
  Result<Snapshot> query();

  // How many GPUs the driver sees (nvmlDeviceGetCount_v2; a MIG-enabled GPU
  // counts once): what `devices: {gpus: auto}` shares out. Blocks, as
  // query() does.
  Result<unsigned> device_count();

  bool has_mig() const;

  // Process lists are read into a buffer that grows when NVML says the list
  // is longer (it changes between calls): at most this many tries...
  static constexpr int kMaxTries = 6;
  // ...and at most this many processes per device.
  static constexpr unsigned kMaxProcesses = 1u << 16;

  struct Api;  // the resolved functions

 private:
  explicit Nvml(void* handle);
  void* handle_ = nullptr;
  std::unique_ptr<Api> api_;
  bool initialised_ = false;
  unsigned capacity_ = 64;  // the last list size that was enough, per call
};

}  // namespace recycler::gpu
