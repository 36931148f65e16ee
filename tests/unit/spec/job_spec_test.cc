#include "spec/job_spec.h"

#include <cmath>
#include <limits>
#include <string>

#include <google/protobuf/util/message_differencer.h>
#include <gtest/gtest.h>

#include "common/yaml_json.h"
#include "tests/unit/spec/spec_test_util.h"

namespace eft::spec {
namespace {

using namespace eft::spec::spec_test;  // NOLINT: the shared helpers

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
      {"/checkpoint/memory_every_steps", "often",
       "spec.checkpoint.memory_every_steps (\"often\") must be auto or a whole number of steps"},
      {"/checkpoint/memory_every_steps", -1, "spec.checkpoint.memory_every_steps (\"-1\") must be auto"},
      {"/checkpoint/memory_every_steps", 1000000000, "spec.checkpoint.memory_every_steps (\"1000000000\")"},
      {"/checkpoint/memory_replicas", 4, "spec.checkpoint.memory_replicas (4) must be <= 3"},
      {"/checkpoint/memory_replicas", -1, "spec.checkpoint.memory_replicas (-1) must be >= 0"},
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


// Evaluation fields (issue 19): a fraction in [0, 1), a step count >= 0, and one eval source.
TEST(JobSpecTest, EvalFieldsAreValidated) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"data: {eval_fraction: 1}", "spec.data.eval_fraction (1.0) must be >= 0 and < 1"},
      {"data: {eval_fraction: -0.1}", "spec.data.eval_fraction (-0.1) must be >= 0 and < 1"},
      {"data: {eval: /e.jsonl, eval_fraction: 0.1}", "spec.data.eval and spec.data.eval_fraction are both set"},
      {"training: {eval_every_steps: -1}", "spec.training.eval_every_steps (-1) must be >= 0"},
      {"data: {eval: [{name: a, path: /a}, {name: a, path: /b}]}", "spec.data.eval[1].name: \"a\" is used twice"},
      {"data: {eval: [{name: 'a b', path: /a}]}", "spec.data.eval[0].name (\"a b\") must be 1-64 of"},
      {"data: {eval: [{path: /a}]}", "spec.data.eval[0].name (\"\") must be 1-64 of"},
      {"data: {eval: {known: ''}}", "spec.data.eval[0].path is empty"},
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

// data.eval's forms (docs/data.md, "Evaluation"): one path (a set named "eval"), a map {NAME: PATH}
// (TRL's eval_dataset dict; sets in name order), one {name, path}, or a list of them (in its order).
TEST(JobSpecTest, EvalSetsCanBeWrittenInFourForms) {
  auto sets = [](const std::string& yaml) {
    std::vector<std::pair<std::string, std::string>> out;
    auto spec = ParseJobSpec("name: a\ncommand: [x]\ndata: {eval: " + yaml + "}\n");
    EXPECT_TRUE(spec.ok()) << yaml << ": " << spec.status();
    if (!spec.ok()) return out;
    EXPECT_TRUE(NormalizeJobSpec(&*spec).ok()) << yaml;
    for (const auto& s : spec->data().eval()) out.emplace_back(s.name(), s.path());
    return out;
  };
  using Sets = std::vector<std::pair<std::string, std::string>>;
  EXPECT_EQ(sets("/e.jsonl"), (Sets{{"eval", "/e.jsonl"}}));
  EXPECT_EQ(sets("{new: /n.jsonl, known: /k.jsonl}"), (Sets{{"known", "/k.jsonl"}, {"new", "/n.jsonl"}}));
  EXPECT_EQ(sets("{name: held-out, path: /h.jsonl}"), (Sets{{"held-out", "/h.jsonl"}}));
  EXPECT_EQ(sets("[{name: new, path: /n.jsonl}, {name: known, path: /k.jsonl}]"),
            (Sets{{"new", "/n.jsonl"}, {"known", "/k.jsonl"}}));
  // The printer writes the list, which reads back as the same sets.
  auto spec = ParseJobSpec("name: a\ncommand: [x]\ndata: {eval: {new: /n.jsonl, known: /k.jsonl}}\n");
  ASSERT_TRUE(spec.ok());
  auto again = JobSpecFromJson(JobSpecToJson(*spec));
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->data().eval_size(), 2);
  EXPECT_EQ(again->data().eval(1).name(), "new");
  auto bad = ParseJobSpec("name: a\ncommand: [x]\ndata: {eval: 3}\n");
  ASSERT_FALSE(bad.ok());
  EXPECT_CONTAINS(bad.status().message(), "spec.data.eval: expected a path, a map {NAME: PATH} or a list of {name, path}");
}


// checkpoint.full_write (docs/checkpoints.md, "Write path"): parallel unless rank0 is asked for.
TEST(JobSpecTest, FullWriteDefaultsToParallel) {
  auto by_default = ParseJobSpec("name: a\ncommand: [x]\n");
  ASSERT_TRUE(by_default.ok() && NormalizeJobSpec(&*by_default).ok());
  EXPECT_EQ(by_default->checkpoint().full_write(), "parallel");
  auto rank0 = ParseJobSpec("name: a\ncommand: [x]\ncheckpoint: {full_write: rank0}\n");
  ASSERT_TRUE(rank0.ok() && NormalizeJobSpec(&*rank0).ok());
  EXPECT_EQ(rank0->checkpoint().full_write(), "rank0");
}

// checkpoint.memory_every_steps (docs/checkpoints.md, "Memory snapshots"): auto by default; a number
// of steps with or without quotes (YAML and REST clients write both); 0 is off.
TEST(JobSpecTest, MemorySnapshotsAreAutoByDefaultAndTakeANumberOfSteps) {
  auto by_default = ParseJobSpec("name: a\ncommand: [x]\n");
  ASSERT_TRUE(by_default.ok() && NormalizeJobSpec(&*by_default).ok());
  EXPECT_EQ(by_default->checkpoint().memory_every_steps(), "auto");
  EXPECT_EQ(MemorySnapshotInterval("auto"), -1);
  for (const char* given : {"5", "\"5\""}) {
    auto five = ParseJobSpec(std::string("name: a\ncommand: [x]\ncheckpoint: {memory_every_steps: ") + given + "}\n");
    ASSERT_TRUE(five.ok()) << five.status();
    ASSERT_TRUE(NormalizeJobSpec(&*five).ok());
    EXPECT_EQ(five->checkpoint().memory_every_steps(), "5");
    EXPECT_EQ(MemorySnapshotInterval(five->checkpoint().memory_every_steps()), 5);
    EXPECT_EQ(JobSpecToJson(*five)["checkpoint"]["memory_every_steps"], "5");
  }
  auto off = JobSpecFromJson(json{{"name", "a"}, {"command", {"x"}}, {"checkpoint", {{"memory_every_steps", 0}}}});
  ASSERT_TRUE(off.ok()) << off.status();
  ASSERT_TRUE(NormalizeJobSpec(&*off).ok());
  EXPECT_EQ(MemorySnapshotInterval(off->checkpoint().memory_every_steps()), 0);
  EXPECT_EQ(MemorySnapshotInterval("999999999"), 999999999);
  for (const char* bad : {"", "-1", "1.5", "1e3", "1000000000", " 5", "Auto"}) {
    EXPECT_FALSE(MemorySnapshotInterval(bad).has_value()) << bad;
  }
  auto listed = ParseJobSpec("name: a\ncommand: [x]\ncheckpoint: {memory_every_steps: [1]}\n");
  EXPECT_FALSE(listed.ok());
}

// checkpoint.export_gguf (docs/models.md): off by default; one of llama.cpp's types eft writes; a
// LoRA run exports its merged model, so it needs merge_lora.
TEST(JobSpecTest, ExportGgufTakesATypeAndALoraRunNeedsItsMergedModel) {
  auto normalized = [](const std::string& extra) {
    auto spec = ParseJobSpec("name: a\ncommand: [x]\n" + extra);
    EXPECT_TRUE(spec.ok()) << spec.status();
    if (!spec.ok()) return std::make_pair(spec.status(), v1::JobSpec());
    Status s = NormalizeJobSpec(&*spec);
    return std::make_pair(s, *spec);
  };
  auto [plain_status, plain] = normalized("");
  ASSERT_TRUE(plain_status.ok()) << plain_status;
  EXPECT_EQ(plain.checkpoint().export_gguf(), "");
  for (const char* type : {"f32", "f16", "bf16", "q8_0"}) {
    auto [s, spec] = normalized(std::string("checkpoint: {export_gguf: ") + type + "}\n");
    ASSERT_TRUE(s.ok()) << type << ": " << s;
    EXPECT_EQ(spec.checkpoint().export_gguf(), type);
  }
  auto [bad, unused] = normalized("checkpoint: {export_gguf: q4_0}\n");
  EXPECT_EQ(bad.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(bad.message(), "spec.checkpoint.export_gguf (\"q4_0\") must be one of f32, f16, bf16, q8_0") << bad;
  auto [unmerged, unused2] = normalized("training: {lora: {r: 8}}\ncheckpoint: {export_gguf: f16}\n");
  EXPECT_EQ(unmerged.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(unmerged.message().rfind("spec.checkpoint.export_gguf of a LoRA run needs spec.checkpoint.merge_lora", 0), 0u)
      << unmerged;
  auto [merged, unused3] = normalized("training: {lora: {r: 8}}\ncheckpoint: {export_gguf: f16, merge_lora: true}\n");
  EXPECT_TRUE(merged.ok()) << merged;
}

// tracking (docs/tracking.md): unset stays empty (the defaults depend on the controller and the
// checkpoint directory); a TensorBoard directory is absolute, an MLflow server an http(s) URL.
TEST(JobSpecTest, TrackingTakesAnAbsoluteDirectoryAndAnHttpUrlOrOff) {
  auto normalize = [](const std::string& extra) {
    auto spec = ParseJobSpec("name: a\ncommand: [x]\n" + extra);
    EXPECT_TRUE(spec.ok()) << spec.status();
    if (!spec.ok()) return std::make_pair(spec.status(), v1::JobSpec());
    Status s = NormalizeJobSpec(&*spec);
    return std::make_pair(s, *spec);
  };
  auto [plain_status, plain] = normalize("");
  ASSERT_TRUE(plain_status.ok()) << plain_status;
  EXPECT_EQ(plain.tracking().tensorboard(), "");
  EXPECT_EQ(plain.tracking().mlflow_tracking_uri(), "");
  for (const char* ok : {"tracking: {tensorboard: off}\n", "tracking: {tensorboard: /runs/tb}\n",
                         "tracking: {mlflow_tracking_uri: 'http://mlflow:5000', mlflow_experiment: sft}\n",
                         "tracking: {mlflow_tracking_uri: 'https://mlflow.example.com/'}\n",
                         "tracking: {mlflow_tracking_uri: 'off'}\n"}) {
    auto [s, spec] = normalize(ok);
    EXPECT_TRUE(s.ok()) << ok << s;
  }
  auto [relative, unused] = normalize("tracking: {tensorboard: runs/tb}\n");
  EXPECT_EQ(relative.message(), "spec.tracking.tensorboard (\"runs/tb\") must be an absolute directory on the nodes, "
                                "or \"off\"");
  auto [scheme, unused2] = normalize("tracking: {mlflow_tracking_uri: 'mlflow:5000'}\n");
  EXPECT_EQ(scheme.message().rfind("spec.tracking.mlflow_tracking_uri (\"mlflow:5000\") must be an http:// or https://", 0), 0u)
      << scheme;
  auto [long_name, unused3] = normalize("tracking: {mlflow_experiment: " + std::string(501, 'x') + "}\n");
  EXPECT_EQ(long_name.code(), StatusCode::kInvalidArgument);
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
