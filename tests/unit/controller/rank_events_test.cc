// InterpretRankEvent (controller/rank_events.h): what each rank event means to the controller, with
// no controller around it.
#include "controller/rank_events.h"

#include <gtest/gtest.h>

#include "common/rank_protocol.h"

namespace eft::controller {
namespace {

using Kind = RankEventEffect::Kind;

v1::RankEvent Event(int attempt, const std::string& json, int rank = 0) {
  v1::RankEvent e;
  e.mutable_key()->set_job_id("7");
  e.mutable_key()->set_attempt(attempt);
  e.mutable_key()->set_rank(rank);
  e.set_seq(1);
  e.set_time_ms(1700000000123);
  e.set_json(json);
  return e;
}

TEST(RankEventsTest, AStepOfTheCurrentAttemptIsProgress) {
  rank::StepEvent step{12, 100, 1.5, 3e-4, 0.7, 4096, 800.0, 5.0, 0.3};
  RankEventEffect e = InterpretRankEvent(Event(2, rank::EncodeEvent(step)), 2);
  ASSERT_EQ(e.kind, Kind::kProgress);
  EXPECT_EQ(e.progress.step(), 12);
  EXPECT_EQ(e.progress.total_steps(), 100);
  EXPECT_DOUBLE_EQ(e.progress.loss(), 1.5);
  EXPECT_DOUBLE_EQ(e.progress.lr(), 3e-4);
  EXPECT_DOUBLE_EQ(e.progress.grad_norm(), 0.7);
  EXPECT_EQ(e.progress.tokens(), 4096);
  EXPECT_DOUBLE_EQ(e.progress.tokens_per_s(), 800.0);
  EXPECT_DOUBLE_EQ(e.progress.mfu(), 0.3);
  EXPECT_EQ(e.progress.time().seconds(), 1700000000);
  // The same step from an attempt being stopped says nothing about the job now.
  EXPECT_EQ(InterpretRankEvent(Event(1, rank::EncodeEvent(step)), 2).kind, Kind::kIgnore);
}

TEST(RankEventsTest, CheckpointsOfTheCurrentAttemptAreRecorded) {
  rank::CheckpointEvent ckpt{"full", 40, "/ckpt/step-40", 1234, 2.5, 0.1};
  RankEventEffect e = InterpretRankEvent(Event(1, rank::EncodeEvent(ckpt)), 1);
  ASSERT_EQ(e.kind, Kind::kRecordCheckpoint);
  EXPECT_EQ(e.checkpoint.job_id, "7");
  EXPECT_EQ(e.checkpoint.kind, "full");
  EXPECT_EQ(e.checkpoint.step, 40);
  EXPECT_EQ(e.checkpoint.path, "/ckpt/step-40");
  EXPECT_EQ(e.checkpoint.bytes, 1234);
  EXPECT_EQ(e.checkpoint.attempt, 1);
  EXPECT_EQ(e.checkpoint.time_ms, 1700000000123);
  EXPECT_DOUBLE_EQ(e.seconds, 2.5);
  EXPECT_DOUBLE_EQ(e.stall_seconds, 0.1);
  // Timings a program did not report stay "not reported".
  RankEventEffect bare = InterpretRankEvent(Event(3, R"({"event":"checkpoint","step":1,"path":"/p"})"), 3);
  ASSERT_EQ(bare.kind, Kind::kRecordCheckpoint);
  EXPECT_EQ(bare.checkpoint.kind, "sharded");
  EXPECT_LT(bare.seconds, 0);
  EXPECT_LT(bare.stall_seconds, 0);

  // A deleted checkpoint is gone whoever reports it.
  RankEventEffect gone =
      InterpretRankEvent(Event(1, rank::EncodeEvent(rank::CheckpointDeletedEvent{"/ckpt/step-10", "retention"})), 3);
  ASSERT_EQ(gone.kind, Kind::kForgetCheckpoint);
  EXPECT_EQ(gone.checkpoint.path, "/ckpt/step-10");
}

// An older attempt's checkpoint reported once a newer attempt runs may have been committed after
// the newer one started (fencing, docs/checkpoints.md): never recorded, so never handed on; a job
// event says so.
TEST(RankEventsTest, AnOlderAttemptsCheckpointIsAJobEventNotARecord) {
  rank::CheckpointEvent ckpt{"sharded", 60, "/ckpt/step-60", 1234, 2.5, 0.1};
  RankEventEffect e = InterpretRankEvent(Event(3, rank::EncodeEvent(ckpt)), 4);
  ASSERT_EQ(e.kind, Kind::kJobEvent);
  EXPECT_EQ(e.event_type, kLateCheckpointEvent);
  EXPECT_EQ(e.message,
            "attempt 3 reported a checkpoint at step 60 (/ckpt/step-60) after attempt 4 started: not offered to "
            "later attempts");
  EXPECT_TRUE(e.checkpoint.path.empty());
}

TEST(RankEventsTest, ErrorsOfTheCurrentAttemptBelongToTheirRank) {
  RankEventEffect e = InterpretRankEvent(Event(2, rank::EncodeEvent(rank::ErrorEvent{"disk full", 1}), 3), 2);
  ASSERT_EQ(e.kind, Kind::kRankError);
  EXPECT_EQ(e.rank, 3);
  EXPECT_EQ(e.message, "disk full");
  EXPECT_EQ(InterpretRankEvent(Event(1, rank::EncodeEvent(rank::ErrorEvent{"old", 1})), 2).kind, Kind::kIgnore);
}

TEST(RankEventsTest, LostProgressIsAJobEvent) {
  RankEventEffect e = InterpretRankEvent(Event(2, rank::EncodeEvent(rank::NoValidCheckpointEvent{"/ckpt", 1})), 2);
  ASSERT_EQ(e.kind, Kind::kJobEvent);
  EXPECT_EQ(e.event_type, "no_valid_checkpoint");
  EXPECT_EQ(e.message, "no valid checkpoint in /ckpt: starting from scratch, 1 checkpoint skipped (attempt 2)");
}

// checkpoint.merge_lora: the merged model's directory becomes a job event, whatever the attempt.
TEST(RankEventsTest, AMergedModelIsAJobEvent) {
  RankEventEffect e = InterpretRankEvent(Event(1, rank::EncodeEvent(rank::FinishedEvent{12, "/ckpt/job/merged"})), 1);
  ASSERT_EQ(e.kind, Kind::kJobEvent);
  EXPECT_EQ(e.event_type, "merged_model");
  EXPECT_EQ(e.message, "LoRA adapters merged into the base model: /ckpt/job/merged (step 12)");
}

// checkpoint.export_gguf: the GGUF file, its type and size become a job event.
TEST(RankEventsTest, AGgufExportIsAJobEvent) {
  RankEventEffect e = InterpretRankEvent(
      Event(1, rank::EncodeEvent(rank::ExportedEvent{12, "/ckpt/job/model-q8_0.gguf", "q8_0", 144812345, 5.1})), 1);
  ASSERT_EQ(e.kind, Kind::kJobEvent);
  EXPECT_EQ(e.event_type, "gguf_exported");
  EXPECT_EQ(e.message, "final model exported for llama.cpp: /ckpt/job/model-q8_0.gguf (q8_0, 144.8 MB, step 12)");
}

TEST(RankEventsTest, WhatTheControllerDoesNotKeepIsIgnoredQuietly) {
  for (const rank::Event& ev : std::vector<rank::Event>{rank::ResumedEvent{3, "sharded", "/p", 1, 0, 0},
                                                        rank::FinishedEvent{9}, rank::MemoryEvent{0, 1, 2},
                                                        rank::UnknownEvent{"calibrated"}}) {
    RankEventEffect e = InterpretRankEvent(Event(1, rank::EncodeEvent(ev)), 1);
    EXPECT_EQ(e.kind, Kind::kIgnore) << rank::EncodeEvent(ev);
    EXPECT_EQ(e.problem, "") << rank::EncodeEvent(ev);
  }
}

TEST(RankEventsTest, EvaluationsOfTheCurrentAttemptAreProgress) {
  RankEventEffect e = InterpretRankEvent(Event(2, rank::EncodeEvent(rank::EvalEvent{40, 1.75, 900, 2.0})), 2);
  ASSERT_EQ(e.kind, Kind::kEval);
  ASSERT_TRUE(e.progress.has_eval_loss());
  EXPECT_DOUBLE_EQ(e.progress.eval_loss(), 1.75);
  EXPECT_EQ(e.progress.eval_step(), 40);
  EXPECT_EQ(e.progress.eval_tokens(), 900);
  EXPECT_EQ(e.progress.step(), 0) << "an eval event carries no step progress";
  EXPECT_EQ(InterpretRankEvent(Event(1, rank::EncodeEvent(rank::EvalEvent{40, 1.75, 900})), 2).kind, Kind::kIgnore);
  EXPECT_EQ(InterpretRankEvent(Event(2, R"({"event":"eval","step":4})"), 2).problem,
            "eval event: \"loss\" is missing");
  // Named sets (data.eval): the effect names the set; an older rank's event (no set, no index) is
  // the one set "eval", index 0.
  rank::EvalEvent second{40, 2.5, 700, 1.0};
  second.set = "known";
  second.index = 1;
  RankEventEffect named = InterpretRankEvent(Event(2, rank::EncodeEvent(second)), 2);
  EXPECT_EQ(named.kind, Kind::kEval);
  EXPECT_EQ(named.eval_set, "known");
  EXPECT_EQ(named.eval_index, 1);
  RankEventEffect old = InterpretRankEvent(Event(2, R"({"event":"eval","step":4,"loss":1.5})"), 2);
  EXPECT_EQ(old.kind, Kind::kEval);
  EXPECT_EQ(old.eval_set, "eval");
  EXPECT_EQ(old.eval_index, 0);
  auto decoded = rank::DecodeEvent(rank::EncodeEvent(second));
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_EQ(std::get<rank::EvalEvent>(*decoded).set, "known");
  EXPECT_EQ(std::get<rank::EvalEvent>(*decoded).index, 1);
}

// Which eval events belong to a job: the spec's set at that index; with no eval data in the spec (a
// program of its own reporting evaluations), index 0 under any name, shown as "eval".
TEST(RankEventsTest, AJobsEvalSetsAreTheSpecs) {
  v1::JobSpec none;
  EXPECT_EQ(EvalCurveNames(none), std::vector<std::string>{"eval"});
  EXPECT_TRUE(IsJobEvalSet(none, 0, "eval"));
  EXPECT_TRUE(IsJobEvalSet(none, 0, "whatever"));
  EXPECT_FALSE(IsJobEvalSet(none, 1, "eval"));
  v1::JobSpec named;
  for (const char* name : {"new", "known"}) named.mutable_data()->add_eval()->set_name(name);
  EXPECT_EQ(EvalCurveNames(named), (std::vector<std::string>{"new", "known"}));
  EXPECT_TRUE(IsJobEvalSet(named, 1, "known"));
  EXPECT_FALSE(IsJobEvalSet(named, 0, "known")) << "a set at another set's index";
  EXPECT_FALSE(IsJobEvalSet(named, 2, "other"));
  EXPECT_FALSE(IsJobEvalSet(named, -1, "new"));
  v1::JobSpec held_out;
  held_out.mutable_data()->set_eval_fraction(0.1);
  EXPECT_EQ(EvalCurveNames(held_out), std::vector<std::string>{"eval"});
  EXPECT_FALSE(IsJobEvalSet(held_out, 0, "other"));
}

TEST(RankEventsTest, MalformedLinesSayWhy) {
  EXPECT_EQ(InterpretRankEvent(Event(1, "not json"), 1).problem, "event: not a JSON object");
  EXPECT_EQ(InterpretRankEvent(Event(1, R"({"event":"checkpoint","step":4})"), 1).problem,
            "checkpoint event: \"path\" is missing");
  EXPECT_EQ(InterpretRankEvent(Event(1, R"({"event":"step"})"), 1).kind, Kind::kIgnore);
}

}  // namespace
}  // namespace eft::controller
