// The controller's side of fencing (docs/checkpoints.md, "Fencing"): an attempt cut off from the
// controller may go on after the next attempt started; its exit 79 (fenced off) is ignored like
// every ended attempt's.
#include "tests/unit/controller/controller_test_fixture.h"

namespace eft::controller {
namespace {

// Exit 79 (fenced off by a newer attempt, common/rank_protocol.h): a stale attempt's rank exits so
// once a newer attempt raised the fence, and its exit, like every ended attempt's, is ignored. The
// current attempt exits 79 only when the fence was deleted by hand or another controller's job shares
// the directory: a counted restart, whose next attempt raises the fence anew.
TEST_F(ControllerTest, Exit79IsIgnoredFromAStaleAttemptAndACountedRestartFromTheCurrentOne) {
  Register("n1");
  std::string id = Submit(Spec("fenced", 1, 1));
  const v1::RankAssignment first = Heartbeat("n1").desired(0);
  Heartbeat("n1", {Rank(first, v1::RANK_STATE_RUNNING)});
  const v1::RankAssignment second = Heartbeat("n1", {Rank(first, v1::RANK_STATE_EXITED, 75)}).desired(0);
  Heartbeat("n1", {Rank(second, v1::RANK_STATE_RUNNING)});
  ASSERT_EQ(Job(id).state(), v1::JOB_STATE_RUNNING);
  Heartbeat("n1", {Rank(first, v1::RANK_STATE_EXITED, 79), Rank(second, v1::RANK_STATE_RUNNING)});
  v1::Job job = Job(id);
  EXPECT_EQ(job.state(), v1::JOB_STATE_RUNNING) << "attempt 1's exit is not looked at";
  EXPECT_EQ(job.attempts_size(), 2);
  EXPECT_EQ(job.restarts(), 0);

  Heartbeat("n1", {Rank(second, v1::RANK_STATE_EXITED, 79)});
  job = Job(id);
  EXPECT_EQ(job.state(), v1::JOB_STATE_RECOVERING);
  EXPECT_EQ(job.restarts(), 1);
  EXPECT_EQ(v1::AttemptEnd_Name(job.attempts(1).end()), "ATTEMPT_END_RANK_FAILED");
  EXPECT_NE(job.attempts(1).end_reason().find("exited with code 79 (fenced off by a newer attempt: another run may be "
                                              "using checkpoint.dir)"),
            std::string::npos)
      << job.attempts(1).end_reason();
}

}  // namespace
}  // namespace eft::controller
