#include "tests/unit/controller/store_test_fixture.h"

#include <sqlite3.h>

#include <cstdlib>
#include <filesystem>

#include <google/protobuf/util/message_differencer.h>

namespace eft::controller {

namespace fs = std::filesystem;

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

JobRecord MakeJob(const std::string& request_id, const std::string& name) {
  JobRecord job;
  job.request_id = request_id;
  job.spec = MakeSpec(name);
  job.state = v1::JOB_STATE_QUEUED;
  job.reason = "waiting for 2 READY nodes";
  job.create_ms = 1'700'000'000'123;
  job.owner = "alice";
  return job;
}

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
  a.reached_step = number > 1 ? 200 : 0;
  return a;
}

void StoreTest::SetUp() {
  std::string tmpl = (fs::temp_directory_path() / "eft-store-test-XXXXXX").string();
  ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
  dir_ = tmpl;
  path_ = (fs::path(dir_) / "state" / "eft.db").string();  // "state/" does not exist yet
}

void StoreTest::TearDown() { fs::remove_all(dir_); }

std::unique_ptr<Store> StoreTest::OpenStore() {
  auto store = Store::Open(path_);
  EXPECT_TRUE(store.ok()) << store.status();
  return store.ok() ? std::move(store).value() : nullptr;
}

std::string StoreTest::AddJob(Store* store, const std::string& request_id) {
  JobRecord job = MakeJob(request_id);
  EXPECT_TRUE(store->InsertJob(&job).ok());
  return job.id;
}

}  // namespace eft::controller
