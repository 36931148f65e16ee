// JobIndex: where each job is filed as its state and attempt change.
#include "controller/job_index.h"

#include <gtest/gtest.h>

namespace eft::controller {
namespace {

using Ids = std::vector<std::string>;
using IdSet = std::set<std::string>;

TEST(JobIndexTest, PendingJobsComeInSubmitOrderNotStringOrder) {
  JobIndex index;
  index.File("10", v1::JOB_STATE_QUEUED, {});
  index.File("9", v1::JOB_STATE_RECOVERING, {});
  index.File("100", v1::JOB_STATE_QUEUED, {});
  EXPECT_EQ(index.Pending(), (Ids{"9", "10", "100"}));
  EXPECT_TRUE(index.Active().empty());
}

TEST(JobIndexTest, AJobIsFiledWhereItsStateSaysAndOnlyThere) {
  JobIndex index;
  index.File("1", v1::JOB_STATE_QUEUED, {});
  index.File("1", v1::JOB_STATE_STARTING, {"n1", "n2"});
  EXPECT_TRUE(index.Pending().empty()) << "starting took it out of the queue";
  EXPECT_EQ(index.ActiveOn("n1"), IdSet{"1"});
  EXPECT_EQ(index.ActiveOn("n2"), IdSet{"1"});
  EXPECT_EQ(index.Active(), IdSet{"1"});

  index.File("1", v1::JOB_STATE_RUNNING, {"n1", "n2"});
  EXPECT_EQ(index.ActiveOn("n2"), IdSet{"1"});

  // A node lost: the job recovers, off every node, back in the queue.
  index.File("1", v1::JOB_STATE_RECOVERING, {"n1", "n2"});
  EXPECT_TRUE(index.ActiveOn("n1").empty());
  EXPECT_TRUE(index.ActiveOn("n2").empty());
  EXPECT_EQ(index.Pending(), Ids{"1"});

  // The next attempt on the survivor only.
  index.File("1", v1::JOB_STATE_STARTING, {"n1"});
  EXPECT_EQ(index.ActiveOn("n1"), IdSet{"1"});
  EXPECT_TRUE(index.ActiveOn("n2").empty()) << "the old attempt's node is not kept";
  EXPECT_TRUE(index.Pending().empty());
}

TEST(JobIndexTest, TerminalJobsAreFiledNowhere) {
  for (v1::JobState terminal : {v1::JOB_STATE_SUCCEEDED, v1::JOB_STATE_FAILED, v1::JOB_STATE_CANCELLED}) {
    JobIndex index;
    index.File("1", v1::JOB_STATE_RUNNING, {"n1"});
    index.File("2", v1::JOB_STATE_QUEUED, {});
    index.File("1", terminal, {"n1"});
    index.File("2", terminal, {});
    EXPECT_TRUE(index.Pending().empty()) << v1::JobState_Name(terminal);
    EXPECT_TRUE(index.Active().empty()) << v1::JobState_Name(terminal);
    EXPECT_TRUE(index.ActiveOn("n1").empty()) << v1::JobState_Name(terminal);
  }
}

TEST(JobIndexTest, JobsSharingANodeLeaveItIndependently) {
  JobIndex index;
  index.File("1", v1::JOB_STATE_RUNNING, {"n1", "n2"});
  index.File("2", v1::JOB_STATE_RUNNING, {"n2", "n3"});
  EXPECT_EQ(index.ActiveOn("n2"), (IdSet{"1", "2"}));
  EXPECT_EQ(index.Active(), (IdSet{"1", "2"}));

  index.File("1", v1::JOB_STATE_SUCCEEDED, {"n1", "n2"});
  EXPECT_EQ(index.ActiveOn("n2"), IdSet{"2"});
  EXPECT_TRUE(index.ActiveOn("n1").empty());
  EXPECT_EQ(index.ActiveOn("n3"), IdSet{"2"});

  index.Remove("2");
  EXPECT_TRUE(index.Active().empty());
  index.Remove("2");  // removing what is not filed is a no-op
  EXPECT_TRUE(index.ActiveOn("unknown").empty());
}

TEST(JobIndexTest, TheCopiesStayValidWhileTheIndexChanges) {
  // Scheduling walks Pending() and starts jobs (refiling them) as it goes.
  JobIndex index;
  index.File("1", v1::JOB_STATE_QUEUED, {});
  index.File("2", v1::JOB_STATE_QUEUED, {});
  Ids walked;
  for (const auto& id : index.Pending()) {
    index.File(id, v1::JOB_STATE_STARTING, {"n" + id});
    walked.push_back(id);
  }
  EXPECT_EQ(walked, (Ids{"1", "2"}));
  EXPECT_TRUE(index.Pending().empty());
  EXPECT_EQ(index.Active(), (IdSet{"1", "2"}));
}

}  // namespace
}  // namespace eft::controller
