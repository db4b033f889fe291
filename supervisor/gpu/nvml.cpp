#include "supervisor/gpu/nvml.h"

#include <dlfcn.h>

#include <algorithm>
#include <utility>

#include "supervisor/gpu/nvml_api.h"
#include "supervisor/util/fd.h"
#include "supervisor/util/safe_dir.h"

namespace recycler::gpu {

struct Nvml::Api {
  nvmlInit_v2_fn init = nullptr;
  nvmlShutdown_fn shutdown = nullptr;
  nvmlErrorString_fn error_string = nullptr;
  nvmlDeviceGetCount_v2_fn count = nullptr;
  nvmlDeviceGetHandleByIndex_v2_fn handle = nullptr;
  nvmlDeviceGetMemoryInfo_fn memory = nullptr;
  nvmlDeviceGetComputeRunningProcesses_v3_fn processes = nullptr;
  // Optional.
  nvmlDeviceGetMigMode_fn mig_mode = nullptr;
  nvmlDeviceGetMaxMigDeviceCount_fn mig_count = nullptr;
  nvmlDeviceGetMigDeviceHandleByIndex_fn mig_handle = nullptr;

  std::string what(const char* call, nvmlReturn_t r) const {
    const char* text = error_string ? error_string(r) : nullptr;
    return std::string(call) + ": " + (text ? text : "error") + " (" + std::to_string(r) + ")";
  }
};

namespace {

template <typename Fn>
bool resolve(void* handle, const char* name, Fn& fn, std::string& missing) {
  fn = reinterpret_cast<Fn>(::dlsym(handle, name));
  if (!fn) missing += (missing.empty() ? "" : ", ") + std::string(name);
  return fn != nullptr;
}

Result<void*> load(const std::string& path, Nvml::Api& api) {
  // A path is loaded only when no other user could have changed it (its
  // constructors run as recycler's user, often root), and through the fd
  // that was checked; a soname comes from the loader's own directories.
  std::string what = path;
  UniqueFd file;
  if (path.find('/') != std::string::npos) {
    auto trusted = open_trusted_file(path);
    if (!trusted) return Error{"cannot load NVML: " + trusted.error().message};
    file = std::move(*trusted);
    what = "/proc/self/fd/" + std::to_string(file.get());
  }
  ::dlerror();
  void* handle = ::dlopen(what.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    const char* why = ::dlerror();
    return Error{"cannot load NVML: " + (what == path ? std::string() : path + ": ") +
                 std::string(why ? why : path)};
  }
  std::string missing;
  resolve(handle, "nvmlInit_v2", api.init, missing);
  resolve(handle, "nvmlShutdown", api.shutdown, missing);
  resolve(handle, "nvmlErrorString", api.error_string, missing);
  resolve(handle, "nvmlDeviceGetCount_v2", api.count, missing);
  resolve(handle, "nvmlDeviceGetHandleByIndex_v2", api.handle, missing);
  resolve(handle, "nvmlDeviceGetMemoryInfo", api.memory, missing);
  resolve(handle, "nvmlDeviceGetComputeRunningProcesses_v3", api.processes, missing);
  if (!missing.empty()) {
    ::dlclose(handle);
    return Error{"NVML library " + path + " lacks " + missing +
                 " (a driver older than R470, or not NVML)"};
  }
  std::string optional;  // absent MIG functions are not an error
  resolve(handle, "nvmlDeviceGetMigMode", api.mig_mode, optional);
  resolve(handle, "nvmlDeviceGetMaxMigDeviceCount", api.mig_count, optional);
  resolve(handle, "nvmlDeviceGetMigDeviceHandleByIndex", api.mig_handle, optional);
  if (!api.mig_mode || !api.mig_count || !api.mig_handle)
    api.mig_mode = nullptr, api.mig_count = nullptr, api.mig_handle = nullptr;
  return handle;
}

// The driver itself is gone (or was never there): initialise again next time.
bool driver_lost(nvmlReturn_t r) {
  return r == NVML_ERROR_GPU_IS_LOST || r == NVML_ERROR_UNINITIALIZED ||
         r == NVML_ERROR_DRIVER_NOT_LOADED;
}

// A call that ends a query: the device count could not be read, or the
// driver went away.
struct FailedCall {
  const char* call;
  nvmlReturn_t r;
};

// One query under way: the functions, the buffer process lists are read into
// (reused from pool to pool) and what has been read so far.
struct Reading {
  const Nvml::Api& api;
  unsigned& capacity;  // Nvml's: the next query starts with what was enough
  std::vector<nvmlProcessInfo_t> infos;
  Snapshot snap;

  // `where` could not be read: nobody's figure is known, and the note says why.
  void skip(const std::string& where, const char* call, nvmlReturn_t r) {
    snap.complete = false;
    snap.notes.push_back(where + ": " + api.what(call, r));
  }
};

// The list changes between calls: grow the buffer to what NVML says it
// needs (plus room for newcomers) and ask again, a bounded number of times.
// The list is left in q.infos, its length in `n`.
nvmlReturn_t read_process_list(Reading& q, nvmlDevice_t h, unsigned& n) {
  nvmlReturn_t r = NVML_ERROR_INSUFFICIENT_SIZE;
  for (int tries = 0; tries < Nvml::kMaxTries && r == NVML_ERROR_INSUFFICIENT_SIZE; ++tries) {
    q.infos.resize(q.capacity);
    n = q.capacity;
    r = q.api.processes(h, &n, q.infos.data());
    if (r == NVML_ERROR_INSUFFICIENT_SIZE)
      q.capacity = std::min(Nvml::kMaxProcesses, std::max(n, q.capacity) + q.capacity / 2 + 8);
  }
  return r;
}

// The first `n` processes of q.infos, as uses of the device about to be added;
// whether NVML gave a figure for any of them.
bool add_uses(Reading& q, unsigned n) {
  size_t at = q.snap.devices.size();
  bool any_known = false;
  for (unsigned i = 0; i < n; ++i) {
    ProcessUse use{static_cast<pid_t>(q.infos[i].pid), at, std::nullopt};
    if (q.infos[i].usedGpuMemory != NVML_VALUE_NOT_AVAILABLE) {
      use.bytes = q.infos[i].usedGpuMemory;
      any_known = true;
    }
    q.snap.uses.push_back(use);
  }
  return any_known;
}

// Reads one pool's total and processes into q.snap, or skips it with a note.
// The call that said the driver is gone, if one did.
std::optional<FailedCall> read_pool(Reading& q, nvmlDevice_t h, Device device) {
  nvmlMemory_t memory{};
  if (nvmlReturn_t r = q.api.memory(h, &memory); r != NVML_SUCCESS) {
    if (driver_lost(r)) return FailedCall{"nvmlDeviceGetMemoryInfo", r};
    q.skip(device.label(), "nvmlDeviceGetMemoryInfo", r);
    return std::nullopt;
  }
  device.total = memory.total;
  device.used = memory.used;
  unsigned n = 0;
  if (nvmlReturn_t r = read_process_list(q, h, n); r != NVML_SUCCESS) {
    if (driver_lost(r)) return FailedCall{"nvmlDeviceGetComputeRunningProcesses_v3", r};
    q.skip(device.label(), "nvmlDeviceGetComputeRunningProcesses_v3", r);
    return std::nullopt;
  }
  n = std::min<unsigned>(n, static_cast<unsigned>(q.infos.size()));
  bool any_known = add_uses(q, n);
  device.per_process_unavailable = n > 0 && !any_known;
  q.snap.devices.push_back(device);
  return std::nullopt;
}

// How many MIG instance positions GPU `h` has; none when MIG is off there or
// cannot be asked about.
std::optional<unsigned> mig_positions(const Nvml::Api& api, nvmlDevice_t h) {
  unsigned current = 0, pending = 0;
  bool mig = api.mig_mode && api.mig_mode(h, &current, &pending) == NVML_SUCCESS &&
             current == NVML_DEVICE_MIG_ENABLE;
  unsigned mig_max = 0;
  if (!mig || api.mig_count(h, &mig_max) != NVML_SUCCESS) return std::nullopt;
  return mig_max;
}

// Each instance is its own memory; the parent would list its processes
// without figures.
std::optional<FailedCall> read_mig_instances(Reading& q, nvmlDevice_t h, unsigned i,
                                             unsigned positions) {
  for (unsigned k = 0; k < positions; ++k) {
    nvmlDevice_t instance = nullptr;
    nvmlReturn_t r = q.api.mig_handle(h, k, &instance);
    if (r == NVML_ERROR_NOT_FOUND) continue;  // no instance at this position
    if (r != NVML_SUCCESS) {
      if (driver_lost(r)) return FailedCall{"nvmlDeviceGetMigDeviceHandleByIndex", r};
      q.skip("GPU " + std::to_string(i) + " MIG " + std::to_string(k),
             "nvmlDeviceGetMigDeviceHandleByIndex", r);
      continue;
    }
    if (auto lost = read_pool(q, instance, Device{i, static_cast<int>(k)})) return lost;
  }
  return std::nullopt;
}

// Reads GPU `i`: the whole GPU, or instance by instance when MIG is on.
std::optional<FailedCall> read_device(Reading& q, unsigned i) {
  nvmlDevice_t h = nullptr;
  if (nvmlReturn_t r = q.api.handle(i, &h); r != NVML_SUCCESS) {
    if (driver_lost(r)) return FailedCall{"nvmlDeviceGetHandleByIndex_v2", r};
    q.skip("GPU " + std::to_string(i), "nvmlDeviceGetHandleByIndex_v2", r);
    return std::nullopt;
  }
  if (std::optional<unsigned> positions = mig_positions(q.api, h))
    return read_mig_instances(q, h, i, *positions);
  return read_pool(q, h, Device{i});
}

// Said once per query, for each device whose processes NVML lists without
// figures.
void note_unavailable_figures(Snapshot& snap, bool has_mig) {
  for (const Device& d : snap.devices)
    if (d.per_process_unavailable)
      snap.notes.push_back(d.label() + ": NVML lists processes but not their memory" +
                           (has_mig ? std::string()
                                    : " (with MIG enabled, per-process figures need the "
                                      "driver's MIG functions, which this library lacks)"));
}

}  // namespace

std::string Device::label() const {
  std::string out = "GPU " + std::to_string(index);
  if (instance >= 0) out += " MIG " + std::to_string(instance);
  return out;
}

Nvml::Nvml(void* handle) : handle_(handle), api_(std::make_unique<Api>()) {}

Nvml::~Nvml() {
  if (initialised_) api_->shutdown();
  if (handle_) ::dlclose(handle_);
}

Result<std::unique_ptr<Nvml>> Nvml::open(const std::string& path) {
  Api api;
  Result<void*> handle = load(path, api);
  if (!handle) return handle.error();
  std::unique_ptr<Nvml> nvml(new Nvml(*handle));
  *nvml->api_ = api;
  if (nvmlReturn_t r = api.init(); r != NVML_SUCCESS)
    return Error{"NVML: " + api.what("nvmlInit_v2", r)};
  nvml->initialised_ = true;
  return nvml;
}

Result<unsigned> Nvml::device_count() {
  const Api& api = *api_;
  if (!initialised_) {
    if (nvmlReturn_t r = api.init(); r != NVML_SUCCESS) return Error{api.what("nvmlInit_v2", r)};
    initialised_ = true;
  }
  unsigned count = 0;
  if (nvmlReturn_t r = api.count(&count); r != NVML_SUCCESS)
    return Error{api.what("nvmlDeviceGetCount_v2", r)};
  return count;
}

bool Nvml::has_mig() const {
  return api_->mig_mode != nullptr;
}

Result<Snapshot> Nvml::query() {
  const Api& api = *api_;
  if (!initialised_) {
    if (nvmlReturn_t r = api.init(); r != NVML_SUCCESS) return Error{api.what("nvmlInit_v2", r)};
    initialised_ = true;
  }
  Reading q{api, capacity_, {}, {}};
  std::optional<FailedCall> failed;
  unsigned count = 0;
  if (nvmlReturn_t r = api.count(&count); r != NVML_SUCCESS)
    failed = FailedCall{"nvmlDeviceGetCount_v2", r};
  for (unsigned i = 0; !failed && i < count; ++i) failed = read_device(q, i);
  if (failed) {
    // A call that says the driver is gone ends the query; shut NVML down so
    // that the next query starts over.
    if (driver_lost(failed->r)) {
      api.shutdown();
      initialised_ = false;
    }
    return Error{api.what(failed->call, failed->r)};
  }
  note_unavailable_figures(q.snap, has_mig());
  return std::move(q.snap);
}

}  // namespace recycler::gpu
