// A fake libnvidia-ml.so.1 for recycler's tests: the seven functions
// recycler requires (and, built with FAKE_NVML_MIG, the three optional MIG
// ones), answering from files the test writes under $RECYCLER_FAKE_NVML_DIR,
// read again on every call so a test (or a worker) changes them at will:
//
//   devices        one line per GPU: "TOTAL_BYTES" or "TOTAL_BYTES mig N"
//                  (MIG enabled, N instances of TOTAL/N each)
//   procs/PID      that pid's usage, one line per device: "DEVICE BYTES",
//                  DEVICE being "I" or, under MIG, "I/K" (instance K of I);
//                  BYTES "na" for NVML_VALUE_NOT_AVAILABLE
//   fail_init      exists: nvmlInit_v2 fails (no driver)
//   lost           exists: every device call fails with GPU_IS_LOST
//   lost_midway    exists: the same, but for the count and the handles (the
//                  driver goes away in the middle of a query)
//   grow           "N": the next N process queries report that the list grew
//                  (NVML_ERROR_INSUFFICIENT_SIZE with a larger count), as a
//                  real list does when processes start between two calls
//   calls          appended: one line per process query ("procs DEVICE")
//
// Under MIG the parent device lists its processes with usedGpuMemory not
// available, as real drivers do. Everything else is hidden
// (-fvisibility=hidden): the exports are exactly those of a minimal driver.
#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "supervisor/gpu/nvml_api.h"

#define EXPORT extern "C" __attribute__((visibility("default")))

namespace {

struct Device {
  unsigned long long total = 0;
  unsigned mig = 0;  // instances; 0: MIG off
};

struct Use {
  unsigned pid;
  unsigned device;
  int instance;  // -1: the whole device
  unsigned long long bytes;
};

bool initialised = false;
int grow_served = 0;  // INSUFFICIENT_SIZE answers given so far

std::string dir() {
  const char* d = std::getenv("RECYCLER_FAKE_NVML_DIR");
  return d ? d : "/nonexistent";
}

bool exists(const std::string& name) {
  return access((dir() + "/" + name).c_str(), F_OK) == 0;
}

std::vector<Device> devices() {
  std::vector<Device> out;
  std::ifstream in(dir() + "/devices");
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    Device d;
    std::string word;
    if (!(fields >> d.total)) continue;
    if (fields >> word && word == "mig") fields >> d.mig;
    out.push_back(d);
  }
  return out;
}

std::vector<Use> uses() {
  std::vector<Use> out;
  std::string procs = dir() + "/procs";
  DIR* d = opendir(procs.c_str());
  if (!d) return out;
  while (dirent* e = readdir(d)) {
    char* end = nullptr;
    unsigned long pid = std::strtoul(e->d_name, &end, 10);
    if (end == e->d_name || *end) continue;
    std::ifstream in(procs + "/" + e->d_name);
    std::string where, bytes;
    while (in >> where >> bytes) {
      Use u{static_cast<unsigned>(pid), 0, -1, NVML_VALUE_NOT_AVAILABLE};
      if (auto slash = where.find('/'); slash != std::string::npos) {
        u.device = std::stoul(where.substr(0, slash));
        u.instance = std::stoi(where.substr(slash + 1));
      } else {
        u.device = std::stoul(where);
      }
      if (bytes != "na") u.bytes = std::stoull(bytes);
      out.push_back(u);
    }
  }
  closedir(d);
  return out;
}

// Handles: 1-based device in the high bits, 1-based MIG instance (0: the
// whole device) in the low byte.
nvmlDevice_t handle(unsigned device, int instance) {
  return reinterpret_cast<nvmlDevice_t>(
      static_cast<uintptr_t>(((device + 1) << 8) | static_cast<unsigned>(instance + 1)));
}
unsigned device_of(nvmlDevice_t h) {
  return static_cast<unsigned>((reinterpret_cast<uintptr_t>(h) >> 8) - 1);
}
int instance_of(nvmlDevice_t h) {
  return static_cast<int>(reinterpret_cast<uintptr_t>(h) & 0xff) - 1;
}

nvmlReturn_t check(nvmlDevice_t h, Device* out) {
  if (!initialised) return NVML_ERROR_UNINITIALIZED;
  if (exists("lost") || exists("lost_midway")) return NVML_ERROR_GPU_IS_LOST;
  auto all = devices();
  if (!h || device_of(h) >= all.size()) return NVML_ERROR_INVALID_ARGUMENT;
  *out = all[device_of(h)];
  if (instance_of(h) >= static_cast<int>(out->mig)) return NVML_ERROR_INVALID_ARGUMENT;
  return NVML_SUCCESS;
}

int grow_wanted() {
  std::ifstream in(dir() + "/grow");
  int n = 0;
  in >> n;
  return n;
}

}  // namespace

EXPORT nvmlReturn_t nvmlInit_v2(void) {
  if (exists("fail_init")) return NVML_ERROR_DRIVER_NOT_LOADED;
  initialised = true;
  return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlShutdown(void) {
  if (!initialised) return NVML_ERROR_UNINITIALIZED;
  initialised = false;
  return NVML_SUCCESS;
}

EXPORT const char* nvmlErrorString(nvmlReturn_t r) {
  switch (r) {
    case NVML_SUCCESS:
      return "Success";
    case NVML_ERROR_UNINITIALIZED:
      return "Uninitialized";
    case NVML_ERROR_INVALID_ARGUMENT:
      return "Invalid Argument";
    case NVML_ERROR_NOT_FOUND:
      return "Not Found";
    case NVML_ERROR_INSUFFICIENT_SIZE:
      return "Insufficient Size";
    case NVML_ERROR_DRIVER_NOT_LOADED:
      return "Driver Not Loaded";
    case NVML_ERROR_GPU_IS_LOST:
      return "GPU is lost";
    default:
      return "Unknown Error";
  }
}

EXPORT nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int* count) {
  if (!initialised) return NVML_ERROR_UNINITIALIZED;
  if (exists("lost")) return NVML_ERROR_GPU_IS_LOST;
  if (!count) return NVML_ERROR_INVALID_ARGUMENT;
  *count = static_cast<unsigned>(devices().size());
  return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t* device) {
  if (!initialised) return NVML_ERROR_UNINITIALIZED;
  if (exists("lost")) return NVML_ERROR_GPU_IS_LOST;
  if (!device || index >= devices().size()) return NVML_ERROR_INVALID_ARGUMENT;
  *device = handle(index, -1);
  return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t h, nvmlMemory_t* memory) {
  Device d;
  if (nvmlReturn_t r = check(h, &d)) return r;
  if (!memory) return NVML_ERROR_INVALID_ARGUMENT;
  unsigned long long total = instance_of(h) < 0 ? d.total : d.total / d.mig;
  unsigned long long used = 0;
  for (const Use& u : uses())
    if (u.device == device_of(h) && (instance_of(h) < 0 || u.instance == instance_of(h)) &&
        u.bytes != NVML_VALUE_NOT_AVAILABLE)
      used += u.bytes;
  *memory = nvmlMemory_t{total, total > used ? total - used : 0, used};
  return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t h, unsigned int* count,
                                                            nvmlProcessInfo_t* infos) {
  Device d;
  if (nvmlReturn_t r = check(h, &d)) return r;
  if (!count) return NVML_ERROR_INVALID_ARGUMENT;
  if (FILE* log = std::fopen((dir() + "/calls").c_str(), "a")) {
    std::fprintf(log, "procs %u\n", device_of(h));
    std::fclose(log);
  }
  std::vector<nvmlProcessInfo_t> list;
  for (const Use& u : uses()) {
    if (u.device != device_of(h)) continue;
    if (instance_of(h) >= 0 && u.instance != instance_of(h)) continue;
    bool parent_of_mig = instance_of(h) < 0 && d.mig > 0;
    list.push_back(nvmlProcessInfo_t{u.pid, parent_of_mig ? NVML_VALUE_NOT_AVAILABLE : u.bytes,
                                     static_cast<unsigned>(u.instance + 1), 0});
  }
  int wanted = grow_wanted();
  if (wanted == 0) grow_served = 0;  // the test took the file away: start over
  if (grow_served < wanted) {
    ++grow_served;
    *count = static_cast<unsigned>(list.size()) + *count + 1;
    return NVML_ERROR_INSUFFICIENT_SIZE;
  }
  if (list.size() > *count || (!infos && !list.empty())) {
    *count = static_cast<unsigned>(list.size());
    return NVML_ERROR_INSUFFICIENT_SIZE;
  }
  for (size_t i = 0; i < list.size(); ++i) infos[i] = list[i];
  *count = static_cast<unsigned>(list.size());
  return NVML_SUCCESS;
}

#ifdef FAKE_NVML_MIG
EXPORT nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t h, unsigned int* current,
                                         unsigned int* pending) {
  Device d;
  if (nvmlReturn_t r = check(h, &d)) return r;
  if (!current || !pending) return NVML_ERROR_INVALID_ARGUMENT;
  *current = *pending = d.mig > 0 ? NVML_DEVICE_MIG_ENABLE : 0;
  return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetMaxMigDeviceCount(nvmlDevice_t h, unsigned int* count) {
  Device d;
  if (nvmlReturn_t r = check(h, &d)) return r;
  if (!count) return NVML_ERROR_INVALID_ARGUMENT;
  *count = d.mig > 0 ? 7 : 0;  // an A100's maximum; only d.mig of them exist
  return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetMigDeviceHandleByIndex(nvmlDevice_t h, unsigned int index,
                                                        nvmlDevice_t* mig) {
  Device d;
  if (nvmlReturn_t r = check(h, &d)) return r;
  if (!mig) return NVML_ERROR_INVALID_ARGUMENT;
  if (index >= d.mig) return NVML_ERROR_NOT_FOUND;
  *mig = handle(device_of(h), static_cast<int>(index));
  return NVML_SUCCESS;
}
#endif
