#include "trainer/train/train_config.h"

#include <algorithm>

#include "common/yaml_json.h"
#include "spec/job_spec.h"

namespace eft::trainer {

using nlohmann::json;

Result<v1::JobSpec> LoadJobSpec(json document, const std::vector<std::string>& overrides) {
  for (const auto& o : overrides) EFT_RETURN_IF_ERROR(ApplyOverride(o, &document));
  EFT_ASSIGN_OR_RETURN(v1::JobSpec spec, spec::JobSpecFromJson(document));
  EFT_RETURN_IF_ERROR(spec::NormalizeJobSpec(&spec));
  return spec;
}

namespace {

// spec.command runs eft-train itself, under a wrapper (numactl, nsys, a test's signal mask) or with
// extra flags: its spec is still the trainer's.
bool CommandRunsTheTrainer(const v1::JobSpec& spec) {
  for (const auto& arg : spec.command()) {
    const size_t slash = arg.rfind('/');
    if ((slash == std::string::npos ? arg : arg.substr(slash + 1)) == "eft-train") return true;
  }
  return false;
}

}  // namespace

Result<TrainConfig> TrainConfigFromJobSpec(v1::JobSpec spec) {
  EFT_RETURN_IF_ERROR(spec::NormalizeJobSpec(&spec));
  if (spec.command_size() > 0) {
    if (!CommandRunsTheTrainer(spec)) {
      return Status::InvalidArgument("spec.command is set (" + spec.command(0) +
                                     " ...): that job runs its own program, not eft-train; remove spec.command "
                                     "to train spec.model with eft-train");
    }
    // NormalizeJobSpec asks for these only when command is empty.
    if (spec.model().empty()) {
      return Status::InvalidArgument("spec.model is required when spec.command runs eft-train");
    }
    if (spec.data().train().empty()) {
      return Status::InvalidArgument("spec.data.train is required when spec.command runs eft-train");
    }
  }
  TrainConfig c;
  c.spec = std::move(spec);
  return c;
}

std::vector<std::string> LoraTargetModules(const v1::LoraSpec& lora) {
  const auto& listed = lora.target_modules();
  const bool all = listed.size() == 1 && listed[0] == "all-linear";
  std::vector<std::string> modules;
  for (const std::string& m : spec::LoraModuleNames()) {
    if (all || std::find(listed.begin(), listed.end(), m) != listed.end()) modules.push_back(m);
  }
  return modules;
}

double LoraScale(const v1::LoraSpec& lora) { return lora.alpha() / static_cast<double>(lora.r()); }

Status ApplyOverride(const std::string& assignment, json* spec) {
  auto eq = assignment.find('=');
  if (eq == std::string::npos || eq == 0) {
    return Status::InvalidArgument("--set " + assignment + ": expected PATH=VALUE, e.g. training.lr=1e-4");
  }
  const std::string path = assignment.substr(0, eq);
  auto value = YamlToJson(assignment.substr(eq + 1));
  if (!value.ok()) return value.status().WithContext("--set " + assignment);
  if (spec->is_null()) *spec = json::object();
  json* cur = spec;
  size_t start = 0;
  while (true) {
    size_t dot = path.find('.', start);
    std::string key = path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    if (key.empty()) return Status::InvalidArgument("--set " + assignment + ": empty name in the path");
    if (!cur->is_object()) {
      return Status::InvalidArgument("--set " + assignment + ": " +
                                     (start == 0 ? std::string("the job spec is not a mapping")
                                                 : path.substr(0, start - 1) + " is not a mapping in the job spec"));
    }
    if (dot == std::string::npos) {
      (*cur)[key] = *value;
      return Status::Ok();
    }
    json& next = (*cur)[key];
    if (next.is_null()) next = json::object();
    cur = &next;
    start = dot + 1;
  }
}

const std::vector<std::string>& FieldsTheTrainerIgnores() {
  static const auto* kIgnored = new std::vector<std::string>{
      "resources.nodes.min",  "resources.nodes.max",
      "resources.gpus_per_node",  // the launcher's: it starts that many ranks
      "resources.grow", "resources.resize_cooldown_seconds",  // the controller's (resizing)
      "fault_tolerance.max_restarts", "fault_tolerance.stop_grace_seconds",
      "env",                      // the worker puts it in every rank's environment
      "priority",                 // the controller's (scheduling)
      "checkpoint.memory_replicas",  // the controller's and workers' (where snapshots are replicated)
      "tracking.mlflow_tracking_uri", "tracking.mlflow_experiment",  // the controller logs MLflow runs
  };
  return *kIgnored;
}

nlohmann::json CompatibilityRecord(const TrainConfig& config, const ModelConfig& model, int64_t examples,
                                   int64_t tokens) {
  const v1::DataSpec& data = config.spec.data();
  const v1::TrainingSpec& training = config.spec.training();
  const v1::ScheduleSpec& schedule = training.schedule();
  nlohmann::json record = {
      {"model", model.ToHfJson()},
      {"data.examples", examples},
      {"data.tokens", tokens},
      {"data.max_seq_len", data.max_seq_len()},
      {"data.packing", data.packing()},
      {"data.loss_on", data.loss_on()},
      {"data.train_on_eos", data.train_on_eos()},
      {"data.truncation", data.truncation()},
      {"training.global_batch_size", training.global_batch_size()},
      {"training.epochs", training.epochs()},
      {"training.max_steps", training.max_steps()},  // with epochs, the LR schedule's length
      // Unsigned, as the samplers take it, so records stay comparable with those already saved.
      {"training.seed", static_cast<uint64_t>(training.seed())},
      {"training.lr", training.lr()},
      {"training.schedule.type", schedule.type()},
      {"training.schedule.warmup_ratio", schedule.warmup_ratio()},
      {"training.schedule.min_lr", schedule.min_lr()},
      {"training.weight_decay", training.weight_decay()},
      {"training.max_grad_norm", training.max_grad_norm()}};
  // Only when set, so checkpoints written before warmup_steps existed still resume.
  if (schedule.warmup_steps() > 0) record["training.schedule.warmup_steps"] = schedule.warmup_steps();
  // Only for LoRA runs, so full fine-tuning checkpoints written before LoRA existed still resume.
  if (training.has_lora()) {
    const v1::LoraSpec& lora = training.lora();
    record["training.lora"] = {{"r", lora.r()},
                               {"alpha", lora.alpha()},
                               {"dropout", lora.dropout()},
                               {"target_modules", LoraTargetModules(lora)}};
  }
  return record;
}

}  // namespace eft::trainer
