#include "spec/job_spec.h"

#include <cmath>
#include <limits>
#include <string>

#include <google/protobuf/util/message_differencer.h>
#include <gtest/gtest.h>

#include "common/yaml_json.h"

namespace eft::spec {
namespace {

using nlohmann::json;

// A complete job spec as a user writes one (docs/api.md), every section used.
constexpr const char* kArchitectureExample = R"(
name: qwen-sft
model: /shared/models/Qwen2.5-0.5B          # HF dir: config.json, *.safetensors, tokenizer.json
data: {train: /shared/data/train.jsonl, format: auto, chat_template: auto,
       max_seq_len: 4096, packing: true, loss_on: assistant}
resources: {nodes: {min: 1, max: 4}, gpus_per_node: 8}
training: {epochs: 2, global_batch_size: 128, micro_batch_size: 2, lr: 1.0e-5,
           schedule: {type: cosine, warmup_ratio: 0.1, min_lr: 0}, weight_decay: 0.1,
           max_grad_norm: 1.0, precision: bf16, activation_checkpointing: full, seed: 42}
checkpoint: {dir: /shared/ckpt/qwen-sft, every_steps: 200, full_every_steps: 1000, keep_last: 3}
fault_tolerance: {max_restarts: 5}
command: []        # empty: eft-train; else any program, run once per rank
)";

// gmock's HasSubstr would need libgmock, which the test targets do not link.
#define EXPECT_CONTAINS(haystack, needle)                                           \
  do {                                                                              \
    const std::string h_ = (haystack), n_ = (needle);                               \
    EXPECT_NE(h_.find(n_), std::string::npos) << "  actual: " << h_ << "\n  wanted: " << n_; \
  } while (0)

bool Equal(const v1::JobSpec& a, const v1::JobSpec& b) {
  return google::protobuf::util::MessageDifferencer::Equals(a, b);
}

v1::JobSpec MustParse(const std::string& text) {
  auto spec = ParseJobSpec(text);
  EXPECT_TRUE(spec.ok()) << spec.status();
  return spec.ok() ? *spec : v1::JobSpec();
}

v1::JobSpec MustNormalize(const std::string& text) {
  v1::JobSpec spec = MustParse(text);
  Status s = NormalizeJobSpec(&spec);
  EXPECT_TRUE(s.ok()) << s;
  return spec;
}

// The message of a spec that must fail to parse.
std::string ParseError(const json& doc) {
  auto spec = JobSpecFromJson(doc);
  EXPECT_FALSE(spec.ok()) << "parsed: " << doc.dump();
  if (spec.ok()) return "";
  EXPECT_EQ(spec.status().code(), StatusCode::kInvalidArgument);
  return spec.status().message();
}

std::string ParseError(const std::string& yaml) {
  auto doc = YamlToJson(yaml);
  EXPECT_TRUE(doc.ok()) << doc.status();
  return doc.ok() ? ParseError(*doc) : "";
}

// A valid eft-train spec with one value replaced (a JSON pointer: "/training/lr").
json ValidWith(const std::string& pointer, json value) {
  json doc = {{"name", "job"}, {"model", "/m"}, {"data", {{"train", "/d.jsonl"}}}};
  doc[json::json_pointer(pointer)] = std::move(value);
  return doc;
}

// The message of a spec that parses but must fail validation.
std::string NormalizeError(const json& doc) {
  auto spec = JobSpecFromJson(doc);
  EXPECT_TRUE(spec.ok()) << spec.status();
  if (!spec.ok()) return "";
  Status s = NormalizeJobSpec(&*spec);
  EXPECT_FALSE(s.ok()) << "accepted: " << doc.dump();
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  return s.message();
}

TEST(JobSpecTest, ArchitectureExampleParsesAndNormalizes) {
  v1::JobSpec spec = MustNormalize(kArchitectureExample);
  EXPECT_EQ(spec.name(), "qwen-sft");
  EXPECT_EQ(spec.model(), "/shared/models/Qwen2.5-0.5B");
  EXPECT_EQ(spec.data().train(), "/shared/data/train.jsonl");
  EXPECT_EQ(spec.data().max_seq_len(), 4096);
  EXPECT_TRUE(spec.data().packing());
  EXPECT_EQ(spec.resources().nodes().min(), 1);
  EXPECT_EQ(spec.resources().nodes().max(), 4);
  EXPECT_EQ(spec.resources().gpus_per_node(), 8);
  EXPECT_EQ(spec.training().epochs(), 2);
  EXPECT_EQ(spec.training().global_batch_size(), 128);
  EXPECT_EQ(spec.training().micro_batch_size(), 2);
  EXPECT_DOUBLE_EQ(spec.training().lr(), 1e-5);
  EXPECT_EQ(spec.training().schedule().type(), "cosine");
  EXPECT_DOUBLE_EQ(spec.training().schedule().warmup_ratio(), 0.1);
  EXPECT_EQ(spec.training().schedule().min_lr(), 0);
  EXPECT_DOUBLE_EQ(spec.training().weight_decay(), 0.1);
  EXPECT_EQ(spec.training().seed(), 42);
  EXPECT_EQ(spec.checkpoint().dir(), "/shared/ckpt/qwen-sft");
  EXPECT_EQ(spec.checkpoint().full_every_steps(), 1000);
  EXPECT_EQ(spec.fault_tolerance().max_restarts(), 5);
  EXPECT_DOUBLE_EQ(spec.fault_tolerance().stop_grace_seconds(), 30);
  EXPECT_EQ(spec.command_size(), 0);
  EXPECT_TRUE(spec.resources().has_grow());
  EXPECT_TRUE(spec.resources().grow());
  EXPECT_DOUBLE_EQ(spec.resources().resize_cooldown_seconds(), 60);
}

TEST(JobSpecTest, MinimalSpecGetsEveryDefault) {
  v1::JobSpec spec = MustNormalize("name: tiny\ncommand: [python, train.py]\n");
  EXPECT_EQ(spec.name(), "tiny");
  EXPECT_EQ(spec.model(), "");
  ASSERT_EQ(spec.command_size(), 2);
  EXPECT_EQ(spec.command(1), "train.py");
  EXPECT_TRUE(spec.env().empty());

  EXPECT_EQ(spec.data().train(), "");
  EXPECT_EQ(spec.data().format(), "auto");
  EXPECT_EQ(spec.data().chat_template(), "auto");
  EXPECT_EQ(spec.data().max_seq_len(), 4096);
  EXPECT_TRUE(spec.data().has_packing());
  EXPECT_TRUE(spec.data().packing());
  EXPECT_EQ(spec.data().loss_on(), "assistant");
  EXPECT_TRUE(spec.data().train_on_eos());
  EXPECT_EQ(spec.data().on_bad_line(), "error");
  EXPECT_EQ(spec.data().truncation(), "truncate");

  EXPECT_EQ(spec.resources().nodes().min(), 1);
  EXPECT_EQ(spec.resources().nodes().max(), 1);
  EXPECT_EQ(spec.resources().gpus_per_node(), 1);

  EXPECT_EQ(spec.training().epochs(), 1);
  EXPECT_EQ(spec.training().global_batch_size(), 32);
  EXPECT_EQ(spec.training().micro_batch_size(), 1);
  EXPECT_TRUE(spec.training().has_lr());
  EXPECT_DOUBLE_EQ(spec.training().lr(), 1e-5);
  EXPECT_EQ(spec.training().schedule().type(), "cosine");
  EXPECT_EQ(spec.training().schedule().warmup_ratio(), 0);
  EXPECT_EQ(spec.training().schedule().min_lr(), 0);
  EXPECT_EQ(spec.training().weight_decay(), 0);
  EXPECT_TRUE(spec.training().has_max_grad_norm());
  EXPECT_DOUBLE_EQ(spec.training().max_grad_norm(), 1.0);
  EXPECT_EQ(spec.training().precision(), "auto");
  EXPECT_EQ(spec.training().activation_checkpointing(), "full");
  EXPECT_EQ(spec.training().device(), "auto");
  EXPECT_TRUE(spec.training().has_seed());
  EXPECT_EQ(spec.training().seed(), 42);

  EXPECT_EQ(spec.checkpoint().dir(), "");  // filled by the controller from the job id
  EXPECT_TRUE(spec.checkpoint().has_every_steps());
  EXPECT_EQ(spec.checkpoint().every_steps(), 200);
  EXPECT_EQ(spec.checkpoint().full_every_steps(), 0);
  EXPECT_EQ(spec.checkpoint().keep_last(), 3);

  EXPECT_TRUE(spec.fault_tolerance().has_max_restarts());
  EXPECT_EQ(spec.fault_tolerance().max_restarts(), 3);
  EXPECT_TRUE(spec.fault_tolerance().has_stop_grace_seconds());
  EXPECT_DOUBLE_EQ(spec.fault_tolerance().stop_grace_seconds(), 30);
}

TEST(JobSpecTest, NodesMaxDefaultsToMin) {
  v1::JobSpec spec = MustNormalize("name: a\ncommand: [x]\nresources: {nodes: {min: 3}}\n");
  EXPECT_EQ(spec.resources().nodes().max(), 3);
}

TEST(JobSpecTest, ExplicitZeroOfOptionalFieldIsKept) {
  v1::JobSpec spec = MustNormalize(R"(
name: zeros
command: [x]
training: {max_grad_norm: 0, seed: 0}
checkpoint: {every_steps: 0}
fault_tolerance: {max_restarts: 0}
data: {packing: false}
)");
  EXPECT_TRUE(spec.training().has_max_grad_norm());
  EXPECT_EQ(spec.training().max_grad_norm(), 0);
  EXPECT_TRUE(spec.training().has_seed());
  EXPECT_EQ(spec.training().seed(), 0);
  EXPECT_EQ(spec.checkpoint().every_steps(), 0);
  EXPECT_TRUE(spec.fault_tolerance().has_max_restarts());
  EXPECT_EQ(spec.fault_tolerance().max_restarts(), 0);
  EXPECT_FALSE(spec.data().packing());

  // ...and survives a trip through JSON, where "unset" and "0" must stay distinct.
  auto back = JobSpecFromJson(JobSpecToJson(spec));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_TRUE(back->fault_tolerance().has_max_restarts());
  EXPECT_EQ(back->fault_tolerance().max_restarts(), 0);
  EXPECT_TRUE(Equal(*back, spec));
}

// An explicit 0 used to become the default silently (gpus_per_node: 0 ran with 1 rank per node).
// Now it is either a value the field allows or an error saying the minimum.
TEST(JobSpecTest, AnExplicitZeroIsNeverReplacedByTheDefault) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"resources: {gpus_per_node: 0}", "spec.resources.gpus_per_node (0) must be >= 1"},
      {"resources: {nodes: {min: 0}}", "spec.resources.nodes.min (0) must be >= 1"},
      {"resources: {nodes: {max: 0}}", "spec.resources.nodes.max (0) must be >= spec.resources.nodes.min (1)"},
      {"data: {max_seq_len: 0}", "spec.data.max_seq_len (0) must be >= 16"},
      {"training: {epochs: 0}", "spec.training.epochs (0) must be >= 1"},
      {"training: {global_batch_size: 0}", "spec.training.global_batch_size (0) must be >= 1"},
      {"training: {micro_batch_size: 0}", "spec.training.micro_batch_size (0) must be >= 1"},
      {"checkpoint: {keep_last: 0}", "spec.checkpoint.keep_last (0) must be >= 1"},
  };
  for (const auto& [yaml, message] : cases) {
    auto spec = ParseJobSpec("name: a\ncommand: [x]\n" + yaml + "\n");
    ASSERT_TRUE(spec.ok()) << spec.status();
    Status s = NormalizeJobSpec(&*spec);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << yaml;
    EXPECT_EQ(s.message(), message) << yaml;
  }
  // Zeros that mean something are kept as they are, and shown in the normalized spec.
  v1::JobSpec kept = MustNormalize(
      "name: a\ncommand: [x]\ntraining: {weight_decay: 0, max_steps: 0}\ncheckpoint: {full_every_steps: 0}\n");
  json shown = JobSpecToJson(kept);
  EXPECT_EQ(shown["training"]["max_steps"], 0);
  EXPECT_EQ(shown["checkpoint"]["full_every_steps"], 0);
  EXPECT_EQ(shown["resources"]["gpus_per_node"], 1);  // left out: the default, stated
}

TEST(JobSpecTest, NormalizeIsIdempotent) {
  v1::JobSpec once = MustNormalize(kArchitectureExample);
  v1::JobSpec twice = once;
  ASSERT_TRUE(NormalizeJobSpec(&twice).ok());
  EXPECT_TRUE(Equal(once, twice));

  v1::JobSpec minimal = MustNormalize("name: tiny\ncommand: [x]\nenv: {A: b}\n");
  v1::JobSpec again = minimal;
  ASSERT_TRUE(NormalizeJobSpec(&again).ok());
  EXPECT_TRUE(Equal(minimal, again));
}

struct BadValue {
  std::string pointer;
  json value;
  std::string expected;  // a substring of the error
};

TEST(JobSpecTest, EveryValidationRuleNamesTheField) {
  const BadValue cases[] = {
      {"/name", "", "spec.name is required"},
      {"/name", std::string(64, 'a'), "spec.name (\"aaaa"},
      {"/name", "Qwen-sft", "spec.name (\"Qwen-sft\") contains \"Q\""},
      {"/name", "qwen_sft", "contains \"_\""},
      {"/name", "1qwen", "spec.name (\"1qwen\") must start with a letter"},
      {"/name", "-qwen", "must start with a letter"},
      {"/name", "qwen-", "spec.name (\"qwen-\") must not end with '-'"},
      {"/model", "", "spec.model is required when spec.command is empty"},
      {"/data/train", "", "spec.data.train is required when spec.command is empty"},
      {"/data/format", "csv", "spec.data.format (\"csv\") must be one of auto, messages, prompt_completion"},
      {"/data/max_seq_len", 8, "spec.data.max_seq_len (8) must be >= 16"},
      {"/data/max_seq_len", 2000000, "spec.data.max_seq_len (2000000) must be <= 1048576"},
      {"/data/loss_on", "everything", "spec.data.loss_on (\"everything\") must be one of assistant, completion, all"},
      {"/data/on_bad_line", "ignore", "spec.data.on_bad_line (\"ignore\") must be one of error, skip"},
      {"/data/truncation", "wrap", "spec.data.truncation (\"wrap\") must be one of truncate, drop"},
      {"/checkpoint/full_write", "rank-0", "spec.checkpoint.full_write (\"rank-0\") must be one of parallel, rank0"},
      {"/resources/nodes/min", -1, "spec.resources.nodes.min (-1) must be >= 1"},
      {"/resources/nodes", {{"min", 2}, {"max", 1}},
       "spec.resources.nodes.max (1) must be >= spec.resources.nodes.min (2)"},
      {"/resources/nodes/max", 10001, "spec.resources.nodes.max (10001) must be <= 10000"},
      {"/resources/nodes/min", 20000, "spec.resources.nodes.min (20000) must be <= 10000"},
      {"/resources/gpus_per_node", 65, "spec.resources.gpus_per_node (65) must be <= 64"},
      {"/resources/gpus_per_node", -2, "spec.resources.gpus_per_node (-2) must be >= 1"},
      {"/training/epochs", -1, "spec.training.epochs (-1) must be >= 1"},
      {"/training/global_batch_size", -4, "spec.training.global_batch_size (-4) must be >= 1"},
      {"/training/micro_batch_size", -1, "spec.training.micro_batch_size (-1) must be >= 1"},
      {"/training/micro_batch_size", 64,
       "spec.training.micro_batch_size (64) must be <= spec.training.global_batch_size (32)"},
      {"/training/lr", 0, "spec.training.lr (0.0) must be a finite number > 0"},
      {"/training/lr", -1e-5, "spec.training.lr (-1e-05) must be"},
      {"/training/schedule/type", "cosin", "spec.training.schedule.type (\"cosin\") must be one of cosine, linear"},
      {"/training/schedule/warmup_ratio", 1.0, "spec.training.schedule.warmup_ratio (1.0) must be >= 0 and < 1"},
      {"/training/schedule/warmup_ratio", -0.1, "spec.training.schedule.warmup_ratio (-0.1)"},
      {"/training/schedule/min_lr", -1, "spec.training.schedule.min_lr (-1.0) must be a finite number >= 0"},
      {"/training/schedule/min_lr", 1e-3, "spec.training.schedule.min_lr (0.001) must be <= spec.training.lr (1e-05)"},
      {"/training/weight_decay", -0.1, "spec.training.weight_decay (-0.1) must be a finite number >= 0"},
      {"/training/max_grad_norm", -1, "spec.training.max_grad_norm (-1.0) must be a finite number >= 0"},
      {"/training/precision", "fp16", "spec.training.precision (\"fp16\") must be one of auto, bf16, fp32"},
      {"/training/device", "tpu", "spec.training.device (\"tpu\") must be one of auto, cpu, cuda"},
      {"/training/activation_checkpointing", "some",
       "spec.training.activation_checkpointing (\"some\") must be one of none, full"},
      {"/checkpoint/every_steps", -1, "spec.checkpoint.every_steps (-1) must be >= 0"},
      {"/checkpoint/full_every_steps", -1, "spec.checkpoint.full_every_steps (-1) must be >= 0"},
      {"/checkpoint/keep_last", -1, "spec.checkpoint.keep_last (-1) must be >= 1"},
      {"/fault_tolerance/max_restarts", -1, "spec.fault_tolerance.max_restarts (-1) must be >= 0"},
      {"/fault_tolerance/max_restarts", 1001, "spec.fault_tolerance.max_restarts (1001) must be <= 1000"},
      {"/resources/resize_cooldown_seconds", -1,
       "spec.resources.resize_cooldown_seconds (-1.0) must be >= 0 and <= 604800"},
      {"/resources/resize_cooldown_seconds", 604801, "spec.resources.resize_cooldown_seconds (604801.0) must be >= 0"},
      {"/priority", 1000001, "spec.priority (1000001) must be <= 1000000"},
      {"/priority", -1000001, "spec.priority (-1000001) must be >= -1000000"},
      {"/fault_tolerance/stop_grace_seconds", 0, "spec.fault_tolerance.stop_grace_seconds (0.0) must be > 0"},
      {"/fault_tolerance/stop_grace_seconds", 3601, "spec.fault_tolerance.stop_grace_seconds (3601.0) must be > 0 and <= 3600"},
      {"/command", {""}, "spec.command[0] is empty"},
      {"/env", {{"1ABC", "x"}}, "spec.env: \"1ABC\" is not a valid variable name"},
      {"/env", {{"MY-VAR", "x"}}, "spec.env: \"MY-VAR\" is not a valid variable name"},
      {"/env", {{"", "x"}}, "spec.env: \"\" is not a valid variable name"},
      {"/env", {{"EFT_JOB_ID", "x"}}, "spec.env.EFT_JOB_ID: the worker sets EFT_JOB_ID"},
      {"/env", {{"EFT_ANYTHING", "x"}}, "spec.env.EFT_ANYTHING"},
  };
  for (const BadValue& c : cases) {
    SCOPED_TRACE(c.pointer + " = " + c.value.dump());
    EXPECT_CONTAINS(NormalizeError(ValidWith(c.pointer, c.value)), c.expected);
  }
}

TEST(JobSpecTest, RankEnvironmentCannotBeOverridden) {
  for (const char* name : {"RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
                           "CUDA_VISIBLE_DEVICES", "GROUP_RANK", "ROLE_RANK", "EFT_EVENTS_FD"}) {
    SCOPED_TRACE(name);
    EXPECT_CONTAINS(NormalizeError(ValidWith("/env", {{name, "1"}})), std::string("spec.env.") + name + ": the worker sets");
  }
  // Near misses are ordinary variables.
  v1::JobSpec spec = MustNormalize("name: a\ncommand: [x]\nenv: {RANKS: '1', _X: y, NCCL_DEBUG: INFO, eft_x: z}\n");
  EXPECT_EQ(spec.env().at("NCCL_DEBUG"), "INFO");
}

TEST(JobSpecTest, FirstErrorInProtoFieldOrder) {
  // Both the name and the node range are wrong: name comes first in spec.proto.
  json doc = ValidWith("/resources/nodes/min", -1);
  doc["name"] = "Bad";
  EXPECT_CONTAINS(NormalizeError(doc), "spec.name");
  // Among env names, the alphabetically first bad one is reported, whatever the map order.
  EXPECT_CONTAINS(NormalizeError(ValidWith("/env", {{"WORLD_SIZE", "1"}, {"RANK", "0"}})), "spec.env.RANK");
}

TEST(JobSpecTest, OwnCommandNeedsNoModelOrData) {
  v1::JobSpec spec = MustNormalize("name: a\ncommand: [/bin/true, '']\n");
  EXPECT_EQ(spec.command(1), "");  // empty arguments after the program are legitimate
}

TEST(JobSpecTest, UnknownFieldSuggestsTheClosestName) {
  EXPECT_EQ(ParseError(ValidWith("/training/learning_rate", 1e-5)),
            "spec.training.learning_rate: unknown field (did you mean lr?)");
  EXPECT_EQ(ParseError(ValidWith("/training/epoch", 2)), "spec.training.epoch: unknown field (did you mean epochs?)");
  EXPECT_EQ(ParseError(ValidWith("/data/max_seq_length", 2048)),
            "spec.data.max_seq_length: unknown field (did you mean max_seq_len?)");
  EXPECT_EQ(ParseError(ValidWith("/resources/gpus", 8)),
            "spec.resources.gpus: unknown field (did you mean gpus_per_node?)");
  // The right name at the wrong level.
  EXPECT_EQ(ParseError(ValidWith("/lr", 1e-5)), "spec.lr: unknown field (did you mean spec.training.lr?)");
  EXPECT_EQ(ParseError(ValidWith("/resources/max_restarts", 1)),
            "spec.resources.max_restarts: unknown field (did you mean spec.fault_tolerance.max_restarts?)");
  // Nothing close: list what is valid there.
  EXPECT_EQ(ParseError(ValidWith("/resources/nodes/xyzzy", 1)),
            "spec.resources.nodes.xyzzy: unknown field (fields here: min, max)");
}

// What people bring from Hugging Face's TrainingArguments and TRL: the eft name, wherever it lives,
// and a word where the eft field is not a plain rename.
TEST(JobSpecTest, HuggingFaceNamesGetTheirEftEquivalent) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"/training/learning_rate", "spec.training.learning_rate: unknown field (did you mean lr?)"},
      {"/training/num_train_epochs", "spec.training.num_train_epochs: unknown field (did you mean epochs?)"},
      {"/training/per_device_train_batch_size",
       "spec.training.per_device_train_batch_size: unknown field (did you mean micro_batch_size?; sequences per "
       "forward/backward on one rank)"},
      {"/training/gradient_accumulation_steps",
       "spec.training.gradient_accumulation_steps: unknown field (did you mean global_batch_size?; eft takes the "
       "batch per optimizer step, global_batch_size = micro_batch_size x accumulation x world size, and derives "
       "the accumulation for whatever world size the job runs at)"},
      {"/training/max_seq_length",
       "spec.training.max_seq_length: unknown field (did you mean spec.data.max_seq_len?)"},
      {"/training/lr_scheduler_type",
       "spec.training.lr_scheduler_type: unknown field (did you mean spec.training.schedule.type?)"},
      {"/training/warmup_ratio",
       "spec.training.warmup_ratio: unknown field (did you mean spec.training.schedule.warmup_ratio?)"},
      {"/training/warmup_steps",
       "spec.training.warmup_steps: unknown field (did you mean spec.training.schedule.warmup_steps?)"},
      {"/training/bf16", "spec.training.bf16: unknown field (did you mean precision?: bf16 | fp32 | auto)"},
      {"/training/gradient_checkpointing",
       "spec.training.gradient_checkpointing: unknown field (did you mean activation_checkpointing?)"},
      {"/training/eval_steps", "spec.training.eval_steps: unknown field (did you mean eval_every_steps?)"},
      {"/training/save_steps", "spec.training.save_steps: unknown field (did you mean spec.checkpoint.every_steps?)"},
      {"/training/lora/lora_alpha", "spec.training.lora.lora_alpha: unknown field (did you mean alpha?)"},
  };
  for (const auto& [path, message] : cases) {
    const std::string error = ParseError(ValidWith(path, 1));
    EXPECT_EQ(error, message) << path;
  }
  // weight_decay and max_grad_norm are HF's names already.
  EXPECT_TRUE(JobSpecFromJson(ValidWith("/training/weight_decay", 0.1)).ok());
}

TEST(JobSpecTest, WarmupStepsIsHuggingFacesAndOverridesTheRatio) {
  v1::JobSpec spec = MustNormalize(ValidWith("/training/schedule/warmup_steps", 30).dump());
  EXPECT_EQ(spec.training().schedule().warmup_steps(), 30);
  EXPECT_EQ(MustNormalize(ValidWith("/training/schedule/warmup_ratio", 0.1).dump()).training().schedule().warmup_steps(),
            0);
  EXPECT_CONTAINS(NormalizeError(ValidWith("/training/schedule/warmup_steps", -1)),
                  "spec.training.schedule.warmup_steps (-1) must be >= 0");
}

TEST(JobSpecTest, WrongTypesNameFieldAndValue) {
  EXPECT_EQ(ParseError(std::string("name: a\nresources: {nodes: {min: two}}\n")),
            "spec.resources.nodes.min: expected an integer, got string \"two\"");
  EXPECT_EQ(ParseError(ValidWith("/resources/nodes/min", 2.5)),
            "spec.resources.nodes.min: expected an integer, got number 2.5");
  EXPECT_EQ(ParseError(ValidWith("/resources/nodes/min", "2")),
            "spec.resources.nodes.min: expected an integer, got string \"2\"");
  EXPECT_EQ(ParseError(ValidWith("/resources/nodes/min", 3000000000LL)),
            "spec.resources.nodes.min: 3000000000 does not fit in a 32-bit integer");
  EXPECT_EQ(ParseError(ValidWith("/training/lr", "fast")), "spec.training.lr: expected a number, got string \"fast\"");
  EXPECT_EQ(ParseError(ValidWith("/data/packing", "yes")), "spec.data.packing: expected true or false, got string \"yes\"");
  EXPECT_EQ(ParseError(ValidWith("/resources/nodes", 2)),
            "spec.resources.nodes: expected a mapping with fields min, max, got integer 2");
  EXPECT_CONTAINS(ParseError(ValidWith("/command", "python train.py")), "spec.command: expected a list of strings (e.g. [python, train.py]), got string");
  EXPECT_CONTAINS(ParseError(ValidWith("/command", {"python", 3})), "spec.command[1]: expected a string, got integer 3 (write it in quotes");
  EXPECT_CONTAINS(ParseError(ValidWith("/env", json::array())), "spec.env: expected a mapping");
  EXPECT_EQ(ParseError(ValidWith("/model", true)),
            "spec.model: expected a string, got boolean true (write it in quotes to pass it as text: \"true\")");
  EXPECT_CONTAINS(ParseError(ValidWith("/training/lr", std::numeric_limits<double>::infinity())), "spec.training.lr: expected a finite number, got number .inf");
  EXPECT_CONTAINS(ParseError(std::string("name: a\ntraining: {lr: .nan}\n")), "spec.training.lr: expected a finite number, got number .nan");
}

TEST(JobSpecTest, EnvValuesMustBeQuotedStrings) {
  EXPECT_EQ(ParseError(std::string("name: a\nenv: {DEBUG: 1}\n")),
            "spec.env.DEBUG: expected a string, got integer 1 (write it in quotes to pass it as text: \"1\")");
  EXPECT_CONTAINS(ParseError(std::string("name: a\nenv: {FLAG: true}\n")), "spec.env.FLAG");
  EXPECT_CONTAINS(ParseError(std::string("name: a\nenv: {X: ~}\n")), "spec.env.X: expected a string, got null");
  v1::JobSpec spec = MustParse("name: a\nenv: {DEBUG: '1', FLAG: \"true\"}\n");
  EXPECT_EQ(spec.env().at("DEBUG"), "1");
  EXPECT_EQ(spec.env().at("FLAG"), "true");
}

TEST(JobSpecTest, TextMustBeUtf8) {
  EXPECT_EQ(ParseError(ValidWith("/model", "/models/caf\xe9")), "spec.model: not valid UTF-8 text; save the file as UTF-8");
  EXPECT_CONTAINS(ParseError(ValidWith("/env", {{"A\xff", "x"}})), "spec.env: a key is not valid UTF-8");
  EXPECT_EQ(MustParse("name: a\nmodel: /models/caf\u00e9\n").model(), "/models/caf\u00e9");
}

TEST(JobSpecTest, DocumentMustBeAMapping) {
  EXPECT_CONTAINS(ParseError(json::array({1, 2})), "spec: expected a mapping with fields name, model");
  EXPECT_CONTAINS(ParseError(json("qwen-sft")), "spec: expected a mapping");
  auto empty = ParseJobSpec("");
  ASSERT_FALSE(empty.ok());
  EXPECT_CONTAINS(empty.status().message(), "spec: the document is empty");
}

TEST(JobSpecTest, SameFieldTwiceIsAnError) {
  json doc = ValidWith("/data/max_seq_len", 100);
  doc["data"]["maxSeqLen"] = 200;
  EXPECT_CONTAINS(ParseError(doc), "given twice");
}

TEST(JobSpecTest, NullLeavesAFieldUnset) {
  v1::JobSpec spec = MustParse("name: a\nmodel:\nfault_tolerance: {max_restarts: null}\n");
  EXPECT_EQ(spec.model(), "");
  EXPECT_FALSE(spec.fault_tolerance().has_max_restarts());
}

TEST(JobSpecTest, IntegersInOtherSpellings) {
  v1::JobSpec spec = MustParse("name: a\ntraining: {epochs: 1e1, seed: '9007199254740993'}\n");
  EXPECT_EQ(spec.training().epochs(), 10);
  EXPECT_EQ(spec.training().seed(), 9007199254740993LL);  // proto JSON's string form, exact
  spec = MustParse("name: a\ntraining: {seed: 9007199254740993}\n");
  EXPECT_EQ(spec.training().seed(), 9007199254740993LL);
  EXPECT_CONTAINS(ParseError(ValidWith("/training/seed", "12ab")), "expected an integer");
  EXPECT_CONTAINS(ParseError(ValidWith("/training/seed", "1-2")), "expected an integer");
}

TEST(JobSpecTest, YamlSyntaxErrorKeepsLineAndColumn) {
  auto spec = ParseJobSpec("name: a\nmodel: /m\ndata: {train: x\nresources: {}\n");
  ASSERT_FALSE(spec.ok());
  EXPECT_EQ(spec.status().code(), StatusCode::kInvalidArgument);
  EXPECT_CONTAINS(spec.status().message(), "line ");
  EXPECT_CONTAINS(spec.status().message(), "column ");

  spec = ParseJobSpec("name: a\nmodel: /m\nname: b\n");
  ASSERT_FALSE(spec.ok());
  EXPECT_CONTAINS(spec.status().message(), "line 3");
  EXPECT_CONTAINS(spec.status().message(), "duplicate key");
}

TEST(JobSpecTest, JsonTextIsAccepted) {
  v1::JobSpec spec = MustNormalize(R"({"name": "j", "command": ["sleep", "1"], "resources": {"gpus_per_node": 2}})");
  EXPECT_EQ(spec.resources().gpus_per_node(), 2);
}

TEST(JobSpecTest, CamelCaseNamesAreAccepted) {
  v1::JobSpec spec = MustNormalize(R"({
    "name": "camel", "command": ["x"],
    "data": {"maxSeqLen": 1024, "lossOn": "all", "chatTemplate": "/t.jinja"},
    "resources": {"gpusPerNode": 4},
    "training": {"globalBatchSize": 64, "microBatchSize": 4, "maxGradNorm": 0.5, "weightDecay": 0.01,
                 "activationCheckpointing": "none", "schedule": {"warmupRatio": 0.05, "minLr": 1e-6}},
    "checkpoint": {"everySteps": 50, "fullEverySteps": 500, "keepLast": 2},
    "faultTolerance": {"maxRestarts": 0, "stopGraceSeconds": 10}
  })");
  EXPECT_EQ(spec.data().max_seq_len(), 1024);
  EXPECT_EQ(spec.data().loss_on(), "all");
  EXPECT_EQ(spec.data().chat_template(), "/t.jinja");
  EXPECT_EQ(spec.resources().gpus_per_node(), 4);
  EXPECT_EQ(spec.training().global_batch_size(), 64);
  EXPECT_EQ(spec.training().micro_batch_size(), 4);
  EXPECT_DOUBLE_EQ(spec.training().max_grad_norm(), 0.5);
  EXPECT_DOUBLE_EQ(spec.training().weight_decay(), 0.01);
  EXPECT_EQ(spec.training().activation_checkpointing(), "none");
  EXPECT_DOUBLE_EQ(spec.training().schedule().warmup_ratio(), 0.05);
  EXPECT_DOUBLE_EQ(spec.training().schedule().min_lr(), 1e-6);
  EXPECT_EQ(spec.checkpoint().every_steps(), 50);
  EXPECT_EQ(spec.checkpoint().full_every_steps(), 500);
  EXPECT_EQ(spec.checkpoint().keep_last(), 2);
  EXPECT_EQ(spec.fault_tolerance().max_restarts(), 0);
  EXPECT_DOUBLE_EQ(spec.fault_tolerance().stop_grace_seconds(), 10);
}

TEST(JobSpecTest, JsonRoundTrip) {
  v1::JobSpec spec = MustNormalize(kArchitectureExample);
  (*spec.mutable_env())["NCCL_DEBUG"] = "INFO";
  (*spec.mutable_env())["PATHS"] = "a: b";
  spec.add_command("python");
  spec.add_command("train.py");
  spec.mutable_training()->set_seed(9007199254740993LL);

  json j = JobSpecToJson(spec);
  // snake_case names, every value shown, 64-bit integers as numbers (YAML output reads better).
  EXPECT_EQ(j["training"]["global_batch_size"], 128);
  EXPECT_EQ(j["training"]["schedule"]["warmup_ratio"], 0.1);
  EXPECT_EQ(j["training"]["schedule"]["min_lr"], 0.0);
  EXPECT_TRUE(j["training"]["seed"].is_number_integer());
  EXPECT_EQ(j["checkpoint"]["full_every_steps"], 1000);
  EXPECT_EQ(j["env"]["PATHS"], "a: b");

  auto back = JobSpecFromJson(j);
  ASSERT_TRUE(back.ok()) << back.status() << "\n" << j.dump(2);
  EXPECT_TRUE(Equal(*back, spec)) << back->DebugString() << "\nvs\n" << spec.DebugString();

  // Through YAML text too, as `eftctl get -o yaml > file; eftctl submit file` does.
  auto from_yaml = ParseJobSpec(JsonToYaml(j));
  ASSERT_TRUE(from_yaml.ok()) << from_yaml.status() << "\n" << JsonToYaml(j);
  EXPECT_TRUE(Equal(*from_yaml, spec));
}

// grow: false and a zero cooldown are explicit choices, not "unset": normalizing keeps them.
TEST(JobSpecTest, ResizeSettingsKeepExplicitFalseAndZero) {
  v1::JobSpec spec = MustNormalize("name: a\ncommand: [x]\nresources: {grow: false, resize_cooldown_seconds: 0}\n");
  EXPECT_TRUE(spec.resources().has_grow());
  EXPECT_FALSE(spec.resources().grow());
  EXPECT_TRUE(spec.resources().has_resize_cooldown_seconds());
  EXPECT_EQ(spec.resources().resize_cooldown_seconds(), 0);
  EXPECT_EQ(JobSpecToJson(spec)["resources"]["grow"], false);
}

TEST(JobSpecTest, PriorityDefaultsToZeroAndKeepsNegatives) {
  EXPECT_EQ(MustNormalize("name: a\ncommand: [x]\n").priority(), 0);
  v1::JobSpec spec = MustNormalize("name: a\ncommand: [x]\npriority: -3\n");
  EXPECT_EQ(spec.priority(), -3);
  EXPECT_EQ(JobSpecToJson(spec)["priority"], -3);
}

TEST(JobSpecTest, ToJsonOmitsUnsetOptionalFields) {
  v1::JobSpec spec = MustParse("name: a\nfault_tolerance: {stop_grace_seconds: 5}\n");
  json j = JobSpecToJson(spec);
  EXPECT_EQ(j["name"], "a");
  EXPECT_EQ(j["model"], "");
  ASSERT_TRUE(j.contains("fault_tolerance"));
  EXPECT_FALSE(j["fault_tolerance"].contains("max_restarts"));
  EXPECT_EQ(j["fault_tolerance"]["stop_grace_seconds"], 5.0);
  auto back = JobSpecFromJson(j);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_FALSE(back->fault_tolerance().has_max_restarts());
  EXPECT_TRUE(Equal(*back, spec));
}

}  // namespace
}  // namespace eft::spec

namespace eft::spec {
namespace {

// Evaluation fields (issue 19): a fraction in [0, 1), a step count >= 0, and one eval source.
TEST(JobSpecTest, EvalFieldsAreValidated) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"data: {eval_fraction: 1}", "spec.data.eval_fraction (1.0) must be >= 0 and < 1"},
      {"data: {eval_fraction: -0.1}", "spec.data.eval_fraction (-0.1) must be >= 0 and < 1"},
      {"data: {eval: /e.jsonl, eval_fraction: 0.1}", "spec.data.eval and spec.data.eval_fraction are both set"},
      {"training: {eval_every_steps: -1}", "spec.training.eval_every_steps (-1) must be >= 0"},
  };
  for (const auto& [yaml, message] : cases) {
    auto spec = ParseJobSpec("name: a\ncommand: [x]\n" + yaml + "\n");
    ASSERT_TRUE(spec.ok()) << spec.status();
    Status s = NormalizeJobSpec(&*spec);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << yaml;
    EXPECT_EQ(s.message().rfind(message, 0), 0u) << yaml << ": " << s.message();
  }
  auto ok = ParseJobSpec("name: a\ncommand: [x]\ndata: {eval_fraction: 0.02}\ntraining: {eval_every_steps: 50}\n"
                         "checkpoint: {keep_best: true}\n");
  ASSERT_TRUE(ok.ok()) << ok.status();
  ASSERT_TRUE(NormalizeJobSpec(&*ok).ok());
  EXPECT_DOUBLE_EQ(ok->data().eval_fraction(), 0.02);
  EXPECT_EQ(ok->training().eval_every_steps(), 50);
  EXPECT_TRUE(ok->checkpoint().keep_best());
}

}  // namespace
}  // namespace eft::spec

namespace eft::spec {
namespace {

// checkpoint.full_write (docs/checkpoints.md, "Write path"): parallel unless rank0 is asked for.
TEST(JobSpecTest, FullWriteDefaultsToParallel) {
  auto by_default = ParseJobSpec("name: a\ncommand: [x]\n");
  ASSERT_TRUE(by_default.ok() && NormalizeJobSpec(&*by_default).ok());
  EXPECT_EQ(by_default->checkpoint().full_write(), "parallel");
  auto rank0 = ParseJobSpec("name: a\ncommand: [x]\ncheckpoint: {full_write: rank0}\n");
  ASSERT_TRUE(rank0.ok() && NormalizeJobSpec(&*rank0).ok());
  EXPECT_EQ(rank0->checkpoint().full_write(), "rank0");
}

// checkpoint.merge_lora (docs/lora.md): off by default, and only with training.lora.
TEST(JobSpecTest, MergeLoraNeedsLora) {
  auto plain = ParseJobSpec("name: a\ncommand: [x]\ncheckpoint: {merge_lora: true}\n");
  ASSERT_TRUE(plain.ok()) << plain.status();
  Status s = NormalizeJobSpec(&*plain);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message().rfind("spec.checkpoint.merge_lora needs spec.training.lora", 0), 0u) << s.message();
  auto lora = ParseJobSpec("name: a\ncommand: [x]\ntraining: {lora: {r: 8}}\ncheckpoint: {merge_lora: true}\n");
  ASSERT_TRUE(lora.ok()) << lora.status();
  ASSERT_TRUE(NormalizeJobSpec(&*lora).ok());
  EXPECT_TRUE(lora->checkpoint().merge_lora());
  auto by_default = ParseJobSpec("name: a\ncommand: [x]\ntraining: {lora: {r: 8}}\n");
  ASSERT_TRUE(by_default.ok() && NormalizeJobSpec(&*by_default).ok());
  EXPECT_FALSE(by_default->checkpoint().merge_lora());
}

}  // namespace
}  // namespace eft::spec
