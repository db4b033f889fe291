// NVML on a MIG-enabled GPU, through a fake driver that has the optional MIG
// functions: each instance is read on its own, with its own total.
#include <gtest/gtest.h>

#include <vector>

#include "supervisor/gpu/nvml.h"
#include "supervisor/gpu/usage.h"
#include "tests/unit/fake_nvml_dir.h"

namespace recycler::gpu {
namespace {

constexpr uint64_t kMiB = 1ull << 20;
constexpr uint64_t kGiB = 1ull << 30;

TEST(NvmlMig, EachMigInstanceIsReadOnItsOwnWithItsOwnTotal) {
  testing::FakeNvmlDir fake;
  fake.write("devices", std::to_string(80 * kGiB) + " mig 2\n" + std::to_string(16 * kGiB) + "\n");
  fake.write("procs/4242", "0/1 " + std::to_string(700 * kMiB) + "\n");
  fake.write("procs/4243", "1 " + std::to_string(kGiB) + "\n");
  auto nvml = Nvml::open(FAKE_NVML);
  ASSERT_TRUE(nvml) << nvml.error().message;
  EXPECT_TRUE((*nvml)->has_mig());
  auto snap = (*nvml)->query();
  ASSERT_TRUE(snap) << snap.error().message;
  ASSERT_EQ(snap->devices.size(), 3u) << "two instances of GPU 0, then GPU 1";
  EXPECT_EQ(snap->devices[0].label(), "GPU 0 MIG 0");
  EXPECT_EQ(snap->devices[1].label(), "GPU 0 MIG 1");
  EXPECT_EQ(snap->devices[1].total, 40 * kGiB);
  EXPECT_EQ(snap->devices[2].label(), "GPU 1");
  EXPECT_TRUE(snap->notes.empty()) << snap->notes.front();
  std::vector<pid_t> worker{4242};
  Usage u = attribute(*snap, worker);
  EXPECT_EQ(u.gpu, 700 * kMiB);
  EXPECT_EQ(u.gpu_capacity, 40 * kGiB) << "a percentage is of the instance";
}

}  // namespace
}  // namespace recycler::gpu
