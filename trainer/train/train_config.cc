#include "trainer/train/train_config.h"

#include <cmath>

#include "common/yaml_json.h"

namespace eft::trainer {
namespace {

using nlohmann::json;

// Job specs arrive in snake_case from files and in lowerCamelCase from protobuf's JSON printer.
const json* Field(const json& obj, const std::string& snake) {
  if (!obj.is_object()) return nullptr;
  if (auto it = obj.find(snake); it != obj.end() && !it->is_null()) return &*it;
  std::string camel;
  bool up = false;
  for (char c : snake) {
    if (c == '_') {
      up = true;
    } else {
      camel += up ? static_cast<char>(std::toupper(static_cast<unsigned char>(c))) : c;
      up = false;
    }
  }
  if (auto it = obj.find(camel); it != obj.end() && !it->is_null()) return &*it;
  return nullptr;
}

Status Read(const json& obj, const std::string& key, const std::string& path, std::string* out) {
  if (const json* v = Field(obj, key)) {
    if (!v->is_string()) return Status::InvalidArgument(path + key + ": expected a string");
    *out = v->get<std::string>();
  }
  return Status::Ok();
}

template <typename T>
Status ReadNumber(const json& obj, const std::string& key, const std::string& path, T* out) {
  if (const json* v = Field(obj, key)) {
    // protobuf's JSON printer writes 64-bit integers as strings.
    if (v->is_string()) {
      try {
        *out = static_cast<T>(std::stod(v->get<std::string>()));
        return Status::Ok();
      } catch (...) {
        return Status::InvalidArgument(path + key + ": expected a number");
      }
    }
    if (!v->is_number()) return Status::InvalidArgument(path + key + ": expected a number");
    *out = v->get<T>();
  }
  return Status::Ok();
}

Status ReadBool(const json& obj, const std::string& key, const std::string& path, bool* out) {
  if (const json* v = Field(obj, key)) {
    if (!v->is_boolean()) return Status::InvalidArgument(path + key + ": expected true or false");
    *out = v->get<bool>();
  }
  return Status::Ok();
}

}  // namespace

Result<TrainConfig> TrainConfigFromJobSpec(const json& spec) {
  if (!spec.is_object()) return Status::InvalidArgument("job spec: expected a mapping");
  TrainConfig c;
  EFT_RETURN_IF_ERROR(Read(spec, "name", "spec.", &c.name));
  EFT_RETURN_IF_ERROR(Read(spec, "model", "spec.", &c.model));
  if (const json* d = Field(spec, "data")) {
    EFT_RETURN_IF_ERROR(Read(*d, "train", "spec.data.", &c.train_data));
    EFT_RETURN_IF_ERROR(Read(*d, "format", "spec.data.", &c.data_format));
    EFT_RETURN_IF_ERROR(ReadNumber(*d, "max_seq_len", "spec.data.", &c.max_seq_len));
    EFT_RETURN_IF_ERROR(ReadBool(*d, "packing", "spec.data.", &c.packing));
    EFT_RETURN_IF_ERROR(Read(*d, "chat_template", "spec.data.", &c.chat_template));
    EFT_RETURN_IF_ERROR(Read(*d, "loss_on", "spec.data.", &c.loss_on));
    EFT_RETURN_IF_ERROR(ReadBool(*d, "train_on_eos", "spec.data.", &c.train_on_eos));
    EFT_RETURN_IF_ERROR(Read(*d, "on_bad_line", "spec.data.", &c.on_bad_line));
    EFT_RETURN_IF_ERROR(Read(*d, "truncation", "spec.data.", &c.truncation));
    EFT_RETURN_IF_ERROR(Read(*d, "cache_dir", "spec.data.", &c.data_cache_dir));
  }
  if (const json* t = Field(spec, "training")) {
    const std::string p = "spec.training.";
    EFT_RETURN_IF_ERROR(ReadNumber(*t, "epochs", p, &c.epochs));
    EFT_RETURN_IF_ERROR(ReadNumber(*t, "global_batch_size", p, &c.global_batch_size));
    EFT_RETURN_IF_ERROR(ReadNumber(*t, "micro_batch_size", p, &c.micro_batch_size));
    EFT_RETURN_IF_ERROR(ReadNumber(*t, "lr", p, &c.schedule.lr));
    EFT_RETURN_IF_ERROR(ReadNumber(*t, "weight_decay", p, &c.adamw.weight_decay));
    EFT_RETURN_IF_ERROR(ReadNumber(*t, "max_grad_norm", p, &c.max_grad_norm));
    EFT_RETURN_IF_ERROR(Read(*t, "precision", p, &c.precision));
    std::string ac = c.activation_checkpointing ? "full" : "none";
    EFT_RETURN_IF_ERROR(Read(*t, "activation_checkpointing", p, &ac));
    if (ac != "full" && ac != "none") {
      return Status::InvalidArgument(p + "activation_checkpointing: '" + ac + "' is not one of none, full");
    }
    c.activation_checkpointing = ac == "full";
    EFT_RETURN_IF_ERROR(Read(*t, "device", p, &c.device));
    EFT_RETURN_IF_ERROR(ReadNumber(*t, "seed", p, &c.seed));
    EFT_RETURN_IF_ERROR(ReadNumber(*t, "max_steps", p, &c.max_steps));
    if (const json* s = Field(*t, "schedule")) {
      EFT_RETURN_IF_ERROR(Read(*s, "type", p + "schedule.", &c.schedule.type));
      EFT_RETURN_IF_ERROR(ReadNumber(*s, "warmup_ratio", p + "schedule.", &c.schedule.warmup_ratio));
      EFT_RETURN_IF_ERROR(ReadNumber(*s, "min_lr", p + "schedule.", &c.schedule.min_lr));
    }
  }
  if (const json* k = Field(spec, "checkpoint")) {
    EFT_RETURN_IF_ERROR(Read(*k, "dir", "spec.checkpoint.", &c.checkpoint_dir));
    EFT_RETURN_IF_ERROR(ReadNumber(*k, "every_steps", "spec.checkpoint.", &c.checkpoint_every_steps));
    EFT_RETURN_IF_ERROR(ReadNumber(*k, "full_every_steps", "spec.checkpoint.", &c.checkpoint_full_every_steps));
    EFT_RETURN_IF_ERROR(ReadNumber(*k, "keep_last", "spec.checkpoint.", &c.keep_last));
  }
  return c;
}

Status ApplyOverride(const std::string& assignment, json* spec) {
  auto eq = assignment.find('=');
  if (eq == std::string::npos || eq == 0) {
    return Status::InvalidArgument("--set " + assignment + ": expected PATH=VALUE, e.g. training.lr=1e-4");
  }
  const std::string path = assignment.substr(0, eq);
  auto value = YamlToJson(assignment.substr(eq + 1));
  if (!value.ok()) return value.status().WithContext("--set " + assignment);
  json* cur = spec;
  size_t start = 0;
  while (true) {
    size_t dot = path.find('.', start);
    std::string key = path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    if (key.empty()) return Status::InvalidArgument("--set " + assignment + ": empty name in the path");
    if (!cur->is_object()) *cur = json::object();
    if (dot == std::string::npos) {
      (*cur)[key] = *value;
      return Status::Ok();
    }
    cur = &(*cur)[key];
    start = dot + 1;
  }
}

Status ValidateTrainConfig(const TrainConfig& c) {
  auto bad = [](const std::string& m) { return Status::InvalidArgument(m); };
  if (c.model.empty()) return bad("spec.model: the Hugging Face model directory is required");
  if (c.train_data.empty()) return bad("spec.data.train: the training data file is required");
  if (c.epochs < 1) return bad("spec.training.epochs: must be >= 1");
  if (c.global_batch_size < 1) return bad("spec.training.global_batch_size: must be >= 1");
  if (c.micro_batch_size < 1) return bad("spec.training.micro_batch_size: must be >= 1");
  if (c.max_seq_len < 2) return bad("spec.data.max_seq_len: must be >= 2");
  if (c.loss_on != "assistant" && c.loss_on != "completion" && c.loss_on != "all") {
    return bad("spec.data.loss_on: '" + c.loss_on + "' is not one of assistant, completion, all");
  }
  if (c.on_bad_line != "error" && c.on_bad_line != "skip") {
    return bad("spec.data.on_bad_line: '" + c.on_bad_line + "' is not one of error, skip");
  }
  if (c.truncation != "truncate" && c.truncation != "drop") {
    return bad("spec.data.truncation: '" + c.truncation + "' is not one of truncate, drop");
  }
  if (c.device != "auto" && c.device != "cpu" && c.device != "cuda") {
    return bad("spec.training.device: '" + c.device + "' is not one of auto, cpu, cuda");
  }
  if (c.precision != "bf16" && c.precision != "fp32") {
    return bad("spec.training.precision: '" + c.precision + "' is not one of bf16, fp32");
  }
  if (!(c.max_grad_norm >= 0) || !std::isfinite(c.max_grad_norm)) {
    return bad("spec.training.max_grad_norm: must be >= 0 (0 disables clipping)");
  }
  if (c.adamw.weight_decay < 0) return bad("spec.training.weight_decay: must be >= 0");
  if (c.max_steps < 0) return bad("max_steps: must be >= 0");
  if (c.checkpoint_every_steps < 0) return bad("spec.checkpoint.every_steps: must be >= 0 (0: never)");
  if (c.checkpoint_full_every_steps < 0) return bad("spec.checkpoint.full_every_steps: must be >= 0 (0: only at the end)");
  if (c.keep_last < 1) return bad("spec.checkpoint.keep_last: must be >= 1");
  EFT_RETURN_IF_ERROR(ValidateSchedule(c.schedule));
  return Status::Ok();
}

}  // namespace eft::trainer
