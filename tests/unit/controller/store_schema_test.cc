// The database file: what Open creates (schema, WAL mode), migrations of older files, and files it
// must refuse (newer schema, garbage, damage) without touching them or crashing.
#include "tests/unit/controller/store_test_fixture.h"

#include <filesystem>
#include <fstream>
#include <iterator>

namespace eft::controller {
namespace {

namespace fs = std::filesystem;

// The attempts table as schema versions 1 and 2 had it (migration 3 adds a column to it).
constexpr const char* kVersion1Attempts =
    "CREATE TABLE attempts (job_id INTEGER NOT NULL REFERENCES jobs (id), number INTEGER NOT NULL, "
    "world_size INTEGER NOT NULL DEFAULT 0, ranks_per_node INTEGER NOT NULL DEFAULT 0, nodes TEXT NOT NULL "
    "DEFAULT '[]', slots TEXT NOT NULL DEFAULT '[]', master_addr TEXT NOT NULL DEFAULT '', master_port "
    "INTEGER NOT NULL DEFAULT 0, resume_from TEXT NOT NULL DEFAULT '', start_ms INTEGER NOT NULL DEFAULT 0, "
    "end_ms INTEGER NOT NULL DEFAULT 0, end_reason TEXT NOT NULL DEFAULT '', PRIMARY KEY (job_id, number))";

// The nodes table as schema versions 1 to 6 had it (migration 7 adds columns to it).
constexpr const char* kVersion1Nodes =
    "CREATE TABLE nodes (name TEXT PRIMARY KEY NOT NULL, address TEXT NOT NULL DEFAULT '', slots INTEGER NOT NULL "
    "DEFAULT 0, drained INTEGER NOT NULL DEFAULT 0, version TEXT NOT NULL DEFAULT '', registered_ms INTEGER NOT NULL "
    "DEFAULT 0, lost INTEGER NOT NULL DEFAULT 0, state_reason TEXT NOT NULL DEFAULT '')";

// Takes a database of the current schema back to before migration 9, which then runs again.
void DropMigration9(const std::string& path) { RawQuery(path, "DROP TABLE mlflow_runs"); }

// Takes a database of the current schema back to before migration 8: migrations 8 and 9 run again.
void DropMigration8(const std::string& path) {
  DropMigration9(path);
  RawQuery(path, "ALTER TABLE attempts DROP COLUMN resume_step");
}

// Takes a database of the current schema back to before migration 7: migrations 7 and 8 run again.
void DropMigration7(const std::string& path) {
  DropMigration8(path);
  RawQuery(path, "ALTER TABLE nodes DROP COLUMN data_address");
  RawQuery(path, "ALTER TABLE nodes DROP COLUMN network_stack");
}

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
            "attempts,checkpoints,counters,events,jobs,loss_points,mlflow_runs,nodes,reservations");
}

// Migration 2 (jobs.owner) on a database written by a version-1 controller: old jobs load, unowned.
TEST_F(StoreTest, Version1JobsGainAnEmptyOwner) {
  fs::create_directories(fs::path(path_).parent_path());
  RawQuery(path_,
           "CREATE TABLE jobs (id INTEGER PRIMARY KEY AUTOINCREMENT, request_id TEXT NOT NULL DEFAULT '', spec TEXT "
           "NOT NULL, state TEXT NOT NULL, reason TEXT NOT NULL DEFAULT '', create_ms INTEGER NOT NULL DEFAULT 0, "
           "start_ms INTEGER NOT NULL DEFAULT 0, end_ms INTEGER NOT NULL DEFAULT 0, attempt INTEGER NOT NULL DEFAULT "
           "0, restarts INTEGER NOT NULL DEFAULT 0, not_before_ms INTEGER NOT NULL DEFAULT 0)");
  RawQuery(path_, kVersion1Attempts);
  RawQuery(path_, kVersion1Nodes);
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

// Migration 3 (attempts.reached_step, reservations) on a database written by a version-2
// controller: its attempts load with reached_step 0 ("not known"), and both new parts work.
TEST_F(StoreTest, Version2AttemptsLoadWithAnUnknownReachedStep) {
  fs::create_directories(fs::path(path_).parent_path());
  RawQuery(path_,
           "CREATE TABLE jobs (id INTEGER PRIMARY KEY AUTOINCREMENT, request_id TEXT NOT NULL DEFAULT '', spec TEXT "
           "NOT NULL, state TEXT NOT NULL, reason TEXT NOT NULL DEFAULT '', create_ms INTEGER NOT NULL DEFAULT 0, "
           "start_ms INTEGER NOT NULL DEFAULT 0, end_ms INTEGER NOT NULL DEFAULT 0, attempt INTEGER NOT NULL DEFAULT "
           "0, restarts INTEGER NOT NULL DEFAULT 0, not_before_ms INTEGER NOT NULL DEFAULT 0, owner TEXT NOT NULL "
           "DEFAULT '')");
  RawQuery(path_, kVersion1Attempts);
  RawQuery(path_, kVersion1Nodes);
  RawQuery(path_, "INSERT INTO jobs (spec, state) VALUES ('{\"name\": \"old\"}', 'JOB_STATE_RECOVERING')");
  RawQuery(path_,
           "INSERT INTO attempts (job_id, number, world_size, nodes, slots, end_ms, end_reason) VALUES (1, 1, 2, "
           "'[\"n1\",\"n2\"]', '[[0],[0]]', 9, 'resized: n3 is available, 2 -> 3 nodes')");
  RawQuery(path_, "PRAGMA user_version = 2");
  auto store = OpenStore();
  ASSERT_TRUE(store);
  EXPECT_EQ(store->schema_version(), Store::kSchemaVersion);
  auto attempts = store->LoadAttempts("1");
  ASSERT_TRUE(attempts.ok()) << attempts.status();
  ASSERT_EQ(attempts->size(), 1u);
  EXPECT_EQ(attempts->front().end_reason, "resized: n3 is available, 2 -> 3 nodes");
  EXPECT_EQ(attempts->front().reached_step, 0);
  ASSERT_TRUE(store->UpdateReachedStep("1", 1, 40).ok());
  EXPECT_EQ(store->LoadAttempts("1")->front().reached_step, 40);
  ASSERT_TRUE(store->SetReservations("1", {"n3"}).ok());
  EXPECT_EQ(store->LoadReservations()->size(), 1u);
}

// Migration 5 (data.eval: one path -> named sets) on specs a version-4 controller stored, as its
// printer wrote them (every field shown, so "eval": "" when there was none): they load, the one
// file as a set named "eval", the others with no set; a spec already in the new form is untouched.
TEST_F(StoreTest, Version4EvalFilesBecomeASetNamedEval) {
  {
    auto store = OpenStore();
    ASSERT_TRUE(store);
  }
  RawQuery(path_, "INSERT INTO jobs (spec, state) VALUES "
                  "('{\"name\": \"with\", \"data\": {\"train\": \"/t.jsonl\", \"eval\": \"/e.jsonl\"}}', 'JOB_STATE_SUCCEEDED'), "
                  "('{\"name\": \"without\", \"data\": {\"train\": \"/t.jsonl\", \"eval\": \"\"}}', 'JOB_STATE_SUCCEEDED'), "
                  "('{\"name\": \"new\", \"data\": {\"eval\": [{\"name\": \"a\", \"path\": \"/a\"}]}}', 'JOB_STATE_SUCCEEDED')");
  RawQuery(path_, "ALTER TABLE attempts DROP COLUMN end_kind");  // migration 6's, which runs again
  DropMigration7(path_);
  RawQuery(path_, "PRAGMA user_version = 4");
  auto store = OpenStore();
  ASSERT_TRUE(store);
  EXPECT_EQ(store->schema_version(), Store::kSchemaVersion);
  auto jobs = store->LoadJobs();
  ASSERT_TRUE(jobs.ok()) << jobs.status();
  ASSERT_EQ(jobs->size(), 3u);
  const v1::DataSpec& with = (*jobs)[0].spec.data();
  ASSERT_EQ(with.eval_size(), 1);
  EXPECT_EQ(with.eval(0).name(), "eval");
  EXPECT_EQ(with.eval(0).path(), "/e.jsonl");
  EXPECT_EQ(with.train(), "/t.jsonl");
  EXPECT_EQ((*jobs)[1].spec.data().eval_size(), 0);
  ASSERT_EQ((*jobs)[2].spec.data().eval_size(), 1);
  EXPECT_EQ((*jobs)[2].spec.data().eval(0).name(), "a");
}

// Migration 6 (attempts.end_kind) on attempts a version-5 controller stored: each gets the kind its
// end reason's words stood for (the reasons below are the forms that controller wrote), running ones
// none; after it, the kind is written and read as a field, and an unknown stored kind is refused.
TEST_F(StoreTest, Version5AttemptsGainTheEndKindTheirReasonSaid) {
  {
    auto store = OpenStore();
    ASSERT_TRUE(store);
    JobRecord job = MakeJob();
    ASSERT_TRUE(store->InsertJob(&job).ok());
  }
  RawQuery(path_, "ALTER TABLE attempts DROP COLUMN end_kind");
  DropMigration7(path_);
  const std::vector<std::pair<std::string, v1::AttemptEnd>> cases = {
      {"", v1::ATTEMPT_END_UNSPECIFIED},  // still running (end_ms 0)
      {"all 4 ranks exited 0", v1::ATTEMPT_END_SUCCEEDED},
      {"cancelled by user", v1::ATTEMPT_END_CANCELLED},
      {"node n2 lost (no heartbeat for 3.0 s)", v1::ATTEMPT_END_NODE_LOST},
      {"rank 1 on node n1 vanished (its worker restarted or lost track of it)", v1::ATTEMPT_END_RANK_LOST},
      {"rank 0 exited with code 78 (out of memory): CUDA out of memory", v1::ATTEMPT_END_OUT_OF_MEMORY},
      {"rank 2 stopped after saving a checkpoint (exit 75)", v1::ATTEMPT_END_STOPPED},
      {"rank 0 exited with code 76 (rendezvous port 29501 busy on node n1; retrying on another port)",
       v1::ATTEMPT_END_PORT_BUSY},
      {"resized: grow: n3 is back, 2 -> 3 nodes", v1::ATTEMPT_END_RESIZED},
      {"preempted: job 7 (priority 5) needs n1", v1::ATTEMPT_END_PREEMPTED},
      {"rank 3 was killed by signal 9 (Killed)", v1::ATTEMPT_END_RANK_FAILED},
      {"rank 1 exited with code 1; node n2 lost (no heartbeat) at the same time, so not counted against "
       "max_restarts",
       v1::ATTEMPT_END_RANK_FAILED},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    RawQuery(path_, "INSERT INTO attempts (job_id, number, world_size, nodes, slots, end_ms, end_reason) VALUES (1, " +
                        std::to_string(i + 1) + ", 1, '[\"n1\"]', '[[0]]', " + (i == 0 ? "0" : "9") + ", '" +
                        cases[i].first + "')");
  }
  RawQuery(path_, "PRAGMA user_version = 5");
  auto store = OpenStore();
  ASSERT_TRUE(store);
  EXPECT_EQ(store->schema_version(), Store::kSchemaVersion);
  auto attempts = store->LoadAttempts("1");
  ASSERT_TRUE(attempts.ok()) << attempts.status();
  ASSERT_EQ(attempts->size(), cases.size());
  for (size_t i = 0; i < cases.size(); ++i) {
    EXPECT_EQ(v1::AttemptEnd_Name((*attempts)[i].end), v1::AttemptEnd_Name(cases[i].second)) << cases[i].first;
  }

  AttemptRecord a = (*attempts)[0];
  a.end_ms = 10;
  a.end = v1::ATTEMPT_END_PREEMPTED;
  a.end_reason = "the words do not matter any more";
  ASSERT_TRUE(store->UpdateAttempt(a).ok());
  EXPECT_EQ(store->LoadAttempts("1")->front().end, v1::ATTEMPT_END_PREEMPTED);
  a.end = static_cast<v1::AttemptEnd>(999);
  EXPECT_EQ(store->UpdateAttempt(a).code(), StatusCode::kInvalidArgument);

  RawQuery(path_, "UPDATE attempts SET end_kind = 'ATTEMPT_END_EXPLODED' WHERE number = 2");
  auto damaged = store->LoadAttempts("1");
  ASSERT_FALSE(damaged.ok());
  EXPECT_EQ(damaged.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(damaged.status().message().find("ATTEMPT_END_EXPLODED"), std::string::npos) << damaged.status();
}

// Migration 7 (nodes.data_address, nodes.network_stack) on nodes a version-6 controller stored: they
// load with neither (their address is then MASTER_ADDR, and whether nodes share loopback is not
// known) until their workers register them; written and read as fields after it.
TEST_F(StoreTest, Version6NodesGainNoDataAddressUntilTheirWorkersSayIt) {
  {
    auto store = OpenStore();
    ASSERT_TRUE(store);
  }
  DropMigration7(path_);
  RawQuery(path_, "INSERT INTO nodes (name, address, slots, version, registered_ms) VALUES ('n1', 'n1.example.org', "
                  "8, '0.1.0', 100)");
  RawQuery(path_, "PRAGMA user_version = 6");
  auto store = OpenStore();
  ASSERT_TRUE(store);
  EXPECT_EQ(store->schema_version(), Store::kSchemaVersion);
  auto nodes = store->LoadNodes();
  ASSERT_TRUE(nodes.ok()) << nodes.status();
  ASSERT_EQ(nodes->size(), 1u);
  NodeRecord n = nodes->front();
  EXPECT_EQ(n.address, "n1.example.org");
  EXPECT_EQ(n.data_address, "");
  EXPECT_EQ(n.network_stack, "");
  EXPECT_EQ(DataAddressOf(n), "n1.example.org") << "an older worker's address is where its ranks are reached";

  n.data_address = "10.0.0.1";
  n.network_stack = "boot-a/4026531840";
  ASSERT_TRUE(store->UpsertNode(n).ok());
  store.reset();
  store = OpenStore();
  EXPECT_EQ(Tie(store->LoadNodes()->front()), Tie(n));
  EXPECT_EQ(DataAddressOf(n), "10.0.0.1");
}

// Migration 8 (attempts.resume_step) on attempts a version-7 controller stored: they load with the
// step they resumed from not known (-1), which is then written and read like any field.
TEST_F(StoreTest, Version7AttemptsLoadWithAnUnknownResumeStep) {
  {
    auto store = OpenStore();
    ASSERT_TRUE(store);
    JobRecord job = MakeJob();
    ASSERT_TRUE(store->InsertJob(&job).ok());
  }
  DropMigration8(path_);
  RawQuery(path_, "INSERT INTO attempts (job_id, number, world_size, nodes, slots, reached_step) VALUES (1, 1, 2, "
                  "'[\"n1\",\"n2\"]', '[[0],[0]]', 40)");
  RawQuery(path_, "PRAGMA user_version = 7");
  auto store = OpenStore();
  ASSERT_TRUE(store);
  EXPECT_EQ(store->schema_version(), Store::kSchemaVersion);
  auto attempts = store->LoadAttempts("1");
  ASSERT_TRUE(attempts.ok()) << attempts.status();
  ASSERT_EQ(attempts->size(), 1u);
  EXPECT_EQ(attempts->front().resume_step, -1);
  EXPECT_EQ(attempts->front().reached_step, 40);
  AttemptRecord a = attempts->front();
  a.number = 2;
  a.resume_step = 37;
  ASSERT_TRUE(store->InsertAttempt(a).ok());
  EXPECT_EQ(store->LoadAttempts("1")->back().resume_step, 37);
  a.resume_step = 39;
  ASSERT_TRUE(store->UpdateAttempt(a).ok());
  EXPECT_EQ(store->LoadAttempts("1")->back().resume_step, 39);
}

// Migration 9 (mlflow_runs, docs/tracking.md) on a version-8 database: its jobs have no run (they
// are not logged to MLflow); new rows are inserted once per job, updated, and listed while not ended.
TEST_F(StoreTest, Version8JobsHaveNoMlflowRunAndNewOnesAreKeptUntilEnded) {
  {
    auto store = OpenStore();
    ASSERT_TRUE(store);
    JobRecord job = MakeJob();
    ASSERT_TRUE(store->InsertJob(&job).ok());
  }
  DropMigration9(path_);
  RawQuery(path_, "PRAGMA user_version = 8");
  auto store = OpenStore();
  ASSERT_TRUE(store);
  EXPECT_EQ(store->schema_version(), Store::kSchemaVersion);
  EXPECT_TRUE(store->LoadOpenMlflowRuns()->empty());
  JobRecord second = MakeJob("r2");
  ASSERT_TRUE(store->InsertJob(&second).ok());
  ASSERT_TRUE(store->InsertMlflowRun({"1", "key1", "", "", false}).ok());
  ASSERT_TRUE(store->InsertMlflowRun({second.id, "key2", "", "", false}).ok());
  ASSERT_TRUE(store->InsertMlflowRun({"1", "other", "9", "x", true}).ok()) << "inserting one that exists is a no-op";
  auto open = store->LoadOpenMlflowRuns();
  ASSERT_TRUE(open.ok()) << open.status();
  ASSERT_EQ(open->size(), 2u);
  EXPECT_EQ((*open)[0].job_id, "1");
  EXPECT_EQ((*open)[0].run_key, "key1");
  EXPECT_EQ((*open)[0].run_id, "");
  ASSERT_TRUE(store->UpdateMlflowRun({"1", "key1", "3", "run-a", false}).ok());
  ASSERT_TRUE(store->UpdateMlflowRun({second.id, "key2", "3", "run-b", true}).ok());
  store.reset();
  store = OpenStore();
  open = store->LoadOpenMlflowRuns();
  ASSERT_EQ(open->size(), 1u) << "an ended run is not listed";
  EXPECT_EQ((*open)[0].experiment_id, "3");
  EXPECT_EQ((*open)[0].run_id, "run-a");
  EXPECT_FALSE((*open)[0].ended);
  EXPECT_EQ(store->InsertMlflowRun({"99", "k", "", "", false}).code(), StatusCode::kNotFound) << "no such job";
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

}  // namespace
}  // namespace eft::controller
