// eft-train reads its job spec through the one schema (spec/job_spec.h): every spec.proto field is
// either read by the trainer's sources or on the list of fields the trainer leaves to the controller,
// a spec the controller would refuse is refused here with the same message, and what a config built
// by hand holds is the normalized spec, defaults and all.
#include "trainer/train/train_config.h"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <google/protobuf/descriptor.h>
#include <google/protobuf/message.h>
#include <google/protobuf/util/message_differencer.h>
#include <gtest/gtest.h>

#include "common/yaml_json.h"
#include "spec/job_spec.h"
#include "trainer/train/build.h"

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

// The trainer's sources (trainer/**/*.{h,cc}) without their // comments, all in one string.
std::string TrainerSources() {
  const char* env = std::getenv("EFT_SOURCE_DIR");
  const std::filesystem::path root = std::filesystem::path(env && *env ? env : EFT_SOURCE_DIR_DEFAULT) / "trainer";
  std::string all;
  for (const auto& entry : std::filesystem::recursive_directory_iterator(root)) {
    const std::string ext = entry.path().extension().string();
    if (!entry.is_regular_file() || (ext != ".h" && ext != ".cc")) continue;
    std::ifstream in(entry.path());
    for (std::string line; std::getline(in, line);) all += line.substr(0, line.find("//")) + "\n";
  }
  EXPECT_GT(all.size(), 100000u) << "no trainer sources under " << root;
  return all;
}

// How the trainer's code reads a field: its message's accessor, or a variable named after it,
// then the field's accessor: config.spec.model(), spec.data().max_seq_len(), lora.r().
std::regex ReadOf(const std::string& path) {
  std::vector<std::string> names;
  std::stringstream parts(path);
  for (std::string name; std::getline(parts, name, '.');) names.push_back(name);
  const std::string message = names.size() > 1 ? names[names.size() - 2] : "spec";
  return std::regex("\\b" + message + "(\\(\\))?\\." + names.back() + "\\(\\)");
}

TEST(TrainConfigTest, EverySpecFieldIsReadByTheTrainerOrDeclaredTheControllers) {
  std::vector<std::string> fields;
  LeafFields(v1::JobSpec::descriptor(), "", &fields);
  const auto& ignored = FieldsTheTrainerIgnores();
  const std::string sources = TrainerSources();
  for (const std::string& field : fields) {
    // The regex on the lines that call the accessor at all: on every line it takes seconds.
    const std::string accessor = "." + field.substr(field.rfind('.') + 1) + "()";
    bool read = false;
    std::stringstream lines(sources);
    for (std::string line; !read && std::getline(lines, line);) {
      read = line.find(accessor) != std::string::npos && std::regex_search(line, ReadOf(field));
    }
    if (std::find(ignored.begin(), ignored.end(), field) != ignored.end()) {
      EXPECT_FALSE(read) << field << " is listed in FieldsTheTrainerIgnores() but trainer/ reads it";
    } else {
      EXPECT_TRUE(read) << "spec.proto has " << field << " but trainer/ neither reads it (as "
                        << "<message>().<field>() or <message>.<field>(), e.g. config.spec.data().max_seq_len() "
                        << "or lora.r()) nor lists it in FieldsTheTrainerIgnores(); decide which";
    }
  }
  // And the other way: nothing listed that the schema does not have.
  for (const std::string& name : ignored) {
    EXPECT_NE(std::find(fields.begin(), fields.end(), name), fields.end()) << name << " is not a spec field";
  }
}

// The pattern above finds what it should, and only that.
TEST(TrainConfigTest, AReadIsTheFieldsAccessorOnItsMessage) {
  EXPECT_TRUE(std::regex_search("config.spec.model()", ReadOf("model")));
  EXPECT_TRUE(std::regex_search("c.spec.data().max_seq_len()", ReadOf("data.max_seq_len")));
  EXPECT_TRUE(std::regex_search("if (data.packing())", ReadOf("data.packing")));
  EXPECT_TRUE(std::regex_search("training().lora().r()", ReadOf("training.lora.r")));
  EXPECT_TRUE(std::regex_search("lora.r()", ReadOf("training.lora.r")));
  EXPECT_FALSE(std::regex_search("lora.r_max()", ReadOf("training.lora.r")));
  EXPECT_FALSE(std::regex_search("data.eval_fraction()", ReadOf("data.eval")));
  EXPECT_FALSE(std::regex_search("model_spec.model()", ReadOf("model")));
  EXPECT_FALSE(std::regex_search("spec.model_dir()", ReadOf("model")));
}

// A config built by hand (tests, benches) holds the normalized spec: the schema's defaults, filled in
// by NormalizeJobSpec and nowhere else.
TEST(TrainConfigTest, AHandBuiltSpecIsNormalized) {
  v1::JobSpec raw;
  raw.set_name("t");
  raw.set_model("/models/tiny");
  raw.mutable_data()->set_train("/data/train.jsonl");
  auto c = TrainConfigFromJobSpec(raw);
  ASSERT_TRUE(c.ok()) << c.status();
  v1::JobSpec normalized = raw;
  ASSERT_TRUE(spec::NormalizeJobSpec(&normalized).ok());
  EXPECT_TRUE(pb::util::MessageDifferencer::Equals(c->spec, normalized)) << c->spec.DebugString();
  EXPECT_EQ(c->spec.data().max_seq_len(), 4096);
  EXPECT_EQ(c->spec.checkpoint().dir(), "");  // by hand: no checkpoints unless asked for
  // Normalizing is the controller's too: one that already normalized gets the same config.
  auto again = TrainConfigFromJobSpec(c->spec);
  ASSERT_TRUE(again.ok());
  EXPECT_TRUE(pb::util::MessageDifferencer::Equals(again->spec, c->spec));
  // And a bad spec is refused with the controller's message.
  raw.mutable_training()->set_micro_batch_size(0);
  EXPECT_EQ(TrainConfigFromJobSpec(raw).status().message(), "spec.training.micro_batch_size (0) must be >= 1");
}

// What the option structs below the trainer get from the spec (trainer/train/build.h).
TEST(TrainConfigTest, TheOptionStructsAreTheSpecs) {
  auto c = TrainConfigFromJobSpec(Normalized(
      "name: t\nmodel: /models/tiny\n"
      "training: {lr: 0.001, weight_decay: 0.1, seed: 7, activation_checkpointing: none,\n"
      "           schedule: {type: linear, warmup_steps: 5, min_lr: 0.0001, warmup_ratio: 0.2},\n"
      "           lora: {r: 8, alpha: 32, dropout: 0.1, target_modules: [v_proj, q_proj]}}\n"
      "parallel: {sharding: full}\n"
      "data: {train: /d.jsonl, chat_template: /t.jinja}\n"
      "checkpoint: {dir: /ckpt, every_steps: 10, full_every_steps: 20, keep_last: 4, require_resume: true,\n"
      "             keep_best: true, full_write: rank0}\n"));
  ASSERT_TRUE(c.ok()) << c.status();
  const ScheduleConfig schedule = BuildSchedule(*c);
  EXPECT_EQ(schedule.type, "linear");
  EXPECT_DOUBLE_EQ(schedule.lr, 0.001);
  EXPECT_DOUBLE_EQ(schedule.min_lr, 0.0001);
  EXPECT_DOUBLE_EQ(schedule.warmup_ratio, 0.2);
  EXPECT_EQ(schedule.warmup_steps, 5);
  const LoraOptions lora = BuildLoraOptions(*c);
  EXPECT_TRUE(lora.enabled);
  EXPECT_EQ(lora.r, 8);
  EXPECT_DOUBLE_EQ(lora.scale, 4.0);
  EXPECT_DOUBLE_EQ(lora.dropout, 0.1);
  EXPECT_EQ(lora.modules, (std::vector<std::string>{"q_proj", "v_proj"}));
  EXPECT_EQ(lora.seed, 7u);
  auto policy = BuildCheckpointPolicy(*c);
  ASSERT_TRUE(policy.ok()) << policy.status();
  EXPECT_EQ(policy->root, "/ckpt");
  EXPECT_EQ(policy->every_steps, 10);
  EXPECT_EQ(policy->full_every_steps, 20);
  EXPECT_EQ(policy->keep_last, 4);
  EXPECT_TRUE(policy->require_resume);
  EXPECT_TRUE(policy->keep_best);
  EXPECT_EQ(policy->full_write, FullWriteMode::kRank0);
  EXPECT_EQ(policy->hf_files.model_dirs, std::vector<std::string>{"/models/tiny"});
  EXPECT_EQ(policy->hf_files.chat_template, "/t.jinja");
  PrecisionChoice fp32;
  fp32.name = "fp32";
  fp32.dtype = at::kFloat;
  auto sharding = BuildShardingOptions(*c, fp32, c10::Device(c10::kCPU));
  ASSERT_TRUE(sharding.ok()) << sharding.status();
  EXPECT_EQ(sharding->strategy, ShardingStrategy::kFull);
  EXPECT_FALSE(sharding->activation_checkpointing);

  auto plain = TrainConfigFromJobSpec(Normalized(kMinimal));
  ASSERT_TRUE(plain.ok());
  EXPECT_FALSE(BuildLoraOptions(*plain).enabled);
  EXPECT_TRUE(BuildShardingOptions(*plain, fp32, c10::Device(c10::kCPU))->activation_checkpointing);
  EXPECT_EQ(BuildCheckpointPolicy(*plain)->full_write, FullWriteMode::kParallel);
}

TEST(TrainConfigTest, ExplicitZerosThatMeanSomethingAreKept) {
  auto c = TrainConfigFromJobSpec(Normalized(
      std::string(kMinimal) + "training: {max_grad_norm: 0, seed: 0, lr: 0.001}\ncheckpoint: {every_steps: 0}\n"));
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->spec.training().max_grad_norm(), 0.0);  // clipping off, not the default 1.0
  EXPECT_EQ(c->spec.training().seed(), 0);
  EXPECT_EQ(BuildCheckpointPolicy(*c)->every_steps, 0);
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
  EXPECT_EQ(config->spec.model(), "/m");
  EXPECT_EQ(config->spec.data().train(), "/d.jsonl");
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

// EFT_JOB_SPEC is the controller's normalized spec printed by JobSpecToJson (worker/rank_env.h):
// reading it back gives the same run as the file it came from.
TEST(TrainConfigTest, TheWorkersSpecReadsBackToTheSameRun) {
  v1::JobSpec spec = Normalized(std::string(kMinimal) +
                                "training: {lr: 0.002, seed: 9, max_steps: 4, schedule: {type: linear}}\n"
                                "checkpoint: {dir: /ckpt, every_steps: 0}\n");
  const std::string handed_to_ranks = spec::JobSpecToJson(spec).dump();
  auto again = LoadJobSpec(Doc(handed_to_ranks), {});
  ASSERT_TRUE(again.ok()) << again.status();
  auto a = TrainConfigFromJobSpec(spec), b = TrainConfigFromJobSpec(*again);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_TRUE(pb::util::MessageDifferencer::Equals(a->spec, b->spec)) << handed_to_ranks;
  EXPECT_EQ(b->spec.checkpoint().every_steps(), 0);
  EXPECT_EQ(b->spec.training().max_steps(), 4);
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
  EXPECT_FALSE(plain->spec.training().has_lora());
  const std::vector<std::string> all = {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"};
  for (const char* lora : {"{}", "{target_modules: all-linear}", "{target_modules: [all-linear]}"}) {
    auto c = TrainConfigFromJobSpec(Normalized(std::string(kMinimal) + "training: {lora: " + lora + "}\n"));
    ASSERT_TRUE(c.ok()) << lora << ": " << c.status();
    ASSERT_TRUE(c->spec.training().has_lora());
    const v1::LoraSpec& l = c->spec.training().lora();
    EXPECT_EQ(l.r(), 16);
    EXPECT_EQ(l.alpha(), 32);
    EXPECT_EQ(l.dropout(), 0);
    EXPECT_EQ(LoraScale(l), 2.0);
    EXPECT_EQ(LoraTargetModules(l), all) << lora;
  }
  // Listed modules come back in layer order, whatever the spec's order.
  auto c = TrainConfigFromJobSpec(Normalized(kMinimal, {"training.lora.target_modules=[down_proj, q_proj]"}));
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(LoraTargetModules(c->spec.training().lora()), (std::vector<std::string>{"q_proj", "down_proj"}));
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
    EXPECT_TRUE(with_lora->spec.checkpoint().merge_lora());
    auto by_default = TrainConfigFromJobSpec(Normalized(kMinimal, {"training.lora.r=4"}));
    ASSERT_TRUE(by_default.ok());
    EXPECT_FALSE(by_default->spec.checkpoint().merge_lora());
  }
  // checkpoint.full_write (docs/checkpoints.md, "Write path"): parallel unless rank0 is asked for.
  {
    auto spec = LoadJobSpec(Doc(kMinimal), {"checkpoint.full_write=rank1"});
    ASSERT_FALSE(spec.ok());
    EXPECT_EQ(spec.status().message(), "spec.checkpoint.full_write (\"rank1\") must be one of parallel, rank0");
    auto rank0 = TrainConfigFromJobSpec(Normalized(kMinimal, {"checkpoint.full_write=rank0"}));
    ASSERT_TRUE(rank0.ok()) << rank0.status();
    EXPECT_EQ(BuildCheckpointPolicy(*rank0)->full_write, FullWriteMode::kRank0);
    auto by_default = TrainConfigFromJobSpec(Normalized(kMinimal, {}));
    ASSERT_TRUE(by_default.ok());
    EXPECT_EQ(BuildCheckpointPolicy(*by_default)->full_write, FullWriteMode::kParallel);
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
