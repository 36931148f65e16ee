// The controller's side of fencing (docs/checkpoints.md, "Fencing"): an attempt cut off from the
// controller may go on committing checkpoints after the next attempt started. What it reports late
// is never handed to a later attempt, and its exit 79 (fenced off) is ignored like every ended
// attempt's.
#include "controller/rank_events.h"
#include "tests/unit/controller/controller_test_fixture.h"

namespace eft::controller {
namespace {

// Fencing (docs/checkpoints.md): a checkpoint an older attempt reports after the next one started
// (its node was cut off while its ranks trained on) may postdate that start. It is not recorded,
// so no later attempt is handed it; a job event says so. The current attempt's are recorded.
TEST_F(ControllerTest, AnOlderAttemptsLateCheckpointIsNeverHandedToALaterAttempt) {
  Register("n1");
  std::string id = Submit(Spec("a", 1, 1));
  const v1::RankAssignment first = Heartbeat("n1").desired(0);
  Heartbeat("n1", {Rank(first, v1::RANK_STATE_RUNNING)},
            {Event(first, 1, R"({"event":"checkpoint","step":10,"kind":"sharded","path":"/ck/step-10","bytes":5})")});
  auto next = Heartbeat("n1", {Rank(first, v1::RANK_STATE_EXITED, 75)});
  ASSERT_EQ(next.desired_size(), 1) << Job(id).reason();
  const v1::RankAssignment second = next.desired(0);
  ASSERT_EQ(second.key().attempt(), 2);
  EXPECT_EQ(second.resume_from(), "/ck/step-10");

  // Attempt 1 reports a later checkpoint now, and attempt 2 one of its own.
  Heartbeat("n1", {Rank(second, v1::RANK_STATE_RUNNING)},
            {Event(first, 2, R"({"event":"checkpoint","step":30,"kind":"sharded","path":"/ck/step-30","bytes":5})"),
             Event(second, 3, R"({"event":"checkpoint","step":20,"kind":"sharded","path":"/ck/step-20","bytes":5})")});
  v1::Job job = Job(id);
  ASSERT_EQ(job.checkpoints_size(), 2);
  for (const auto& c : job.checkpoints()) EXPECT_NE(c.path(), "/ck/step-30");
  EXPECT_EQ(EventsOfType(id, kLateCheckpointEvent),
            std::vector<std::string>{"attempt 1 reported a checkpoint at step 30 (/ck/step-30) after attempt 2 "
                                     "started: not offered to later attempts"});

  next = Heartbeat("n1", {Rank(second, v1::RANK_STATE_EXITED, 75)});
  ASSERT_EQ(next.desired_size(), 1) << Job(id).reason();
  ASSERT_EQ(next.desired(0).key().attempt(), 3);
  EXPECT_EQ(next.desired(0).resume_from(), "/ck/step-20") << "the newest of a current attempt, not the late one";
}

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
