// A full or failing disk, injected under SQLite (tests/util/sqlite_fault_injection.h) so the store
// sees exactly the error codes a real one produces: errors come back, nothing is half-written, and
// the store works again once the disk does.
#include "tests/unit/controller/store_test_fixture.h"

#include <sqlite3.h>

#include <string>

#include "tests/util/sqlite_fault_injection.h"

namespace eft::controller {
namespace {

using eft::testing::SqliteFaultInjection;
// A full disk fails the write with SQLITE_FULL, at the first page or halfway through a commit.
TEST_F(StoreTest, DiskFullIsAnErrorAndLosesNothing) {
  SqliteFaultInjection faults;
  auto store = OpenStore();
  std::string kept = AddJob(store.get(), "kept");
  JobRecord big = MakeJob("big");
  (*big.spec.mutable_env())["BLOB"] = std::string(64 * 1024, 'b');  // many overflow pages
  for (int allowed : {0, 5}) {
    faults.FailWrites(SQLITE_FULL, allowed);
    Status status = store->InsertJob(&big);
    EXPECT_EQ(status.code(), StatusCode::kResourceExhausted) << status;
    EXPECT_NE(status.message().find("inserting job"), std::string::npos) << status;
    status = store->RunInTransaction([&] {
      AddJob(store.get(), "in-txn");
      return store->InsertJob(&big);
    });
    EXPECT_FALSE(status.ok());
    faults.FailWrites(SQLITE_OK);
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
  SqliteFaultInjection faults;
  auto store = OpenStore();
  JobRecord huge = MakeJob("huge");
  (*huge.spec.mutable_env())["BLOB"] = std::string(16 << 20, 'h');  // beyond the page cache
  Status nested, after;
  Status status = store->RunInTransaction([&] {
    AddJob(store.get(), "before");
    faults.FailWrites(SQLITE_FULL);
    nested = store->RunInTransaction([&] { return store->InsertJob(&huge); });
    faults.FailWrites(SQLITE_OK);
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
  SqliteFaultInjection faults;
  auto store = OpenStore();
  AddJob(store.get(), "kept");
  faults.FailWrites(SQLITE_IOERR_WRITE);
  JobRecord job = MakeJob("lost");
  Status status = store->InsertJob(&job);
  EXPECT_EQ(status.code(), StatusCode::kInternal) << status;
  EXPECT_NE(status.message().find("I/O error"), std::string::npos) << status;
  faults.FailWrites(SQLITE_OK);
  // A failed fsync is reported too; whether that commit survives is then unknown, like any write
  // whose acknowledgement was lost, but what was acknowledged before stays.
  faults.FailSyncs(SQLITE_IOERR_FSYNC);
  EXPECT_FALSE(store->NextCounter("c").ok());
  faults.FailSyncs(SQLITE_OK);
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

}  // namespace
}  // namespace eft::controller
