// TrainConfig: everything one training run needs, read from a job spec (the YAML/JSON users submit,
// or the EFT_JOB_SPEC the worker hands every rank) and overridden by command-line flags.
// Field names and defaults are the job spec's (proto/eft/v1/spec.proto); errors name the field path.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "trainer/optim/adamw.h"
#include "trainer/optim/schedule.h"

namespace eft::trainer {

struct TrainConfig {
  std::string name = "train";
  std::string model;       // HF model directory
  std::string train_data;  // JSONL
  std::string data_format = "auto";
  int64_t max_seq_len = 4096;
  bool packing = true;  // several documents per sequence (trainer/data/packing.h)
  std::string chat_template = "auto";  // auto: the model's; else a Jinja file
  std::string loss_on = "assistant";   // assistant | completion | all
  bool train_on_eos = true;
  std::string on_bad_line = "error";   // error | skip
  std::string truncation = "truncate"; // truncate | drop
  std::string data_cache_dir;          // empty: <checkpoint_dir>/data-cache, else ~/.cache/eft/data

  int64_t epochs = 1;
  int64_t global_batch_size = 32;
  int64_t micro_batch_size = 1;
  int64_t max_steps = 0;  // > 0: stop after this many optimizer steps (for tests and smoke runs)
  ScheduleConfig schedule;
  AdamWConfig adamw;
  double max_grad_norm = 1.0;
  std::string precision = "bf16";  // bf16 | fp32
  bool activation_checkpointing = true;
  std::string device = "auto";  // auto | cpu | cuda (trainer/parallel/device.h)
  uint64_t seed = 42;

  std::string checkpoint_dir;     // empty: no checkpoints
  int64_t checkpoint_every_steps = 200;     // sharded checkpoints; 0: never
  int64_t checkpoint_full_every_steps = 0;  // full (HF + optimizer) checkpoints; 0: only at the end
  int keep_last = 3;
  std::string output_dir;  // also write the final model as a plain Hugging Face directory here
  int threads = 0;         // intra-op threads per rank; 0: cores / local ranks
  double peak_tflops = 0;  // per rank, for MFU; 0: not reported
};

// Reads the fields the trainer uses from a job spec document (snake_case or lowerCamelCase keys).
Result<TrainConfig> TrainConfigFromJobSpec(const nlohmann::json& spec);
// Applies a "training.lr=1e-4"-style override (a job spec path and a YAML value) to a job spec
// document, before it is read with TrainConfigFromJobSpec.
Status ApplyOverride(const std::string& assignment, nlohmann::json* spec);
Status ValidateTrainConfig(const TrainConfig& config);

}  // namespace eft::trainer
