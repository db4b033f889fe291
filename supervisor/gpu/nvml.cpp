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

bool Nvml::has_mig() const {
  return api_->mig_mode != nullptr;
}

Result<Snapshot> Nvml::query() {
  const Api& api = *api_;
  if (!initialised_) {
    if (nvmlReturn_t r = api.init(); r != NVML_SUCCESS) return Error{api.what("nvmlInit_v2", r)};
    initialised_ = true;
  }
  // A call that says the driver is gone ends the query; shut NVML down so
  // that the next query starts over.
  auto lost = [&](const char* call, nvmlReturn_t r) -> Result<Snapshot> {
    if (driver_lost(r)) {
      api.shutdown();
      initialised_ = false;
    }
    return Error{api.what(call, r)};
  };

  unsigned count = 0;
  if (nvmlReturn_t r = api.count(&count); r != NVML_SUCCESS)
    return lost("nvmlDeviceGetCount_v2", r);
  Snapshot snap;
  std::vector<nvmlProcessInfo_t> infos;
  // Reads one pool's total and processes into snap; false: the driver is gone.
  auto read_pool = [&](nvmlDevice_t h, Device device, nvmlReturn_t& failed) {
    nvmlMemory_t memory{};
    if (nvmlReturn_t r = api.memory(h, &memory); r != NVML_SUCCESS) {
      if (driver_lost(r)) return failed = r, false;
      snap.complete = false;
      snap.notes.push_back(device.label() + ": " + api.what("nvmlDeviceGetMemoryInfo", r));
      return true;
    }
    device.total = memory.total;
    // The list changes between calls: grow the buffer to what NVML says it
    // needs (plus room for newcomers) and ask again, a bounded number of times.
    unsigned n = 0;
    nvmlReturn_t r = NVML_ERROR_INSUFFICIENT_SIZE;
    for (int tries = 0; tries < kMaxTries && r == NVML_ERROR_INSUFFICIENT_SIZE; ++tries) {
      infos.resize(capacity_);
      n = capacity_;
      r = api.processes(h, &n, infos.data());
      if (r == NVML_ERROR_INSUFFICIENT_SIZE)
        capacity_ = std::min(kMaxProcesses, std::max(n, capacity_) + capacity_ / 2 + 8);
    }
    if (r != NVML_SUCCESS) {
      if (driver_lost(r)) return failed = r, false;
      snap.complete = false;
      snap.notes.push_back(device.label() + ": " +
                           api.what("nvmlDeviceGetComputeRunningProcesses_v3", r));
      return true;
    }
    n = std::min<unsigned>(n, static_cast<unsigned>(infos.size()));
    size_t at = snap.devices.size();
    bool any_known = false;
    for (unsigned i = 0; i < n; ++i) {
      ProcessUse use{static_cast<pid_t>(infos[i].pid), at, std::nullopt};
      if (infos[i].usedGpuMemory != NVML_VALUE_NOT_AVAILABLE) {
        use.bytes = infos[i].usedGpuMemory;
        any_known = true;
      }
      snap.uses.push_back(use);
    }
    device.per_process_unavailable = n > 0 && !any_known;
    snap.devices.push_back(device);
    return true;
  };

  for (unsigned i = 0; i < count; ++i) {
    nvmlDevice_t h = nullptr;
    if (nvmlReturn_t r = api.handle(i, &h); r != NVML_SUCCESS) {
      if (driver_lost(r)) return lost("nvmlDeviceGetHandleByIndex_v2", r);
      snap.complete = false;
      snap.notes.push_back("GPU " + std::to_string(i) + ": " +
                           api.what("nvmlDeviceGetHandleByIndex_v2", r));
      continue;
    }
    nvmlReturn_t failed = NVML_SUCCESS;
    unsigned current = 0, pending = 0;
    bool mig = api.mig_mode && api.mig_mode(h, &current, &pending) == NVML_SUCCESS &&
               current == NVML_DEVICE_MIG_ENABLE;
    unsigned mig_max = 0;
    if (mig && api.mig_count(h, &mig_max) != NVML_SUCCESS) mig = false;
    if (mig) {
      // Each instance is its own memory; the parent would list its processes
      // without figures.
      for (unsigned k = 0; k < mig_max; ++k) {
        nvmlDevice_t instance = nullptr;
        nvmlReturn_t r = api.mig_handle(h, k, &instance);
        if (r == NVML_ERROR_NOT_FOUND) continue;  // no instance at this position
        if (r != NVML_SUCCESS) {
          if (driver_lost(r)) return lost("nvmlDeviceGetMigDeviceHandleByIndex", r);
          snap.complete = false;
          snap.notes.push_back("GPU " + std::to_string(i) + " MIG " + std::to_string(k) + ": " +
                               api.what("nvmlDeviceGetMigDeviceHandleByIndex", r));
          continue;
        }
        if (!read_pool(instance, Device{i, static_cast<int>(k)}, failed))
          return lost("nvmlDeviceGetComputeRunningProcesses_v3", failed);
      }
    } else if (!read_pool(h, Device{i}, failed)) {
      return lost("nvmlDeviceGetComputeRunningProcesses_v3", failed);
    }
  }
  for (const Device& d : snap.devices)
    if (d.per_process_unavailable)
      snap.notes.push_back(d.label() + ": NVML lists processes but not their memory" +
                           (has_mig() ? std::string()
                                      : " (with MIG enabled, per-process figures need the "
                                        "driver's MIG functions, which this library lacks)"));
  return snap;
}

}  // namespace recycler::gpu
