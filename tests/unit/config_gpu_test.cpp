// The config's GPU parts: the top-level `gpu:` section, policies on gpu and
// gpu_total, and NVML checked when the config is read (on a fake host whose
// NVML loads or not).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <string_view>
#include <vector>

#include "policies/policy.h"
#include "supervisor/config/parse.h"
#include "tests/support/fake_host.h"

namespace recycler::config {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

std::vector<std::string> errors(std::string_view yaml, const HostLookup& host) {
  std::vector<std::string> out;
  for (const auto& d : parse_string(yaml, "/etc/recycler/test.yaml", host).errors)
    out.push_back(d.str());
  return out;
}

FakeHost with_nvml() {
  return debian_host(0, 0);
}
FakeHost without_nvml() {
  FakeHost host = debian_host(0, 0);
  host.set_nvml_error("cannot load NVML: libnvidia-ml.so.1: cannot open shared object file");
  return host;
}

constexpr std::string_view kGpuPolicy = R"(programs:
  train:
    command: [/bin/true]
    policies:
      - memory: {metric: gpu, limit: 90%}
)";

TEST(GpuConfig, APolicyOnGpuWithoutNvmlIsAnErrorAtThePolicyThatSaysWhatToDo) {
  EXPECT_THAT(errors(kGpuPolicy, without_nvml()),
              ElementsAre("/etc/recycler/test.yaml:5:9: error: programs.train.policies[0].memory: "
                          "reads GPU memory through NVML, which cannot be used: cannot load NVML: "
                          "libnvidia-ml.so.1: cannot open shared object file (install the NVIDIA "
                          "driver, or set gpu.nvml to the path of libnvidia-ml.so.1)"));
}

TEST(GpuConfig, APolicyOnGpuLoadsTheDefaultLibraryAndAPercentageNeedsNoMemoryMax) {
  FakeHost host = with_nvml();
  LoadResult r = parse_string(kGpuPolicy, "/etc/recycler/test.yaml", host);
  ASSERT_TRUE(r.config);
  EXPECT_TRUE(r.config->needs_gpu());
  EXPECT_EQ(r.config->nvml_library(), "libnvidia-ml.so.1");
  EXPECT_TRUE(r.config->programs[0].policies[0].policy->needs() & policies::kNeedsGpu);
}

TEST(GpuConfig, TheGpuSectionNamesTheLibraryRelativeToTheConfigOrAbsoluteOrBySoname) {
  FakeHost host = with_nvml();
  auto library = [&](std::string_view gpu) {
    std::string yaml = std::string(gpu) + "\nprograms: {a: {command: [/bin/true]}}\n";
    LoadResult r = parse_string(yaml, "/etc/recycler/test.yaml", host);
    EXPECT_TRUE(r.config) << (r.errors.empty() ? "" : r.errors[0].str());
    return r.config ? r.config->nvml_library() : std::nullopt;
  };
  EXPECT_EQ(library("gpu:"), "libnvidia-ml.so.1");
  EXPECT_EQ(library("gpu: {}"), "libnvidia-ml.so.1");
  EXPECT_EQ(library("gpu: {nvml: /opt/nvidia/lib/libnvidia-ml.so.1}"),
            "/opt/nvidia/lib/libnvidia-ml.so.1");
  EXPECT_EQ(library("gpu: {nvml: lib/libnvidia-ml.so.1}"), "/etc/recycler/lib/libnvidia-ml.so.1");
  EXPECT_EQ(library("gpu: {nvml: libnvidia-ml.so.1}"), "libnvidia-ml.so.1");
  EXPECT_EQ(library("log: {level: info}"), std::nullopt) << "nothing asks for GPU figures";
}

TEST(GpuConfig, AGpuSectionAloneDoesNotNeedNvmlToBeThere) {
  // Timelines record the gpu columns when NVML answers; a warning at run
  // time says when it does not.
  EXPECT_THAT(errors("gpu:\nprograms: {a: {command: [/bin/true], timeline: {dir: /tmp}}}\n",
                     without_nvml()),
              IsEmpty());
}

TEST(GpuConfig, ABadGpuSectionIsAnErrorAtItsKey) {
  FakeHost host = with_nvml();
  EXPECT_THAT(
      errors("gpu: {nvm: x}\nprograms: {a: {command: [/bin/true]}}\n", host),
      ElementsAre("/etc/recycler/test.yaml:1:7: error: unknown key \"nvm\" in gpu; did you mean "
                  "\"nvml\"?"));
  EXPECT_THAT(errors("gpu: {nvml: ''}\nprograms: {a: {command: [/bin/true]}}\n", host),
              ElementsAre(HasSubstr("gpu.nvml: must not be empty")));
  EXPECT_THAT(errors("gpu: [a]\nprograms: {a: {command: [/bin/true]}}\n", host),
              ElementsAre(HasSubstr("gpu")));
}

TEST(GpuConfig, ScopeProcessTakesGpuButNotGpuTotal) {
  FakeHost host = with_nvml();
  EXPECT_THAT(errors("programs: {a: {command: [/bin/true], policies: [{memory: {metric: gpu, "
                     "limit: 2GiB, scope: process}}]}}\n",
                     host),
              IsEmpty());
  EXPECT_THAT(errors("programs: {a: {command: [/bin/true], policies: [{memory: {metric: "
                     "gpu_total, limit: 2GiB, scope: process}}]}}\n",
                     host),
              ElementsAre(HasSubstr("scope: process takes rss, pss, uss or gpu")));
}

}  // namespace
}  // namespace recycler::config
