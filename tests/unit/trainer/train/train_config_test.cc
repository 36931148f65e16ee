// eft-train reads its job spec through the one schema (spec/job_spec.h): every spec.proto field either
// reaches TrainConfig or is on the list of fields the trainer leaves to the controller, and a spec
// the controller would refuse is refused here with the same message.
#include "trainer/train/train_config.h"

#include <algorithm>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <google/protobuf/descriptor.h>
#include <google/protobuf/message.h>
#include <gtest/gtest.h>

#include "common/yaml_json.h"
#include "spec/job_spec.h"

namespace eft::trainer {
namespace {

namespace pb = google::protobuf;
using nlohmann::json;

json Doc(const std::string& yaml) {
  auto doc = YamlToJson(yaml);
  EXPECT_TRUE(doc.ok()) << doc.status();
  return doc.ok() ? *doc : json();
}

const char* kMinimal = "name: t\nmodel: /models/tiny\ndata: {train: /data/train.jsonl}\n";

v1::JobSpec Normalized(const std::string& yaml, const std::vector<std::string>& overrides = {}) {
  auto spec = LoadJobSpec(Doc(yaml), overrides);
  EXPECT_TRUE(spec.ok()) << spec.status();
  return spec.ok() ? *spec : v1::JobSpec();
}

// Every scalar, repeated or map field of the spec, as a dotted path ("training.schedule.type").
void LeafFields(const pb::Descriptor* d, const std::string& prefix, std::vector<std::string>* out) {
  for (int i = 0; i < d->field_count(); ++i) {
    const pb::FieldDescriptor* f = d->field(i);
    const std::string path = prefix + f->name();
    if (f->type() == pb::FieldDescriptor::TYPE_MESSAGE && !f->is_map() && !f->is_repeated()) {
      LeafFields(f->message_type(), path + ".", out);
    } else {
      out->push_back(path);
    }
  }
}

// A valid value different from what the minimal spec normalizes to, for each field the trainer
// reads. A new field in spec.proto needs an entry here or in FieldsTheTrainerIgnores(), so the test
// fails until someone decided what eft-train does with it.
const std::map<std::string, std::string>& ChangedValues() {
  static const auto* kValues = new std::map<std::string, std::string>{
      {"name", "other-name"},
      {"model", "/models/other"},
      {"data.train", "/data/other.jsonl"},
      {"data.format", "messages"},
      {"data.chat_template", "/templates/chat.jinja"},
      {"data.max_seq_len", "128"},
      {"data.packing", "false"},
      {"data.loss_on", "all"},
      {"data.train_on_eos", "false"},
      {"data.on_bad_line", "skip"},
      {"data.truncation", "drop"},
      {"data.cache_dir", "/cache"},
      {"training.epochs", "3"},
      {"training.global_batch_size", "8"},
      {"training.micro_batch_size", "2"},
      {"training.lr", "0.0003"},
      {"training.schedule.type", "linear"},
      {"training.schedule.warmup_ratio", "0.1"},
      {"training.schedule.warmup_steps", "5"},
      {"training.schedule.min_lr", "0.000001"},
      {"training.weight_decay", "0.01"},
      {"training.max_grad_norm", "0.5"},
      {"training.precision", "fp32"},
      {"training.activation_checkpointing", "none"},
      {"parallel.sharding", "full"},
      {"training.seed", "7"},
      {"training.device", "cpu"},
      {"training.max_steps", "10"},
      {"training.lora.r", "8"},
      {"training.lora.alpha", "16"},
      {"training.lora.dropout", "0.1"},
      {"training.lora.target_modules", "[q_proj, v_proj]"},
      {"training.lora.init_from", "/adapters/previous"},
      {"checkpoint.dir", "/checkpoints/run"},
      {"checkpoint.every_steps", "50"},
      {"checkpoint.full_every_steps", "100"},
      {"checkpoint.keep_last", "5"},
      {"checkpoint.require_resume", "true"},
      {"data.eval", "/data/eval.jsonl"},
      {"data.eval_fraction", "0.02"},
      {"training.eval_every_steps", "25"},
      {"checkpoint.keep_best", "true"},
      {"checkpoint.merge_lora", "true"},
      {"checkpoint.full_write", "rank0"},
  };
  return *kValues;
}

// Fields valid only beside others: the overrides they need, applied to both sides of the comparison.
const std::map<std::string, std::vector<std::string>>& Prerequisites() {
  static const auto* kNeeds = new std::map<std::string, std::vector<std::string>>{
      {"checkpoint.merge_lora", {"training.lora.r=8"}},
  };
  return *kNeeds;
}

TEST(TrainConfigTest, EverySpecFieldReachesTheTrainerOrIsDeclaredTheControllers) {
  std::vector<std::string> fields;
  LeafFields(v1::JobSpec::descriptor(), "", &fields);
  const auto& ignored = FieldsTheTrainerIgnores();
  const auto baseline = TrainConfigFromJobSpec(Normalized(kMinimal));
  ASSERT_TRUE(baseline.ok()) << baseline.status();

  for (const std::string& field : fields) {
    const bool is_ignored = std::find(ignored.begin(), ignored.end(), field) != ignored.end();
    auto changed = ChangedValues().find(field);
    if (is_ignored) {
      EXPECT_EQ(changed, ChangedValues().end()) << field << " is both read and ignored";
      continue;
    }
    ASSERT_NE(changed, ChangedValues().end())
        << "spec.proto has " << field << " but eft-train neither reads it (TrainConfigFromJobSpec) nor lists "
        << "it in FieldsTheTrainerIgnores(); decide, then add it to ChangedValues() here";
    std::vector<std::string> needs;
    if (auto it = Prerequisites().find(field); it != Prerequisites().end()) needs = it->second;
    auto before = needs.empty() ? baseline : TrainConfigFromJobSpec(Normalized(kMinimal, needs));
    ASSERT_TRUE(before.ok()) << field << ": " << before.status();
    needs.push_back(field + "=" + changed->second);
    auto config = TrainConfigFromJobSpec(Normalized(kMinimal, needs));
    ASSERT_TRUE(config.ok()) << field << ": " << config.status();
    EXPECT_FALSE(*config == *before) << "setting " << field << "=" << changed->second
                                     << " did not change the trainer's configuration";
  }
  // And the other way: nothing listed that the schema does not have.
  for (const std::string& name : ignored) {
    EXPECT_NE(std::find(fields.begin(), fields.end(), name), fields.end()) << name << " is not a spec field";
  }
  for (const auto& [name, value] : ChangedValues()) {
    EXPECT_NE(std::find(fields.begin(), fields.end(), name), fields.end()) << name << " is not a spec field";
  }
}

TEST(TrainConfigTest, DefaultsAreTheSchemasDefaults) {
  auto c = TrainConfigFromJobSpec(Normalized(kMinimal));
  ASSERT_TRUE(c.ok()) << c.status();
  // The values spec.proto documents, filled in by NormalizeJobSpec and nowhere else.
  EXPECT_EQ(c->data_format, "auto");
  EXPECT_EQ(c->chat_template, "auto");
  EXPECT_EQ(c->max_seq_len, 4096);
  EXPECT_TRUE(c->packing);
  EXPECT_EQ(c->loss_on, "assistant");
  EXPECT_TRUE(c->train_on_eos);
  EXPECT_EQ(c->on_bad_line, "error");
  EXPECT_EQ(c->truncation, "truncate");
  EXPECT_EQ(c->epochs, 1);
  EXPECT_EQ(c->global_batch_size, 32);
  EXPECT_EQ(c->micro_batch_size, 1);
  EXPECT_DOUBLE_EQ(c->schedule.lr, 1e-5);
  EXPECT_EQ(c->schedule.type, "cosine");
  EXPECT_DOUBLE_EQ(c->max_grad_norm, 1.0);
  EXPECT_EQ(c->precision, "auto");
  EXPECT_TRUE(c->activation_checkpointing);
  EXPECT_EQ(c->sharding, "grad_op");
  EXPECT_EQ(c->device, "auto");
  EXPECT_EQ(c->seed, 42u);
  EXPECT_EQ(c->max_steps, 0);
  EXPECT_EQ(c->checkpoint_dir, "");  // by hand: no checkpoints unless asked for
  EXPECT_EQ(c->checkpoint_every_steps, 200);
  EXPECT_EQ(c->checkpoint_full_every_steps, 0);
  EXPECT_EQ(c->keep_last, 3);
  EXPECT_EQ(c->full_write, "parallel");
}

TEST(TrainConfigTest, ExplicitZerosThatMeanSomethingAreKept) {
  auto c = TrainConfigFromJobSpec(Normalized(
      std::string(kMinimal) + "training: {max_grad_norm: 0, seed: 0, lr: 0.001}\ncheckpoint: {every_steps: 0}\n"));
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->max_grad_norm, 0.0);  // clipping off, not the default 1.0
  EXPECT_EQ(c->seed, 0u);
  EXPECT_EQ(c->checkpoint_every_steps, 0);
}

// The trainer no longer has a reader of its own: what the controller refuses, eft-train refuses with
// the same words (it used to accept unknown keys silently).
TEST(TrainConfigTest, TheControllersErrorsAreTheTrainers) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"training.learning_rate=1e-4", "spec.training.learning_rate: unknown field (did you mean lr?)"},
      {"training.device=tpu", "spec.training.device (\"tpu\") must be one of auto, cpu, cuda"},
      {"training.max_steps=-1", "spec.training.max_steps (-1) must be >= 0"},
      {"data.max_seq_len=8", "spec.data.max_seq_len (8) must be >= 16"},
      {"training.lr=\"fast\"", "spec.training.lr: expected a number, got string \"fast\""},
  };
  for (const auto& [override, message] : cases) {
    auto from_trainer = LoadJobSpec(Doc(kMinimal), {override});
    ASSERT_FALSE(from_trainer.ok()) << override;
    EXPECT_EQ(from_trainer.status().message(), message) << override;
    // The controller's path: parse, then normalize.
    json doc = Doc(kMinimal);
    ASSERT_TRUE(ApplyOverride(override, &doc).ok());
    Status controller;
    auto parsed = spec::JobSpecFromJson(doc);
    if (!parsed.ok()) {
      controller = parsed.status();
    } else {
      controller = spec::NormalizeJobSpec(&*parsed);
    }
    EXPECT_EQ(controller.message(), from_trainer.status().message()) << override;
  }
}

TEST(TrainConfigTest, RequiredFieldsAreNamed) {
  auto no_model = LoadJobSpec(Doc("name: t\ndata: {train: /d.jsonl}\n"), {});
  ASSERT_FALSE(no_model.ok());
  EXPECT_NE(no_model.status().message().find("spec.model is required"), std::string::npos) << no_model.status();
  auto no_data = LoadJobSpec(Doc("name: t\nmodel: /m\n"), {});
  ASSERT_FALSE(no_data.ok());
  EXPECT_NE(no_data.status().message().find("spec.data.train is required"), std::string::npos) << no_data.status();
}

TEST(TrainConfigTest, ASpecWithItsOwnCommandIsNotTheTrainers) {
  auto spec = LoadJobSpec(Doc("name: t\ncommand: [python, train.py]\n"), {});
  ASSERT_TRUE(spec.ok()) << spec.status();
  auto config = TrainConfigFromJobSpec(*spec);
  ASSERT_FALSE(config.ok());
  EXPECT_EQ(config.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(config.status().message().find("spec.command is set (python ...)"), std::string::npos)
      << config.status();
}

// A command that runs eft-train (a wrapper, extra flags) still trains the spec's model and data.
TEST(TrainConfigTest, ACommandThatRunsTheTrainerKeepsTheSpec) {
  auto spec = LoadJobSpec(Doc("name: t\nmodel: /m\ndata: {train: /d.jsonl}\n"
                              "command: [numactl, --interleave=all, /opt/eft/bin/eft-train, train]\n"),
                          {});
  ASSERT_TRUE(spec.ok()) << spec.status();
  auto config = TrainConfigFromJobSpec(*spec);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->model, "/m");
  EXPECT_EQ(config->train_data, "/d.jsonl");
  // Not a program merely named like it, and not without a model.
  auto other = LoadJobSpec(Doc("name: t\nmodel: /m\ndata: {train: /d.jsonl}\ncommand: [eft-train.sh]\n"), {});
  ASSERT_TRUE(other.ok()) << other.status();
  EXPECT_FALSE(TrainConfigFromJobSpec(*other).ok());
  auto no_model = LoadJobSpec(Doc("name: t\ncommand: [eft-train, train]\n"), {});
  ASSERT_TRUE(no_model.ok()) << no_model.status();
  auto c = TrainConfigFromJobSpec(*no_model);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("spec.model is required when spec.command runs eft-train"), std::string::npos)
      << c.status();
}

// EFT_JOB_SPEC is the controller's normalized spec printed by JobSpecToJson: reading it back gives
// the same run as the file it came from.
TEST(TrainConfigTest, TheWorkersSpecReadsBackToTheSameRun) {
  v1::JobSpec spec = Normalized(std::string(kMinimal) +
                                "training: {lr: 0.002, seed: 9, max_steps: 4, schedule: {type: linear}}\n"
                                "checkpoint: {dir: /ckpt, every_steps: 0}\n");
  const std::string handed_to_ranks = spec::JobSpecToJson(spec).dump();
  auto again = LoadJobSpec(Doc(handed_to_ranks), {});
  ASSERT_TRUE(again.ok()) << again.status();
  auto a = TrainConfigFromJobSpec(spec), b = TrainConfigFromJobSpec(*again);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_TRUE(*a == *b);
  EXPECT_EQ(b->checkpoint_every_steps, 0);
  EXPECT_EQ(b->max_steps, 4);
}

TEST(ApplyOverrideTest, SetsNestedPathsWithYamlValues) {
  json doc = Doc(kMinimal);
  ASSERT_TRUE(ApplyOverride("training.lr=1e-4", &doc).ok());
  ASSERT_TRUE(ApplyOverride("training.schedule.type=linear", &doc).ok());
  ASSERT_TRUE(ApplyOverride("data.packing=false", &doc).ok());
  ASSERT_TRUE(ApplyOverride("data.train=/other.jsonl", &doc).ok());  // replaces a value
  ASSERT_TRUE(ApplyOverride("env={A: b}", &doc).ok());               // a flow mapping
  EXPECT_DOUBLE_EQ(doc["training"]["lr"].get<double>(), 1e-4);
  EXPECT_EQ(doc["training"]["schedule"]["type"], "linear");
  EXPECT_EQ(doc["data"]["packing"], false);
  EXPECT_EQ(doc["data"]["train"], "/other.jsonl");
  EXPECT_EQ(doc["env"]["A"], "b");
}

TEST(ApplyOverrideTest, MalformedAssignmentsAreErrors) {
  json doc = Doc(kMinimal);
  for (const char* bad : {"training.lr", "=3", "training..lr=1", "training.lr=[1"}) {
    Status s = ApplyOverride(bad, &doc);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(s.message().find(std::string("--set ") + bad), std::string::npos) << s;
  }
  // A path through a value that is not a mapping says so instead of replacing the value.
  Status through_scalar = ApplyOverride("model.path=/x", &doc);
  EXPECT_EQ(through_scalar.message(), "--set model.path=/x: model is not a mapping in the job spec");
  EXPECT_EQ(doc["model"], "/models/tiny");
}


// training.lora (docs/lora.md): absent means full fine-tuning; present, PEFT's spelling works and
// every bad value is refused with the field named.
namespace lora_spec {

TEST(LoraSpecTest, DefaultsAndAllLinear) {
  auto plain = TrainConfigFromJobSpec(Normalized(kMinimal));
  ASSERT_TRUE(plain.ok());
  EXPECT_FALSE(plain->lora.enabled);
  const std::vector<std::string> all = {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"};
  for (const char* lora : {"{}", "{target_modules: all-linear}", "{target_modules: [all-linear]}"}) {
    auto c = TrainConfigFromJobSpec(Normalized(std::string(kMinimal) + "training: {lora: " + lora + "}\n"));
    ASSERT_TRUE(c.ok()) << lora << ": " << c.status();
    EXPECT_TRUE(c->lora.enabled);
    EXPECT_EQ(c->lora.r, 16);
    EXPECT_EQ(c->lora.alpha, 32);
    EXPECT_EQ(c->lora.dropout, 0);
    EXPECT_EQ(c->lora.scale(), 2.0);
    EXPECT_EQ(c->lora.target_modules, all) << lora;
  }
  // Listed modules come back in layer order, whatever the spec's order.
  auto c = TrainConfigFromJobSpec(Normalized(kMinimal, {"training.lora.target_modules=[down_proj, q_proj]"}));
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->lora.target_modules, (std::vector<std::string>{"q_proj", "down_proj"}));
}

TEST(LoraSpecTest, BadValuesAreRefusedWithTheFieldNamed) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"training.lora.r=0", "spec.training.lora.r (0) must be >= 1"},
      {"training.lora.r=-4", "spec.training.lora.r (-4) must be >= 1"},
      {"training.lora.alpha=0", "spec.training.lora.alpha (0.0) must be a finite number > 0"},
      {"training.lora.alpha=-1", "spec.training.lora.alpha (-1.0) must be a finite number > 0"},
      {"training.lora.dropout=1", "spec.training.lora.dropout (1.0) must be >= 0 and < 1"},
      {"training.lora.dropout=-0.1", "spec.training.lora.dropout (-0.1) must be >= 0 and < 1"},
      {"training.lora.target_modules=[q_proj, qkv_proj]",
       "spec.training.lora.target_modules: unknown module \"qkv_proj\"; use all-linear or names from q_proj, "
       "k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj"},
      {"training.lora.target_modules=lm_head",
       "spec.training.lora.target_modules: unknown module \"lm_head\"; use all-linear or names from q_proj, "
       "k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj"},
      {"training.lora.target_modules=[q_proj, q_proj]", "spec.training.lora.target_modules: \"q_proj\" is given twice"},
      {"training.lora.target_modules=[all-linear, q_proj]",
       "spec.training.lora.target_modules: all-linear already names every module; use it alone"},
      {"training.lora.rank=8", "spec.training.lora.rank: unknown field (fields here: r, alpha, dropout, "
                               "target_modules, init_from)"},
  };
  // checkpoint.merge_lora merges adapters: without training.lora there are none.
  {
    auto spec = LoadJobSpec(Doc(kMinimal), {"checkpoint.merge_lora=true"});
    ASSERT_FALSE(spec.ok());
    EXPECT_EQ(spec.status().message().rfind("spec.checkpoint.merge_lora needs spec.training.lora", 0), 0u)
        << spec.status();
    auto with_lora = TrainConfigFromJobSpec(Normalized(kMinimal, {"checkpoint.merge_lora=true", "training.lora.r=4"}));
    ASSERT_TRUE(with_lora.ok()) << with_lora.status();
    EXPECT_TRUE(with_lora->merge_lora);
    auto by_default = TrainConfigFromJobSpec(Normalized(kMinimal, {"training.lora.r=4"}));
    ASSERT_TRUE(by_default.ok());
    EXPECT_FALSE(by_default->merge_lora);
  }
  // checkpoint.full_write (docs/checkpoints.md, "Write path"): parallel unless rank0 is asked for.
  {
    auto spec = LoadJobSpec(Doc(kMinimal), {"checkpoint.full_write=rank1"});
    ASSERT_FALSE(spec.ok());
    EXPECT_EQ(spec.status().message(), "spec.checkpoint.full_write (\"rank1\") must be one of parallel, rank0");
    auto rank0 = TrainConfigFromJobSpec(Normalized(kMinimal, {"checkpoint.full_write=rank0"}));
    ASSERT_TRUE(rank0.ok()) << rank0.status();
    EXPECT_EQ(rank0->full_write, "rank0");
    auto by_default = TrainConfigFromJobSpec(Normalized(kMinimal, {}));
    ASSERT_TRUE(by_default.ok());
    EXPECT_EQ(by_default->full_write, "parallel");
  }
  for (const auto& [override, message] : cases) {
    auto spec = LoadJobSpec(Doc(kMinimal), {override});
    ASSERT_FALSE(spec.ok()) << override;
    EXPECT_EQ(spec.status().message(), message) << override;
  }
}

}  // namespace lora_spec

}  // namespace
}  // namespace eft::trainer
