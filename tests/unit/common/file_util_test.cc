#include "common/file_util.h"

#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>

#include <gtest/gtest.h>

namespace eft {
namespace {

class ReadFileToStringTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (std::filesystem::temp_directory_path() / "eft-file-util-XXXXXX").string();
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string Write(const std::string& name, const std::string& bytes) {
    std::string path = dir_ + "/" + name;
    std::ofstream(path, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    return path;
  }
  std::string dir_;
};

TEST_F(ReadFileToStringTest, MissingFileIsNotFoundNamingThePathAndReason) {
  std::string path = dir_ + "/missing.txt";
  auto r = ReadFileToString(path);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(r.status().message(), "cannot read " + path + ": No such file or directory");
}

TEST_F(ReadFileToStringTest, DirectoryIsAnErrorNamingThePath) {
  auto r = ReadFileToString(dir_);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(), "cannot read " + dir_ + ": Is a directory");
}

// Root reads files whatever their mode, so as root (CI) the read runs in a child that has become
// `nobody`; its status comes back through a pipe.
TEST_F(ReadFileToStringTest, UnreadableFileIsPermissionDenied) {
  std::string path = Write("secret", "x");
  ASSERT_EQ(::chmod(path.c_str(), 0), 0);
  if (::geteuid() != 0) {
    auto r = ReadFileToString(path);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), StatusCode::kPermissionDenied);
    EXPECT_NE(r.status().message().find(path), std::string::npos) << r.status();
    return;
  }
  ASSERT_EQ(::chmod(dir_.c_str(), 0711), 0);  // nobody may pass through the directory, not read the file
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0) << std::strerror(errno);
  if (child == 0) {
    ::close(fds[0]);
    std::string report;
    if (::setresgid(65534, 65534, 65534) != 0 || ::setresuid(65534, 65534, 65534) != 0) {
      report = "setresuid(nobody) failed: " + std::string(std::strerror(errno));
    } else {
      auto r = ReadFileToString(path);
      report = r.ok() ? "read it" : std::to_string(static_cast<int>(r.status().code())) + " " + r.status().message();
    }
    (void)!::write(fds[1], report.data(), report.size());
    ::_exit(0);
  }
  ::close(fds[1]);
  std::string report;
  char buf[512];
  for (ssize_t n; (n = ::read(fds[0], buf, sizeof(buf))) > 0;) report.append(buf, static_cast<size_t>(n));
  ::close(fds[0]);
  int wstatus = 0;
  ASSERT_EQ(::waitpid(child, &wstatus, 0), child);
  EXPECT_EQ(report.rfind(std::to_string(static_cast<int>(StatusCode::kPermissionDenied)) + " ", 0), 0u) << report;
  EXPECT_NE(report.find(path), std::string::npos) << report;
}

TEST_F(ReadFileToStringTest, EmptyFileIsEmptyString) {
  auto r = ReadFileToString(Write("empty", ""));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(*r, "");
}

TEST_F(ReadFileToStringTest, BinaryContentComesBackByteForByte) {
  std::string bytes;
  for (int i = 0; i < 3 * 64 * 1024 + 17; ++i) bytes.push_back(static_cast<char>((i * 7919) & 0xff));
  bytes[5] = '\0';
  bytes[6] = '\r';
  auto r = ReadFileToString(Write("blob", bytes));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->size(), bytes.size());
  EXPECT_EQ(*r, bytes);
}

TEST_F(ReadFileToStringTest, ProcFilesThatReportSizeZeroAreReadToTheEnd) {
  auto r = ReadFileToString("/proc/self/stat");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->rfind(std::to_string(::getpid()) + " (", 0), 0u) << *r;
}

TEST_F(ReadFileToStringTest, WriteStringToFileWritesAndReplacesExactly) {
  const std::string path = dir_ + "/out";
  ASSERT_TRUE(WriteStringToFile(path, "a longer first text").ok());
  ASSERT_TRUE(WriteStringToFile(path, std::string("b\0c", 3)).ok());
  EXPECT_EQ(*ReadFileToString(path), std::string("b\0c", 3));
}

// A full disk must be recognisable as one (the checkpointer matches the system's reason to tell a
// full storage from other failures: docs/checkpoints.md, "When a save fails"). /dev/full fails
// every write with ENOSPC.
TEST_F(ReadFileToStringTest, WriteStringToFileNamesThePathAndTheSystemsReason) {
  Status full = WriteStringToFile("/dev/full", "x");
  EXPECT_EQ(full.code(), StatusCode::kInternal);  // Status::IoError
  EXPECT_NE(full.message().find("/dev/full"), std::string::npos) << full;
  EXPECT_NE(full.message().find(std::strerror(ENOSPC)), std::string::npos) << full;
  Status missing = WriteStringToFile(dir_ + "/no/such/dir/f", "x");
  EXPECT_NE(missing.message().find(std::strerror(ENOENT)), std::string::npos) << missing;
}

}  // namespace
}  // namespace eft
