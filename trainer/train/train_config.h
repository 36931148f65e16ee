// TrainConfig: everything one training run needs. Its spec part comes from a normalized job spec
// (spec/job_spec.h: the one schema, whose names, defaults and allowed values are spec.proto's), read
// from a --config file or the EFT_JOB_SPEC the worker hands every rank, after --set overrides; the
// rest (output dir, threads, peak TFLOP/s) only the command line sets.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "eft/v1/spec.pb.h"
#include "trainer/optim/adamw.h"
#include "trainer/optim/schedule.h"
#include "trainer/model/model_config.h"

namespace eft::trainer {

// training.lora (docs/lora.md); absent from the spec: full fine-tuning.
struct LoraConfig {
  bool enabled = false;
  int64_t r = 16;
  double alpha = 32;
  double dropout = 0;
  std::vector<std::string> target_modules;  // HF module names, all-linear expanded, in layer order
  std::string init_from;                    // a PEFT adapter directory, or empty
  double scale() const { return alpha / static_cast<double>(r); }
  bool operator==(const LoraConfig&) const = default;
};

// One named held-out set of data.eval (proto/eft/v1/spec.proto, EvalSet).
struct EvalSetConfig {
  std::string name;
  std::string path;  // JSONL, read as data.train is
  bool operator==(const EvalSetConfig&) const = default;
};

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
  int64_t max_steps = 0;  // > 0: stop after this many optimizer steps
  ScheduleConfig schedule;
  AdamWConfig adamw;
  double max_grad_norm = 1.0;
  std::string precision = "auto";  // auto | bf16 | fp32 (trainer/train/precision.h)
  bool activation_checkpointing = true;
  std::string sharding = "grad_op";  // full | grad_op | no_shard (trainer/parallel/sharded_llama.h)
  std::string device = "auto";  // auto | cpu | cuda (trainer/parallel/device.h)
  uint64_t seed = 42;
  LoraConfig lora;

  std::string checkpoint_dir;     // empty: no checkpoints
  int64_t checkpoint_every_steps = 200;     // sharded checkpoints; 0: never
  int64_t checkpoint_full_every_steps = 0;  // full (HF + optimizer) checkpoints; 0: only at the end
  int keep_last = 3;
  bool require_resume = false;  // a resume that finds only unusable checkpoints fails
  bool merge_lora = false;      // LoRA: also write the merged model at the end (docs/lora.md)
  std::string full_write = "parallel";  // parallel | rank0 (docs/checkpoints.md, "Write path")

  // Evaluation (trainer/train/evaluation.h).
  std::vector<EvalSetConfig> eval_sets;  // data.eval, in its order; empty: none
  double eval_fraction = 0;      // > 0: hold out this part of train_data instead
  int64_t eval_every_steps = 0;  // 0: at every full checkpoint and at the end
  bool keep_best = false;        // the lowest-eval-loss checkpoint outlives keep_last's rotation

  // Command line only.
  std::string output_dir;  // also write the final model as a plain Hugging Face directory here
  int threads = 0;         // intra-op threads per rank; 0: cores / local ranks
  double peak_tflops = 0;  // per rank, for MFU; 0: a known GPU's peak, else not reported (peak_flops.h)
  std::string profile_steps;  // "A:B": profile those steps (trainer/train/step_profiler.h); empty: off
  std::string profile_dir;    // where the profiles go

  bool operator==(const TrainConfig&) const = default;
};

// A job spec document (YAML or JSON, as parsed by YamlToJson) with `--set` overrides applied, then
// read, validated and completed with defaults by spec/job_spec.h. Errors name the field path.
Result<v1::JobSpec> LoadJobSpec(nlohmann::json document, const std::vector<std::string>& overrides);

// The run a normalized spec describes. Fails for a spec eft-train cannot run itself (spec.command
// set: that job runs the user's program instead).
Result<TrainConfig> TrainConfigFromJobSpec(const v1::JobSpec& normalized);

// Applies a "training.lr=1e-4"-style override (a job spec path and a YAML value) to a job spec
// document. Keys may be written as the spec writes them (snake_case) or in lowerCamelCase.
Status ApplyOverride(const std::string& assignment, nlohmann::json* spec);

// The spec.proto fields eft-train does not read because they are the controller's and the worker's
// business (placement, restarts, the program and its environment), as paths like
// "resources.nodes.min". Every other field reaches TrainConfig; a test holds both lists to that.
const std::vector<std::string>& FieldsTheTrainerIgnores();

// What a resume must agree on with the run that saved the checkpoint, by name (the model, the data,
// the global batch, the schedule, the seed; TrainerState::compat, checked by CheckCompatible in
// trainer/checkpoint/trainer_state.h). World size, nodes, micro-batch size, precision and activation
// checkpointing may change between attempts.
nlohmann::json CompatibilityRecord(const TrainConfig& config, const ModelConfig& model, int64_t dataset_examples,
                                   int64_t dataset_tokens);

}  // namespace eft::trainer
