// TrainerState: what a checkpoint records besides tensors (trainer_state.json, written by rank 0),
// and the check that a resume is compatible with the run that wrote it.
//
// Only what makes the optimisation path the same is compared: the model, the data, the global
// batch, the schedule and the seed. World size, node count, micro-batch size, precision and
// activation checkpointing may change between attempts.
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"

namespace eft::trainer {

struct TrainerState {
  int64_t step = 0;            // training steps completed
  int64_t optimizer_step = 0;  // AdamW updates made (steps with a non-finite gradient make none)
  int64_t epoch = 0;           // of the next step
  int64_t samples_consumed = 0;
  int64_t total_steps = 0;
  int world_size = 0;          // of the run that saved it
  std::vector<double> loss_tail;  // the last losses, oldest first
  nlohmann::json compat;       // CompatibilityRecord of the run that saved it
  // The data order and every random choice derive from this seed and the step (training itself
  // draws no random numbers: no dropout), so it is the whole RNG state.
  uint64_t seed = 0;
  // The eval loss at this very step (checkpoint.keep_best compares it); NaN: not evaluated at it.
  double eval_loss = std::numeric_limits<double>::quiet_NaN();
  std::string config_hash() const;  // CRC-32C of the compatibility record, for humans and logs
  nlohmann::json ToJson() const;
  static Result<TrainerState> FromJson(const nlohmann::json& j);
};

// OK when `saved` and `current` (the records of two runs: which fields a resume must agree on, by
// name, e.g. CompatibilityRecord in trainer/train/train_config.h) agree; else FailedPrecondition naming
// every differing field with both values ("training.global_batch_size: checkpoint 32, now 64").
Status CheckCompatible(const nlohmann::json& saved, const nlohmann::json& current);

}  // namespace eft::trainer
