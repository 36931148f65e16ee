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
bool CommandRunsTheTrainer(const v1::JobSpec& s) {
  for (const auto& arg : s.command()) {
    const size_t slash = arg.rfind('/');
    if ((slash == std::string::npos ? arg : arg.substr(slash + 1)) == "eft-train") return true;
  }
  return false;
}

}  // namespace

Result<TrainConfig> TrainConfigFromJobSpec(const v1::JobSpec& s) {
  if (s.command_size() > 0) {
    if (!CommandRunsTheTrainer(s)) {
      return Status::InvalidArgument("spec.command is set (" + s.command(0) +
                                     " ...): that job runs its own program, not eft-train; remove spec.command "
                                     "to train spec.model with eft-train");
    }
    // NormalizeJobSpec asks for these only when command is empty.
    if (s.model().empty()) return Status::InvalidArgument("spec.model is required when spec.command runs eft-train");
    if (s.data().train().empty()) {
      return Status::InvalidArgument("spec.data.train is required when spec.command runs eft-train");
    }
  }
  TrainConfig c;
  c.name = s.name();
  c.model = s.model();

  const v1::DataSpec& d = s.data();
  c.train_data = d.train();
  c.data_format = d.format();
  c.chat_template = d.chat_template();
  c.max_seq_len = d.max_seq_len();
  c.packing = d.packing();
  c.loss_on = d.loss_on();
  c.train_on_eos = d.train_on_eos();
  c.on_bad_line = d.on_bad_line();
  c.truncation = d.truncation();
  c.data_cache_dir = d.cache_dir();

  const v1::TrainingSpec& t = s.training();
  c.epochs = t.epochs();
  c.global_batch_size = t.global_batch_size();
  c.micro_batch_size = t.micro_batch_size();
  c.schedule.lr = t.lr();
  c.schedule.type = t.schedule().type();
  c.schedule.warmup_ratio = t.schedule().warmup_ratio();
  c.schedule.warmup_steps = t.schedule().warmup_steps();
  c.schedule.min_lr = t.schedule().min_lr();
  c.adamw.weight_decay = t.weight_decay();
  c.max_grad_norm = t.max_grad_norm();
  c.precision = t.precision();
  c.activation_checkpointing = t.activation_checkpointing() == "full";
  c.sharding = s.parallel().sharding();
  c.seed = static_cast<uint64_t>(t.seed());
  c.device = t.device();
  c.max_steps = t.max_steps();
  if (t.has_lora()) {
    const v1::LoraSpec& l = t.lora();
    c.lora.enabled = true;
    c.lora.r = l.r();
    c.lora.alpha = l.alpha();
    c.lora.dropout = l.dropout();
    c.lora.init_from = l.init_from();
    // Layer order whatever the spec's order, so the same set of modules is the same run.
    const bool all = l.target_modules_size() == 1 && l.target_modules(0) == "all-linear";
    for (const std::string& m : spec::LoraModuleNames()) {
      if (all || std::find(l.target_modules().begin(), l.target_modules().end(), m) != l.target_modules().end()) {
        c.lora.target_modules.push_back(m);
      }
    }
  }

  const v1::CheckpointSpec& k = s.checkpoint();
  c.checkpoint_dir = k.dir();
  c.checkpoint_every_steps = k.every_steps();
  c.checkpoint_full_every_steps = k.full_every_steps();
  c.keep_last = k.keep_last();
  c.require_resume = k.require_resume();
  for (const v1::EvalSet& set : d.eval()) c.eval_sets.push_back({set.name(), set.path()});
  c.eval_fraction = d.eval_fraction();
  c.eval_every_steps = t.eval_every_steps();
  c.keep_best = k.keep_best();
  c.merge_lora = k.merge_lora();
  c.full_write = k.full_write().empty() ? "parallel" : k.full_write();  // unnormalized specs too
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
      "command",                  // a job with a command does not run eft-train
      "env",                      // the worker puts it in every rank's environment
      "priority",                 // the controller's (scheduling)
  };
  return *kIgnored;
}

static nlohmann::json CompatibilityRecordWithoutLora(const TrainConfig& c, const ModelConfig& model, int64_t examples, int64_t tokens);

nlohmann::json CompatibilityRecord(const TrainConfig& c, const ModelConfig& model, int64_t examples, int64_t tokens) {
  nlohmann::json record = CompatibilityRecordWithoutLora(c, model, examples, tokens);
  // Only for LoRA runs, so full fine-tuning checkpoints written before LoRA existed still resume.
  // Only when set, so checkpoints written before warmup_steps existed still resume.
  if (c.schedule.warmup_steps > 0) record["training.schedule.warmup_steps"] = c.schedule.warmup_steps;
  if (c.lora.enabled) {
    record["training.lora"] = {{"r", c.lora.r}, {"alpha", c.lora.alpha}, {"dropout", c.lora.dropout},
                               {"target_modules", c.lora.target_modules}};
  }
  return record;
}

static nlohmann::json CompatibilityRecordWithoutLora(const TrainConfig& c, const ModelConfig& model, int64_t examples, int64_t tokens) {
  return {{"model", model.ToHfJson()},
          {"data.examples", examples},
          {"data.tokens", tokens},
          {"data.max_seq_len", c.max_seq_len},
          {"data.packing", c.packing},
          {"data.loss_on", c.loss_on},
          {"data.train_on_eos", c.train_on_eos},
          {"data.truncation", c.truncation},
          {"training.global_batch_size", c.global_batch_size},
          {"training.epochs", c.epochs},
          {"training.max_steps", c.max_steps},  // with epochs, the LR schedule's length
          {"training.seed", c.seed},
          {"training.lr", c.schedule.lr},
          {"training.schedule.type", c.schedule.type},
          {"training.schedule.warmup_ratio", c.schedule.warmup_ratio},
          {"training.schedule.min_lr", c.schedule.min_lr},
          {"training.weight_decay", c.adamw.weight_decay},
          {"training.max_grad_norm", c.max_grad_norm}};
}

}  // namespace eft::trainer
