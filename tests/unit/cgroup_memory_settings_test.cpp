// What `limits:` writes into the memory files a kernel may lack (v1 and v2
// tables), in which order, and what `check` and a program's start say this
// host cannot apply (supervisor/cgroup/memory_settings.h).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "supervisor/cgroup/memory_settings.h"

namespace recycler::cgroup {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

// "file=value" for each setting, in the order they are written; a "!" after
// the value for those whose failure is worth a warning.
std::vector<std::string> written(const config::Limits& limits, const Files& files) {
  std::vector<std::string> out;
  for (const MemorySetting& s : memory_settings(limits, files))
    out.push_back(std::string(s.file) + "=" + s.value + (s.matters ? "!" : ""));
  return out;
}

constexpr uint64_t kMiB = 1 << 20;

TEST(MemorySettingsWritten, V2ByDefaultOomTakesTheWholeWorkerAndNoSwap) {
  EXPECT_THAT(written({}, kV2),
              ElementsAre("memory.low=0", "memory.oom.group=1!", "memory.swap.max=0!"));
}

TEST(MemorySettingsWritten, V2WritesWhatIsConfigured) {
  config::Limits l;
  l.memory_low = 64 * kMiB;
  l.swap_max = 32 * kMiB;
  l.oom_group = false;
  EXPECT_THAT(written(l, kV2), ElementsAre("memory.low=67108864!", "memory.oom.group=0",
                                           "memory.swap.max=33554432!"));
  l.swap_max = config::Limits::kUnlimitedSwap;
  EXPECT_EQ(written(l, kV2).back(), "memory.swap.max=max");
}

TEST(MemorySettingsWritten, V1AddsSwapToTheMemoryLimitAndNeedsOne) {
  EXPECT_THAT(written({}, kV1), IsEmpty()) << "no memory limit to add swap to";
  config::Limits l;
  l.memory_max = 64 * kMiB;
  EXPECT_THAT(written(l, kV1), ElementsAre("memory.memsw.limit_in_bytes=67108864!"));
  l.swap_max = 32 * kMiB;
  EXPECT_THAT(written(l, kV1), ElementsAre("memory.memsw.limit_in_bytes=100663296!"));
  l.swap_max = config::Limits::kUnlimitedSwap;
  EXPECT_THAT(written(l, kV1), ElementsAre("memory.memsw.limit_in_bytes=-1"));
  l.swap_max = UINT64_MAX - 1;
  EXPECT_THAT(written(l, kV1), ElementsAre("memory.memsw.limit_in_bytes=-1!"))
      << "a sum past 2^64 is no limit, not a wrapped-around small one";
}

Layout layout(Mode mode, std::vector<std::string> absent = {}) {
  Layout l;
  l.mode = mode;
  l.hierarchies = {{mode == Mode::V2 ? "" : "memory", "/sys/fs/cgroup/memory"}};
  l.root = "/recycler";
  l.absent_files = std::move(absent);
  return l;
}

TEST(MemorySettingsUnapplied, NothingOnAHostWithEveryFile) {
  config::Limits l;
  l.memory_max = 64 * kMiB;
  l.memory_low = 32 * kMiB;
  l.swap_max = 0;
  l.oom_group = true;
  EXPECT_THAT(unapplied_settings(l, layout(Mode::V2)), IsEmpty());
  EXPECT_THAT(unapplied_settings({}, layout(Mode::V1)), IsEmpty())
      << "v1's defaults need no word: it has no oom.group, and swap goes with memory_max";
}

TEST(MemorySettingsUnapplied, V1SaysWhatItHasNoFileForOnlyWhenWritten) {
  config::Limits l;
  l.memory_low = 32 * kMiB;
  l.oom_group = true;
  l.swap_max = 16 * kMiB;
  EXPECT_THAT(
      unapplied_settings(l, layout(Mode::Hybrid)),
      ElementsAre("limits.memory_low: cgroup v1 has no memory.low; not applied",
                  "limits.oom_group: cgroup v1 has no memory.oom.group: an OOM kill takes the "
                  "process the kernel picks, not the whole worker",
                  "limits.swap_max: cgroup v1 limits swap only together with memory "
                  "(memory.memsw.limit_in_bytes), so only with limits.memory_max; not applied"));
  l.oom_group = false;
  l.memory_low.reset();
  l.memory_max = 64 * kMiB;
  EXPECT_THAT(unapplied_settings(l, layout(Mode::V1)), IsEmpty());
}

TEST(MemorySettingsUnapplied, AKernelWithoutSwapAccountingIsSaidEvenForTheDefault) {
  config::Limits l;
  l.memory_max = 64 * kMiB;
  EXPECT_THAT(unapplied_settings(l, layout(Mode::V1, {"memory.memsw.limit_in_bytes"})),
              ElementsAre("limits.swap_max (default: no swap): this kernel does not account "
                          "swap (no memory.memsw.limit_in_bytes; boot it with swapaccount=1): "
                          "the workers may swap beyond their memory limit"));
  EXPECT_THAT(unapplied_settings({}, layout(Mode::V2, {"memory.swap.max"})),
              ElementsAre("limits.swap_max (default: no swap): this kernel does not account "
                          "swap (no memory.swap.max; it was built without CONFIG_MEMCG_SWAP or "
                          "booted with swapaccount=0): the workers may swap beyond their memory "
                          "limit"));
  l.swap_max = config::Limits::kUnlimitedSwap;
  EXPECT_THAT(unapplied_settings(l, layout(Mode::V1, {"memory.memsw.limit_in_bytes"})), IsEmpty())
      << "unlimited swap is what the kernel does anyway";
}

TEST(MemorySettingsUnapplied, AnOldV2KernelWithoutOomGroupIsSaid) {
  EXPECT_THAT(unapplied_settings({}, layout(Mode::V2, {"memory.oom.group"})),
              ElementsAre("limits.oom_group (default: on): this kernel has no memory.oom.group "
                          "(Linux 4.19 added it): an OOM kill may take one process of a worker "
                          "and leave the rest running"));
  config::Limits off;
  off.oom_group = false;
  EXPECT_THAT(unapplied_settings(off, layout(Mode::V2, {"memory.oom.group"})), IsEmpty());
}

TEST(MemorySettingsUnapplied, NothingWithoutEnforcementOrAMemoryController) {
  config::Limits l;
  l.memory_low = 32 * kMiB;
  Layout fallback = layout(Mode::V1);
  fallback.not_enforced = "no permission";
  EXPECT_THAT(unapplied_settings(l, fallback), IsEmpty());
  Layout no_memory = layout(Mode::V1);
  no_memory.missing = {"memory"};
  EXPECT_THAT(unapplied_settings(l, no_memory), IsEmpty());
}

}  // namespace
}  // namespace recycler::cgroup
