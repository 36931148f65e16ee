// Learning-rate schedules, as Hugging Face transformers computes them (get_{cosine,linear,constant}_
// schedule_with_warmup, plus a floor at min_lr): linear warmup from 0 over WarmupSteps(), then cosine,
// linear or constant towards min_lr at total_steps. `step` counts optimizer steps from 0, and step s
// trains with LearningRate(s): the first step of a warmup trains with lr 0, as in HF.
#pragma once

#include <cstdint>
#include <string>

#include "common/status.h"

namespace eft::trainer {

struct ScheduleConfig {
  std::string type = "cosine";  // cosine | linear | constant
  double lr = 1e-5;
  double min_lr = 0.0;
  double warmup_ratio = 0.0;
  int64_t warmup_steps = 0;  // > 0: the warmup, overriding warmup_ratio (HF's warmup_steps)
  bool operator==(const ScheduleConfig&) const = default;
};

// Errors name the field as the job spec spells it: "spec.training.schedule.min_lr: ...".
Status ValidateSchedule(const ScheduleConfig& config);

// warmup_steps when > 0, else ceil(total_steps * warmup_ratio), as HF's
// TrainingArguments.get_warmup_steps; the product is computed in double like HF's,
// so the same job warms up for the same number of steps here and under the HF Trainer (including
// products that land a hair above an integer in binary, e.g. 100 * 0.07 -> 8 steps).
int64_t WarmupSteps(const ScheduleConfig& config, int64_t total_steps);

// The learning rate for optimizer step `step` (0-based) of `total_steps`:
//   step < W:  lr * step / max(1, W)
//   else, with progress = min(1, (step - W) / max(1, total_steps - W)):
//     cosine:   min_lr + (lr - min_lr) * 0.5 * (1 + cos(pi * progress))
//     linear:   min_lr + (lr - min_lr) * max(0, (total_steps - step) / max(1, total_steps - W))
//     constant: lr
// Progress is clamped at 1 so steps past total_steps stay at min_lr (HF's cosine would rise again).
double LearningRate(const ScheduleConfig& config, int64_t step, int64_t total_steps);

}  // namespace eft::trainer
