// TrainConfig: everything one training run needs. Its spec is the job's, normalized by spec/job_spec.h
// (the one schema, whose names, defaults and allowed values are spec.proto's), read from a --config
// file or the EFT_JOB_SPEC the worker hands every rank, after --set overrides; the rest (output dir,
// threads, peak TFLOP/s, profiling) only the command line sets. The trainer reads the spec's typed
// fields where it uses them (config.spec.data().max_seq_len()): nothing here repeats a spec field or
// its default, so a default exists only where NormalizeJobSpec fills it in.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "eft/v1/spec.pb.h"
#include "trainer/model/model_config.h"

namespace eft::trainer {

struct TrainConfig {
  // Normalized (TrainConfigFromJobSpec): every field the schema defaults is set.
  v1::JobSpec spec;

  // Command line only.
  std::string output_dir;  // also write the final model as a plain Hugging Face directory here
  int threads = 0;         // intra-op threads per rank; 0: cores / local ranks
  double peak_tflops = 0;  // per rank, for MFU; 0: a known GPU's peak, else not reported (peak_flops.h)
  std::string profile_steps;  // "A:B": profile those steps (trainer/train/step_profiler.h); empty: off
  std::string profile_dir;    // where the profiles go
};

// A job spec document (YAML or JSON, as parsed by YamlToJson) with `--set` overrides applied, then
// read, validated and completed with defaults by spec/job_spec.h. Errors name the field path.
Result<v1::JobSpec> LoadJobSpec(nlohmann::json document, const std::vector<std::string>& overrides);

// The run a job spec describes, with the spec normalized (idempotent: the controller's spec comes
// normalized already), so a config built by hand gets the schema's defaults too. Fails for a spec the
// controller would refuse, and for one eft-train cannot run itself (spec.command runs another
// program: that job runs the user's program instead).
Result<TrainConfig> TrainConfigFromJobSpec(v1::JobSpec spec);

// training.lora's target_modules as HF module names, all-linear expanded, in layer order whatever
// the spec's order, so that the same set of modules is the same run.
std::vector<std::string> LoraTargetModules(const v1::LoraSpec& lora);
// What the adapters' update is multiplied by: alpha / r.
double LoraScale(const v1::LoraSpec& lora);

// Applies a "training.lr=1e-4"-style override (a job spec path and a YAML value) to a job spec
// document. Keys may be written as the spec writes them (snake_case) or in lowerCamelCase.
Status ApplyOverride(const std::string& assignment, nlohmann::json* spec);

// The spec.proto fields eft-train does not read because they are the controller's and the worker's
// business (placement, restarts, scheduling, the rank environment), as paths like
// "resources.nodes.min". The trainer reads every other field (the job's name only to name a GGUF
// export); train_config_test holds the trainer's sources to both halves.
const std::vector<std::string>& FieldsTheTrainerIgnores();

// What a resume must agree on with the run that saved the checkpoint, by name (the model, the data,
// the global batch, the schedule, the seed; TrainerState::compat, checked by CheckCompatible in
// trainer/checkpoint/trainer_state.h). World size, nodes, micro-batch size, precision and activation
// checkpointing may change between attempts.
nlohmann::json CompatibilityRecord(const TrainConfig& config, const ModelConfig& model, int64_t dataset_examples,
                                   int64_t dataset_tokens);

}  // namespace eft::trainer
