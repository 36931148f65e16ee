// Job spec text (spec/spec_json.cc): what YAML and JSON are accepted, how errors in the text read, and
// printing a spec back.
#include <cmath>
#include <limits>
#include <string>

#include <gtest/gtest.h>

#include "tests/unit/spec/spec_test_util.h"

namespace eft::spec {
namespace {

using namespace eft::spec::spec_test;  // NOLINT: the shared helpers

TEST(JobSpecTextTest, WrongTypesNameFieldAndValue) {
  EXPECT_EQ(ParseError(std::string("name: a\nresources: {nodes: {min: two}}\n")),
            "spec.resources.nodes.min: expected an integer, got string \"two\"");
  EXPECT_EQ(ParseError(ValidWith("/resources/nodes/min", 2.5)),
            "spec.resources.nodes.min: expected an integer, got number 2.5");
  EXPECT_EQ(ParseError(ValidWith("/resources/nodes/min", "2")),
            "spec.resources.nodes.min: expected an integer, got string \"2\"");
  EXPECT_EQ(ParseError(ValidWith("/resources/nodes/min", 3000000000LL)),
            "spec.resources.nodes.min: 3000000000 does not fit in a 32-bit integer");
  // A literal beyond 64 bits is read as a double; one that rounds to -2^63 must not pass as it.
  EXPECT_EQ(ParseError(std::string("name: a\ntraining: {seed: -9223372036854775809}\n")),
            "spec.training.seed: -9.223372036854776e+18 does not fit in a 64-bit integer");
  EXPECT_EQ(ParseError(ValidWith("/training/seed", "-9223372036854775809")),
            "spec.training.seed: -9223372036854775809 does not fit in a 64-bit integer");
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

TEST(JobSpecTextTest, EnvValuesMustBeQuotedStrings) {
  EXPECT_EQ(ParseError(std::string("name: a\nenv: {DEBUG: 1}\n")),
            "spec.env.DEBUG: expected a string, got integer 1 (write it in quotes to pass it as text: \"1\")");
  EXPECT_CONTAINS(ParseError(std::string("name: a\nenv: {FLAG: true}\n")), "spec.env.FLAG");
  EXPECT_CONTAINS(ParseError(std::string("name: a\nenv: {X: ~}\n")), "spec.env.X: expected a string, got null");
  v1::JobSpec spec = MustParse("name: a\nenv: {DEBUG: '1', FLAG: \"true\"}\n");
  EXPECT_EQ(spec.env().at("DEBUG"), "1");
  EXPECT_EQ(spec.env().at("FLAG"), "true");
}

TEST(JobSpecTextTest, TextMustBeUtf8) {
  EXPECT_EQ(ParseError(ValidWith("/model", "/models/caf\xe9")), "spec.model: not valid UTF-8 text; save the file as UTF-8");
  EXPECT_CONTAINS(ParseError(ValidWith("/env", {{"A\xff", "x"}})), "spec.env: a key is not valid UTF-8");
  EXPECT_EQ(MustParse("name: a\nmodel: /models/caf\u00e9\n").model(), "/models/caf\u00e9");
  // PEFT's one-string form of target_modules too (fuzz/regressions/job_spec: it threw from nlohmann).
  EXPECT_EQ(ParseError(std::string("name: a\ntraining: {lora: {r: 8, target_modules: \"q\xff\"}}\n")),
            "spec.training.lora.target_modules: not valid UTF-8 text; save the file as UTF-8");
  // A JSON spec with a trailing comma (yaml-cpp never returned: fuzz/regressions/job_spec).
  auto trailing_comma = ParseJobSpec("{\"name\": \"a\"},\n");
  ASSERT_FALSE(trailing_comma.ok());
  EXPECT_EQ(trailing_comma.status().message(), "YAML line 1 column 14: unexpected ',' after the document");
}

TEST(JobSpecTextTest, DocumentMustBeAMapping) {
  EXPECT_CONTAINS(ParseError(json::array({1, 2})), "spec: expected a mapping with fields name, model");
  EXPECT_CONTAINS(ParseError(json("qwen-sft")), "spec: expected a mapping");
  auto empty = ParseJobSpec("");
  ASSERT_FALSE(empty.ok());
  EXPECT_CONTAINS(empty.status().message(), "spec: the document is empty");
}

TEST(JobSpecTextTest, SameFieldTwiceIsAnError) {
  json doc = ValidWith("/data/max_seq_len", 100);
  doc["data"]["maxSeqLen"] = 200;
  EXPECT_CONTAINS(ParseError(doc), "given twice");
}

TEST(JobSpecTextTest, NullLeavesAFieldUnset) {
  v1::JobSpec spec = MustParse("name: a\nmodel:\nfault_tolerance: {max_restarts: null}\n");
  EXPECT_EQ(spec.model(), "");
  EXPECT_FALSE(spec.fault_tolerance().has_max_restarts());
}

TEST(JobSpecTextTest, IntegersInOtherSpellings) {
  v1::JobSpec spec = MustParse("name: a\ntraining: {epochs: 1e1, seed: '9007199254740993'}\n");
  EXPECT_EQ(spec.training().epochs(), 10);
  EXPECT_EQ(spec.training().seed(), 9007199254740993LL);  // proto JSON's string form, exact
  spec = MustParse("name: a\ntraining: {seed: 9007199254740993}\n");
  EXPECT_EQ(spec.training().seed(), 9007199254740993LL);
  EXPECT_CONTAINS(ParseError(ValidWith("/training/seed", "12ab")), "expected an integer");
  EXPECT_CONTAINS(ParseError(ValidWith("/training/seed", "1-2")), "expected an integer");
}

TEST(JobSpecTextTest, YamlSyntaxErrorKeepsLineAndColumn) {
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

TEST(JobSpecTextTest, JsonTextIsAccepted) {
  v1::JobSpec spec = MustNormalize(R"({"name": "j", "command": ["sleep", "1"], "resources": {"gpus_per_node": 2}})");
  EXPECT_EQ(spec.resources().gpus_per_node(), 2);
}

TEST(JobSpecTextTest, CamelCaseNamesAreAccepted) {
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

TEST(JobSpecTextTest, JsonRoundTrip) {
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
TEST(JobSpecTextTest, ResizeSettingsKeepExplicitFalseAndZero) {
  v1::JobSpec spec = MustNormalize("name: a\ncommand: [x]\nresources: {grow: false, resize_cooldown_seconds: 0}\n");
  EXPECT_TRUE(spec.resources().has_grow());
  EXPECT_FALSE(spec.resources().grow());
  EXPECT_TRUE(spec.resources().has_resize_cooldown_seconds());
  EXPECT_EQ(spec.resources().resize_cooldown_seconds(), 0);
  EXPECT_EQ(JobSpecToJson(spec)["resources"]["grow"], false);
}

TEST(JobSpecTextTest, PriorityDefaultsToZeroAndKeepsNegatives) {
  EXPECT_EQ(MustNormalize("name: a\ncommand: [x]\n").priority(), 0);
  v1::JobSpec spec = MustNormalize("name: a\ncommand: [x]\npriority: -3\n");
  EXPECT_EQ(spec.priority(), -3);
  EXPECT_EQ(JobSpecToJson(spec)["priority"], -3);
}

TEST(JobSpecTextTest, ToJsonOmitsUnsetOptionalFields) {
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
