// The container recycler runs in (runtime/container_watch.h): its memory
// cgroup found under the mount even where /proc/self/cgroup names the host's
// path, its v1 and v2 files read, and a resize seen at the next reading.
#include "supervisor/runtime/container_watch.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "tests/support/fakes.h"

namespace recycler {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

class ContainerWatchTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/container-watch-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { fs::remove_all(dir_); }
  void write(const std::string& name, const std::string& text) {
    fs::create_directories(fs::path(dir_ + "/" + name).parent_path());
    std::ofstream(dir_ + "/" + name) << text;
  }
  std::string dir_;
  testing::FakeTimers timers_;
};

TEST_F(ContainerWatchTest, AV1ContainerWithoutACgroupNamespaceIsTheMountItself) {
  // podman on v1: /proc/self/cgroup names /libpod_parent/libpod-ID, and the
  // container's own memory cgroup is what is mounted at .../memory.
  write("self_cgroup",
        "12:memory:/libpod_parent/libpod-4f2a\n11:pids:/libpod_parent/libpod-4f2a\n");
  write("fs/memory/memory.limit_in_bytes", "536870912\n");
  cgroup::Layout layout;
  layout.mode = cgroup::Mode::V1;
  layout.hierarchies = {{"pids", dir_ + "/fs/pids"}, {"memory", dir_ + "/fs/memory"}};
  cgroup::Paths paths;
  paths.self_cgroup = dir_ + "/self_cgroup";
  EXPECT_EQ(container_memory_dir(layout, paths), dir_ + "/fs/memory");
  // With the path there (a host, or a cgroup namespace), that path.
  write("fs/memory/libpod_parent/libpod-4f2a/memory.limit_in_bytes", "1073741824\n");
  EXPECT_EQ(container_memory_dir(layout, paths), dir_ + "/fs/memory/libpod_parent/libpod-4f2a");
  layout.hierarchies.clear();
  EXPECT_EQ(container_memory_dir(layout, paths), "");
}

TEST_F(ContainerWatchTest, V2FiguresAreReadAndAResizeIsSeenAtTheNextReading) {
  write("c/memory.max", "536870912\n");
  write("c/memory.current", "314572800\n");
  write("c/memory.events", "low 0\nhigh 0\nmax 12\noom 1\noom_kill 1\noom_group_kill 0\n");
  write("c/memory.pressure",
        "some avg10=3.50 avg60=1.00 avg300=0.20 total=123\nfull avg10=1.00 avg60=0.00 "
        "avg300=0.00 total=45\n");
  std::vector<std::optional<uint64_t>> limits;
  ContainerWatch watch(timers_, dir_ + "/c", true,
                       [&](std::optional<uint64_t> limit) { limits.push_back(limit); });
  EXPECT_THAT(limits, ::testing::ElementsAre(536870912u));
  EXPECT_EQ(watch.status().current, 314572800u);
  EXPECT_EQ(watch.status().oom_kills, 1u);
  EXPECT_DOUBLE_EQ(watch.status().pressure.value_or(-1), 3.5);
  timers_.advance(ContainerWatch::kInterval);
  EXPECT_EQ(limits.size(), 1u) << "the same limit again is no change";
  write("c/memory.max", "1073741824\n");  // resized in place
  timers_.advance(ContainerWatch::kInterval);
  EXPECT_THAT(limits, ::testing::ElementsAre(536870912u, 1073741824u));
  write("c/memory.max", "max\n");
  timers_.advance(ContainerWatch::kInterval);
  EXPECT_EQ(limits.back(), std::nullopt);
  EXPECT_EQ(watch.limit(), std::nullopt);
}

TEST_F(ContainerWatchTest, V1SaysNoLimitWithAHugeNumberAndOomKillsInOomControl) {
  write("m/memory.limit_in_bytes", "9223372036854771712\n");
  write("m/memory.usage_in_bytes", "1048576\n");
  write("m/memory.oom_control", "oom_kill_disable 0\nunder_oom 0\noom_kill 3\n");
  ContainerWatch watch(timers_, dir_ + "/m", false, nullptr);
  EXPECT_EQ(watch.limit(), std::nullopt);
  EXPECT_EQ(watch.status().current, 1048576u);
  EXPECT_EQ(watch.status().oom_kills, 3u);
  EXPECT_EQ(watch.status().pressure, std::nullopt);
}

}  // namespace
}  // namespace recycler
