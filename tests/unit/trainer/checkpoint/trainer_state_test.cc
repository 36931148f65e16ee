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

// A run's config: a minimal job spec with `overrides` (eft-train's --set), normalized.
TrainConfig Config(const std::vector<std::string>& overrides = {}) {
  const nlohmann::json minimal = {{"name", "t"}, {"model", "/m"}, {"data", {{"train", "/d.jsonl"}}}};
  auto spec = LoadJobSpec(minimal, overrides);
  EXPECT_TRUE(spec.ok()) << spec.status();
  auto config = TrainConfigFromJobSpec(spec.ok() ? *spec : v1::JobSpec());
  EXPECT_TRUE(config.ok()) << config.status();
  return config.ok() ? *config : TrainConfig();
}

TEST(TrainerState, CompatibilityNamesEveryDifferenceWithBothValues) {
  ModelConfig m;
  m.model_type = "llama";
  m.hidden_size = 64;
  nlohmann::json saved = CompatibilityRecord(Config({"training.global_batch_size=32"}), m, 100, 5000);
  // World size, micro-batch size and precision are not part of the record: they may change.
  const TrainConfig other = Config({"training.micro_batch_size=2", "training.precision=bf16"});
  EXPECT_TRUE(CheckCompatible(saved, CompatibilityRecord(other, m, 100, 5000)).ok());

  ModelConfig m2 = m;
  m2.hidden_size = 128;
  Status s = CheckCompatible(saved, CompatibilityRecord(Config({"training.global_batch_size=64"}), m2, 101, 5000));
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("training.global_batch_size: checkpoint 32, now 64"), std::string::npos) << s;
  EXPECT_NE(s.message().find("model.hidden_size: checkpoint 64, now 128"), std::string::npos) << s;
  EXPECT_NE(s.message().find("data.examples: checkpoint 100, now 101"), std::string::npos) << s;
}

// Checkpoints already on disk carry this record: a resume compares it with the running spec's, so
// its names, values and their JSON types must not drift.
TEST(TrainerState, TheRecordOfARunIsWhatCheckpointsAlreadyHold) {
  ModelConfig m;
  m.model_type = "llama";
  nlohmann::json record = CompatibilityRecord(Config(), m, 10, 100);
  record.erase("model");
  EXPECT_EQ(record.dump(),
            R"({"data.examples":10,"data.loss_on":"assistant","data.max_seq_len":4096,"data.packing":true,)"
            R"("data.tokens":100,"data.train_on_eos":true,"data.truncation":"truncate","training.epochs":1,)"
            R"("training.global_batch_size":32,"training.lr":1e-05,"training.max_grad_norm":1.0,)"
            R"("training.max_steps":0,"training.schedule.min_lr":0.0,"training.schedule.type":"cosine",)"
            R"("training.schedule.warmup_ratio":0.0,"training.seed":42,"training.weight_decay":0.0})");
  const nlohmann::json lora =
      CompatibilityRecord(Config({"training.lora.target_modules=[v_proj, q_proj]"}), m, 10, 100)["training.lora"];
  EXPECT_EQ(lora.dump(), R"({"alpha":32.0,"dropout":0.0,"r":16,"target_modules":["q_proj","v_proj"]})");
}

// warmup_steps changes the schedule, so a resume must agree on it; unset, it is absent from the
// record, so checkpoints written before it existed still resume.
TEST(TrainerState, WarmupStepsIsPartOfTheRecordOnlyWhenSet) {
  ModelConfig m;
  const nlohmann::json before = CompatibilityRecord(Config(), m, 10, 100);
  EXPECT_FALSE(before.contains("training.schedule.warmup_steps"));
  const TrainConfig with = Config({"training.schedule.warmup_steps=20"});
  const Status s = CheckCompatible(before, CompatibilityRecord(with, m, 10, 100));
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("training.schedule.warmup_steps: not in the checkpoint"), std::string::npos) << s;
  const TrainConfig other = Config({"training.schedule.warmup_steps=30"});
  EXPECT_NE(CheckCompatible(CompatibilityRecord(with, m, 10, 100), CompatibilityRecord(other, m, 10, 100))
                .message()
                .find("training.schedule.warmup_steps: checkpoint 20, now 30"),
            std::string::npos);
}

}  // namespace
}  // namespace eft::trainer
