// cgroup mode detection and root resolution against fixture mountinfo files
// and fake cgroup trees built under a temporary directory (Paths::prefix).
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "supervisor/cgroup/cgroup.h"

namespace recycler::cgroup {
namespace {

namespace fs = std::filesystem;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

std::string fixture(const std::string& name) {
  return std::string(RECYCLER_FIXTURES_DIR) + "/cgroup/" + name;
}

// A scratch tree: files under prefix/..., removed afterwards.
class FakeTree {
 public:
  FakeTree() {
    char tmpl[] = "/tmp/recycler-cgroup-test-XXXXXX";
    root_ = ::mkdtemp(tmpl);
  }
  ~FakeTree() { fs::remove_all(root_); }
  void write(const std::string& path, const std::string& content) {
    fs::path p = root_ + path;
    fs::create_directories(p.parent_path());
    std::ofstream(p) << content;
  }
  void mkdir(const std::string& path) { fs::create_directories(root_ + path); }
  const std::string& root() const { return root_; }

 private:
  std::string root_;
};

Paths paths_for(const FakeTree& tree, const std::string& mountinfo, const std::string& self = "") {
  Paths p;
  p.mountinfo = fixture(mountinfo);
  p.self_cgroup = tree.root() + "/proc-self-cgroup";
  p.proc = tree.root() + "/proc";
  p.prefix = tree.root();
  if (!self.empty()) std::ofstream(p.self_cgroup) << self;
  return p;
}

std::vector<std::string> controllers(const Layout& l) {
  std::vector<std::string> out;
  for (const Hierarchy& h : l.hierarchies) out.push_back(h.controller);
  return out;
}

TEST(ParseMountinfo, ReadsMountPointTypeAndSuperOptions) {
  std::string text =
      "35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n"
      "28 21 0:25 / /mnt/odd\\040name rw,relatime shared:4 - tmpfs tmpfs rw,size=10k\n"
      "garbage line\n";
  auto entries = parse_mountinfo(text);
  ASSERT_EQ(entries.size(), 2u);
  EXPECT_EQ(entries[0].mount_point, "/sys/fs/cgroup/memory");
  EXPECT_EQ(entries[0].fstype, "cgroup");
  EXPECT_EQ(entries[0].super_options, "rw,memory");
  EXPECT_EQ(entries[1].mount_point, "/mnt/odd name") << "octal escapes are decoded";
  EXPECT_EQ(entries[1].fstype, "tmpfs");
}

TEST(ParseSelfCgroup, FindsTheUnifiedEntry) {
  EXPECT_EQ(parse_v2_self_cgroup("0::/system.slice/recycler.service\n"),
            "/system.slice/recycler.service");
  EXPECT_EQ(parse_v2_self_cgroup("4:memory:/x\n0::/\n"), "/");
  EXPECT_EQ(parse_v2_self_cgroup("4:memory:/x\n"), std::nullopt);
}

// ---- parse_worker_of: which worker a notify sender belongs to ----

Layout v1_layout(const std::string& root) {
  Layout l;
  l.mode = Mode::Hybrid;
  l.hierarchies = {{"memory", "/sys/fs/cgroup/memory"}, {"cpu", "/sys/fs/cgroup/cpu,cpuacct"}};
  l.root = root;
  return l;
}

Layout v2_layout(const std::string& root) {
  Layout l;
  l.mode = Mode::V2;
  l.hierarchies = {{"", "/sys/fs/cgroup"}};
  l.root = root;
  return l;
}

constexpr const char* kV1ProcCgroup =
    "12:pids:/recycler/web/3\n"
    "7:cpu,cpuacct:/recycler/web/3\n"
    "4:memory:/recycler/web/3\n"
    "0::/system.slice/ssh.service\n";

TEST(ParseCgroupOf, FindsAControllersLineCoMountedOrNotAndV2s) {
  EXPECT_EQ(parse_cgroup_of(kV1ProcCgroup, "memory"), "/recycler/web/3");
  EXPECT_EQ(parse_cgroup_of(kV1ProcCgroup, "cpuacct"), "/recycler/web/3");
  EXPECT_EQ(parse_cgroup_of(kV1ProcCgroup, ""), "/system.slice/ssh.service");
  EXPECT_EQ(parse_cgroup_of(kV1ProcCgroup, "blkio"), std::nullopt);
  EXPECT_EQ(parse_cgroup_of("4:memory\n", "memory"), std::nullopt);
}

TEST(ParseWorkerOf, ReadsProgramAndSlotFromTheFirstHierarchysLine) {
  EXPECT_EQ(parse_worker_of(kV1ProcCgroup, v1_layout("/recycler")), (WorkerId{"web", 3}));
}

TEST(ParseWorkerOf, OnV2ReadsTheUnifiedLineAndAcceptsSubCgroupsOfTheWorker) {
  Layout l = v2_layout("/system.slice/recycler.service/recycler");
  EXPECT_EQ(parse_worker_of("0::/system.slice/recycler.service/recycler/api/0\n", l),
            (WorkerId{"api", 0}));
  EXPECT_EQ(parse_worker_of("0::/system.slice/recycler.service/recycler/api/12/inner\n", l),
            (WorkerId{"api", 12}));
}

// A surge runs the slot's next generation in <slot>.b: the same worker, the
// other cgroup (the variant says which generation a notify sender is of).
TEST(ParseWorkerOf, TheSurgesOtherCgroupIsTheSameSlotInVariantOne) {
  Layout l = v2_layout("/recycler");
  auto plain = parse_worker_of("0::/recycler/api/2\n", l);
  auto other = parse_worker_of("0::/recycler/api/2.b/inner\n", l);
  ASSERT_TRUE(plain && other);
  EXPECT_EQ(*plain, *other) << "one slot";
  EXPECT_EQ(plain->variant, 0u);
  EXPECT_EQ(other->variant, 1u);
  EXPECT_EQ(other->slot, 2u);
  EXPECT_EQ(parse_worker_of("0::/recycler/api/2.c\n", l), std::nullopt);
}

TEST(ParseWorkerOf, AProcessOutsideTheRootIsNoWorker) {
  Layout l = v1_layout("/recycler");
  EXPECT_EQ(parse_worker_of("4:memory:/user.slice\n", l), std::nullopt);
  EXPECT_EQ(parse_worker_of("4:memory:/recycler\n", l), std::nullopt) << "the root itself";
  EXPECT_EQ(parse_worker_of("4:memory:/recycler/web\n", l), std::nullopt) << "no slot";
  EXPECT_EQ(parse_worker_of("4:memory:/recycler-other/web/0\n", l), std::nullopt)
      << "a sibling root with the same prefix";
  EXPECT_EQ(parse_worker_of("4:memory:/recycler/web/x1\n", l), std::nullopt);
  EXPECT_EQ(parse_worker_of("4:memory:/recycler//0\n", l), std::nullopt);
  EXPECT_EQ(parse_worker_of("12:pids:/recycler/web/3\n", l), std::nullopt)
      << "only the first hierarchy's line counts";
  EXPECT_EQ(parse_worker_of("", l), std::nullopt);
  EXPECT_EQ(parse_worker_of("garbage without colons", l), std::nullopt);
  EXPECT_EQ(parse_worker_of("4:memory:/recycler/web/99999999999\n", l), std::nullopt);
}

TEST(ParseWorkerOf, TheV1ControllerMustMatchAWholeNameInTheList) {
  Layout l = v1_layout("/recycler");
  EXPECT_EQ(parse_worker_of("4:memoryx:/recycler/web/1\n", l), std::nullopt);
  EXPECT_EQ(parse_worker_of("4:hugetlb,memory:/recycler/web/1\n", l), (WorkerId{"web", 1}));
}

TEST(Detect, HybridHostUsesTheV1ControllersMemoryFirst) {
  FakeTree tree;
  Layout l = detect("recycler", paths_for(tree, "hybrid.mountinfo"));
  EXPECT_EQ(l.mode, Mode::Hybrid);
  EXPECT_THAT(controllers(l), ElementsAre("memory", "cpu", "freezer", "pids"));
  EXPECT_EQ(l.root, "/recycler");
  EXPECT_EQ(l.display_root(), tree.root() + "/sys/fs/cgroup/memory/recycler");
  EXPECT_TRUE(l.missing.empty());
  EXPECT_FALSE(l.not_enforced) << *l.not_enforced;
}

TEST(Detect, CoMountedCpuAndMissingPidsOnAPureV1Host) {
  FakeTree tree;
  Layout l = detect("workers/ml", paths_for(tree, "v1-comounted.mountinfo"));
  EXPECT_EQ(l.mode, Mode::V1);
  EXPECT_THAT(controllers(l), ElementsAre("memory", "cpu"));
  EXPECT_EQ(l.hierarchies[1].mount, tree.root() + "/sys/fs/cgroup/cpu,cpuacct");
  EXPECT_THAT(l.missing, ElementsAre("pids"));
  EXPECT_EQ(l.root, "/workers/ml");
}

TEST(Detect, V2DelegatedCgroupHoldingOnlyUsNeedsALeaf) {
  FakeTree tree;
  const std::string own = "/sys/fs/cgroup/system.slice/recycler.service";
  tree.write(own + "/cgroup.procs", std::to_string(::getpid()) + "\n");
  tree.write(own + "/cgroup.controllers", "cpuset cpu io memory pids\n");
  tree.write(own + "/cgroup.type", "domain\n");
  tree.write(own + "/cgroup.subtree_control", "");
  Layout l =
      detect("recycler", paths_for(tree, "v2.mountinfo", "0::/system.slice/recycler.service\n"));
  EXPECT_EQ(l.mode, Mode::V2);
  EXPECT_EQ(l.own, "/system.slice/recycler.service");
  EXPECT_EQ(l.root, "/system.slice/recycler.service/recycler");
  EXPECT_TRUE(l.needs_leaf);
  EXPECT_TRUE(l.missing.empty());
  EXPECT_FALSE(l.not_enforced) << *l.not_enforced;
  EXPECT_EQ(l.display_root(), tree.root() + own + "/recycler");
}

TEST(Detect, V2CgroupSharedWithOtherProcessesCannotBeDelegated) {
  FakeTree tree;
  const std::string own = "/sys/fs/cgroup/user.slice/session-1.scope";
  tree.write(own + "/cgroup.procs", "4242\n" + std::to_string(::getpid()) + "\n");
  tree.write(own + "/cgroup.controllers", "memory pids\n");
  tree.write(own + "/cgroup.type", "domain\n");
  Layout l =
      detect("recycler", paths_for(tree, "v2.mountinfo", "0::/user.slice/session-1.scope\n"));
  ASSERT_TRUE(l.not_enforced);
  EXPECT_THAT(*l.not_enforced, HasSubstr("also holds other processes (pid 4242)"));
  EXPECT_THAT(*l.not_enforced, HasSubstr("Delegate=yes"));
  EXPECT_THAT(l.missing, ElementsAre("cpu"));
}

TEST(Detect, V2RealRootNeedsNoLeaf) {
  FakeTree tree;
  tree.write("/sys/fs/cgroup/cgroup.procs", "1\n2\n");
  tree.write("/sys/fs/cgroup/cgroup.controllers", "cpu memory pids\n");
  Layout l = detect("recycler", paths_for(tree, "v2.mountinfo", "0::/\n"));
  EXPECT_EQ(l.root, "/recycler");
  EXPECT_FALSE(l.needs_leaf) << "the root cgroup may hold processes and delegate at once";
  EXPECT_FALSE(l.not_enforced);
}

TEST(Detect, AnAbsoluteRootIsTakenFromTheTopOfTheHierarchy) {
  FakeTree tree;
  tree.mkdir("/sys/fs/cgroup/elsewhere");
  tree.write("/sys/fs/cgroup/system.slice/x.service/cgroup.type", "domain\n");
  Layout l =
      detect("/elsewhere/workers", paths_for(tree, "v2.mountinfo", "0::/system.slice/x.service\n"));
  EXPECT_EQ(l.root, "/elsewhere/workers");
  EXPECT_FALSE(l.needs_leaf);
}

TEST(Detect, AV1KernelWithoutSwapAccountingLacksTheMemswFiles) {
  FakeTree tree;
  tree.write("/sys/fs/cgroup/memory/memory.limit_in_bytes", "9223372036854771712\n");
  EXPECT_THAT(detect("recycler", paths_for(tree, "hybrid.mountinfo")).absent_files,
              ElementsAre("memory.memsw.limit_in_bytes"));
  tree.write("/sys/fs/cgroup/memory/memory.memsw.limit_in_bytes", "9223372036854771712\n");
  EXPECT_THAT(detect("recycler", paths_for(tree, "hybrid.mountinfo")).absent_files, IsEmpty());
}

TEST(Detect, WithoutAMemoryCgroupToLookAtNothingIsCalledAbsent) {
  FakeTree tree;  // no files at all: a fixture, or a v2 root cgroup
  EXPECT_THAT(detect("recycler", paths_for(tree, "hybrid.mountinfo")).absent_files, IsEmpty());
}

TEST(Detect, AV2KernelWithoutSwapAccountingLacksMemorySwapMaxInOurOwnCgroup) {
  FakeTree tree;
  const std::string own = "/sys/fs/cgroup/system.slice/recycler.service";
  tree.write(own + "/cgroup.procs", std::to_string(::getpid()) + "\n");
  tree.write(own + "/cgroup.controllers", "cpu memory pids\n");
  tree.write(own + "/cgroup.type", "domain\n");
  tree.write(own + "/cgroup.subtree_control", "");
  for (const char* file : {"memory.max", "memory.low", "memory.oom.group"})
    tree.write(own + "/" + file, "0\n");
  Layout l =
      detect("recycler", paths_for(tree, "v2.mountinfo", "0::/system.slice/recycler.service\n"));
  EXPECT_THAT(l.absent_files, ElementsAre("memory.swap.max"));
}

TEST(Detect, NoCgroupFilesystemMeansNothingIsEnforced) {
  FakeTree tree;
  Layout l = detect("recycler", paths_for(tree, "none.mountinfo"));
  EXPECT_EQ(l.mode, Mode::None);
  ASSERT_TRUE(l.not_enforced);
  EXPECT_THAT(*l.not_enforced, HasSubstr("no cgroup filesystem"));
}

TEST(Detect, UnreadableMountinfoIsReported) {
  Paths p;
  p.mountinfo = "/nonexistent/mountinfo";
  Layout l = detect("recycler", p);
  ASSERT_TRUE(l.not_enforced);
  EXPECT_THAT(*l.not_enforced, HasSubstr("/nonexistent/mountinfo"));
}

}  // namespace
}  // namespace recycler::cgroup
