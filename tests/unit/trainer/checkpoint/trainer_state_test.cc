// Trainer state round trip and the compatibility rule a resume is checked with.
#include "trainer/checkpoint/trainer_state.h"
#include "trainer/train/train_config.h"

#include <gtest/gtest.h>

namespace eft::trainer {
namespace {

TEST(TrainerState, RoundTripsThroughJson) {
  TrainerState s;
  s.step = 12;
  s.optimizer_step = 11;
  s.epoch = 2;
  s.samples_consumed = 96;
  s.total_steps = 100;
  s.world_size = 4;
  s.loss_tail = {4.5, 4.25};
  s.compat = {{"training.seed", 42}};
  auto back = TrainerState::FromJson(s.ToJson());
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->ToJson(), s.ToJson());
  EXPECT_FALSE(s.ToJson().contains("eval_loss")) << "not evaluated at this step: no eval_loss";
  s.eval_loss = 1.5;
  back = TrainerState::FromJson(s.ToJson());
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_DOUBLE_EQ(back->eval_loss, 1.5);
  auto bad = TrainerState::FromJson({{"format", 1}, {"step", "x"}});
  EXPECT_EQ(bad.status().code(), StatusCode::kDataLoss);
}

TEST(TrainerState, CompatibilityNamesEveryDifferenceWithBothValues) {
  TrainConfig c;
  c.global_batch_size = 32;
  ModelConfig m;
  m.model_type = "llama";
  m.hidden_size = 64;
  nlohmann::json saved = CompatibilityRecord(c, m, 100, 5000);
  // World size, micro-batch size and precision are not part of the record: they may change.
  TrainConfig other = c;
  other.micro_batch_size = c.micro_batch_size * 2;
  other.precision = "bf16";
  EXPECT_TRUE(CheckCompatible(saved, CompatibilityRecord(other, m, 100, 5000)).ok());

  other.global_batch_size = 64;
  ModelConfig m2 = m;
  m2.hidden_size = 128;
  Status s = CheckCompatible(saved, CompatibilityRecord(other, m2, 101, 5000));
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("training.global_batch_size: checkpoint 32, now 64"), std::string::npos) << s;
  EXPECT_NE(s.message().find("model.hidden_size: checkpoint 64, now 128"), std::string::npos) << s;
  EXPECT_NE(s.message().find("data.examples: checkpoint 100, now 101"), std::string::npos) << s;
}

// warmup_steps changes the schedule, so a resume must agree on it; unset, it is absent from the
// record, so checkpoints written before it existed still resume.
TEST(TrainerState, WarmupStepsIsPartOfTheRecordOnlyWhenSet) {
  TrainConfig c;
  ModelConfig m;
  const nlohmann::json before = CompatibilityRecord(c, m, 10, 100);
  EXPECT_FALSE(before.contains("training.schedule.warmup_steps"));
  TrainConfig with = c;
  with.schedule.warmup_steps = 20;
  const Status s = CheckCompatible(before, CompatibilityRecord(with, m, 10, 100));
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("training.schedule.warmup_steps: not in the checkpoint"), std::string::npos) << s;
  TrainConfig other = with;
  other.schedule.warmup_steps = 30;
  EXPECT_NE(CheckCompatible(CompatibilityRecord(with, m, 10, 100), CompatibilityRecord(other, m, 10, 100))
                .message()
                .find("training.schedule.warmup_steps: checkpoint 20, now 30"),
            std::string::npos);
}

}  // namespace
}  // namespace eft::trainer
