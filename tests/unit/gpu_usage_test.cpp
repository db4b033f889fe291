// Attributing an NVML snapshot to a worker's processes, and the pid NVML
// knows a process by when recycler runs in a nested pid namespace.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <vector>

#include "supervisor/gpu/usage.h"
#include "supervisor/util/fd.h"

namespace recycler::gpu {
namespace {

constexpr uint64_t kGiB = 1ull << 30;

Snapshot two_gpus() {
  Snapshot s;
  s.devices = {Device{0, -1, 16 * kGiB}, Device{1, -1, 80 * kGiB}};
  s.uses = {ProcessUse{10, 0, 2 * kGiB}, ProcessUse{11, 1, kGiB}, ProcessUse{11, 0, kGiB},
            ProcessUse{99, 1, 40 * kGiB}};
  return s;
}

TEST(GpuUsage, TheWorkersGpuIsItsFullestDeviceAndGpuTotalTheSum) {
  std::vector<pid_t> worker{10, 11};
  Usage u = attribute(two_gpus(), worker);
  EXPECT_EQ(u.gpu, 3 * kGiB) << "GPU 0: 2 + 1 GiB, GPU 1: 1 GiB";
  EXPECT_EQ(u.gpu_capacity, 16 * kGiB) << "a percentage is of the device it is fullest on";
  EXPECT_EQ(u.gpu_total, 4 * kGiB);
  EXPECT_EQ(u.gpu_total_capacity, 96 * kGiB);
}

TEST(GpuUsage, OtherWorkersProcessesAreNotCounted) {
  std::vector<pid_t> worker{11};
  Usage u = attribute(two_gpus(), worker);
  EXPECT_EQ(u.gpu, kGiB);
  EXPECT_EQ(u.gpu_total, 2 * kGiB);
}

TEST(GpuUsage, AWorkerOnNoGpuHoldsZeroWithNoCapacity) {
  std::vector<pid_t> worker{12};
  Usage u = attribute(two_gpus(), worker);
  EXPECT_EQ(u.gpu, 0u);
  EXPECT_EQ(u.gpu_total, 0u);
  EXPECT_FALSE(u.gpu_capacity) << "no device: a percentage limit has nothing to be of";
}

TEST(GpuUsage, AnIncompleteSnapshotTellsNothing) {
  Snapshot s = two_gpus();
  s.complete = false;
  std::vector<pid_t> worker{10};
  Usage u = attribute(s, worker);
  EXPECT_FALSE(u.gpu);
  EXPECT_FALSE(u.gpu_total);
}

class ProcRoot : public ::testing::Test {
 protected:
  ProcRoot() {
    char tmpl[] = "/tmp/fake-proc.XXXXXX";
    root_ = ::mkdtemp(tmpl);
    fd_ = UniqueFd(::open(root_.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
  }
  ~ProcRoot() override { std::filesystem::remove_all(root_); }
  void status(pid_t pid, const std::string& nspid) {
    std::filesystem::create_directory(root_ / std::to_string(pid));
    std::ofstream(root_ / std::to_string(pid) / "status")
        << "Name:\tpython3\nTgid:\t" << pid << "\nNgid:\t0\nPid:\t" << pid << "\n"
        << nspid << "\nNSsid:\t1\n";
  }
  std::filesystem::path root_;
  UniqueFd fd_;
};

TEST_F(ProcRoot, InANestedPidNamespaceTheHostPidIsTheFirstOfNSpid) {
  status(42, "NSpid:\t91234\t42");
  EXPECT_EQ(host_pid(fd_.get(), 42), 91234);
  status(7, "NSpid:\t5000\t300\t7");
  EXPECT_EQ(host_pid(fd_.get(), 7), 5000);
}

TEST_F(ProcRoot, WithoutNestingOrWithoutTheFileThePidIsItsOwn) {
  status(42, "NSpid:\t42");
  EXPECT_EQ(host_pid(fd_.get(), 42), 42);
  EXPECT_EQ(host_pid(fd_.get(), 43), 43) << "no such process";
  status(44, "NSpid:\tgarbage 12");
  EXPECT_EQ(host_pid(fd_.get(), 44), 44);
}

TEST_F(ProcRoot, ANestedNamespaceIsRecognisedFromRecyclersOwnNSpid) {
  status(1, "NSpid:\t7001\t1");
  status(2, "NSpid:\t2");
  EXPECT_TRUE(nested_pid_namespace(fd_.get(), 1));
  EXPECT_FALSE(nested_pid_namespace(fd_.get(), 2));
  EXPECT_FALSE(nested_pid_namespace(fd_.get(), 3));
}

TEST_F(ProcRoot, NvmlsHostPidsAreAttributedToTheWorkerThroughNSpid) {
  status(42, "NSpid:\t91234\t42");
  Snapshot s;
  s.devices = {Device{0, -1, 80 * kGiB}};
  s.uses = {ProcessUse{91234, 0, 5 * kGiB}, ProcessUse{42, 0, kGiB}};  // 42: another host pid
  std::vector<pid_t> host{host_pid(fd_.get(), 42)};
  EXPECT_EQ(attribute(s, host).gpu, 5 * kGiB);
}

// A pod: recycler's /proc is its own pid namespace's, and NVML lists host
// pids (12345, 23456) it cannot map; one may even equal a worker's own
// number. Its figure is unknown, never 0 (a policy would read "no memory").
TEST_F(ProcRoot, InAPodsPidNamespaceNvmlsPidsMakeEveryFigureUnknown) {
  std::filesystem::create_directory(root_ / "1");
  std::ofstream(root_ / "1" / "comm") << "recycler\n";
  EXPECT_FALSE(host_pid_namespace(fd_.get())) << "no kthreadd: not the host's";
  std::filesystem::create_directory(root_ / "2");
  std::ofstream(root_ / "2" / "comm") << "kthreadd\n";
  EXPECT_TRUE(host_pid_namespace(fd_.get()));

  Snapshot s;
  s.devices = {Device{0, -1, 80 * kGiB}};
  s.uses = {ProcessUse{12345, 0, 30 * kGiB}, ProcessUse{7, 0, kGiB}};
  std::vector<pid_t> worker{7, 8};
  Usage u = attribute(s, worker, /*host_hidden=*/true);
  EXPECT_FALSE(u.gpu) << "pid 7 here is not NVML's pid 7";
  EXPECT_FALSE(u.gpu_total);
  EXPECT_EQ(attribute(s, worker).gpu, kGiB) << "on the host, pid 7 is pid 7";
  // Nobody holds GPU memory: 0 is the truth, even from a pod.
  s.uses.clear();
  EXPECT_EQ(attribute(s, worker, true).gpu, 0u);
}

// A slot with whole GPUs of its own (CUDA_VISIBLE_DEVICES): their used
// memory stands in for its figure; a GPU it does not have, or an incomplete
// snapshot, leaves it unknown.
TEST(GpuUsage, WholeGpusOfASlotStandInWithTheirUsedMemory) {
  Snapshot s = two_gpus();
  s.devices[0].used = 5 * kGiB;
  s.devices[1].used = 41 * kGiB;
  std::vector<unsigned> first{0}, both{0, 1}, absent{0, 7};
  Usage one = attribute_devices(s, first);
  EXPECT_EQ(one.gpu, 5 * kGiB);
  EXPECT_EQ(one.gpu_capacity, 16 * kGiB);
  Usage two = attribute_devices(s, both);
  EXPECT_EQ(two.gpu, 41 * kGiB) << "the fullest";
  EXPECT_EQ(two.gpu_capacity, 80 * kGiB);
  EXPECT_EQ(two.gpu_total, 46 * kGiB);
  EXPECT_EQ(two.gpu_total_capacity, 96 * kGiB);
  EXPECT_FALSE(attribute_devices(s, absent).gpu);
  EXPECT_FALSE(attribute_devices(s, {}).gpu);
  s.complete = false;
  EXPECT_FALSE(attribute_devices(s, first).gpu);
}

}  // namespace
}  // namespace recycler::gpu
