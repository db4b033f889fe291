// open_private_dir and open_private_file: what another local user could plant
// or swap on the way to a file recycler writes is refused, with the reason.
#include "supervisor/util/safe_dir.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

namespace recycler {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

constexpr uid_t kNobody = 65534;

class SafeDir : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/recycler-safe-dir-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    tmp_ = tmpl;
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(tmp_, ec);
  }
  std::string mkdir(const std::string& name, mode_t mode) const {
    std::string path = tmp_ + "/" + name;
    EXPECT_EQ(::mkdir(path.c_str(), 0700), 0) << path;
    EXPECT_EQ(::chmod(path.c_str(), mode), 0);
    return path;
  }
  static std::string read(const std::string& path) {
    std::ifstream in(path);
    return std::string(std::istreambuf_iterator<char>(in), {});
  }

  std::string tmp_;
};

#define REQUIRE_ROOT() \
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to give files to another user"

TEST_F(SafeDir, CreatesTheDirectoryAndItsParentsOwnerOnly) {
  auto dir = open_private_dir(tmp_ + "/a/b/c", 0750);
  ASSERT_TRUE(dir.ok()) << dir.error().message;
  struct stat st {};
  ASSERT_EQ(::stat((tmp_ + "/a/b/c").c_str(), &st), 0);
  EXPECT_TRUE(S_ISDIR(st.st_mode));
  EXPECT_EQ(st.st_mode & 0027, 0u);
  ASSERT_EQ(::stat((tmp_ + "/a").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0027, 0u);
}

TEST_F(SafeDir, ReturnsADirectoryFdThatFilesAreOpenedIn) {
  auto dir = open_private_dir(tmp_ + "/d", 0750);
  ASSERT_TRUE(dir.ok()) << dir.error().message;
  auto fd = open_private_file(dir->get(), "f.csv", O_WRONLY | O_CREAT | O_APPEND, 0640);
  ASSERT_TRUE(fd.ok()) << fd.error().message;
  ASSERT_EQ(::write(fd->get(), "x\n", 2), 2);
  EXPECT_EQ(read(tmp_ + "/d/f.csv"), "x\n");
}

TEST_F(SafeDir, AcceptsAStickyWorldWritableParentLikeTmp) {
  std::string sticky = mkdir("sticky", 01777);
  auto dir = open_private_dir(sticky + "/mine", 0750);
  EXPECT_TRUE(dir.ok()) << dir.error().message;
}

TEST_F(SafeDir, RefusesAWorldWritableParentWithoutTheStickyBit) {
  std::string open = mkdir("open", 0777);
  auto dir = open_private_dir(open + "/mine", 0750);
  ASSERT_FALSE(dir.ok());
  EXPECT_EQ(dir.error().message, open +
                                     ": writable by other users (mode 0777) without the sticky "
                                     "bit; refusing to write there");
  EXPECT_FALSE(fs::exists(open + "/mine")) << "nothing created past the unsafe directory";
}

TEST_F(SafeDir, RefusesAGroupWritableDirectoryItself) {
  std::string dir = mkdir("shared", 0770);
  auto opened = open_private_dir(dir, 0750);
  ASSERT_FALSE(opened.ok());
  EXPECT_THAT(opened.error().message, HasSubstr("writable by other users (mode 0770)"));
}

TEST_F(SafeDir, RefusesADirectoryOwnedByAnotherUser) {
  REQUIRE_ROOT();
  std::string sticky = mkdir("tmp", 01777);
  // Another user created the directory first (the example's predictable path).
  std::string theirs = sticky + "/timelines";
  ASSERT_EQ(::mkdir(theirs.c_str(), 0755), 0);
  ASSERT_EQ(::chown(theirs.c_str(), kNobody, kNobody), 0);
  auto dir = open_private_dir(theirs, 0750);
  ASSERT_FALSE(dir.ok());
  EXPECT_EQ(
      dir.error().message,
      theirs + ": owned by uid 65534, not by recycler's user (uid 0); refusing to write there");
}

TEST_F(SafeDir, RefusesAParentOwnedByAnotherUser) {
  REQUIRE_ROOT();
  std::string theirs = mkdir("theirs", 0755);
  ASSERT_EQ(::chown(theirs.c_str(), kNobody, kNobody), 0);
  auto dir = open_private_dir(theirs + "/timelines", 0750);
  ASSERT_FALSE(dir.ok());
  EXPECT_THAT(dir.error().message, HasSubstr("owned by uid 65534, not by root or recycler's user"));
}

TEST_F(SafeDir, FollowsItsOwnSymlinksButNotAnotherUsers) {
  std::string target = mkdir("target", 0750);
  fs::create_symlink(target, tmp_ + "/mine");
  auto dir = open_private_dir(tmp_ + "/mine/sub", 0750);
  ASSERT_TRUE(dir.ok()) << dir.error().message;
  EXPECT_TRUE(fs::is_directory(target + "/sub"));

  if (::geteuid() != 0) return;
  std::string sticky = mkdir("tmp", 01777);
  fs::create_symlink(target, sticky + "/planted");
  ASSERT_EQ(::lchown((sticky + "/planted").c_str(), kNobody, kNobody), 0);
  auto refused = open_private_dir(sticky + "/planted", 0750);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.error().message,
            sticky +
                "/planted: a symlink owned by uid 65534 (only root's and recycler's own are "
                "followed); refusing to write there");
}

TEST_F(SafeDir, ResolvesRelativeAndAbsoluteSymlinksOnTheWay) {
  std::string real = mkdir("real", 0750);
  fs::create_symlink("real", tmp_ + "/rel");
  fs::create_symlink(tmp_ + "/rel", tmp_ + "/abs");
  auto dir = open_private_dir(tmp_ + "/abs/x", 0750);
  ASSERT_TRUE(dir.ok()) << dir.error().message;
  EXPECT_TRUE(fs::is_directory(real + "/x"));
}

TEST_F(SafeDir, ASymlinkLoopIsAnError) {
  fs::create_symlink(tmp_ + "/b", tmp_ + "/a");
  fs::create_symlink(tmp_ + "/a", tmp_ + "/b");
  auto dir = open_private_dir(tmp_ + "/a", 0750);
  ASSERT_FALSE(dir.ok());
  EXPECT_EQ(dir.error().code, ELOOP);
}

TEST_F(SafeDir, AFileIsNeverOpenedThroughASymlink) {
  auto dir = open_private_dir(tmp_ + "/d", 0750);
  ASSERT_TRUE(dir.ok());
  std::ofstream(tmp_ + "/precious") << "keep";
  fs::create_symlink(tmp_ + "/precious", tmp_ + "/d/f.csv");
  auto fd = open_private_file(dir->get(), "f.csv", O_WRONLY | O_CREAT | O_TRUNC, 0640);
  ASSERT_FALSE(fd.ok());
  EXPECT_EQ(fd.error().message, "f.csv: a symlink; refusing to write through it");
  EXPECT_EQ(read(tmp_ + "/precious"), "keep");
}

TEST_F(SafeDir, AFifoIsRefusedWithoutBlocking) {
  auto dir = open_private_dir(tmp_ + "/d", 0750);
  ASSERT_TRUE(dir.ok());
  ASSERT_EQ(::mkfifo((tmp_ + "/d/f.csv").c_str(), 0600), 0);
  // With a reader waiting, the open succeeds: the type check refuses it.
  int reader = ::open((tmp_ + "/d/f.csv").c_str(), O_RDONLY | O_NONBLOCK);
  ASSERT_GE(reader, 0);
  auto fd = open_private_file(dir->get(), "f.csv", O_WRONLY | O_CREAT | O_APPEND, 0640);
  ::close(reader);
  ASSERT_FALSE(fd.ok());
  EXPECT_EQ(fd.error().message, "f.csv: not a regular file; refusing it");
  // Without one, it fails at once (ENXIO) instead of waiting for a reader.
  auto again = open_private_file(dir->get(), "f.csv", O_WRONLY | O_CREAT | O_APPEND, 0640);
  EXPECT_FALSE(again.ok());
}

TEST_F(SafeDir, AHardLinkToAnotherFileIsRefusedAndNotTruncated) {
  auto dir = open_private_dir(tmp_ + "/d", 0750);
  ASSERT_TRUE(dir.ok());
  std::ofstream(tmp_ + "/precious") << "keep";
  ASSERT_EQ(::link((tmp_ + "/precious").c_str(), (tmp_ + "/d/f.csv").c_str()), 0);
  auto fd = open_private_file(dir->get(), "f.csv", O_WRONLY | O_CREAT | O_TRUNC, 0640);
  ASSERT_FALSE(fd.ok());
  EXPECT_EQ(fd.error().message, "f.csv: has 2 links; refusing it");
  EXPECT_EQ(read(tmp_ + "/precious"), "keep");
}

TEST_F(SafeDir, AFileOfAnotherUserIsRefused) {
  REQUIRE_ROOT();
  auto dir = open_private_dir(tmp_ + "/d", 0750);
  ASSERT_TRUE(dir.ok());
  std::ofstream(tmp_ + "/d/f.csv") << "theirs";
  ASSERT_EQ(::chown((tmp_ + "/d/f.csv").c_str(), kNobody, kNobody), 0);
  auto fd = open_private_file(dir->get(), "f.csv", O_WRONLY | O_APPEND, 0640);
  ASSERT_FALSE(fd.ok());
  EXPECT_EQ(fd.error().message,
            "f.csv: owned by uid 65534, not by recycler's user (uid 0); refusing it");
}

// A socket's directory: a sticky /tmp lets anyone bind the name first.
TEST_F(SafeDir, ASocketsDirectoryMayNotBeWritableByOthersEvenWithTheStickyBit) {
  std::string sticky = mkdir("sticky", 01777);
  auto refused = open_private_dir(sticky, 0755, Shared::Never);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.error().message, sticky +
                                         ": writable by other users (mode 1777): any of them "
                                         "could take a name there first; refusing to write there");
  EXPECT_TRUE(open_private_dir(sticky, 0755).ok()) << "fine for files recycler checks itself";
  EXPECT_TRUE(open_private_dir(sticky + "/mine", 0755, Shared::Never).ok())
      << "a private directory under it is fine";
}

// What `recycler check` says of a socket's directory is what `run` would do
// there, without creating anything: another user's directory is refused as
// a sticky one is; a directory still to be made is fine.
TEST_F(SafeDir, CheckingASocketsDirectoryAppliesTheRulesOfOpeningItAndCreatesNothing) {
  REQUIRE_ROOT();
  constexpr const char* kRefusing = "not a place for recycler's socket";
  std::string theirs = mkdir("theirs", 0755);
  ASSERT_EQ(::chown(theirs.c_str(), kNobody, kNobody), 0);
  Status s = check_private_dir(theirs, Shared::Never, kRefusing);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().message, theirs +
                                   ": owned by uid 65534, not by recycler's user (uid 0); not a "
                                   "place for recycler's socket");
  EXPECT_FALSE(open_private_dir(theirs, 0755, Shared::Never).ok()) << "run refuses it too";
  std::string sticky = mkdir("sticky", 01777);
  EXPECT_FALSE(check_private_dir(sticky, Shared::Never, kRefusing).ok());
  EXPECT_TRUE(check_private_dir(sticky, Shared::Sticky, kRefusing).ok());
  std::string missing = tmp_ + "/mine/run";
  EXPECT_TRUE(check_private_dir(missing, Shared::Never, kRefusing).ok());
  EXPECT_FALSE(fs::exists(tmp_ + "/mine")) << "nothing is created";
  EXPECT_FALSE(check_private_dir(theirs + "/under", Shared::Never, kRefusing).ok())
      << "what exists on the way is checked";
}

std::string write_file(const std::string& path, mode_t mode) {
  std::ofstream(path) << "\x7f"
                         "ELF";
  EXPECT_EQ(::chmod(path.c_str(), mode), 0);
  return path;
}

TEST_F(SafeDir, ATrustedFileIsOpenedReadOnlyThroughTrustedSymlinks) {
  std::string lib = mkdir("lib", 0755);
  write_file(lib + "/libx.so.1.2", 0644);
  fs::create_symlink("libx.so.1.2", lib + "/libx.so.1");
  fs::create_symlink(lib, tmp_ + "/alias");
  auto fd = open_trusted_file(tmp_ + "/alias/libx.so.1");
  ASSERT_TRUE(fd.ok()) << fd.error().message;
  char buf[4] = {};
  EXPECT_EQ(::read(fd->get(), buf, 4), 4);
  EXPECT_EQ(std::string(buf, 4),
            "\x7f"
            "ELF");
  EXPECT_FALSE(open_trusted_file(lib + "/missing.so").ok());
}

TEST_F(SafeDir, AFileOthersCanWriteIsNotTrustedNorIsItsDirectory) {
  std::string lib = mkdir("lib", 0755);
  write_file(lib + "/open.so", 0666);
  auto file = open_trusted_file(lib + "/open.so");
  ASSERT_FALSE(file.ok());
  EXPECT_EQ(file.error().message,
            lib + "/open.so: writable by other users (mode 0666); refusing to load it");

  std::string open = mkdir("open", 0777);
  write_file(open + "/lib.so", 0644);
  auto dir = open_trusted_file(open + "/lib.so");
  ASSERT_FALSE(dir.ok());
  EXPECT_EQ(dir.error().message, open +
                                     ": writable by other users (mode 0777) without the sticky "
                                     "bit; refusing to load from there");
}

TEST_F(SafeDir, AFileOrSymlinkOfAnotherUserIsNotTrusted) {
  REQUIRE_ROOT();
  std::string lib = mkdir("lib", 0755);
  write_file(lib + "/theirs.so", 0644);
  ASSERT_EQ(::chown((lib + "/theirs.so").c_str(), kNobody, kNobody), 0);
  auto file = open_trusted_file(lib + "/theirs.so");
  ASSERT_FALSE(file.ok());
  EXPECT_EQ(file.error().message, lib +
                                      "/theirs.so: owned by uid 65534, not by root or recycler's "
                                      "user (uid 0); refusing to load it");

  write_file(lib + "/mine.so", 0644);
  std::string sticky = mkdir("tmp", 01777);
  fs::create_symlink(lib + "/mine.so", sticky + "/planted.so");
  ASSERT_EQ(::lchown((sticky + "/planted.so").c_str(), kNobody, kNobody), 0);
  auto link = open_trusted_file(sticky + "/planted.so");
  ASSERT_FALSE(link.ok());
  EXPECT_THAT(link.error().message, HasSubstr("planted.so: a symlink owned by uid 65534"));
}

}  // namespace
}  // namespace recycler
