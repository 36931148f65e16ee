// common/memory_snapshot: staging a held snapshot's shards for a resume, on real files.
#include "common/memory_snapshot.h"

#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <string>

#include <gtest/gtest.h>

#include "common/crc32c.h"
#include "common/file_util.h"

namespace eft::snapshot {
namespace {

namespace fs = std::filesystem;

class MemorySnapshotFilesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (fs::temp_directory_path() / "eft-memory-snapshot-XXXXXX").string();
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { fs::remove_all(dir_); }

  // A held shard file of `bytes` random bytes, and its record.
  ShardRecord Held(const std::string& path, int rank, int world, int64_t step, size_t bytes) {
    std::string data(bytes, '\0');
    std::mt19937 gen(static_cast<uint32_t>(rank * 7 + step));
    for (char& c : data) c = static_cast<char>(gen());
    fs::create_directories(fs::path(path).parent_path());
    std::ofstream(path, std::ios::binary).write(data.data(), static_cast<std::streamsize>(data.size()));
    ShardRecord r;
    r.step = step;
    r.rank = rank;
    r.world_size = world;
    r.bytes = static_cast<int64_t>(bytes);
    r.crc32c = Crc32c(data.data(), data.size());
    return r;
  }
  std::string dir_;
};

TEST(MemorySnapshotNamesTest, StagedDirectoriesAreStepNDotSnapshot) {
  EXPECT_EQ(ShardFileName(3, 8), "rank-00003-of-00008.safetensors");
  EXPECT_EQ(HeldStepDir("/dev/shm/eft/job-1/attempt-2", 40), "/dev/shm/eft/job-1/attempt-2/step-40");
  EXPECT_EQ(StagedDir("/ckpt", 137), "/ckpt/step-137.snapshot");
  int64_t step = 0;
  EXPECT_TRUE(IsStagedDir("/ckpt/step-137.snapshot", &step));
  EXPECT_EQ(step, 137);
  EXPECT_TRUE(IsStagedDir("/ckpt/step-9.snapshot/", &step));
  EXPECT_EQ(step, 9);
  for (const char* not_staged : {"/ckpt/step-137", "/ckpt/step-137.tmp", "/ckpt/step-.snapshot", "/ckpt/step-1x.snapshot",
                                 "auto", "", "/ckpt/x-1.snapshot"}) {
    EXPECT_FALSE(IsStagedDir(not_staged)) << not_staged;
  }
}

// The worker's replication note to a rank: written whole, read back; absent or damaged: none.
TEST_F(MemorySnapshotFilesTest, AReplicationNoteIsReadBackAndNothingElseIsTakenForOne) {
  EXPECT_FALSE(ReadReplicationNote(dir_, 3).has_value());
  ASSERT_TRUE(WriteReplicationNote(dir_, 3, {42, 0.125, 1 << 20}).ok());
  EXPECT_EQ(ReplicationNotePath(dir_, 3), dir_ + "/replicated-rank-00003");
  auto note = ReadReplicationNote(dir_, 3);
  ASSERT_TRUE(note.has_value());
  EXPECT_EQ(note->step, 42);
  EXPECT_DOUBLE_EQ(note->seconds, 0.125);
  EXPECT_EQ(note->bytes, 1 << 20);
  ASSERT_TRUE(WriteReplicationNote(dir_, 3, {43, 0.5, 10}).ok());
  EXPECT_EQ(ReadReplicationNote(dir_, 3)->step, 43) << "replaced whole";
  EXPECT_FALSE(fs::exists(ReplicationNotePath(dir_, 3) + ".tmp"));
  for (const std::string& bad : {std::string("43 0.5"), std::string("43 0.5 10"), std::string("x 0.5 10\n"),
                                 std::string("43 -1 10\n"), std::string("-4 0.5 10\n"), std::string("")}) {
    ASSERT_TRUE(WriteStringToFile(ReplicationNotePath(dir_, 3), bad).ok());
    EXPECT_FALSE(ReadReplicationNote(dir_, 3).has_value()) << "'" << bad << "'";
  }
}

TEST_F(MemorySnapshotFilesTest, StagedShardsAreByteForByteTheHeldOnesWithTheirRecords) {
  const std::string staged = StagedDir(dir_ + "/ckpt", 12);
  std::vector<ShardRecord> records;
  for (int r = 0; r < 3; ++r) {
    const std::string held = dir_ + "/held/node" + std::to_string(r) + "/" + ShardFileName(r, 3);
    records.push_back(Held(held, r, 3, 12, 100000 + 17 * r));
    ASSERT_TRUE(StageShard(held, records.back(), staged).ok());
    auto copied = ReadFileToString(staged + "/" + ShardFileName(r, 3));
    ASSERT_TRUE(copied.ok());
    EXPECT_EQ(*copied, *ReadFileToString(held));
  }
  auto read = ReadStagedRecords(staged);
  ASSERT_TRUE(read.ok()) << read.status();
  ASSERT_EQ(read->size(), 3u);
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ((*read)[r].rank, r);
    EXPECT_EQ((*read)[r].step, 12);
    EXPECT_EQ((*read)[r].bytes, records[r].bytes);
    EXPECT_EQ((*read)[r].crc32c, records[r].crc32c);
  }
  EXPECT_FALSE(fs::exists(staged + "/" + ShardFileName(0, 3) + ".partial"));
}

TEST_F(MemorySnapshotFilesTest, ADamagedHeldCopyIsRefusedAndLeavesNothingStaged) {
  const std::string held = dir_ + "/held/" + ShardFileName(1, 2);
  ShardRecord r = Held(held, 1, 2, 5, 4096);
  {
    std::fstream f(held, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(100);
    const char c = static_cast<char>(f.get());
    f.seekp(100);
    f.put(static_cast<char>(~c));  // one byte's bits flipped, as a memory error would
  }
  const std::string staged = StagedDir(dir_ + "/ckpt", 5);
  Status s = StageShard(held, r, staged);
  EXPECT_EQ(s.code(), StatusCode::kDataLoss) << s;
  EXPECT_NE(s.message().find("is damaged"), std::string::npos) << s;
  EXPECT_FALSE(fs::exists(staged + "/" + ShardFileName(1, 2)));
  EXPECT_FALSE(fs::exists(staged + "/" + ShardFileName(1, 2) + ".partial"));
  // A truncated one too.
  fs::resize_file(held, 1000);
  EXPECT_EQ(StageShard(held, r, staged).code(), StatusCode::kDataLoss);
  // And one that is gone (its node's memory went with it).
  fs::remove(held);
  EXPECT_EQ(StageShard(held, r, staged).code(), StatusCode::kNotFound);
}

TEST_F(MemorySnapshotFilesTest, AMissingRankOrMixedSnapshotsAreNamed) {
  const std::string staged = StagedDir(dir_ + "/ckpt", 8);
  for (int r : {0, 2}) {
    const std::string held = dir_ + "/held/" + ShardFileName(r, 3);
    ASSERT_TRUE(StageShard(held, Held(held, r, 3, 8, 512), staged).ok());
  }
  auto read = ReadStagedRecords(staged);
  ASSERT_FALSE(read.ok());
  EXPECT_EQ(read.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(read.status().message().find("rank 1 of 3 was not staged (2 of 3 shards are there)"), std::string::npos)
      << read.status();

  // Rank 1 of another step in the same directory.
  const std::string other = dir_ + "/held/other/" + ShardFileName(1, 3);
  ASSERT_TRUE(StageShard(other, Held(other, 1, 3, 9, 512), staged).ok());
  read = ReadStagedRecords(staged);
  ASSERT_FALSE(read.ok());
  EXPECT_NE(read.status().message().find("records of two snapshots"), std::string::npos) << read.status();

  // A record whose file is gone, and a record that is not one.
  fs::remove(staged + "/" + ShardFileName(1, 3) + kRecordSuffix);
  const std::string held1 = dir_ + "/held/" + ShardFileName(1, 3);
  ASSERT_TRUE(StageShard(held1, Held(held1, 1, 3, 8, 512), staged).ok());
  ASSERT_TRUE(ReadStagedRecords(staged).ok());
  fs::remove(staged + "/" + ShardFileName(2, 3));
  read = ReadStagedRecords(staged);
  ASSERT_FALSE(read.ok());
  EXPECT_NE(read.status().message().find("recorded but missing"), std::string::npos) << read.status();
  ASSERT_TRUE(WriteStringToFile(staged + "/" + ShardFileName(2, 3) + kRecordSuffix, "{\"step\": \"eight\"}").ok());
  EXPECT_EQ(ReadStagedRecords(staged).status().code(), StatusCode::kDataLoss);
  EXPECT_EQ(ReadStagedRecords(dir_ + "/nothing.snapshot").status().code(), StatusCode::kNotFound);
}

// A full disk while staging (simulated with a file size limit, which fails writes with EFBIG as a full
// quota would): an I/O error naming the file, and no partial file left behind.
TEST_F(MemorySnapshotFilesTest, AFullDiskWhileStagingIsAnIoErrorAndLeavesNoPartialFile) {
  const std::string held = dir_ + "/held/" + ShardFileName(0, 1);
  const ShardRecord r = Held(held, 0, 1, 3, 1 << 20);
  const std::string staged = StagedDir(dir_ + "/ckpt", 3);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ::signal(SIGXFSZ, SIG_IGN);
    struct rlimit limit = {64 * 1024, 64 * 1024};
    ::setrlimit(RLIMIT_FSIZE, &limit);
    const Status s = StageShard(held, r, staged);
    const bool named = s.message().find(ShardFileName(0, 1)) != std::string::npos;
    ::_exit(s.code() == StatusCode::kInternal && named ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "StageShard under a 64 KiB file size limit must fail with an I/O error (kInternal) naming the file";
  EXPECT_FALSE(fs::exists(staged + "/" + ShardFileName(0, 1)));
  EXPECT_FALSE(fs::exists(staged + "/" + ShardFileName(0, 1) + ".partial"));
}

}  // namespace
}  // namespace eft::snapshot
