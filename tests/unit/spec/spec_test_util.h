// Helpers shared by the job spec tests (job_spec_test.cc: validation and defaults;
// spec_json_test.cc: reading and printing the text).
#pragma once

#include <string>

#include <google/protobuf/util/message_differencer.h>
#include <gtest/gtest.h>

#include "common/yaml_json.h"
#include "spec/job_spec.h"

namespace eft::spec::spec_test {

using nlohmann::json;

// A complete job spec as a user writes one (docs/api.md), every section used.
inline constexpr const char* kArchitectureExample = R"(
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

inline bool Equal(const v1::JobSpec& a, const v1::JobSpec& b) {
  return google::protobuf::util::MessageDifferencer::Equals(a, b);
}

inline v1::JobSpec MustParse(const std::string& text) {
  auto spec = ParseJobSpec(text);
  EXPECT_TRUE(spec.ok()) << spec.status();
  return spec.ok() ? *spec : v1::JobSpec();
}

inline v1::JobSpec MustNormalize(const std::string& text) {
  v1::JobSpec spec = MustParse(text);
  Status s = NormalizeJobSpec(&spec);
  EXPECT_TRUE(s.ok()) << s;
  return spec;
}

// The message of a spec that must fail to parse.
inline std::string ParseError(const json& doc) {
  auto spec = JobSpecFromJson(doc);
  EXPECT_FALSE(spec.ok()) << "parsed: " << doc.dump();
  if (spec.ok()) return "";
  EXPECT_EQ(spec.status().code(), StatusCode::kInvalidArgument);
  return spec.status().message();
}

inline std::string ParseError(const std::string& yaml) {
  auto doc = YamlToJson(yaml);
  EXPECT_TRUE(doc.ok()) << doc.status();
  return doc.ok() ? ParseError(*doc) : "";
}

// A valid eft-train spec with one value replaced (a JSON pointer: "/training/lr").
inline json ValidWith(const std::string& pointer, json value) {
  json doc = {{"name", "job"}, {"model", "/m"}, {"data", {{"train", "/d.jsonl"}}}};
  doc[json::json_pointer(pointer)] = std::move(value);
  return doc;
}

// The message of a spec that parses but must fail validation.
inline std::string NormalizeError(const json& doc) {
  auto spec = JobSpecFromJson(doc);
  EXPECT_TRUE(spec.ok()) << spec.status();
  if (!spec.ok()) return "";
  Status s = NormalizeJobSpec(&*spec);
  EXPECT_FALSE(s.ok()) << "accepted: " << doc.dump();
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  return s.message();
}


}  // namespace eft::spec::spec_test
