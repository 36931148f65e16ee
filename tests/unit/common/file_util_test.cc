#include "common/file_util.h"

#include <sys/stat.h>
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

TEST_F(ReadFileToStringTest, UnreadableFileIsPermissionDenied) {
  if (::geteuid() == 0) GTEST_SKIP() << "SKIPPED LOUDLY: root reads files whatever their mode";
  std::string path = Write("secret", "x");
  ASSERT_EQ(::chmod(path.c_str(), 0), 0);
  auto r = ReadFileToString(path);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kPermissionDenied);
  EXPECT_NE(r.status().message().find(path), std::string::npos) << r.status();
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
