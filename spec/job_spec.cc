// Job spec validation and defaults (NormalizeJobSpec); reading and printing the JSON is in
// spec_json.cc.
//
// NormalizeJobSpec reports the FIRST error only, checking fields in the order spec.proto declares
// them (nested messages depth-first). One error at a time keeps messages short, and a fixed order
// makes the reported error deterministic for users and tests alike.
#include "spec/job_spec.h"
#include "spec/spec_messages.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "common/rank_protocol.h"

namespace eft::spec {
namespace internal {

using nlohmann::json;

std::string Quote(const std::string& s) {
  // Long values would drown the message; the start is enough to recognise one's own input.
  std::string shown = s.size() > 60 ? s.substr(0, 57) + "..." : s;
  return json(shown).dump(-1, ' ', false, json::error_handler_t::replace);
}

// Doubles as a YAML user wrote them: shortest round-trip text, YAML spellings for non-finite ones.
std::string FormatDouble(double d) {
  if (std::isnan(d)) return ".nan";
  if (std::isinf(d)) return d < 0 ? "-.inf" : ".inf";
  return json(d).dump();
}

Status Invalid(const std::string& message) { return Status::InvalidArgument(message); }

Status CheckRange(const std::string& field, int64_t v, int64_t lo, int64_t hi) {
  if (v < lo) return Invalid(field + " (" + std::to_string(v) + ") must be >= " + std::to_string(lo));
  if (v > hi) return Invalid(field + " (" + std::to_string(v) + ") must be <= " + std::to_string(hi));
  return Status::Ok();
}

}  // namespace internal

using internal::CheckRange;
using internal::FormatDouble;
using internal::Invalid;
using internal::Quote;

namespace {

using nlohmann::json;

// ---------------------------------------------------------------------------------------------
// Validation helpers for NormalizeJobSpec. Each names the field, the bad value and the rule.

// An eval set's name becomes a metric label value and a legend entry: short, plain characters.
bool IsEvalSetName(const std::string& name) {
  if (name.empty() || name.size() > 64) return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '.' || c == '-';
  });
}

// `!(v >= lo)` rather than `v < lo` so that NaN fails too.
Status CheckAtLeast(const std::string& field, double v, double lo) {
  if (!std::isfinite(v) || !(v >= lo)) {
    return Invalid(field + " (" + FormatDouble(v) + ") must be a finite number >= " + FormatDouble(lo));
  }
  return Status::Ok();
}

Status CheckChoice(const std::string& field, std::string* value, const char* default_value,
                   std::initializer_list<const char*> choices) {
  if (value->empty()) *value = default_value;
  for (const char* c : choices) {
    if (*value == c) return Status::Ok();
  }
  std::string list;
  for (const char* c : choices) list += (list.empty() ? "" : ", ") + std::string(c);
  return Invalid(field + " (" + Quote(*value) + ") must be one of " + list);
}

// tracking (docs/tracking.md): the fields stay empty when unset (their defaults depend on the
// controller and the checkpoint directory); what is set must be usable.
Status CheckTracking(const v1::TrackingSpec& tracking) {
  const std::string& tb = tracking.tensorboard();
  if (!tb.empty() && tb != "off" && tb.front() != '/') {
    return Invalid("spec.tracking.tensorboard (" + Quote(tb) +
                   ") must be an absolute directory on the nodes, or \"off\"");
  }
  const std::string& uri = tracking.mlflow_tracking_uri();
  if (!uri.empty() && uri != "off" && uri.rfind("http://", 0) != 0 && uri.rfind("https://", 0) != 0) {
    return Invalid("spec.tracking.mlflow_tracking_uri (" + Quote(uri) +
                   ") must be an http:// or https:// URL of an MLflow tracking server, or \"off\"");
  }
  if (tracking.mlflow_experiment().size() > 500) {
    return Invalid("spec.tracking.mlflow_experiment is longer than 500 characters");
  }
  return Status::Ok();
}

// checkpoint.memory_every_steps: "auto" (the default), or a whole number of steps ("0": off).
Status NormalizeMemoryEverySteps(std::string* value) {
  if (value->empty()) *value = "auto";
  if (MemorySnapshotInterval(*value).has_value()) return Status::Ok();
  return Invalid("spec.checkpoint.memory_every_steps (" + Quote(*value) +
                 ") must be auto or a whole number of steps from 0 (off) to 999999999");
}

Status CheckName(const std::string& name) {
  const std::string rule = "1-63 characters of a-z, 0-9 and '-', starting with a letter (e.g. \"qwen-sft\")";
  if (name.empty()) return Invalid("spec.name is required: " + rule);
  if (name.size() > 63) {
    return Invalid("spec.name (" + Quote(name) + ") is " + std::to_string(name.size()) +
                   " characters long; use at most 63");
  }
  for (char c : name) {
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-')) {
      return Invalid("spec.name (" + Quote(name) + ") contains " + Quote(std::string(1, c)) +
                     "; use only lowercase letters a-z, digits 0-9 and '-'");
    }
  }
  if (!(name[0] >= 'a' && name[0] <= 'z')) {
    return Invalid("spec.name (" + Quote(name) + ") must start with a letter a-z");
  }
  if (name.back() == '-') return Invalid("spec.name (" + Quote(name) + ") must not end with '-'");
  return Status::Ok();
}

Status CheckEnv(const v1::JobSpec& spec) {
  // Map order is unspecified; sort so that the reported error does not depend on it.
  std::vector<std::string> names;
  for (const auto& [k, v] : spec.env()) names.push_back(k);
  std::sort(names.begin(), names.end());
  for (const std::string& n : names) {
    bool valid = !n.empty() && !(n[0] >= '0' && n[0] <= '9');
    for (char c : n) {
      valid = valid && ((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_');
    }
    if (!valid) {
      return Invalid("spec.env: " + Quote(n) +
                     " is not a valid variable name; use letters, digits and '_', not starting with a digit");
    }
    if (rank::IsReservedEnvName(n)) {
      return Invalid("spec.env." + n + ": the worker sets " + n +
                     " for every rank (RANK, WORLD_SIZE, MASTER_ADDR, CUDA_VISIBLE_DEVICES, EFT_*, ...); "
                     "remove it from spec.env");
    }
  }
  return Status::Ok();
}

}  // namespace

std::optional<int64_t> MemorySnapshotInterval(const std::string& memory_every_steps) {
  if (memory_every_steps == "auto") return -1;
  // At most 9 digits: what docs/openapi.yaml states, and far beyond any run's length.
  if (memory_every_steps.empty() || memory_every_steps.size() > 9 ||
      memory_every_steps.find_first_not_of("0123456789") != std::string::npos) {
    return std::nullopt;
  }
  return std::stoll(memory_every_steps);
}

Status NormalizeJobSpec(v1::JobSpec* spec) {
  const bool own_command = spec->command_size() > 0;
  EFT_RETURN_IF_ERROR(CheckName(spec->name()));
  if (!own_command && spec->model().empty()) {
    return Invalid("spec.model is required when spec.command is empty: set it to a Hugging Face model "
                   "directory (config.json, *.safetensors, tokenizer.json), or set spec.command to run your "
                   "own program");
  }

  v1::DataSpec* data = spec->mutable_data();
  if (!own_command && data->train().empty()) {
    return Invalid("spec.data.train is required when spec.command is empty: set it to a JSONL file of "
                   "training examples");
  }
  EFT_RETURN_IF_ERROR(CheckChoice("spec.data.format", data->mutable_format(), "auto",
                                  {"auto", "messages", "prompt_completion", "text", "alpaca", "pretokenized"}));
  if (data->chat_template().empty()) data->set_chat_template("auto");
  if (!data->has_max_seq_len()) data->set_max_seq_len(4096);
  EFT_RETURN_IF_ERROR(CheckRange("spec.data.max_seq_len", data->max_seq_len(), 16, 1048576));
  if (!data->has_packing()) data->set_packing(true);
  EFT_RETURN_IF_ERROR(CheckChoice("spec.data.loss_on", data->mutable_loss_on(), "assistant",
                                  {"assistant", "completion", "all"}));
  if (!data->has_train_on_eos()) data->set_train_on_eos(true);
  EFT_RETURN_IF_ERROR(CheckChoice("spec.data.on_bad_line", data->mutable_on_bad_line(), "error", {"error", "skip"}));
  EFT_RETURN_IF_ERROR(
      CheckChoice("spec.data.truncation", data->mutable_truncation(), "truncate", {"truncate", "drop"}));
  // Evaluation data (docs/data.md, "Evaluation").
  if (!std::isfinite(data->eval_fraction()) || !(data->eval_fraction() >= 0) || !(data->eval_fraction() < 1)) {
    return Invalid("spec.data.eval_fraction (" + FormatDouble(data->eval_fraction()) +
                   ") must be >= 0 and < 1 (the fraction of data.train held out for evaluation, e.g. 0.02)");
  }
  std::set<std::string> eval_names;
  for (int i = 0; i < data->eval_size(); ++i) {
    const v1::EvalSet& set = data->eval(i);
    const std::string path = "spec.data.eval[" + std::to_string(i) + "]";
    if (!IsEvalSetName(set.name())) {
      return Invalid(path + ".name (\"" + set.name() + "\") must be 1-64 of A-Z a-z 0-9 _ . - (it names the set in "
                     "logs, the loss plot and the metrics)");
    }
    if (!eval_names.insert(set.name()).second) return Invalid(path + ".name: \"" + set.name() + "\" is used twice");
    if (set.path().empty()) return Invalid(path + ".path is empty: a JSONL file of held-out examples");
  }
  if (data->eval_size() > 0 && data->eval_fraction() > 0) {
    return Invalid("spec.data.eval and spec.data.eval_fraction are both set: evaluate on a file or on a held-out "
                   "part of data.train, not both");
  }

  v1::ResourceSpec* res = spec->mutable_resources();
  v1::NodeRange* nodes = res->mutable_nodes();
  if (!nodes->has_min()) nodes->set_min(1);
  EFT_RETURN_IF_ERROR(CheckRange("spec.resources.nodes.min", nodes->min(), 1, 10000));
  if (!nodes->has_max()) nodes->set_max(nodes->min());
  if (nodes->max() < nodes->min()) {
    return Invalid("spec.resources.nodes.max (" + std::to_string(nodes->max()) +
                   ") must be >= spec.resources.nodes.min (" + std::to_string(nodes->min()) + ")");
  }
  EFT_RETURN_IF_ERROR(CheckRange("spec.resources.nodes.max", nodes->max(), 1, 10000));
  if (!res->has_gpus_per_node()) res->set_gpus_per_node(1);
  EFT_RETURN_IF_ERROR(CheckRange("spec.resources.gpus_per_node", res->gpus_per_node(), 1, 64));
  if (!res->has_grow()) res->set_grow(true);
  if (!res->has_resize_cooldown_seconds()) res->set_resize_cooldown_seconds(60);
  const double cooldown = res->resize_cooldown_seconds();
  // A week is far beyond any useful cooldown; the bound keeps the milliseconds the controller
  // computes from it well inside int64.
  if (!std::isfinite(cooldown) || !(cooldown >= 0) || cooldown > 604800) {
    return Invalid("spec.resources.resize_cooldown_seconds (" + FormatDouble(cooldown) +
                   ") must be >= 0 and <= 604800 (seconds between two resizes of the job)");
  }

  EFT_RETURN_IF_ERROR(CheckRange("spec.priority", spec->priority(), -1000000, 1000000));

  v1::TrainingSpec* t = spec->mutable_training();
  if (!t->has_epochs()) t->set_epochs(1);
  EFT_RETURN_IF_ERROR(CheckRange("spec.training.epochs", t->epochs(), 1, std::numeric_limits<int32_t>::max()));
  if (!t->has_global_batch_size()) t->set_global_batch_size(32);
  EFT_RETURN_IF_ERROR(CheckRange("spec.training.global_batch_size", t->global_batch_size(), 1,
                                 std::numeric_limits<int32_t>::max()));
  if (!t->has_micro_batch_size()) t->set_micro_batch_size(1);
  EFT_RETURN_IF_ERROR(CheckRange("spec.training.micro_batch_size", t->micro_batch_size(), 1,
                                 std::numeric_limits<int32_t>::max()));
  if (t->micro_batch_size() > t->global_batch_size()) {
    return Invalid("spec.training.micro_batch_size (" + std::to_string(t->micro_batch_size()) +
                   ") must be <= spec.training.global_batch_size (" + std::to_string(t->global_batch_size()) + ")");
  }
  if (!t->has_lr()) t->set_lr(1e-5);
  if (!std::isfinite(t->lr()) || !(t->lr() > 0)) {
    return Invalid("spec.training.lr (" + FormatDouble(t->lr()) + ") must be a finite number > 0 (e.g. 1e-5)");
  }
  v1::ScheduleSpec* sched = t->mutable_schedule();
  EFT_RETURN_IF_ERROR(CheckChoice("spec.training.schedule.type", sched->mutable_type(), "cosine",
                                  {"cosine", "linear", "constant"}));
  if (!std::isfinite(sched->warmup_ratio()) || !(sched->warmup_ratio() >= 0) || !(sched->warmup_ratio() < 1)) {
    return Invalid("spec.training.schedule.warmup_ratio (" + FormatDouble(sched->warmup_ratio()) +
                   ") must be >= 0 and < 1 (a fraction of the steps, e.g. 0.1)");
  }
  if (sched->warmup_steps() < 0) {
    return Invalid("spec.training.schedule.warmup_steps (" + std::to_string(sched->warmup_steps()) +
                   ") must be >= 0 (optimizer steps; 0: warmup_ratio decides)");
  }
  EFT_RETURN_IF_ERROR(CheckAtLeast("spec.training.schedule.min_lr", sched->min_lr(), 0));
  if (sched->min_lr() > t->lr()) {
    return Invalid("spec.training.schedule.min_lr (" + FormatDouble(sched->min_lr()) +
                   ") must be <= spec.training.lr (" + FormatDouble(t->lr()) + ")");
  }
  EFT_RETURN_IF_ERROR(CheckAtLeast("spec.training.weight_decay", t->weight_decay(), 0));
  if (!t->has_max_grad_norm()) t->set_max_grad_norm(1.0);
  EFT_RETURN_IF_ERROR(CheckAtLeast("spec.training.max_grad_norm", t->max_grad_norm(), 0));
  EFT_RETURN_IF_ERROR(CheckChoice("spec.training.precision", t->mutable_precision(), "auto", {"auto", "bf16", "fp32"}));
  EFT_RETURN_IF_ERROR(CheckChoice("spec.training.activation_checkpointing", t->mutable_activation_checkpointing(),
                                  "full", {"none", "full"}));
  EFT_RETURN_IF_ERROR(CheckChoice("spec.training.device", t->mutable_device(), "auto", {"auto", "cpu", "cuda"}));
  if (!t->has_seed()) t->set_seed(42);
  EFT_RETURN_IF_ERROR(CheckRange("spec.training.max_steps", t->max_steps(), 0, std::numeric_limits<int32_t>::max()));
  EFT_RETURN_IF_ERROR(CheckRange("spec.training.eval_every_steps", t->eval_every_steps(), 0,
                                 std::numeric_limits<int32_t>::max()));
  if (t->has_lora()) EFT_RETURN_IF_ERROR(NormalizeLora(t->mutable_lora()));

  EFT_RETURN_IF_ERROR(CheckChoice("spec.parallel.sharding", spec->mutable_parallel()->mutable_sharding(), "grad_op",
                                  {"full", "grad_op", "no_shard"}));

  v1::CheckpointSpec* ckpt = spec->mutable_checkpoint();
  if (!ckpt->has_every_steps()) ckpt->set_every_steps(200);
  EFT_RETURN_IF_ERROR(CheckRange("spec.checkpoint.every_steps", ckpt->every_steps(), 0,
                                 std::numeric_limits<int32_t>::max()));
  EFT_RETURN_IF_ERROR(CheckRange("spec.checkpoint.full_every_steps", ckpt->full_every_steps(), 0,
                                 std::numeric_limits<int32_t>::max()));
  if (!ckpt->has_keep_last()) ckpt->set_keep_last(3);
  EFT_RETURN_IF_ERROR(CheckRange("spec.checkpoint.keep_last", ckpt->keep_last(), 1,
                                 std::numeric_limits<int32_t>::max()));
  EFT_RETURN_IF_ERROR(CheckChoice("spec.checkpoint.full_write", ckpt->mutable_full_write(), "parallel",
                                  {"parallel", "rank0"}));
  EFT_RETURN_IF_ERROR(NormalizeMemoryEverySteps(ckpt->mutable_memory_every_steps()));
  if (!ckpt->has_memory_replicas()) ckpt->set_memory_replicas(1);
  EFT_RETURN_IF_ERROR(CheckRange("spec.checkpoint.memory_replicas", ckpt->memory_replicas(), 0, 3));
  if (ckpt->merge_lora() && !t->has_lora()) {
    return Invalid("spec.checkpoint.merge_lora needs spec.training.lora: only a LoRA run has adapters to merge "
                   "(a full fine-tuning run's output is already a merged model)");
  }
  if (!ckpt->export_gguf().empty()) {
    EFT_RETURN_IF_ERROR(
        CheckChoice("spec.checkpoint.export_gguf", ckpt->mutable_export_gguf(), "", {"f32", "f16", "bf16", "q8_0"}));
    if (t->has_lora() && !ckpt->merge_lora()) {
      return Invalid("spec.checkpoint.export_gguf of a LoRA run needs spec.checkpoint.merge_lora: true (llama.cpp "
                     "runs the merged model, not the adapters)");
    }
  }

  EFT_RETURN_IF_ERROR(CheckTracking(spec->tracking()));

  v1::FaultToleranceSpec* ft = spec->mutable_fault_tolerance();
  if (!ft->has_max_restarts()) ft->set_max_restarts(3);
  EFT_RETURN_IF_ERROR(CheckRange("spec.fault_tolerance.max_restarts", ft->max_restarts(), 0, 1000));
  if (!ft->has_stop_grace_seconds()) ft->set_stop_grace_seconds(30);
  double grace = ft->stop_grace_seconds();
  if (!std::isfinite(grace) || !(grace > 0) || grace > 3600) {
    return Invalid("spec.fault_tolerance.stop_grace_seconds (" + FormatDouble(grace) +
                   ") must be > 0 and <= 3600 (seconds between SIGTERM and SIGKILL)");
  }

  if (own_command && spec->command(0).empty()) {
    return Invalid("spec.command[0] is empty: it must name the program every rank runs (e.g. [python, train.py])");
  }
  return CheckEnv(*spec);
}

std::vector<std::string> EvalSetNames(const v1::JobSpec& spec) {
  std::vector<std::string> names;
  if (spec.data().eval_fraction() > 0) names.push_back("eval");
  for (const v1::EvalSet& set : spec.data().eval()) names.push_back(set.name());
  return names;
}

}  // namespace eft::spec
