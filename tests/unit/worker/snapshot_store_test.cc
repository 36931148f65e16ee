// SnapshotStore on real files in a temporary directory: taking a rank's file over, the retention
// bound, replicas (a damaged one refused), the budget, Keep, and staging a held and a missing rank.
#include "worker/snapshot_store.h"

#include <sys/statvfs.h>

#include <gtest/gtest.h>

#include <filesystem>

#include "tests/unit/worker/snapshot_test_util.h"

namespace eft::worker::testing {
namespace {

namespace fs = std::filesystem;

class SnapshotStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = MakeTempDir();
    ASSERT_FALSE(dir_.empty());
    Open(64 << 20);
  }
  void TearDown() override {
    store_.reset();
    fs::remove_all(dir_);
  }
  void Open(int64_t budget) {
    store_.reset();
    SnapshotStoreOptions o;
    o.root = dir_ + "/shm";
    o.budget_bytes = budget;
    o.clock = &clock_;
    auto s = SnapshotStore::Open(o);
    ASSERT_TRUE(s.ok()) << s.status();
    store_ = std::move(s).value();
  }
  std::string Incoming(const AttemptId& a) {
    auto d = store_->IncomingDir(a);
    EXPECT_TRUE(d.ok()) << d.status();
    return d.ok() ? *d : "";
  }
  // Takes over rank `rank`'s snapshot of `step` (`bytes` long) of `a`; the event it came with.
  rank::MemorySnapshotEvent TakeOver(const AttemptId& a, int64_t step, int rank, int world, size_t bytes,
                                     Status* status = nullptr) {
    rank::MemorySnapshotEvent e =
        WriteRankSnapshot(Incoming(a), step, rank, world, SnapshotBytes(bytes, static_cast<uint32_t>(step * 31 + rank)));
    Status s = store_->TakeOver(a, rank, e);
    if (status) *status = s;
    else EXPECT_TRUE(s.ok()) << s;
    return e;
  }
  v1::SnapshotHeader Header(const AttemptId& a, int64_t step, int rank, int world, const std::string& bytes) {
    v1::SnapshotHeader h;
    h.set_from_node("node-a");
    h.set_job_id(a.first);
    h.set_attempt(a.second);
    h.set_step(step);
    h.set_rank(rank);
    h.set_world_size(world);
    h.set_bytes(static_cast<int64_t>(bytes.size()));
    h.set_crc32c(Crc32c(bytes.data(), bytes.size()));
    return h;
  }
  Status Receive(const v1::SnapshotHeader& h, const std::string& bytes) {
    auto r = store_->BeginReplica(h);
    if (!r.ok()) return r.status();
    for (size_t at = 0; at < bytes.size(); at += 1000) EFT_RETURN_IF_ERROR((*r)->Write(bytes.substr(at, 1000)));
    return (*r)->Commit();
  }
  // "job attempt step world [ranks] bytes" of each held step.
  std::vector<std::string> Held() {
    std::vector<std::string> out;
    for (const auto& h : store_->Held()) {
      std::string ranks;
      for (int r : h.ranks()) ranks += (ranks.empty() ? "" : ",") + std::to_string(r);
      out.push_back(h.job_id() + " " + std::to_string(h.attempt()) + " " + std::to_string(h.step()) + " " +
                    std::to_string(h.world_size()) + " [" + ranks + "] " + std::to_string(h.bytes()));
    }
    return out;
  }
  std::string HeldFile(const AttemptId& a, int64_t step, int rank, int world) {
    return dir_ + "/shm/job-" + a.first + "/attempt-" + std::to_string(a.second) + "/held/step-" +
           std::to_string(step) + "/" + snapshot::ShardFileName(rank, world);
  }

  std::string dir_;
  ManualClock clock_;
  std::unique_ptr<SnapshotStore> store_;
  const AttemptId a_{"7", 2};
};

TEST_F(SnapshotStoreTest, TakeOverMovesTheRanksFileOutOfItsDirectory) {
  const std::string incoming = Incoming(a_);
  EXPECT_EQ(incoming, dir_ + "/shm/job-7/attempt-2/incoming");
  EXPECT_TRUE(fs::is_directory(incoming)) << "made before the rank starts";
  rank::MemorySnapshotEvent e = TakeOver(a_, 4, 1, 2, 3000);
  EXPECT_FALSE(fs::exists(e.path)) << "the rank's pruning of its own two files never meets the worker's";
  ASSERT_TRUE(fs::exists(HeldFile(a_, 4, 1, 2)));
  EXPECT_EQ(ReadWholeFile(HeldFile(a_, 4, 1, 2)), SnapshotBytes(3000, 4 * 31 + 1));
  TakeOver(a_, 4, 0, 2, 3000);
  EXPECT_EQ(Held(), (std::vector<std::string>{"7 2 4 2 [0,1] 6000"}));
  EXPECT_EQ(store_->Stats().own_bytes, 6000);
}

TEST_F(SnapshotStoreTest, AFileThatIsNotTheRanksOwnOrNotWholeIsRefused) {
  const std::string incoming = Incoming(a_);
  rank::MemorySnapshotEvent e = WriteRankSnapshot(incoming, 3, 1, 2, SnapshotBytes(100, 1));
  // Another rank's name, and a path outside the attempt's directory: refused and left alone.
  EXPECT_EQ(store_->TakeOver(a_, 0, e).code(), StatusCode::kInvalidArgument);
  rank::MemorySnapshotEvent elsewhere = e;
  elsewhere.path = dir_ + "/x.safetensors";
  WriteWholeFile(elsewhere.path, "x");
  EXPECT_EQ(store_->TakeOver(a_, 1, elsewhere).code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(fs::exists(elsewhere.path));
  EXPECT_TRUE(fs::exists(e.path));
  // Shorter than reported: refused and deleted, so that it does not stay in memory.
  rank::MemorySnapshotEvent longer = e;
  longer.bytes = 200;
  const Status s = store_->TakeOver(a_, 1, longer);
  EXPECT_EQ(s.code(), StatusCode::kDataLoss) << s;
  EXPECT_NE(s.message().find("has 100 bytes, the event says 200"), std::string::npos) << s;
  EXPECT_FALSE(fs::exists(e.path));
  EXPECT_TRUE(Held().empty());
}

// At most two steps per own shard: the newest and the one before.
TEST_F(SnapshotStoreTest, OwnShardsKeepTheNewestTwoSteps) {
  for (int64_t step = 1; step <= 5; ++step) TakeOver(a_, step, 0, 1, 1000);
  EXPECT_EQ(Held(), (std::vector<std::string>{"7 2 4 1 [0] 1000", "7 2 5 1 [0] 1000"}));
  EXPECT_EQ(CountFiles(dir_ + "/shm/job-7/attempt-2/held"), 2u);
  EXPECT_FALSE(fs::exists(dir_ + "/shm/job-7/attempt-2/held/step-3")) << "an emptied step directory goes too";
  EXPECT_EQ(store_->Stats().own_bytes, 2000);
}

// The controller's keep step (the newest step held whole with its replicas) stays beside the newest,
// own and replica alike, however many newer ones come; a new keep step lets the old one go.
TEST_F(SnapshotStoreTest, TheKeepStepStaysBesideTheNewest) {
  TakeOver(a_, 1, 0, 2, 1000);
  TakeOver(a_, 2, 0, 2, 1000);
  const std::string r2 = SnapshotBytes(900, 2);
  ASSERT_TRUE(Receive(Header(a_, 2, 1, 2, r2), r2).ok());
  store_->SetKeepSteps({{a_, 2}});
  for (int64_t step = 3; step <= 6; ++step) {
    TakeOver(a_, step, 0, 2, 1000);
    const std::string r = SnapshotBytes(900, static_cast<uint32_t>(step));
    ASSERT_TRUE(Receive(Header(a_, step, 1, 2, r), r).ok());
  }
  EXPECT_EQ(Held(), (std::vector<std::string>{"7 2 2 2 [0,1] 1900", "7 2 6 2 [0,1] 1900"}))
      << "step 2 is kept on this node for every rank it held of it";
  // Replicated up to the newest: nothing older is needed.
  store_->SetKeepSteps({{a_, 6}});
  EXPECT_EQ(Held(), (std::vector<std::string>{"7 2 6 2 [0,1] 1900"}));
  store_->SetKeepSteps({});
  TakeOver(a_, 7, 0, 2, 1000);
  EXPECT_EQ(Held(), (std::vector<std::string>{"7 2 6 2 [0,1] 1900", "7 2 7 2 [0] 1000"}));
}

// With a history window, own files taken over within it before the newest stay too (a frozen peer's
// last replicated step is among them), but only while the budget has room: they go first, oldest
// first, when a new file or a replica needs it, and never cause a refusal.
TEST_F(SnapshotStoreTest, OwnHistoryStaysWhileTheBudgetHasRoomAndGoesFirst) {
  Open(5000);
  store_->SetOwnHistory(std::chrono::milliseconds(1000));
  for (int64_t step = 1; step <= 4; ++step) {
    TakeOver(a_, step, 0, 1, 1000);
    clock_.Advance(std::chrono::milliseconds(300));
  }
  EXPECT_EQ(Held(), (std::vector<std::string>{"7 2 1 1 [0] 1000", "7 2 2 1 [0] 1000", "7 2 3 1 [0] 1000",
                                              "7 2 4 1 [0] 1000"}))
      << "steps 1-3 were taken over within 1 s before step 4";
  TakeOver(a_, 5, 0, 1, 1000);  // 1.2 s after step 1: step 1 leaves the window
  EXPECT_EQ(Held(), (std::vector<std::string>{"7 2 2 1 [0] 1000", "7 2 3 1 [0] 1000", "7 2 4 1 [0] 1000",
                                              "7 2 5 1 [0] 1000"}));
  // A replica needing 1500 bytes of the 1000 free: the oldest history (step 2) makes room, not a refusal.
  const std::string replica = SnapshotBytes(1500, 9);
  ASSERT_TRUE(Receive(Header(a_, 5, 1, 2, replica), replica).ok());
  EXPECT_EQ(Held(), (std::vector<std::string>{"7 2 3 1 [0] 1000", "7 2 4 1 [0] 1000", "7 2 5 1 [0] 1000",
                                              "7 2 5 2 [1] 1500"}));
  EXPECT_EQ(store_->Stats().own_bytes, 3000);
  // The window closed: down to the two an own shard always keeps.
  store_->SetOwnHistory(std::chrono::milliseconds(0));
  clock_.Advance(std::chrono::milliseconds(5000));
  TakeOver(a_, 6, 0, 1, 1000);
  EXPECT_EQ(Held(), (std::vector<std::string>{"7 2 5 1 [0] 1000", "7 2 5 2 [1] 1500", "7 2 6 1 [0] 1000"}));
}

// Replicas: the newest complete one and the one being received; the older goes once the newer is whole.
TEST_F(SnapshotStoreTest, ReplicasKeepTheNewestCompleteOneAndTheOneBeingReceived) {
  const std::string one = SnapshotBytes(2500, 1), two = SnapshotBytes(2600, 2);
  ASSERT_TRUE(Receive(Header(a_, 1, 3, 4, one), one).ok());
  EXPECT_EQ(Held(), (std::vector<std::string>{"7 2 1 4 [3] 2500"}));
  auto receiving = store_->BeginReplica(Header(a_, 2, 3, 4, two));
  ASSERT_TRUE(receiving.ok()) << receiving.status();
  ASSERT_TRUE((*receiving)->Write(two.substr(0, 1000)).ok());
  EXPECT_EQ(Held(), (std::vector<std::string>{"7 2 1 4 [3] 2500"})) << "only whole files are held";
  EXPECT_EQ(store_->Stats().receiving_bytes, 2600) << "the whole file is reserved";
  EXPECT_EQ(store_->BeginReplica(Header(a_, 3, 3, 4, two)).status().code(), StatusCode::kAlreadyExists)
      << "one transfer per shard at a time";
  ASSERT_TRUE((*receiving)->Write(two.substr(1000)).ok());
  ASSERT_TRUE((*receiving)->Commit().ok());
  EXPECT_EQ(Held(), (std::vector<std::string>{"7 2 2 4 [3] 2600"}));
  EXPECT_EQ(ReadWholeFile(HeldFile(a_, 2, 3, 4)), two);
  EXPECT_FALSE(fs::exists(HeldFile(a_, 1, 3, 4)));
  EXPECT_EQ(store_->BeginReplica(Header(a_, 2, 3, 4, two)).status().code(), StatusCode::kAlreadyExists)
      << "not the same step again";
  EXPECT_EQ(store_->BeginReplica(Header(a_, 1, 3, 4, one)).status().code(), StatusCode::kAlreadyExists)
      << "nor an older one";
  const SnapshotStoreStats stats = store_->Stats();
  EXPECT_EQ(stats.replica_bytes, 2600);
  EXPECT_EQ(stats.receiving_bytes, 0);
}

TEST_F(SnapshotStoreTest, AReplicaDamagedInTransitIsRefusedAndLeavesNothing) {
  const std::string bytes = SnapshotBytes(5000, 9);
  v1::SnapshotHeader h = Header(a_, 6, 0, 2, bytes);
  std::string damaged = bytes;
  damaged[4321] ^= 0x10;
  Status s = Receive(h, damaged);
  EXPECT_EQ(s.code(), StatusCode::kDataLoss) << s;
  EXPECT_EQ(s.message().rfind("damaged in transit: received 5000 bytes with CRC-32C ", 0), 0u) << s;
  s = Receive(h, bytes.substr(0, 4000));
  EXPECT_EQ(s.code(), StatusCode::kDataLoss) << "short: " << s;
  s = Receive(h, bytes + "x");
  EXPECT_EQ(s.code(), StatusCode::kDataLoss) << "long: " << s;
  EXPECT_TRUE(Held().empty());
  EXPECT_EQ(CountFiles(dir_ + "/shm/job-7"), 0u) << "no .partial file left";
  EXPECT_EQ(store_->Stats().receiving_bytes, 0);
  {
    auto abandoned = store_->BeginReplica(h);  // a sender that goes away mid-transfer
    ASSERT_TRUE(abandoned.ok());
    ASSERT_TRUE((*abandoned)->Write(bytes.substr(0, 10)).ok());
  }
  EXPECT_EQ(store_->Stats().receiving_bytes, 0);
  EXPECT_TRUE(Receive(h, bytes).ok()) << "the shard is free again";
  EXPECT_EQ(Held(), (std::vector<std::string>{"7 2 6 2 [0] 5000"}));
}

TEST_F(SnapshotStoreTest, NothingBeyondTheBudget) {
  Open(1000);
  const std::string incoming = Incoming(a_);
  TakeOver(a_, 1, 0, 2, 400);
  TakeOver(a_, 2, 0, 2, 400);
  // The third step of a shard drops the first: it fits as long as that makes room.
  TakeOver(a_, 3, 0, 2, 400);
  Status s;
  rank::MemorySnapshotEvent big = TakeOver(a_, 3, 1, 2, 300, &s);
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted) << s;
  EXPECT_EQ(s.message(), "needs 300 bytes, 200 bytes of the 1000 bytes budget free (--snapshot-memory-mb)");
  EXPECT_FALSE(fs::exists(big.path)) << "a refused file is deleted: the rank could otherwise fill the memory";
  EXPECT_EQ(Held(), (std::vector<std::string>{"7 2 2 2 [0] 400", "7 2 3 2 [0] 400"}));
  const std::string replica = SnapshotBytes(201, 3);
  EXPECT_EQ(store_->BeginReplica(Header(a_, 3, 1, 2, replica)).status().code(), StatusCode::kResourceExhausted);
  EXPECT_TRUE(Receive(Header(a_, 3, 1, 2, replica.substr(0, 200)), replica.substr(0, 200)).ok());
  EXPECT_EQ(store_->Stats().replica_bytes, 200);
}

TEST_F(SnapshotStoreTest, KeepDeletesEveryAttemptNotListed) {
  const AttemptId old{"7", 1}, other{"9", 1}, fresh{"11", 1};
  TakeOver(old, 5, 0, 1, 100);
  TakeOver(a_, 8, 0, 1, 100);
  TakeOver(other, 2, 0, 1, 100);
  store_->Keep({old, a_, other});
  store_->Keep({a_, other});
  EXPECT_FALSE(fs::exists(dir_ + "/shm/job-7/attempt-1"));
  EXPECT_EQ(Held(), (std::vector<std::string>{"7 2 8 1 [0] 100", "9 1 2 1 [0] 100"}));
  EXPECT_EQ(store_->Stats().own_bytes, 200);
  const std::string bytes = SnapshotBytes(10, 1);
  EXPECT_EQ(store_->BeginReplica(Header(old, 6, 0, 1, bytes)).status().code(), StatusCode::kFailedPrecondition)
      << "an attempt no longer kept takes no replicas";

  // A replica of an attempt the controller has not named yet: spared for a while, then deleted.
  ASSERT_TRUE(Receive(Header(fresh, 1, 0, 1, bytes), bytes).ok());
  store_->Keep({a_});
  EXPECT_EQ(Held(), (std::vector<std::string>{"11 1 1 1 [0] 10", "7 2 8 1 [0] 100"}));
  clock_.Advance(std::chrono::seconds(61));
  store_->Keep({a_});
  EXPECT_EQ(Held(), (std::vector<std::string>{"7 2 8 1 [0] 100"}));
  EXPECT_FALSE(fs::exists(dir_ + "/shm/job-11"));
  EXPECT_FALSE(fs::exists(dir_ + "/shm/job-9"));

  // A transfer for an attempt dropped meanwhile fails and leaves nothing.
  auto receiving = store_->BeginReplica(Header(a_, 9, 1, 2, bytes));
  ASSERT_TRUE(receiving.ok());
  store_->Keep({});
  EXPECT_EQ((*receiving)->Write(bytes).code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ((*receiving)->Commit().code(), StatusCode::kDataLoss);
  receiving->reset();
  EXPECT_EQ(store_->Stats().receiving_bytes, 0);
  EXPECT_EQ(CountFiles(dir_ + "/shm"), 0u);
}

TEST_F(SnapshotStoreTest, StageCopiesHeldShardsAndSaysWhichAreMissing) {
  rank::MemorySnapshotEvent own = TakeOver(a_, 12, 0, 2, 7000);
  const std::string replica = SnapshotBytes(6000, 5);
  ASSERT_TRUE(Receive(Header(a_, 12, 1, 2, replica), replica).ok());
  v1::StageOrder order;
  order.set_job_id("7");
  order.set_attempt(2);
  order.set_step(12);
  order.set_world_size(2);
  order.add_ranks(0);
  order.add_ranks(1);
  order.set_dir(snapshot::StagedDir(dir_ + "/ckpt", 12));
  v1::StageResult r = store_->Stage(order);
  EXPECT_EQ(r.error(), "");
  EXPECT_EQ(r.job_id(), "7");
  EXPECT_EQ(r.step(), 12);
  EXPECT_EQ(r.ranks_size(), 2);
  auto records = snapshot::ReadStagedRecords(order.dir());
  ASSERT_TRUE(records.ok()) << records.status();
  ASSERT_EQ(records->size(), 2u);
  EXPECT_EQ((*records)[0].crc32c, own.crc32c);
  EXPECT_EQ(ReadWholeFile(order.dir() + "/" + snapshot::ShardFileName(1, 2)), replica);
  EXPECT_TRUE(Held().size() == 1) << "staging copies; the held files stay";
  EXPECT_EQ(CountFiles(dir_ + "/shm/staging"), 0u);

  v1::StageOrder missing = order;
  missing.set_step(13);
  missing.set_dir(snapshot::StagedDir(dir_ + "/ckpt", 13));
  r = store_->Stage(missing);
  EXPECT_EQ(r.error(), "rank 0, 1 of job 7 attempt 2 at step 13 (world size 2) is not held on this node");
  EXPECT_FALSE(fs::exists(missing.dir() + "/" + snapshot::ShardFileName(0, 2)));
  missing = order;
  missing.set_world_size(3);
  EXPECT_NE(store_->Stage(missing).error(), "") << "another world size's shard is another shard";

  // A held file damaged in memory is not staged.
  std::string damaged = ReadWholeFile(HeldFile(a_, 12, 0, 2));
  damaged[0] ^= 1;
  WriteWholeFile(HeldFile(a_, 12, 0, 2), damaged);
  order.set_dir(dir_ + "/ckpt2/step-12.snapshot");
  r = store_->Stage(order);
  EXPECT_NE(r.error().find("is damaged"), std::string::npos) << r.error();
}

TEST_F(SnapshotStoreTest, OpenAndCloseDeleteOnlyWhatTheStoreMakes) {
  TakeOver(a_, 1, 0, 1, 100);
  WriteWholeFile(dir_ + "/shm/someone-elses", "x");
  Open(1 << 20);  // a restarted worker: nobody knows the old records
  EXPECT_FALSE(fs::exists(dir_ + "/shm/job-7"));
  EXPECT_TRUE(fs::exists(dir_ + "/shm/someone-elses"));
  const std::string incoming = Incoming(a_);
  WriteRankSnapshot(incoming, 1, 0, 1, "abc");  // not taken over: the worker stops first
  store_->Close();
  EXPECT_FALSE(fs::exists(dir_ + "/shm/job-7")) << "incoming files too";
  EXPECT_FALSE(fs::exists(dir_ + "/shm/staging"));
  EXPECT_TRUE(fs::exists(dir_ + "/shm/someone-elses"));
  EXPECT_EQ(store_->IncomingDir(a_).status().code(), StatusCode::kFailedPrecondition);
  fs::remove(dir_ + "/shm/someone-elses");
  store_->Close();
  EXPECT_FALSE(fs::exists(dir_ + "/shm")) << "an empty root goes too";
}

// The budget never exceeds the snapshot directory's filesystem (statvfs of the real one: the test's
// temporary directory's), so snapshots are refused by the store rather than failing with ENOSPC.
TEST(SnapshotBudgetTest, IsCutToTheSizeOfTheDirectorysFilesystem) {
  const std::string dir = MakeTempDir();
  struct statvfs fs {};
  ASSERT_EQ(statvfs(dir.c_str(), &fs), 0);
  const int64_t size = static_cast<int64_t>(fs.f_blocks) * static_cast<int64_t>(fs.f_frsize);
  std::string why;
  EXPECT_EQ(FitSnapshotBudget(size / 2, dir, &why), size / 2);
  EXPECT_EQ(why, "") << "a budget the filesystem can hold stays";
  const std::string made = dir + "/not/yet";
  EXPECT_EQ(FitSnapshotBudget(size * 4, made, &why), size) << "the directory is made, then measured";
  EXPECT_TRUE(std::filesystem::is_directory(made));
  EXPECT_EQ(why.rfind(made + "'s filesystem holds only " + MibText(size) + ", less than the snapshot budget of " +
                          MibText(size * 4),
                      0),
            0u)
      << why;
  EXPECT_NE(why.find("--shm-size"), std::string::npos) << why;
  std::filesystem::remove_all(dir);
}

TEST(SnapshotBudgetTest, AQuarterOfMemTotal) {
  const std::string dir = MakeTempDir();
  WriteWholeFile(dir + "/meminfo", "MemFree:  100 kB\nMemTotal:       16384000 kB\n");
  EXPECT_EQ(DefaultSnapshotBudget(dir + "/meminfo"), int64_t{16384000} * 1024 / 4);
  EXPECT_EQ(DefaultSnapshotBudget(dir + "/none"), int64_t{1} << 30);
  EXPECT_GT(DefaultSnapshotBudget(), 0);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace eft::worker::testing
