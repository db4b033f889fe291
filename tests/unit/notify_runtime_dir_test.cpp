// The run directory's lock: what another recycler's start may remove, and
// what it must leave to a recycler it cannot see (another pid namespace).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "supervisor/notify/runtime_dir.h"
#include "supervisor/util/fd.h"

namespace recycler::notify {
namespace {

namespace fs = std::filesystem;

// Above any pid_max: no process here has it, as a recycler's pid in
// another pid namespace is not seen here.
const std::string kUnseenPid = "999999998";

class RuntimeDirTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/recycler-rundir-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    base_ = std::string(tmpl) + "/recycler";
  }
  void TearDown() override { fs::remove_all(fs::path(base_).parent_path()); }

  // A run directory `name`, as another recycler made it; locked when `held`.
  UniqueFd run_dir(const std::string& name, bool held) {
    fs::create_directories(base_ + "/" + name + "/prog");
    UniqueFd fd(::open((base_ + "/" + name).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    EXPECT_TRUE(fd);
    if (held) {
      EXPECT_EQ(::flock(fd.get(), LOCK_EX | LOCK_NB), 0);
    }
    return fd;
  }

  std::string base_;
};

TEST_F(RuntimeDirTest, ADirectoryOfARecyclerThatIsGoneIsRemoved) {
  fs::create_directories(base_);
  UniqueFd other = run_dir(kUnseenPid, false);
  auto dir = RuntimeDir::open(base_);
  ASSERT_TRUE(dir) << dir.error().message;
  EXPECT_FALSE(fs::exists(base_ + "/" + kUnseenPid));
  EXPECT_EQ(dir->path(), base_ + "/" + std::to_string(::getpid()));
}

TEST_F(RuntimeDirTest, ALockedDirectoryIsKeptThoughItsPidIsNotSeenHere) {
  fs::create_directories(base_);
  UniqueFd other = run_dir(kUnseenPid, true);
  auto dir = RuntimeDir::open(base_);
  ASSERT_TRUE(dir) << dir.error().message;
  EXPECT_TRUE(fs::exists(base_ + "/" + kUnseenPid + "/prog"))
      << "a recycler of another pid namespace lost its notify sockets";
}

TEST_F(RuntimeDirTest, ALockedDirectoryWithThisPidIsKeptAndThisRunTakesAnotherName) {
  fs::create_directories(base_);
  std::string pid = std::to_string(::getpid());
  UniqueFd other = run_dir(pid, true);
  auto dir = RuntimeDir::open(base_);
  ASSERT_TRUE(dir) << dir.error().message;
  EXPECT_TRUE(fs::exists(base_ + "/" + pid + "/prog"));
  EXPECT_EQ(dir->path(), base_ + "/" + pid + "-1");
}

TEST_F(RuntimeDirTest, ItsOwnDirectoryIsLockedWhileItLastsAndRemovedAfter) {
  std::string path;
  {
    auto dir = RuntimeDir::open(base_);
    ASSERT_TRUE(dir) << dir.error().message;
    path = dir->path();
    UniqueFd probe(::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    ASSERT_TRUE(probe);
    EXPECT_NE(::flock(probe.get(), LOCK_EX | LOCK_NB), 0);
    EXPECT_EQ(errno, EWOULDBLOCK);
  }
  EXPECT_FALSE(fs::exists(path));
}

}  // namespace
}  // namespace recycler::notify
