// Store against real SQLite files, one fresh directory per test. Faults (disk full, I/O errors)
// come from a VFS shim that wraps SQLite's own unix VFS, so the store sees exactly the error codes a
// full or failing disk produces; crashes are real SIGKILLs of a forked process.
#include "controller/store.h"

#include <fcntl.h>
#include <signal.h>
#include <sqlite3.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <tuple>

#include <google/protobuf/util/message_differencer.h>
#include <gtest/gtest.h>

namespace eft::controller {
namespace {

namespace fs = std::filesystem;

// ---- fault-injecting VFS -------------------------------------------------------------------------

// While fail_rc is set, every write after the next `writes_before_failure` ones returns it.
int fail_rc = SQLITE_OK;
int writes_before_failure = 0;
int fail_sync_rc = SQLITE_OK;
int wal_syncs = 0;

struct FaultFile {
  sqlite3_file base;
  sqlite3_file* real;  // the unix VFS's file, allocated right behind this struct
  int flags;
};
sqlite3_file* Real(sqlite3_file* f) { return reinterpret_cast<FaultFile*>(f)->real; }
#define EFT_FORWARD(method, ...) Real(f)->pMethods->method(Real(f), ##__VA_ARGS__)

const sqlite3_io_methods kFaultMethods = {
    3,
    [](sqlite3_file* f) { return EFT_FORWARD(xClose); },
    [](sqlite3_file* f, void* b, int n, sqlite3_int64 o) { return EFT_FORWARD(xRead, b, n, o); },
    [](sqlite3_file* f, const void* b, int n, sqlite3_int64 o) {
      if (fail_rc != SQLITE_OK && writes_before_failure-- <= 0) return fail_rc;
      return EFT_FORWARD(xWrite, b, n, o);
    },
    [](sqlite3_file* f, sqlite3_int64 size) { return EFT_FORWARD(xTruncate, size); },
    [](sqlite3_file* f, int flags) {
      if (reinterpret_cast<FaultFile*>(f)->flags & SQLITE_OPEN_WAL) ++wal_syncs;
      return fail_sync_rc != SQLITE_OK ? fail_sync_rc : EFT_FORWARD(xSync, flags);
    },
    [](sqlite3_file* f, sqlite3_int64* size) { return EFT_FORWARD(xFileSize, size); },
    [](sqlite3_file* f, int lock) { return EFT_FORWARD(xLock, lock); },
    [](sqlite3_file* f, int lock) { return EFT_FORWARD(xUnlock, lock); },
    [](sqlite3_file* f, int* out) { return EFT_FORWARD(xCheckReservedLock, out); },
    [](sqlite3_file* f, int op, void* arg) { return EFT_FORWARD(xFileControl, op, arg); },
    [](sqlite3_file* f) { return EFT_FORWARD(xSectorSize); },
    [](sqlite3_file* f) { return EFT_FORWARD(xDeviceCharacteristics); },
    [](sqlite3_file* f, int page, int size, int extend, void volatile** out) {
      return EFT_FORWARD(xShmMap, page, size, extend, out);
    },
    [](sqlite3_file* f, int offset, int n, int flags) { return EFT_FORWARD(xShmLock, offset, n, flags); },
    [](sqlite3_file* f) { EFT_FORWARD(xShmBarrier); },
    [](sqlite3_file* f, int del) { return EFT_FORWARD(xShmUnmap, del); },
    [](sqlite3_file* f, sqlite3_int64 o, int n, void** p) { return EFT_FORWARD(xFetch, o, n, p); },
    [](sqlite3_file* f, sqlite3_int64 o, void* p) { return EFT_FORWARD(xUnfetch, o, p); },
};

// Makes the fault VFS SQLite's default for its lifetime, so Store::Open picks it up unchanged.
class FaultVfsScope {
 public:
  FaultVfsScope() : base_(sqlite3_vfs_find(nullptr)), vfs_(*base_) {
    fail_rc = fail_sync_rc = SQLITE_OK;
    writes_before_failure = wal_syncs = 0;
    vfs_.szOsFile = static_cast<int>(sizeof(FaultFile)) + base_->szOsFile;
    vfs_.zName = "eft-fault";
    vfs_.pNext = nullptr;
    vfs_.pAppData = base_;
    vfs_.xOpen = [](sqlite3_vfs* vfs, sqlite3_filename name, sqlite3_file* f, int flags, int* out) {
      auto* base = static_cast<sqlite3_vfs*>(vfs->pAppData);
      auto* file = reinterpret_cast<FaultFile*>(f);
      file->real = reinterpret_cast<sqlite3_file*>(file + 1);
      file->flags = flags;
      int rc = base->xOpen(base, name, file->real, flags, out);
      file->base.pMethods = rc == SQLITE_OK ? &kFaultMethods : nullptr;
      return rc;
    };
    sqlite3_vfs_register(&vfs_, /*makeDflt=*/1);
  }
  ~FaultVfsScope() {
    fail_rc = fail_sync_rc = SQLITE_OK;
    sqlite3_vfs_unregister(&vfs_);
    sqlite3_vfs_register(base_, 1);
  }

 private:
  sqlite3_vfs* base_;
  sqlite3_vfs vfs_;
};

// ---- helpers -------------------------------------------------------------------------------------

// What the sqlite3 CLI would print for the first column of the first row.
std::string RawQuery(const std::string& path, const std::string& sql) {
  sqlite3* db = nullptr;
  std::string out;
  if (sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, nullptr) == SQLITE_OK) {
    sqlite3_stmt* stmt = nullptr;
    if (sqlite3_prepare_v2(db, sql.c_str(), -1, &stmt, nullptr) != SQLITE_OK) {
      out = std::string("error: ") + sqlite3_errmsg(db);
    } else if (int rc = sqlite3_step(stmt); rc == SQLITE_ROW) {
      const unsigned char* text = sqlite3_column_text(stmt, 0);
      out = text ? reinterpret_cast<const char*>(text) : "";
    } else if (rc != SQLITE_DONE) {
      out = std::string("error: ") + sqlite3_errmsg(db);
    }
    sqlite3_finalize(stmt);
  }
  sqlite3_close(db);
  return out;
}

v1::JobSpec MakeSpec(const std::string& name) {
  v1::JobSpec spec;
  spec.set_name(name);
  spec.set_model("/shared/models/Qwen2.5-0.5B");
  spec.mutable_data()->set_train("/shared/data/train.jsonl");
  spec.mutable_data()->set_max_seq_len(4096);
  spec.mutable_data()->set_packing(false);  // present and false: must not come back as unset
  spec.mutable_resources()->mutable_nodes()->set_min(2);
  spec.mutable_resources()->mutable_nodes()->set_max(4);
  spec.mutable_resources()->set_gpus_per_node(8);
  spec.mutable_training()->set_lr(1.25e-5);
  spec.mutable_training()->set_seed(0);
  spec.mutable_training()->mutable_schedule()->set_type("cosine");
  spec.mutable_training()->mutable_schedule()->set_warmup_ratio(0.1);
  spec.mutable_checkpoint()->set_dir("/shared/ckpt/" + name);
  spec.mutable_checkpoint()->set_every_steps(0);
  spec.mutable_fault_tolerance()->set_max_restarts(5);
  spec.mutable_fault_tolerance()->set_stop_grace_seconds(2.5);
  spec.add_command("python3");
  spec.add_command("train.py --note=\"ünïcode 'quoted'\"");
  (*spec.mutable_env())["HF_HOME"] = "/cache/hf";
  (*spec.mutable_env())["MULTI"] = "line one\nline two";
  return spec;
}

JobRecord MakeJob(const std::string& request_id = "", const std::string& name = "qwen-sft") {
  JobRecord job;
  job.request_id = request_id;
  job.spec = MakeSpec(name);
  job.state = v1::JOB_STATE_QUEUED;
  job.reason = "waiting for 2 READY nodes";
  job.create_ms = 1'700'000'000'123;
  job.owner = "alice";
  return job;
}

auto Tie(const JobRecord& j) {
  return std::tie(j.id, j.request_id, j.state, j.reason, j.create_ms, j.start_ms, j.end_ms, j.attempt, j.restarts,
                  j.not_before_ms, j.owner);
}
auto Tie(const AttemptRecord& a) {
  return std::tie(a.job_id, a.number, a.world_size, a.ranks_per_node, a.nodes, a.slots, a.master_addr,
                  a.master_port, a.resume_from, a.start_ms, a.end_ms, a.end_reason);
}
auto Tie(const NodeRecord& n) {
  return std::tie(n.name, n.address, n.slots, n.drained, n.version, n.registered_ms, n.lost, n.state_reason);
}
auto Tie(const CheckpointRecord& c) {
  return std::tie(c.job_id, c.step, c.kind, c.path, c.bytes, c.attempt, c.time_ms);
}
auto Tie(const EventRecord& e) { return std::tie(e.job_id, e.time_ms, e.type, e.attempt, e.message); }

void ExpectSameJob(const JobRecord& want, const JobRecord& got) {
  EXPECT_EQ(Tie(want), Tie(got));
  EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(want.spec, got.spec))
      << "want " << want.spec.DebugString() << "got " << got.spec.DebugString();
}

AttemptRecord MakeAttempt(const std::string& job_id, int32_t number) {
  AttemptRecord a;
  a.job_id = job_id;
  a.number = number;
  a.world_size = 16;
  a.ranks_per_node = 8;
  a.nodes = {"n2", "n1"};
  a.slots = {{0, 1, 2, 3, 4, 5, 6, 7}, {7, 6, 5, 4, 3, 2, 1, 0}};
  a.master_addr = "10.0.0.2";
  a.master_port = 29500 + number;
  a.resume_from = number > 1 ? "/ckpt/step-200" : "";
  a.start_ms = 1000 * number;
  return a;
}

class StoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (fs::temp_directory_path() / "eft-store-test-XXXXXX").string();
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
    path_ = (fs::path(dir_) / "state" / "eft.db").string();  // "state/" does not exist yet
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::unique_ptr<Store> OpenStore() {
    auto store = Store::Open(path_);
    EXPECT_TRUE(store.ok()) << store.status();
    return store.ok() ? std::move(store).value() : nullptr;
  }
  std::string AddJob(Store* store, const std::string& request_id = "") {
    JobRecord job = MakeJob(request_id);
    EXPECT_TRUE(store->InsertJob(&job).ok());
    return job.id;
  }

  std::string dir_;
  std::string path_;
};

// ---- tests ---------------------------------------------------------------------------------------

TEST_F(StoreTest, OpenCreatesDatabaseWithSchemaInWalMode) {
  auto store = OpenStore();
  ASSERT_TRUE(store);
  EXPECT_TRUE(fs::exists(path_));
  EXPECT_EQ(store->schema_version(), Store::kSchemaVersion);
  EXPECT_EQ(store->path(), path_);
  // A second, independent connection sees what is in the file.
  EXPECT_EQ(RawQuery(path_, "PRAGMA user_version"), std::to_string(Store::kSchemaVersion));
  EXPECT_EQ(RawQuery(path_, "PRAGMA journal_mode"), "wal");
  EXPECT_EQ(RawQuery(path_, "SELECT group_concat(name, ',') FROM (SELECT name FROM sqlite_schema WHERE type = "
                            "'table' AND name NOT LIKE 'sqlite_%' ORDER BY name)"),
            "attempts,checkpoints,counters,events,jobs,nodes");
}

// synchronous is a setting of each connection, so another connection cannot see the store's; what
// FULL means is observable though: every commit fsyncs the WAL before the call returns.
TEST_F(StoreTest, EveryCommitSyncsTheWal) {
  FaultVfsScope vfs;
  auto store = OpenStore();
  ASSERT_TRUE(store);
  for (int i = 1; i <= 3; ++i) {
    int before = wal_syncs;
    AddJob(store.get());
    EXPECT_GE(wal_syncs - before, 1) << "commit " << i << " did not fsync the WAL";
  }
}

TEST_F(StoreTest, JobRoundTripsEveryField) {
  auto store = OpenStore();
  JobRecord job = MakeJob("req-1");
  ASSERT_TRUE(store->InsertJob(&job).ok());
  EXPECT_EQ(job.id, "1");
  auto jobs = store->LoadJobs();
  ASSERT_TRUE(jobs.ok()) << jobs.status();
  ASSERT_EQ(jobs->size(), 1u);
  ExpectSameJob(job, jobs->front());
  EXPECT_TRUE(jobs->front().spec.data().has_packing());
  EXPECT_TRUE(jobs->front().spec.training().has_seed());

  job.state = v1::JOB_STATE_RUNNING;
  job.reason = "all 16 ranks running";
  job.start_ms = 1'700'000'100'000;
  job.end_ms = 1'700'000'200'000;
  job.attempt = 3;
  job.restarts = 2;
  job.not_before_ms = 1'700'000'150'000;
  job.request_id = "req-1b";
  job.spec.mutable_checkpoint()->set_dir("/elsewhere");
  job.spec.mutable_env()->erase("MULTI");
  JobRecord changed_create = job;
  changed_create.create_ms = 5;  // not a column UpdateJob writes
  ASSERT_TRUE(store->UpdateJob(changed_create).ok());
  jobs = store->LoadJobs();
  ASSERT_TRUE(jobs.ok());
  ExpectSameJob(job, jobs->front());

  // Readable with the sqlite3 CLI: snake_case JSON and state names.
  EXPECT_EQ(RawQuery(path_, "SELECT state FROM jobs"), "JOB_STATE_RUNNING");
  EXPECT_NE(RawQuery(path_, "SELECT spec FROM jobs").find("\"gpus_per_node\":8"), std::string::npos);
}

TEST_F(StoreTest, JobIdsIncreaseAndAreNeverReused) {
  auto store = OpenStore();
  EXPECT_EQ(AddJob(store.get()), "1");
  EXPECT_EQ(AddJob(store.get()), "2");
  EXPECT_EQ(AddJob(store.get()), "3");
  store.reset();
  // Deleting the newest row would let a plain rowid hand out 3 again.
  EXPECT_EQ(RawQuery(path_, "DELETE FROM jobs WHERE id = 3 RETURNING id"), "3");
  store = OpenStore();
  EXPECT_EQ(AddJob(store.get()), "4");
}

TEST_F(StoreTest, RequestIdsAreLookedUpAndUnique) {
  auto store = OpenStore();
  std::string id = AddJob(store.get(), "submit-abc");
  AddJob(store.get());  // '' is "no key" and may repeat
  AddJob(store.get());
  auto found = store->FindJobByRequestId("submit-abc");
  ASSERT_TRUE(found.ok()) << found.status();
  ASSERT_TRUE(found->has_value());
  EXPECT_EQ((*found)->id, id);
  EXPECT_EQ((*found)->spec.name(), "qwen-sft");
  EXPECT_FALSE(store->FindJobByRequestId("other")->has_value());
  EXPECT_FALSE(store->FindJobByRequestId("")->has_value());

  JobRecord duplicate = MakeJob("submit-abc");
  Status status = store->InsertJob(&duplicate);
  EXPECT_EQ(status.code(), StatusCode::kAlreadyExists) << status;
  EXPECT_NE(status.message().find("submit-abc"), std::string::npos) << status;
  EXPECT_EQ(store->LoadJobs()->size(), 3u);
}

TEST_F(StoreTest, BadUpdatesAreRefused) {
  auto store = OpenStore();
  JobRecord job = MakeJob();
  job.id = "42";
  EXPECT_EQ(store->UpdateJob(job).code(), StatusCode::kNotFound);
  job.id = "abc";
  EXPECT_EQ(store->UpdateJob(job).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(store->LoadAttempts("x1").status().code(), StatusCode::kInvalidArgument);
  JobRecord bad_state = MakeJob();
  bad_state.state = static_cast<v1::JobState>(99);
  EXPECT_EQ(store->InsertJob(&bad_state).code(), StatusCode::kInvalidArgument);
}

// Rows edited by hand (or damaged) load as DATA_LOSS naming the record, never half-filled.
TEST_F(StoreTest, DamagedRowsAreDataLoss) {
  auto store = OpenStore();
  std::string id = AddJob(store.get());
  ASSERT_TRUE(store->InsertAttempt(MakeAttempt(id, 1)).ok());
  RawQuery(path_, "UPDATE jobs SET spec = '{\"name\": 7' WHERE id = 1");
  auto jobs = store->LoadJobs();
  EXPECT_EQ(jobs.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(jobs.status().message().find("job 1: stored spec"), std::string::npos) << jobs.status();
  RawQuery(path_, "UPDATE jobs SET spec = '{}', state = 'JOB_STATE_NAPPING' WHERE id = 1");
  EXPECT_NE(store->LoadJobs().status().message().find("JOB_STATE_NAPPING"), std::string::npos);
  RawQuery(path_, "UPDATE attempts SET slots = '[[0], [\"x\"]]'");
  auto attempts = store->LoadAttempts(id);
  EXPECT_EQ(attempts.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(attempts.status().message().find("attempt 1 of job 1: stored slots"), std::string::npos)
      << attempts.status();
}

TEST_F(StoreTest, AttemptsRoundTrip) {
  auto store = OpenStore();
  std::string j1 = AddJob(store.get()), j2 = AddJob(store.get());
  AttemptRecord a1 = MakeAttempt(j1, 1), a2 = MakeAttempt(j1, 2), b1 = MakeAttempt(j2, 1);
  b1.nodes = {};
  b1.slots = {};
  for (const auto& a : {a2, b1, a1}) ASSERT_TRUE(store->InsertAttempt(a).ok());
  EXPECT_EQ(store->InsertAttempt(a1).code(), StatusCode::kAlreadyExists);
  EXPECT_EQ(store->InsertAttempt(MakeAttempt("77", 1)).code(), StatusCode::kNotFound);  // no job 77

  a1.end_ms = 5000;
  a1.end_reason = "node n2 lost (no heartbeat for 3.0 s)";
  a1.nodes = {"n1"};
  a1.slots = {{3}};
  ASSERT_TRUE(store->UpdateAttempt(a1).ok());
  EXPECT_EQ(store->UpdateAttempt(MakeAttempt(j2, 9)).code(), StatusCode::kNotFound);

  auto attempts = store->LoadAttempts(j1);
  ASSERT_TRUE(attempts.ok()) << attempts.status();
  ASSERT_EQ(attempts->size(), 2u);
  EXPECT_EQ(Tie((*attempts)[0]), Tie(a1));
  EXPECT_EQ(Tie((*attempts)[1]), Tie(a2));
  auto unfinished = store->LoadUnfinishedAttempts();
  ASSERT_TRUE(unfinished.ok());
  ASSERT_EQ(unfinished->size(), 2u);
  EXPECT_EQ(Tie((*unfinished)[0]), Tie(a2));
  EXPECT_EQ(Tie((*unfinished)[1]), Tie(b1));
}

TEST_F(StoreTest, NodesAreUpserted) {
  auto store = OpenStore();
  NodeRecord b{"node-b", "10.0.0.2", 8, false, "0.1.0", 100, false, ""};
  NodeRecord a{"node-a", "10.0.0.1", 4, true, "0.1.0", 200, true, "no heartbeat for 3.0 s"};
  ASSERT_TRUE(store->UpsertNode(b).ok());
  ASSERT_TRUE(store->UpsertNode(a).ok());
  a.lost = false;
  a.state_reason = "";
  a.slots = 8;
  a.registered_ms = 300;
  ASSERT_TRUE(store->UpsertNode(a).ok());
  auto nodes = store->LoadNodes();
  ASSERT_TRUE(nodes.ok()) << nodes.status();
  ASSERT_EQ(nodes->size(), 2u);
  EXPECT_EQ(Tie((*nodes)[0]), Tie(a));
  EXPECT_EQ(Tie((*nodes)[1]), Tie(b));
}

TEST_F(StoreTest, CheckpointsAreStoredOnceAndLatestIsHighestStep) {
  auto store = OpenStore();
  std::string job = AddJob(store.get()), other = AddJob(store.get());
  EXPECT_FALSE(store->LatestCheckpoint(job)->has_value());
  CheckpointRecord c100{job, 100, "sharded", "/ckpt/step-100", 10, 1, 1000};
  CheckpointRecord c300{job, 300, "full", "/ckpt/step-300", 30, 2, 3000};
  CheckpointRecord c200{job, 200, "sharded", "/ckpt/step-200", 20, 1, 2000};
  for (const auto& c : {c100, c300, c200}) ASSERT_TRUE(store->InsertCheckpoint(c).ok());
  CheckpointRecord again = c300;  // the relayed event arriving twice
  again.time_ms = 9999;
  EXPECT_TRUE(store->InsertCheckpoint(again).ok());
  ASSERT_TRUE(store->InsertCheckpoint({other, 900, "sharded", "/o/step-900", 1, 1, 1}).ok());

  auto all = store->LoadCheckpoints(job);
  ASSERT_TRUE(all.ok()) << all.status();
  ASSERT_EQ(all->size(), 3u);
  EXPECT_EQ(Tie((*all)[0]), Tie(c100));
  EXPECT_EQ(Tie((*all)[1]), Tie(c200));
  EXPECT_EQ(Tie((*all)[2]), Tie(c300));
  auto latest = store->LatestCheckpoint(job);
  ASSERT_TRUE(latest.ok() && latest->has_value());
  EXPECT_EQ(Tie(**latest), Tie(c300));

  // Same step written twice (e.g. by two attempts): the later one wins.
  CheckpointRecord c300b{job, 300, "sharded", "/ckpt/a2/step-300", 31, 3, 4000};
  ASSERT_TRUE(store->InsertCheckpoint(c300b).ok());
  EXPECT_EQ(Tie(**store->LatestCheckpoint(job)), Tie(c300b));
  EXPECT_EQ(store->InsertCheckpoint({"5", 1, "sharded", "/x", 1, 1, 1}).code(), StatusCode::kNotFound);

  // Retention deleted step-100 and step-300 of attempt 2: forgotten, and a later save of the same
  // path is stored again.
  ASSERT_TRUE(store->DeleteCheckpoint(job, "/ckpt/step-100").ok());
  ASSERT_TRUE(store->DeleteCheckpoint(job, "/ckpt/a2/step-300").ok());
  EXPECT_TRUE(store->DeleteCheckpoint(job, "/not/stored").ok());
  EXPECT_EQ(store->LoadCheckpoints(job)->size(), 2u);
  EXPECT_EQ(Tie(**store->LatestCheckpoint(job)), Tie(c300));
  ASSERT_TRUE(store->InsertCheckpoint(c100).ok());
  EXPECT_EQ(store->LoadCheckpoints(job)->size(), 3u);
  EXPECT_EQ(store->LoadCheckpoints(other)->size(), 1u);
}

TEST_F(StoreTest, EventsComeBackInAppendOrder) {
  auto store = OpenStore();
  std::string job = AddJob(store.get()), other = AddJob(store.get());
  // Wall time steps backwards between the first two: order is the append order anyway.
  std::vector<EventRecord> events = {{job, 5000, "submitted", 0, "queued"},
                                     {job, 4000, "attempt_started", 1, "on n1, n2"},
                                     {job, 6000, "attempt_ended", 1, "node n2 lost"}};
  ASSERT_TRUE(store->AppendEvent(events[0]).ok());
  ASSERT_TRUE(store->AppendEvent({other, 1, "submitted", 0, ""}).ok());
  ASSERT_TRUE(store->AppendEvent(events[1]).ok());
  ASSERT_TRUE(store->AppendEvent(events[2]).ok());
  auto loaded = store->LoadEvents(job);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  ASSERT_EQ(loaded->size(), 3u);
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ(Tie((*loaded)[i]), Tie(events[i]));
  EXPECT_EQ(store->LoadEvents(other)->size(), 1u);
  EXPECT_EQ(store->AppendEvent({"99", 1, "x", 0, ""}).code(), StatusCode::kNotFound);
}

TEST_F(StoreTest, CountersCountFromOneAndPersist) {
  auto store = OpenStore();
  EXPECT_EQ(*store->NextCounter("master_port"), 1);
  EXPECT_EQ(*store->NextCounter("master_port"), 2);
  EXPECT_EQ(*store->NextCounter("other"), 1);
  store.reset();
  store = OpenStore();
  EXPECT_EQ(*store->NextCounter("master_port"), 3);
}

TEST_F(StoreTest, FailedTransactionLeavesNothing) {
  auto store = OpenStore();
  Status status = store->RunInTransaction([&] {
    std::string id = AddJob(store.get());
    EXPECT_TRUE(store->AppendEvent({id, 1, "submitted", 0, ""}).ok());
    EXPECT_EQ(store->NextCounter("c").value(), 1);
    return Status::FailedPrecondition("scheduler changed its mind");
  });
  EXPECT_EQ(status.code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(store->LoadJobs()->empty());
  EXPECT_TRUE(store->LoadEvents("1")->empty());
  EXPECT_EQ(*store->NextCounter("c"), 1);

  // A nested failure propagated by the outer body undoes everything.
  status = store->RunInTransaction([&] {
    AddJob(store.get());
    return store->RunInTransaction([&] {
      AddJob(store.get());
      return Status::Internal("inner");
    });
  });
  EXPECT_EQ(status.code(), StatusCode::kInternal);
  EXPECT_TRUE(store->LoadJobs()->empty());

  // One the outer body tolerates undoes only the inner writes.
  status = store->RunInTransaction([&] {
    AddJob(store.get(), "outer");
    EXPECT_FALSE(store->RunInTransaction([&] {
                        AddJob(store.get(), "inner");
                        return Status::Internal("inner");
                      }).ok());
    return store->RunInTransaction([&] { return Status::Ok(); });
  });
  EXPECT_TRUE(status.ok()) << status;
  auto jobs = store->LoadJobs();
  ASSERT_EQ(jobs->size(), 1u);
  EXPECT_EQ(jobs->front().request_id, "outer");
}

TEST_F(StoreTest, ReopenKeepsEverything) {
  auto store = OpenStore();
  JobRecord job = MakeJob("r");
  ASSERT_TRUE(store->InsertJob(&job).ok());
  AttemptRecord attempt = MakeAttempt(job.id, 1);
  NodeRecord node{"n1", "10.0.0.1", 8, true, "0.1.0", 7, true, "drained by admin"};
  CheckpointRecord checkpoint{job.id, 200, "full", "/ckpt/step-200", 1 << 20, 1, 9};
  EventRecord event{job.id, 11, "submitted", 0, "queued"};
  ASSERT_TRUE(store->RunInTransaction([&]() -> Status {
    EFT_RETURN_IF_ERROR(store->InsertAttempt(attempt));
    EFT_RETURN_IF_ERROR(store->UpsertNode(node));
    EFT_RETURN_IF_ERROR(store->InsertCheckpoint(checkpoint));
    return store->AppendEvent(event);
  }).ok());
  store.reset();

  store = OpenStore();
  ASSERT_TRUE(store);
  ExpectSameJob(job, store->LoadJobs()->at(0));
  EXPECT_EQ(Tie(store->LoadAttempts(job.id)->at(0)), Tie(attempt));
  EXPECT_EQ(Tie(store->LoadNodes()->at(0)), Tie(node));
  EXPECT_EQ(Tie(store->LoadCheckpoints(job.id)->at(0)), Tie(checkpoint));
  EXPECT_EQ(Tie(store->LoadEvents(job.id)->at(0)), Tie(event));
}

// Migration 2 (jobs.owner) on a database written by a version-1 controller: old jobs load, unowned.
TEST_F(StoreTest, Version1JobsGainAnEmptyOwner) {
  fs::create_directories(fs::path(path_).parent_path());
  RawQuery(path_,
           "CREATE TABLE jobs (id INTEGER PRIMARY KEY AUTOINCREMENT, request_id TEXT NOT NULL DEFAULT '', spec TEXT "
           "NOT NULL, state TEXT NOT NULL, reason TEXT NOT NULL DEFAULT '', create_ms INTEGER NOT NULL DEFAULT 0, "
           "start_ms INTEGER NOT NULL DEFAULT 0, end_ms INTEGER NOT NULL DEFAULT 0, attempt INTEGER NOT NULL DEFAULT "
           "0, restarts INTEGER NOT NULL DEFAULT 0, not_before_ms INTEGER NOT NULL DEFAULT 0)");
  RawQuery(path_, "INSERT INTO jobs (spec, state) VALUES ('{\"name\": \"old\"}', 'JOB_STATE_QUEUED')");
  RawQuery(path_, "PRAGMA user_version = 1");
  auto store = OpenStore();
  ASSERT_TRUE(store);
  EXPECT_EQ(store->schema_version(), Store::kSchemaVersion);
  auto jobs = store->LoadJobs();
  ASSERT_TRUE(jobs.ok()) << jobs.status();
  ASSERT_EQ(jobs->size(), 1u);
  EXPECT_EQ(jobs->front().spec.name(), "old");
  EXPECT_EQ(jobs->front().owner, "");
  JobRecord job = MakeJob();
  ASSERT_TRUE(store->InsertJob(&job).ok());
  EXPECT_EQ(store->LoadJobs()->back().owner, "alice");
}

TEST_F(StoreTest, NewerSchemaIsRefused) {
  fs::create_directories(fs::path(path_).parent_path());
  RawQuery(path_, "PRAGMA user_version = 99");
  auto store = Store::Open(path_);
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), StatusCode::kFailedPrecondition);
  const std::string& message = store.status().message();
  EXPECT_NE(message.find("version 99 is newer than this controller supports (" + std::to_string(Store::kSchemaVersion) + ")"),
            std::string::npos)
      << message;
  EXPECT_NE(message.find(path_), std::string::npos) << message;
  EXPECT_EQ(RawQuery(path_, "PRAGMA user_version"), "99");
}

TEST_F(StoreTest, GarbageFileIsRefusedUntouched) {
  fs::create_directories(fs::path(path_).parent_path());
  const std::string garbage(8192, 'x');
  std::ofstream(path_, std::ios::binary) << garbage;
  auto store = Store::Open(path_);
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), StatusCode::kDataLoss) << store.status();
  EXPECT_NE(store.status().message().find(path_), std::string::npos) << store.status();
  std::ifstream in(path_, std::ios::binary);
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(in), {}), garbage);
}

TEST_F(StoreTest, DamagedFileIsAnErrorNotACrash) {
  // Cut in half, and a page in the middle overwritten (bit rot, a bad copy).
  for (bool truncate : {true, false}) {
    fs::remove_all(fs::path(path_).parent_path());
    auto store = OpenStore();
    for (int i = 0; i < 200; ++i) AddJob(store.get());
    store.reset();  // checkpoints the WAL into the main file and removes it
    ASSERT_FALSE(fs::exists(path_ + "-wal"));
    const uintmax_t size = fs::file_size(path_);
    if (truncate) {
      fs::resize_file(path_, size / 2);
    } else {
      std::fstream file(path_, std::ios::in | std::ios::out | std::ios::binary);
      file.seekp(static_cast<std::streamoff>(size / 2 / 4096 * 4096));
      file << std::string(4096, '\xA5');
    }
    auto reopened = Store::Open(path_);
    ASSERT_FALSE(reopened.ok()) << truncate;
    EXPECT_EQ(reopened.status().code(), StatusCode::kDataLoss) << reopened.status();
    EXPECT_NE(reopened.status().message().find("restore it from a backup"), std::string::npos) << reopened.status();
  }
}

// A full disk fails the write with SQLITE_FULL, at the first page or halfway through a commit.
TEST_F(StoreTest, DiskFullIsAnErrorAndLosesNothing) {
  FaultVfsScope vfs;
  auto store = OpenStore();
  std::string kept = AddJob(store.get(), "kept");
  JobRecord big = MakeJob("big");
  (*big.spec.mutable_env())["BLOB"] = std::string(64 * 1024, 'b');  // many overflow pages
  for (int allowed : {0, 5}) {
    fail_rc = SQLITE_FULL;
    writes_before_failure = allowed;
    Status status = store->InsertJob(&big);
    EXPECT_EQ(status.code(), StatusCode::kResourceExhausted) << status;
    EXPECT_NE(status.message().find("inserting job"), std::string::npos) << status;
    status = store->RunInTransaction([&] {
      AddJob(store.get(), "in-txn");
      return store->InsertJob(&big);
    });
    EXPECT_FALSE(status.ok());
    fail_rc = SQLITE_OK;
    auto jobs = store->LoadJobs();
    ASSERT_TRUE(jobs.ok()) << jobs.status();
    ASSERT_EQ(jobs->size(), 1u);
    EXPECT_EQ(jobs->front().id, kept);
  }
  std::string after = AddJob(store.get(), "after");  // space is back: the store works again
  store.reset();
  EXPECT_EQ(RawQuery(path_, "PRAGMA integrity_check"), "ok");
  store = OpenStore();
  auto jobs = store->LoadJobs();
  ASSERT_EQ(jobs->size(), 2u);
  EXPECT_EQ(jobs->at(0).request_id, "kept");
  EXPECT_EQ(jobs->at(1).request_id, "after");
}

// A big write spills pages to the WAL before COMMIT, so the disk fills up inside the transaction,
// and SQLite may then roll all of it back. A body that ignores that error must not get the rest
// committed piecemeal.
TEST_F(StoreTest, DiskFullInsideATransactionCommitsNothing) {
  FaultVfsScope vfs;
  auto store = OpenStore();
  JobRecord huge = MakeJob("huge");
  (*huge.spec.mutable_env())["BLOB"] = std::string(16 << 20, 'h');  // beyond the page cache
  Status nested, after;
  Status status = store->RunInTransaction([&] {
    AddJob(store.get(), "before");
    fail_rc = SQLITE_FULL;
    nested = store->RunInTransaction([&] { return store->InsertJob(&huge); });
    fail_rc = SQLITE_OK;
    JobRecord job = MakeJob("after");
    after = store->InsertJob(&job);
    return Status::Ok();  // ignores `nested`
  });
  EXPECT_EQ(nested.code(), StatusCode::kResourceExhausted) << nested;
  EXPECT_EQ(after.code(), StatusCode::kAborted) << after;
  EXPECT_EQ(status.code(), StatusCode::kAborted) << status;
  EXPECT_TRUE(store->LoadJobs()->empty());
  EXPECT_EQ(AddJob(store.get(), "later"), "1");  // still usable; the failed ids were not taken
}

TEST_F(StoreTest, IoErrorsAreErrorsAndTheStoreRecovers) {
  FaultVfsScope vfs;
  auto store = OpenStore();
  AddJob(store.get(), "kept");
  fail_rc = SQLITE_IOERR_WRITE;
  JobRecord job = MakeJob("lost");
  Status status = store->InsertJob(&job);
  EXPECT_EQ(status.code(), StatusCode::kInternal) << status;
  EXPECT_NE(status.message().find("I/O error"), std::string::npos) << status;
  fail_rc = SQLITE_OK;
  // A failed fsync is reported too; whether that commit survives is then unknown, like any write
  // whose acknowledgement was lost, but what was acknowledged before stays.
  fail_sync_rc = SQLITE_IOERR_FSYNC;
  EXPECT_FALSE(store->NextCounter("c").ok());
  fail_sync_rc = SQLITE_OK;
  AddJob(store.get(), "after");
  store.reset();
  EXPECT_EQ(RawQuery(path_, "PRAGMA integrity_check"), "ok");
  store = OpenStore();
  auto jobs = store->LoadJobs();
  ASSERT_TRUE(jobs.ok()) << jobs.status();
  ASSERT_EQ(jobs->size(), 2u);
  EXPECT_EQ(jobs->at(0).request_id, "kept");
  EXPECT_EQ(jobs->at(1).request_id, "after");
}

// What InsertJob acknowledged survives SIGKILL: the process never gets to close the database, so the
// reopen recovers from the WAL.
TEST_F(StoreTest, AcknowledgedWritesSurviveKill9) {
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    close(fds[0]);
    auto store = Store::Open(path_);
    bool ok = store.ok();
    for (int i = 0; ok && i < 3; ++i) {
      JobRecord job = MakeJob("child-" + std::to_string(i));
      ok = (*store)->InsertJob(&job).ok();
    }
    ok = ok && (*store)->NextCounter("port").ok();
    (void)!write(fds[1], ok ? "ok" : "no", 2);
    for (;;) pause();  // killed here, holding the database open
  }
  close(fds[1]);
  char reply[3] = {};
  ASSERT_EQ(read(fds[0], reply, 2), 2);
  close(fds[0]);
  EXPECT_STREQ(reply, "ok");
  ASSERT_EQ(kill(pid, SIGKILL), 0);
  int wstatus = 0;
  ASSERT_EQ(waitpid(pid, &wstatus, 0), pid);
  ASSERT_TRUE(WIFSIGNALED(wstatus));
  EXPECT_GT(fs::file_size(path_ + "-wal"), 0u);  // the data is only in the WAL

  auto store = OpenStore();
  ASSERT_TRUE(store);
  auto jobs = store->LoadJobs();
  ASSERT_TRUE(jobs.ok()) << jobs.status();
  ASSERT_EQ(jobs->size(), 3u);
  EXPECT_EQ(jobs->at(2).request_id, "child-2");
  EXPECT_EQ(*store->NextCounter("port"), 2);
}

// Not a check: prints the cost of one durable InsertJob on this disk.
// Run with --gtest_also_run_disabled_tests --gtest_filter='*InsertJobLatency*'.
TEST_F(StoreTest, DISABLED_InsertJobLatency) {
  auto store = OpenStore();
  std::vector<double> ms;
  for (int i = 0; i < 200; ++i) {
    JobRecord job = MakeJob();
    auto start = std::chrono::steady_clock::now();
    ASSERT_TRUE(store->InsertJob(&job).ok());
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
  }
  std::sort(ms.begin(), ms.end());
  std::printf("InsertJob (synchronous=FULL) over %zu: median %.3f ms, p10 %.3f ms, p90 %.3f ms, max %.3f ms\n",
              ms.size(), ms[ms.size() / 2], ms[ms.size() / 10], ms[ms.size() * 9 / 10], ms.back());
}

}  // namespace
}  // namespace eft::controller
