#include "trainer/optim/schedule.h"

#include <gtest/gtest.h>

#include <cmath>
#include <numbers>

namespace eft::trainer {
namespace {

ScheduleConfig Config(const std::string& type, double warmup_ratio = 0.1) {
  ScheduleConfig c;
  c.type = type;
  c.lr = 1e-3;
  c.min_lr = 1e-4;
  c.warmup_ratio = warmup_ratio;
  return c;
}

// Relative comparison: the expected values below are derived by hand from the formulas.
void ExpectLr(const ScheduleConfig& c, int64_t step, int64_t total, double expected) {
  const double got = LearningRate(c, step, total);
  EXPECT_NEAR(got, expected, 1e-12 * std::max(1e-3, std::abs(expected)))
      << c.type << " step " << step << " of " << total;
}

TEST(ScheduleTest, WarmupStepsRoundUpLikeHuggingFace) {
  EXPECT_EQ(WarmupSteps(Config("cosine", 0.1), 100), 10);
  EXPECT_EQ(WarmupSteps(Config("cosine", 0.1), 7), 1);     // ceil(0.7)
  EXPECT_EQ(WarmupSteps(Config("cosine", 0.07), 100), 8);  // 100 * 0.07 == 7.000000000000001 in double, as in Python
  EXPECT_EQ(WarmupSteps(Config("cosine", 0.0), 100), 0);
  EXPECT_EQ(WarmupSteps(Config("cosine", 0.5), 0), 0);
}

// lr 1e-3, min_lr 1e-4, 100 steps, warmup_ratio 0.1 -> 10 warmup steps; decay spans steps 10..100.
TEST(ScheduleTest, CosineAtKeySteps) {
  const ScheduleConfig c = Config("cosine");
  ExpectLr(c, 0, 100, 0.0);     // the first warmup step trains with lr 0, as under HF
  ExpectLr(c, 1, 100, 1e-4);
  ExpectLr(c, 9, 100, 9e-4);    // last warmup step
  ExpectLr(c, 10, 100, 1e-3);   // warmup boundary: the peak
  ExpectLr(c, 55, 100, 5.5e-4); // halfway: min_lr + (lr - min_lr) / 2
  // Last step: progress 89/90, 1e-4 + 9e-4 * 0.5 * (1 + cos(pi * 89 / 90)).
  ExpectLr(c, 99, 100, 1.0027412784140692e-4);
  ExpectLr(c, 100, 100, 1e-4);
  ExpectLr(c, 150, 100, 1e-4);  // past the end: stays at min_lr
}

TEST(ScheduleTest, LinearAtKeySteps) {
  const ScheduleConfig c = Config("linear");
  ExpectLr(c, 0, 100, 0.0);
  ExpectLr(c, 5, 100, 5e-4);
  ExpectLr(c, 10, 100, 1e-3);
  ExpectLr(c, 55, 100, 5.5e-4);
  ExpectLr(c, 99, 100, 1.1e-4);  // 1e-4 + 9e-4 * 1/90
  ExpectLr(c, 100, 100, 1e-4);
  ExpectLr(c, 150, 100, 1e-4);
}

TEST(ScheduleTest, ConstantAtKeySteps) {
  const ScheduleConfig c = Config("constant");
  ExpectLr(c, 0, 100, 0.0);
  ExpectLr(c, 5, 100, 5e-4);
  ExpectLr(c, 10, 100, 1e-3);
  ExpectLr(c, 99, 100, 1e-3);  // min_lr plays no part
}

TEST(ScheduleTest, NoWarmupStartsAtThePeak) {
  ExpectLr(Config("cosine", 0.0), 0, 10, 1e-3);
  ExpectLr(Config("linear", 0.0), 0, 10, 1e-3);
  ExpectLr(Config("linear", 0.0), 9, 10, 1e-4 + 9e-4 / 10);
  ExpectLr(Config("cosine", 0.0), 0, 1, 1e-3);  // a one-step job trains at lr
}

// transformers' lr_lambda functions (optimization.py), transcribed: with min_lr = 0 our schedule must
// be lr * lambda(step) at every step.
double HfLambda(const std::string& type, int64_t step, int64_t warmup, int64_t total) {
  if (step < warmup) return static_cast<double>(step) / static_cast<double>(std::max<int64_t>(1, warmup));
  if (type == "constant") return 1.0;
  if (type == "linear") {
    return std::max(0.0, static_cast<double>(total - step) / static_cast<double>(std::max<int64_t>(1, total - warmup)));
  }
  const double progress =
      static_cast<double>(step - warmup) / static_cast<double>(std::max<int64_t>(1, total - warmup));
  return std::max(0.0, 0.5 * (1.0 + std::cos(std::numbers::pi * 0.5 * 2.0 * progress)));
}

TEST(ScheduleTest, MatchesHuggingFaceFormulasAtEveryStep) {
  for (const char* type : {"cosine", "linear", "constant"}) {
    for (double ratio : {0.0, 0.03, 0.1, 0.5}) {
      for (int64_t total : {1, 2, 7, 100, 1001}) {
        ScheduleConfig c = Config(type, ratio);
        c.min_lr = 0;
        const int64_t warmup = static_cast<int64_t>(std::ceil(static_cast<double>(total) * ratio));
        for (int64_t s = 0; s < total; ++s) {
          const double expected = c.lr * HfLambda(type, s, warmup, total);
          ASSERT_NEAR(LearningRate(c, s, total), expected, 1e-15) << type << " ratio " << ratio << " step " << s
                                                                  << " of " << total;
        }
      }
    }
  }
}

void ExpectInvalid(const ScheduleConfig& c, const std::string& field) {
  Status s = ValidateSchedule(c);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << field;
  EXPECT_NE(s.message().find(field), std::string::npos) << s.message();
}

TEST(ScheduleTest, ValidateNamesTheField) {
  EXPECT_TRUE(ValidateSchedule(Config("cosine")).ok());
  EXPECT_TRUE(ValidateSchedule(Config("constant", 0.0)).ok());
  ExpectInvalid(Config("exponential"), "training.schedule.type");
  ScheduleConfig c = Config("cosine");
  c.lr = 0;
  ExpectInvalid(c, "training.lr");
  c.lr = NAN;
  ExpectInvalid(c, "training.lr");
  c.lr = INFINITY;
  ExpectInvalid(c, "training.lr");
  c = Config("cosine");
  c.min_lr = 2e-3;
  ExpectInvalid(c, "training.schedule.min_lr");
  c.min_lr = -1e-6;
  ExpectInvalid(c, "training.schedule.min_lr");
  c.min_lr = c.lr;  // allowed: a flat schedule after warmup
  EXPECT_TRUE(ValidateSchedule(c).ok());
  for (double bad : {1.0, -0.1, 1.5, static_cast<double>(NAN)}) {
    ExpectInvalid(Config("linear", bad), "training.schedule.warmup_ratio");
  }
}

// warmup_steps, HF's: when > 0 it is the warmup and the ratio is not looked at.
TEST(ScheduleTest, WarmupStepsOverrideTheRatio) {
  ScheduleConfig c = Config("linear", 0.5);
  c.warmup_steps = 10;
  EXPECT_EQ(WarmupSteps(c, 100), 10);
  EXPECT_EQ(WarmupSteps(c, 0), 10);
  ExpectLr(c, 5, 100, 5e-4);
  ExpectLr(c, 10, 100, 1e-3);
  c.warmup_steps = -1;
  ExpectInvalid(c, "training.schedule.warmup_steps");
}

}  // namespace
}  // namespace eft::trainer
