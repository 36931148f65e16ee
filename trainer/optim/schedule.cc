#include "trainer/optim/schedule.h"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <sstream>

namespace eft::trainer {
namespace {

std::string Num(double v) {
  std::ostringstream os;
  os << v;
  return os.str();
}

}  // namespace

Status ValidateSchedule(const ScheduleConfig& c) {
  const std::string p = "spec.training.schedule.";
  if (c.type != "cosine" && c.type != "linear" && c.type != "constant") {
    return Status::InvalidArgument(p + "type: '" + c.type + "' is not one of cosine, linear, constant");
  }
  if (!std::isfinite(c.lr) || c.lr <= 0) {
    return Status::InvalidArgument("spec.training.lr: " + Num(c.lr) + " must be a finite number > 0");
  }
  if (!std::isfinite(c.min_lr) || c.min_lr < 0 || c.min_lr > c.lr) {
    return Status::InvalidArgument(p + "min_lr: " + Num(c.min_lr) + " must be between 0 and training.lr (" +
                                   Num(c.lr) + ")");
  }
  if (c.warmup_steps < 0) {
    return Status::InvalidArgument(p + "warmup_steps: " + std::to_string(c.warmup_steps) + " must be >= 0");
  }
  if (!(c.warmup_ratio >= 0 && c.warmup_ratio < 1)) {
    return Status::InvalidArgument(p + "warmup_ratio: " + Num(c.warmup_ratio) +
                                   " must be >= 0 and < 1 (a fraction of the total steps)");
  }
  return Status::Ok();
}

int64_t WarmupSteps(const ScheduleConfig& c, int64_t total_steps) {
  if (c.warmup_steps > 0) return c.warmup_steps;
  if (total_steps <= 0 || c.warmup_ratio <= 0) return 0;
  return static_cast<int64_t>(std::ceil(static_cast<double>(total_steps) * c.warmup_ratio));
}

double LearningRate(const ScheduleConfig& c, int64_t step, int64_t total_steps) {
  const int64_t warmup = WarmupSteps(c, total_steps);
  if (step < warmup) {
    return c.lr * static_cast<double>(step) / static_cast<double>(std::max<int64_t>(1, warmup));
  }
  if (c.type == "constant") return c.lr;
  const double progress = std::min(
      1.0, static_cast<double>(step - warmup) / static_cast<double>(std::max<int64_t>(1, total_steps - warmup)));
  double factor;
  if (c.type == "linear") {
    // HF's form (remaining / span) rather than 1 - progress: the two round differently.
    factor = std::max(0.0, static_cast<double>(total_steps - step) /
                               static_cast<double>(std::max<int64_t>(1, total_steps - warmup)));
  } else {
    factor = 0.5 * (1.0 + std::cos(std::numbers::pi * progress));
  }
  return c.min_lr + (c.lr - c.min_lr) * factor;
}

}  // namespace eft::trainer
