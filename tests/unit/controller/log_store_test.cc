#include "controller/log_store.h"
#include "controller/records.h"

#include <filesystem>

#include <gtest/gtest.h>

namespace eft::controller {
namespace {

namespace fs = std::filesystem;

class LogStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() / ("eft-logstore-" + std::to_string(::getpid()));
    fs::remove_all(root_);
  }
  void TearDown() override { fs::remove_all(root_); }
  fs::path root_;
};

TEST_F(LogStoreTest, AppendsAtOffsetsWithoutDuplicatesOrGaps) {
  LogStore logs(root_.string());
  LogId id{"7", 2, 1};
  EXPECT_EQ(logs.Size(id), 0);
  EXPECT_EQ(*logs.Append(id, 0, "hello "), 6);
  EXPECT_EQ(*logs.Append(id, 0, "hello "), 6) << "a retried chunk is not written twice";
  EXPECT_EQ(*logs.Append(id, 3, "lo world"), 11) << "an overlapping chunk adds only its new bytes";
  EXPECT_EQ(*logs.Append(id, 20, "gap"), 11) << "a chunk past the end is refused; the end says where to resume";
  EXPECT_EQ(*logs.Read(id, 0, 100), "hello world");
  EXPECT_EQ(*logs.Read(id, 6, 3), "wor");
  EXPECT_EQ(*logs.Read(id, 11, 10), "");
  EXPECT_EQ(*logs.Read(LogId{"7", 9, 9}, 0, 10), "") << "a missing log reads as empty";
}

TEST_F(LogStoreTest, ListsLogsByAttemptThenRank) {
  LogStore logs(root_.string());
  ASSERT_TRUE(logs.Append({"3", 2, 0}, 0, "x").ok());
  ASSERT_TRUE(logs.Append({"3", 1, 10}, 0, "x").ok());
  ASSERT_TRUE(logs.Append({"3", 1, 2}, 0, "x").ok());
  ASSERT_TRUE(logs.Append({"4", 1, 0}, 0, "x").ok());
  std::vector<LogId> ids = logs.List("3");
  ASSERT_EQ(ids.size(), 3u);
  EXPECT_EQ(ids[0], (LogId{"3", 1, 2}));
  EXPECT_EQ(ids[1], (LogId{"3", 1, 10}));
  EXPECT_EQ(ids[2], (LogId{"3", 2, 0}));
  EXPECT_TRUE(logs.List("5").empty());
}

TEST_F(LogStoreTest, RefusesIdsThatCouldEscapeTheDirectory) {
  LogStore logs(root_.string());
  EXPECT_FALSE(logs.Append({"../etc", 1, 0}, 0, "x").ok());
  EXPECT_FALSE(logs.Append({"1", -1, 0}, 0, "x").ok());
  EXPECT_FALSE(logs.Append({"1", 1, 0}, -5, "x").ok());
  EXPECT_TRUE(logs.List("../..").empty());
  // Job ids become directory names: only ids the controller issues (records.h) are accepted.
  EXPECT_TRUE(IsJobId("123"));
  EXPECT_FALSE(IsJobId(""));
  EXPECT_FALSE(IsJobId("1/2"));
}

}  // namespace
}  // namespace eft::controller
