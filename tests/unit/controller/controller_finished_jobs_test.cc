// Finished jobs leave memory (docs/architecture.md, "Finished jobs"): beyond
// finished_jobs_in_memory the jobs that finished first are read back from the store, and every
// surface answers for them as before: GetJob (attempts, checkpoints, events, loss history),
// ListJobs (order, filters, pages across memory and store), CancelJob, WaitForJobChange, a retried
// SubmitJob's request id, the /metrics state counts, and a controller restart. Found by the
// control-plane soak: the controller's memory grew by ~5 KB per finished job for as long as it ran.
#include <google/protobuf/util/message_differencer.h>

#include "tests/unit/controller/controller_test_fixture.h"

namespace eft::controller {
namespace {

class FinishedJobsTest : public ControllerTest {
 protected:
  void SetUp() override {
    config_.finished_jobs_in_memory = 2;
    config_.progress_flush_interval = 0ms;  // every Tick stores what a job reported
    ControllerTest::SetUp();
    Register("n1");
  }

  // Runs a 1-rank job on n1 through 3 steps and a checkpoint to exit `code` (0: SUCCEEDED, 2: FAILED).
  std::string RunToEnd(const std::string& name, int code, const std::string& request_id = "") {
    auto job = c_->SubmitJob(Spec(name, 1, 1), request_id);
    EXPECT_TRUE(job.ok()) << job.status();
    auto a = StartRanks({"n1"}).at("n1");
    std::vector<v1::RankEvent> events;
    for (int step = 1; step <= 3; ++step) {
      events.push_back(Event(a, ++seq_, R"({"event":"step","step":)" + std::to_string(step) +
                                            R"(,"loss":)" + std::to_string(2.0 / step) + R"(,"total_steps":3})"));
    }
    events.push_back(Event(a, ++seq_, R"({"event":"checkpoint","step":3,"kind":"full","path":"/ck/)" + job->id() +
                                          R"(","bytes":5})"));
    Heartbeat("n1", {Rank(a, v1::RANK_STATE_RUNNING)}, events);
    Heartbeat("n1", {Rank(a, v1::RANK_STATE_EXITED, code)});
    Heartbeat("n1");  // the exit was acknowledged: the worker forgets the rank
    clock_.Advance(10ms);
    c_->Tick();
    return job->id();
  }

  // What GetJob says, less the live progress (not stored: a job read back has none, as after a restart).
  v1::Job Stored(const std::string& id) {
    v1::Job j = Job(id);
    j.clear_progress();
    return j;
  }

  static bool Same(const v1::Job& a, const v1::Job& b, std::string* diff) {
    google::protobuf::util::MessageDifferencer d;
    d.ReportDifferencesToString(diff);
    return d.Compare(a, b);
  }

  uint64_t seq_ = 0;
};

TEST_F(FinishedJobsTest, TheOldestFinishedJobsLeaveMemoryAndReadBackTheSame) {
  std::vector<std::string> ids;
  std::vector<v1::Job> when_finished;
  for (int i = 0; i < 5; ++i) {
    ids.push_back(RunToEnd("j" + std::to_string(i), i == 1 ? 2 : 0));
    when_finished.push_back(Stored(ids.back()));
  }
  EXPECT_EQ(c_->JobsInMemory(), 2u) << "only the 2 most recently finished jobs stay";
  for (size_t i = 0; i < ids.size(); ++i) {
    std::string diff;
    EXPECT_TRUE(Same(Stored(ids[i]), when_finished[i], &diff)) << "job " << ids[i] << ": " << diff;
  }
  v1::Job first = Job(ids[0]);
  EXPECT_EQ(first.state(), v1::JOB_STATE_SUCCEEDED);
  EXPECT_EQ(first.checkpoints_size(), 1);
  EXPECT_EQ(first.loss_history().train_size(), 3);
  EXPECT_EQ(Job(ids[1]).state(), v1::JOB_STATE_FAILED);
  EXPECT_EQ(c_->JobOwner(ids[0]).value(), "");
  EXPECT_EQ(c_->GetJob("99").status().code(), StatusCode::kNotFound);

  // Cancelling a finished job out of memory answers as for one in memory.
  EXPECT_EQ(c_->CancelJob(ids[0]).status().code(), StatusCode::kFailedPrecondition);
  // Watching one returns at once the first time, then waits out the timeout: it will not change.
  uint64_t version = 0;
  bool changed = false;
  auto watched = c_->WaitForJobChange(ids[0], &version, 10s, &changed);
  ASSERT_TRUE(watched.ok()) << watched.status();
  EXPECT_TRUE(changed);
  EXPECT_EQ(watched->state(), v1::JOB_STATE_SUCCEEDED);
  auto again = c_->WaitForJobChange(ids[0], &version, 50ms, &changed);
  ASSERT_TRUE(again.ok());
  EXPECT_FALSE(changed);

  // /metrics counts every job, in memory or not.
  ControllerSnapshot snap = c_->Snapshot(100);
  EXPECT_EQ(snap.jobs_by_state[v1::JOB_STATE_SUCCEEDED], 4);
  EXPECT_EQ(snap.jobs_by_state[v1::JOB_STATE_FAILED], 1);
}

TEST_F(FinishedJobsTest, ListJobsPagesAcrossMemoryAndTheStoreWithFilters) {
  std::vector<std::string> ids;
  for (int i = 0; i < 4; ++i) ids.push_back(RunToEnd("done" + std::to_string(i), i == 2 ? 2 : 0));
  std::string queued = Submit(Spec("wide", 2, 2));  // never fits on one node: stays QUEUED
  ids.push_back(queued);

  std::vector<std::string> seen;
  v1::ListJobsRequest req;
  req.set_page_size(2);
  do {
    auto page = c_->ListJobs(req);
    ASSERT_TRUE(page.ok()) << page.status();
    for (const auto& j : page->jobs()) seen.push_back(j.id());
    req.set_page_token(page->next_page_token());
  } while (!req.page_token().empty());
  EXPECT_EQ(seen, std::vector<std::string>(ids.rbegin(), ids.rend())) << "newest first, each once";

  v1::ListJobsRequest succeeded;
  succeeded.add_states(v1::JOB_STATE_SUCCEEDED);
  auto page = c_->ListJobs(succeeded);
  ASSERT_TRUE(page.ok());
  ASSERT_EQ(page->jobs_size(), 3);
  EXPECT_EQ(page->jobs(2).id(), ids[0]);
  EXPECT_EQ(page->jobs(2).state(), v1::JOB_STATE_SUCCEEDED);
  EXPECT_EQ(page->jobs(2).spec().name(), "done0");

  v1::ListJobsRequest bad;
  bad.set_page_token("x1");
  EXPECT_EQ(c_->ListJobs(bad).status().code(), StatusCode::kInvalidArgument);
}

TEST_F(FinishedJobsTest, ARetriedSubmitGetsItsJobBackAfterItLeftMemory) {
  std::string id = RunToEnd("keyed", 0, "req-7");
  for (int i = 0; i < 3; ++i) RunToEnd("later" + std::to_string(i), 0);
  auto again = c_->SubmitJob(Spec("keyed", 1, 1), "req-7");
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->id(), id);
  EXPECT_EQ(again->state(), v1::JOB_STATE_SUCCEEDED);
}

TEST_F(FinishedJobsTest, ARestartLoadsOnlyTheMostRecentlyFinishedJobs) {
  std::vector<std::string> ids;
  for (int i = 0; i < 4; ++i) ids.push_back(RunToEnd("r" + std::to_string(i), 0));
  std::string queued = Submit(Spec("wide", 2, 2));
  Restart();
  EXPECT_EQ(c_->JobsInMemory(), 3u) << "the queued job and the 2 most recently finished";
  EXPECT_EQ(Job(ids[0]).state(), v1::JOB_STATE_SUCCEEDED);
  EXPECT_EQ(Job(queued).state(), v1::JOB_STATE_QUEUED);
  EXPECT_EQ(c_->Snapshot(100).jobs_by_state[v1::JOB_STATE_SUCCEEDED], 4);
  // New jobs get fresh MASTER_PORTs: the attempts of the jobs left on disk still count.
  Register("n1");
  std::string next = RunToEnd("after", 0);
  EXPECT_EQ(Job(next).attempts(0).master_port(), config_.master_port_base + 4) << "the 5th attempt ever";
}

}  // namespace
}  // namespace eft::controller
