// `devices:`: every key read, every bad value reported at its position,
// `gpus: auto` checked on a fake machine (NVML there or not, a
// CUDA_VISIBLE_DEVICES given or not), and the exact environment each slot
// gets (supervisor/config/devices.h).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <string_view>
#include <vector>

#include "supervisor/config/devices.h"
#include "supervisor/config/parse.h"
#include "tests/support/fake_host.h"

namespace recycler::config {
namespace {

using testing::ElementsAre;
using testing::IsEmpty;

const FakeHost kHost = debian_host(0, 0);

std::vector<std::string> lines(const std::vector<Diagnostic>& diagnostics) {
  std::vector<std::string> out;
  for (const auto& d : diagnostics) out.push_back(d.str());
  return out;
}
std::vector<std::string> errors(std::string_view yaml, const HostLookup& host = kHost) {
  return lines(parse_string(yaml, "test.yaml", host).errors);
}
DevicesConfig devices(std::string_view yaml, const HostLookup& host = kHost) {
  LoadResult result = parse_string(yaml, "test.yaml", host);
  EXPECT_THAT(lines(result.errors), IsEmpty());
  if (!result.config || result.config->programs.size() != 1) {
    ADD_FAILURE() << "expected exactly one program";
    return {};
  }
  return result.config->programs[0].devices;
}

// --- Reading -------------------------------------------------------------------------------

TEST(DevicesParse, EveryKeyIsRead) {
  DevicesConfig d = devices(R"(programs:
  train:
    command: [/bin/true]
    devices:
      gpus: [0, 1, "GPU-5f3c2a1e-0d4b-4b7e-9c1a-2b3c4d5e6f70", MIG-GPU-8f2a/1/0]
      per_slot: 2
      pytorch_alloc_conf: "expandable_segments:True,roundup_power2_divisions:[256:1,512:2]"
      xla_preallocate: false
      xla_mem_fraction: .50
)");
  EXPECT_THAT(d.gpus, ElementsAre("0", "1", "GPU-5f3c2a1e-0d4b-4b7e-9c1a-2b3c4d5e6f70",
                                  "MIG-GPU-8f2a/1/0"));
  EXPECT_FALSE(d.gpus_auto);
  EXPECT_EQ(d.per_slot, 2u);
  EXPECT_EQ(d.pytorch_alloc_conf,
            "expandable_segments:True,roundup_power2_divisions:[256:1,512:2]");
  EXPECT_EQ(d.xla_preallocate, false);
  EXPECT_EQ(d.xla_mem_fraction, 0.5);
}

TEST(DevicesParse, WithoutTheKeyOrWithAnEmptyOneNothingIsSet) {
  EXPECT_EQ(devices("programs: {a: {command: [/bin/true]}}"), DevicesConfig{});
  EXPECT_EQ(devices("programs: {a: {command: [/bin/true], devices: }}"), DevicesConfig{});
  EXPECT_EQ(devices("programs: {a: {command: [/bin/true], devices: {per_slot: }}}"),
            DevicesConfig{});
}

TEST(DevicesParse, AutoIsKeptForTheRunWhenNvmlIsThere) {
  DevicesConfig d = devices("programs: {a: {command: [/bin/true], devices: {gpus: auto}}}");
  EXPECT_TRUE(d.gpus_auto);
  EXPECT_THAT(d.gpus, IsEmpty());
  EXPECT_EQ(d.per_slot, 1u);
}

TEST(DevicesParse, AnIndexIsWrittenAsCudaReadsIt) {
  EXPECT_THAT(devices("programs: {a: {command: [/bin/true], devices: {gpus: [007, 1]}}}").gpus,
              ElementsAre("7", "1"));
}

TEST(DevicesParse, EachBadValueIsAnErrorAtItsPosition) {
  EXPECT_THAT(
      errors(R"(programs:
  a:
    command: [/bin/true]
    devices:
      gpus: [0, -1, gpu0, "0,1", 1, 0, 5000]
      xla_preallocate: yes
      xla_mem_fraction: 1.5
      pytorch_alloc_conf: "expandable_segments"
  b:
    command: [/bin/true]
    devices: {gpus: [], xla_mem_fraction: "50%"}
  c:
    command: [/bin/true]
    devices: {gpus: all, pytorch_alloc_conf: "", per_slot: 0}
  d:
    command: [/bin/true]
    devices: {per_slot: 2, xla_mem_fraction: 0}
)"),
      ElementsAre("test.yaml:5:17: error: programs.a.devices.gpus[1]: invalid GPU \"-1\"; "
                  "expected an index (0, 1, ...) or a UUID as nvidia-smi -L shows it (GPU-..., "
                  "MIG-...)",
                  "test.yaml:5:21: error: programs.a.devices.gpus[2]: invalid GPU \"gpu0\"; "
                  "expected an index (0, 1, ...) or a UUID as nvidia-smi -L shows it (GPU-..., "
                  "MIG-...)",
                  "test.yaml:5:27: error: programs.a.devices.gpus[3]: invalid GPU \"0,1\"; "
                  "expected an index (0, 1, ...) or a UUID as nvidia-smi -L shows it (GPU-..., "
                  "MIG-...)",
                  "test.yaml:5:37: error: programs.a.devices.gpus[5]: GPU 0 is listed twice",
                  "test.yaml:5:40: error: programs.a.devices.gpus[6]: 5000 is out of range; "
                  "expected an integer from 0 to 4095",
                  "test.yaml:6:24: error: programs.a.devices.xla_preallocate: invalid value "
                  "\"yes\"; expected true or false",
                  "test.yaml:7:25: error: programs.a.devices.xla_mem_fraction: 1.5 is out of "
                  "range; expected a fraction of the GPU's memory above 0 and at most 1, e.g. 0.5",
                  "test.yaml:8:27: error: programs.a.devices.pytorch_alloc_conf: invalid option "
                  "\"expandable_segments\" in \"expandable_segments\"; expected NAME:VALUE "
                  "options separated by commas, e.g. "
                  "\"expandable_segments:True,max_split_size_mb:128\"",
                  "test.yaml:11:21: error: programs.b.devices.gpus must be a list of GPUs "
                  "(indexes or UUIDs) or auto",
                  "test.yaml:11:43: error: programs.b.devices.xla_mem_fraction: invalid value "
                  "\"50%\"; expected a fraction of the GPU's memory above 0 and at most 1, e.g. "
                  "0.5",
                  "test.yaml:14:21: error: programs.c.devices.gpus must be a list of GPUs "
                  "(indexes or UUIDs) or auto",
                  "test.yaml:14:46: error: programs.c.devices.pytorch_alloc_conf must not be "
                  "empty; expected NAME:VALUE options separated by commas, e.g. "
                  "\"expandable_segments:True,max_split_size_mb:128\"",
                  "test.yaml:14:60: error: programs.c.devices.per_slot: 0 is out of range; "
                  "expected an integer from 1 to 1024",
                  "test.yaml:17:25: error: programs.d.devices.per_slot needs gpus: the list (or "
                  "auto) it takes GPUs from",
                  "test.yaml:17:46: error: programs.d.devices.xla_mem_fraction: 0 is out of "
                  "range; expected a fraction of the GPU's memory above 0 and at most 1, e.g. "
                  "0.5"));
}

TEST(DevicesParse, PerSlotMayNotExceedTheListedGpus) {
  EXPECT_THAT(
      errors("programs: {a: {command: [/bin/true], devices: {gpus: [0, 1], per_slot: 3}}}"),
      ElementsAre("test.yaml:1:72: error: programs.a.devices.per_slot (3) is more than the 2 "
                  "GPUs gpus lists: a slot would get one twice"));
}

TEST(DevicesParse, AnUnknownKeyGetsADidYouMean) {
  EXPECT_THAT(errors("programs: {a: {command: [/bin/true], devices: {gpu: [0]}}}"),
              ElementsAre("test.yaml:1:48: error: unknown key \"gpu\" in programs.a.devices; did "
                          "you mean \"gpus\"?"));
}

// --- gpus: auto, against the machine ----------------------------------------------------------

constexpr std::string_view kAuto = "programs: {a: {command: [/bin/true], devices: {gpus: auto}}}";

TEST(DevicesCheck, AutoWithoutNvmlIsAnErrorAtTheValueThatSaysWhatToDo) {
  FakeHost host = debian_host(0, 0);
  host.set_nvml_error("cannot load NVML: libnvidia-ml.so.1 is in none of the loader's directories");
  EXPECT_THAT(errors(kAuto, host),
              ElementsAre("test.yaml:1:54: error: programs.a.devices.gpus: auto counts the GPUs "
                          "through NVML, which cannot be used: cannot load NVML: "
                          "libnvidia-ml.so.1 is in none of the loader's directories (list the "
                          "GPUs instead, install the NVIDIA driver, or set gpu.nvml to the path "
                          "of libnvidia-ml.so.1)"));
}

TEST(DevicesCheck, AutoWithAGivenCudaVisibleDevicesNeedsNoNvml) {
  FakeHost host = debian_host(0, 0);
  host.set_nvml_error("cannot load NVML: gone");
  host.set_cuda_visible_devices("2,3");
  EXPECT_THAT(errors(kAuto, host), IsEmpty());
  host.set_cuda_visible_devices(" , ");
  EXPECT_THAT(errors(kAuto, host),
              ElementsAre("test.yaml:1:54: error: programs.a.devices.gpus: auto shares out "
                          "recycler's own CUDA_VISIBLE_DEVICES, which names no GPU"));
}

// --- The environment ------------------------------------------------------------------------

TEST(DevicesEnvironment, SlotsTakeConsecutiveEntriesRoundRobin) {
  std::vector<std::string> gpus{"0", "1", "2", "3"};
  EXPECT_THAT(slot_gpus(gpus, 1, 0), ElementsAre("0"));
  EXPECT_THAT(slot_gpus(gpus, 1, 5), ElementsAre("1")) << "slot 5 wraps to the second GPU";
  EXPECT_THAT(slot_gpus(gpus, 2, 1), ElementsAre("2", "3"));
  EXPECT_THAT(slot_gpus(gpus, 3, 1), ElementsAre("3", "0", "1")) << "a share wraps too";
  EXPECT_THAT(slot_gpus({}, 1, 0), IsEmpty());
}

TEST(DevicesEnvironment, VisibleDeviceListsAreSplitAndTrimmed) {
  EXPECT_THAT(visible_device_list("0,1"), ElementsAre("0", "1"));
  EXPECT_THAT(visible_device_list(" GPU-ab , 2,,"), ElementsAre("GPU-ab", "2"));
  EXPECT_THAT(visible_device_list(""), IsEmpty());
}

TEST(DevicesEnvironment, EachVariableIsSetFromItsKey) {
  DevicesConfig d;
  d.gpus = {"0", "1", "2"};
  d.per_slot = 2;
  d.pytorch_alloc_conf = "expandable_segments:True";
  d.xla_preallocate = false;
  d.xla_mem_fraction = 0.5;
  EnvMap env{{"CUDA_VISIBLE_DEVICES", "7"}, {"PATH", "/bin"}};
  apply_devices(d, {}, 1, {}, env);
  EXPECT_EQ(env, (EnvMap{{"CUDA_DEVICE_ORDER", "PCI_BUS_ID"},
                         {"CUDA_VISIBLE_DEVICES", "2,0"},
                         {"PATH", "/bin"},
                         {"PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True"},
                         {"XLA_PYTHON_CLIENT_MEM_FRACTION", "0.5"},
                         {"XLA_PYTHON_CLIENT_PREALLOCATE", "false"}}))
      << "what recycler inherited is overridden";
}

TEST(DevicesEnvironment, TheProgramsEnvWinsForEveryVariable) {
  DevicesConfig d;
  d.gpus = {"0", "1"};
  d.pytorch_alloc_conf = "expandable_segments:True";
  d.xla_preallocate = true;
  d.xla_mem_fraction = 0.9;
  EnvMap program_env{{"CUDA_VISIBLE_DEVICES", "5"},
                     {"PYTORCH_CUDA_ALLOC_CONF", "backend:cudaMallocAsync"},
                     {"XLA_PYTHON_CLIENT_PREALLOCATE", "false"},
                     {"XLA_PYTHON_CLIENT_MEM_FRACTION", ".2"}};
  EnvMap env = program_env;
  apply_devices(d, program_env, 0, {}, env);
  EXPECT_EQ(env, program_env) << "nothing added: not even CUDA_DEVICE_ORDER";
}

TEST(DevicesEnvironment, AnOrderAlreadyThereStaysAndUuidsNeedNone) {
  DevicesConfig d;
  d.gpus = {"1"};
  EnvMap env{{"CUDA_DEVICE_ORDER", "FASTEST_FIRST"}};
  apply_devices(d, {}, 0, {}, env);
  EXPECT_EQ(env["CUDA_DEVICE_ORDER"], "FASTEST_FIRST");
  d.gpus = {"GPU-aa", "MIG-bb"};
  EnvMap uuids;
  apply_devices(d, {}, 1, {}, uuids);
  EXPECT_EQ(uuids, (EnvMap{{"CUDA_VISIBLE_DEVICES", "MIG-bb"}}));
}

TEST(DevicesEnvironment, AutoSharesOutThePoolTheRunFound) {
  DevicesConfig d;
  d.gpus_auto = true;
  EnvMap env;
  apply_devices(d, {}, 3, {"4", "5"}, env);
  EXPECT_EQ(env["CUDA_VISIBLE_DEVICES"], "5");
  EnvMap none;
  apply_devices(d, {}, 0, {}, none);
  EXPECT_THAT(none, IsEmpty()) << "unresolved: the runtime refuses such a program before this";
}

TEST(DevicesEnvironment, FractionsAreWrittenAsXlaReadsThem) {
  EXPECT_EQ(format_mem_fraction(0.5), "0.5");
  EXPECT_EQ(format_mem_fraction(1), "1");
  EXPECT_EQ(format_mem_fraction(0.75), "0.75");
}

}  // namespace
}  // namespace recycler::config
