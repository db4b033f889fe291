// NVML through a fake driver that exports only the seven functions recycler
// requires (tests/support/fake_nvml): loading, querying, and each pitfall of
// real drivers: lists that change between calls, figures NVML cannot give,
// MIG without the MIG functions, a driver that goes away and comes back.
#include "supervisor/gpu/nvml.h"

#include <dlfcn.h>
#include <gtest/gtest.h>
#include <unistd.h>
#include <uv.h>

#include <string>
#include <vector>

#include "supervisor/gpu/sampler.h"
#include "supervisor/gpu/usage.h"
#include "supervisor/util/uv.h"
#include "tests/unit/fake_nvml_dir.h"

namespace recycler::gpu {
namespace {

constexpr uint64_t kMiB = 1ull << 20;
constexpr uint64_t kGiB = 1ull << 30;

class NvmlTest : public ::testing::Test {
 protected:
  std::unique_ptr<Nvml> open() {
    auto nvml = Nvml::open(FAKE_NVML);
    EXPECT_TRUE(nvml) << (nvml ? "" : nvml.error().message);
    return nvml ? std::move(*nvml) : nullptr;
  }
  testing::FakeNvmlDir fake_;
};

TEST_F(NvmlTest, ALibraryWithOnlyTheSevenRequiredFunctionsIsEnough) {
  void* lib = ::dlopen(FAKE_NVML, RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(lib, nullptr);
  EXPECT_EQ(::dlsym(lib, "nvmlDeviceGetMigMode"), nullptr) << "the fake must stay minimal";
  EXPECT_EQ(::dlsym(lib, "nvmlDeviceGetComputeRunningProcesses_v2"), nullptr);
  ::dlclose(lib);
  auto nvml = open();
  ASSERT_TRUE(nvml);
  EXPECT_FALSE(nvml->has_mig());
}

TEST_F(NvmlTest, AQueryReportsEveryDeviceItsTotalAndEveryProcessOnIt) {
  fake_.write("devices", std::to_string(16 * kGiB) + "\n" + std::to_string(80 * kGiB) + "\n");
  fake_.write("procs/4242",
              "0 " + std::to_string(512 * kMiB) + "\n1 " + std::to_string(3 * kGiB) + "\n");
  fake_.write("procs/4243", "1 " + std::to_string(kGiB) + "\n");
  auto nvml = open();
  ASSERT_TRUE(nvml);
  auto snap = nvml->query();
  ASSERT_TRUE(snap) << snap.error().message;
  ASSERT_EQ(snap->devices.size(), 2u);
  EXPECT_EQ(snap->devices[0].total, 16 * kGiB);
  EXPECT_EQ(snap->devices[1].total, 80 * kGiB);
  EXPECT_EQ(snap->devices[1].label(), "GPU 1");
  EXPECT_TRUE(snap->complete);
  EXPECT_EQ(snap->uses.size(), 3u);
  std::vector<pid_t> worker{4242, 4243};
  Usage u = attribute(*snap, worker);
  EXPECT_EQ(u.gpu, 4 * kGiB) << "GPU 1 holds the most: 3 GiB + 1 GiB";
  EXPECT_EQ(u.gpu_capacity, 80 * kGiB);
  EXPECT_EQ(u.gpu_total, 4 * kGiB + 512 * kMiB);
  EXPECT_EQ(u.gpu_total_capacity, 96 * kGiB);
}

TEST_F(NvmlTest, AListLongerThanTheBufferIsReadAgainWithARoomierOne) {
  fake_.write("devices", std::to_string(80 * kGiB) + "\n");
  for (int pid = 1000; pid < 1300; ++pid) fake_.write("procs/" + std::to_string(pid), "0 4096\n");
  auto nvml = open();
  ASSERT_TRUE(nvml);
  auto snap = nvml->query();
  ASSERT_TRUE(snap) << snap.error().message;
  EXPECT_TRUE(snap->complete);
  EXPECT_EQ(snap->uses.size(), 300u);
}

TEST_F(NvmlTest, AListThatGrowsBetweenCallsIsAskedForAgainUntilItFits) {
  fake_.write("devices", std::to_string(80 * kGiB) + "\n");
  fake_.write("procs/4242", "0 " + std::to_string(kGiB) + "\n");
  fake_.write("grow", "3");  // three answers of NVML_ERROR_INSUFFICIENT_SIZE first
  auto nvml = open();
  ASSERT_TRUE(nvml);
  auto snap = nvml->query();
  ASSERT_TRUE(snap) << snap.error().message;
  EXPECT_TRUE(snap->complete);
  ASSERT_EQ(snap->uses.size(), 1u);
  EXPECT_EQ(snap->uses[0].bytes, kGiB);
  EXPECT_EQ(fake_.calls(), 4);
}

TEST_F(NvmlTest, AListThatNeverSettlesMakesTheSnapshotIncompleteAfterBoundedTries) {
  fake_.write("devices", std::to_string(80 * kGiB) + "\n");
  fake_.write("procs/4242", "0 " + std::to_string(kGiB) + "\n");
  fake_.write("grow", "1000");
  auto nvml = open();
  ASSERT_TRUE(nvml);
  auto snap = nvml->query();
  ASSERT_TRUE(snap) << snap.error().message;
  EXPECT_FALSE(snap->complete);
  EXPECT_EQ(fake_.calls(), Nvml::kMaxTries);
  ASSERT_FALSE(snap->notes.empty());
  EXPECT_NE(snap->notes[0].find("Insufficient Size"), std::string::npos) << snap->notes[0];
  std::vector<pid_t> worker{4242};
  EXPECT_FALSE(attribute(*snap, worker).gpu) << "an incomplete list tells nobody's figure";
}

TEST_F(NvmlTest, MemoryNvmlCannotTellLeavesTheWorkersFigureEmptyNotZero) {
  fake_.write("devices", std::to_string(80 * kGiB) + "\n");
  fake_.write("procs/4242", "0 na\n");
  fake_.write("procs/4243", "0 " + std::to_string(kGiB) + "\n");
  auto nvml = open();
  ASSERT_TRUE(nvml);
  auto snap = nvml->query();
  ASSERT_TRUE(snap);
  std::vector<pid_t> with_unknown{4242, 4243}, known{4243}, absent{77};
  EXPECT_FALSE(attribute(*snap, with_unknown).gpu);
  EXPECT_EQ(attribute(*snap, known).gpu, kGiB);
  EXPECT_EQ(attribute(*snap, absent).gpu, 0u) << "not listed: holds nothing";
}

TEST_F(NvmlTest, MigWithoutTheMigFunctionsSaysPerProcessFiguresAreNotAvailable) {
  fake_.write("devices", std::to_string(80 * kGiB) + " mig 2\n");
  fake_.write("procs/4242", "0/1 " + std::to_string(kGiB) + "\n");
  auto nvml = open();
  ASSERT_TRUE(nvml);
  auto snap = nvml->query();
  ASSERT_TRUE(snap);
  ASSERT_EQ(snap->devices.size(), 1u);
  EXPECT_TRUE(snap->devices[0].per_process_unavailable);
  ASSERT_EQ(snap->notes.size(), 1u);
  EXPECT_NE(snap->notes[0].find("MIG"), std::string::npos) << snap->notes[0];
  std::vector<pid_t> worker{4242};
  EXPECT_FALSE(attribute(*snap, worker).gpu);
}

TEST_F(NvmlTest, ADriverThatGoesAwayFailsTheQueryAndIsInitialisedAgainWhenBack) {
  fake_.write("devices", std::to_string(80 * kGiB) + "\n");
  auto nvml = open();
  ASSERT_TRUE(nvml);
  ASSERT_TRUE(nvml->query());
  fake_.write("lost", "");
  auto gone = nvml->query();
  ASSERT_FALSE(gone);
  EXPECT_NE(gone.error().message.find("GPU is lost"), std::string::npos) << gone.error().message;
  fake_.write("fail_init", "");
  fake_.remove("lost");
  EXPECT_FALSE(nvml->query()) << "the driver is not back yet";
  fake_.remove("fail_init");
  EXPECT_TRUE(nvml->query());
}

TEST_F(NvmlTest, ADriverThatGoesAwayMidQueryIsReportedByTheCallThatFound) {
  fake_.write("devices", std::to_string(80 * kGiB) + "\n");
  auto nvml = open();
  ASSERT_TRUE(nvml);
  fake_.write("lost_midway", "");
  auto gone = nvml->query();
  ASSERT_FALSE(gone);
  // The first call after the handle: the memory total, not the process list.
  EXPECT_NE(gone.error().message.find("nvmlDeviceGetMemoryInfo"), std::string::npos)
      << gone.error().message;
  fake_.remove("lost_midway");
}

// What devices: {gpus: auto} shares out.
TEST_F(NvmlTest, TheDeviceCountIsEveryGpuTheDriverSees) {
  fake_.write("devices", std::to_string(80 * kGiB) + "\n" + std::to_string(80 * kGiB) + "\n" +
                             std::to_string(40 * kGiB) + "\n");
  auto nvml = open();
  ASSERT_TRUE(nvml);
  auto count = nvml->device_count();
  ASSERT_TRUE(count) << count.error().message;
  EXPECT_EQ(*count, 3u);
  fake_.write("lost", "");
  auto gone = nvml->device_count();
  ASSERT_FALSE(gone);
  EXPECT_NE(gone.error().message.find("nvmlDeviceGetCount_v2"), std::string::npos)
      << gone.error().message;
  fake_.remove("lost");
}

TEST_F(NvmlTest, AMissingLibraryIsAnErrorThatNamesIt) {
  auto nvml = Nvml::open("/nonexistent/libnvidia-ml.so.1");
  ASSERT_FALSE(nvml);
  EXPECT_NE(nvml.error().message.find("/nonexistent/libnvidia-ml.so.1"), std::string::npos)
      << nvml.error().message;
}

TEST_F(NvmlTest, ALibraryWithoutTheRequiredFunctionsIsAnErrorListingThem) {
  // libc is a shared library, and surely not NVML.
  auto status = Nvml::open("libc.so.6");
  ASSERT_FALSE(status);
  EXPECT_NE(status.error().message.find("nvmlInit_v2"), std::string::npos)
      << status.error().message;
}

TEST_F(NvmlTest, NoDriverAtStartIsAnErrorFromInit) {
  fake_.write("fail_init", "");
  auto nvml = Nvml::open(FAKE_NVML);
  ASSERT_FALSE(nvml);
  EXPECT_NE(nvml.error().message.find("Driver Not Loaded"), std::string::npos)
      << nvml.error().message;
}

// The runtime's side: queries on the thread pool, once per interval for
// everyone, and a driver that fails warns and recovers.
class SamplerTest : public NvmlTest {
 protected:
  SamplerTest() { uv_loop_init(&loop_); }
  ~SamplerTest() override {
    sampler_.reset();
    uv_run(&loop_, UV_RUN_NOWAIT);
    uv_loop_close(&loop_);
  }
  // Runs the loop until `n` queries were answered or `failures` more
  // queries were made, whichever first; false after 10 s.
  bool run_until(std::function<bool()> done) {
    uv::LoopTimers& t = timers_;
    TimePoint give_up = t.now() + std::chrono::seconds(10);
    while (!done()) {
      if (t.now() > give_up) return false;
      uv_run(&loop_, UV_RUN_ONCE);
    }
    return true;
  }
  uv_loop_t loop_{};
  uv::LoopTimers timers_{&loop_};
  std::unique_ptr<Sampler> sampler_;
};

TEST_F(SamplerTest, TheLatestSnapshotIsAttributedToEachWorkersProcesses) {
  fake_.write("devices", std::to_string(80 * kGiB) + "\n");
  fake_.write("procs/4242", "0 " + std::to_string(2 * kGiB) + "\n");
  sampler_ = std::make_unique<Sampler>(&loop_, timers_, FAKE_NVML, "/proc", ::getpid());
  EXPECT_FALSE(sampler_->latest());
  sampler_->want(std::chrono::milliseconds(20));
  ASSERT_TRUE(run_until([&] { return sampler_->answered() >= 1; }));
  std::vector<pid_t> worker{4242};
  EXPECT_EQ(sampler_->usage(worker).gpu, 2 * kGiB);
  fake_.write("procs/4242", "0 " + std::to_string(3 * kGiB) + "\n");
  uint64_t seen = sampler_->answered();
  ASSERT_TRUE(run_until([&] { return sampler_->answered() > seen; }));
  EXPECT_EQ(sampler_->usage(worker).gpu, 3 * kGiB);
}

TEST_F(SamplerTest, AShorterIntervalAskedForWhileAQueryIsUnderWayKeepsItTicking) {
  fake_.write("devices", std::to_string(80 * kGiB) + "\n");
  sampler_ = std::make_unique<Sampler>(&loop_, timers_, FAKE_NVML, "/proc", ::getpid());
  sampler_->want(std::chrono::milliseconds(50));  // a query is now under way
  sampler_->want(std::chrono::milliseconds(10));  // a second program samples faster
  ASSERT_TRUE(run_until([&] { return sampler_->answered() >= 3; }));
}

TEST_F(SamplerTest, ADriverThatFailsEmptiesTheFiguresAndTheyComeBackWithIt) {
  fake_.write("devices", std::to_string(80 * kGiB) + "\n");
  fake_.write("procs/4242", "0 " + std::to_string(kGiB) + "\n");
  sampler_ = std::make_unique<Sampler>(&loop_, timers_, FAKE_NVML, "/proc", ::getpid());
  sampler_->want(std::chrono::milliseconds(20));
  ASSERT_TRUE(run_until([&] { return sampler_->latest() != nullptr; }));
  fake_.write("lost", "");
  ASSERT_TRUE(run_until([&] { return sampler_->latest() == nullptr; }));
  std::vector<pid_t> worker{4242};
  EXPECT_FALSE(sampler_->usage(worker).gpu);
  fake_.remove("lost");
  ASSERT_TRUE(run_until([&] { return sampler_->latest() != nullptr; }));
  EXPECT_EQ(sampler_->usage(worker).gpu, kGiB);
}

TEST_F(SamplerTest, ALibraryMissingAtStartLeavesFiguresEmptyAndTheLoopRunning) {
  sampler_ = std::make_unique<Sampler>(&loop_, timers_, "/nonexistent/libnvidia-ml.so.1", "/proc",
                                       ::getpid());
  sampler_->want(std::chrono::milliseconds(20));
  // Two ticks of the interval go by without an answer; the loop is free.
  bool ticked = false;
  auto timer = timers_.after(std::chrono::milliseconds(60), [&] { ticked = true; });
  ASSERT_TRUE(run_until([&] { return ticked; }));
  EXPECT_EQ(sampler_->answered(), 0u);
  EXPECT_FALSE(sampler_->latest());
}

}  // namespace
}  // namespace recycler::gpu
