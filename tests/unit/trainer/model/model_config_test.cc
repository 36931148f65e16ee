#include "trainer/model/model_config.h"

#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

namespace eft::trainer {
namespace {

using json = nlohmann::json;

// config.json files as the Hub ships them (fields trimmed of nothing that matters here).
const char* kLlama32_1B = R"({
  "architectures": ["LlamaForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
  "bos_token_id": 128000, "eos_token_id": [128001, 128008, 128009], "head_dim": 64, "hidden_act": "silu",
  "hidden_size": 2048, "initializer_range": 0.02, "intermediate_size": 8192,
  "max_position_embeddings": 131072, "mlp_bias": false, "model_type": "llama",
  "num_attention_heads": 32, "num_hidden_layers": 16, "num_key_value_heads": 8, "pretraining_tp": 1,
  "rms_norm_eps": 1e-05,
  "rope_scaling": {"factor": 32.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                   "original_max_position_embeddings": 8192, "rope_type": "llama3"},
  "rope_theta": 500000.0, "tie_word_embeddings": true, "torch_dtype": "bfloat16",
  "transformers_version": "4.45.0.dev0", "use_cache": true, "vocab_size": 128256})";

const char* kQwen25_05B = R"({
  "architectures": ["Qwen2ForCausalLM"], "attention_dropout": 0.0, "bos_token_id": 151643,
  "eos_token_id": 151643, "hidden_act": "silu", "hidden_size": 896, "initializer_range": 0.02,
  "intermediate_size": 4864, "max_position_embeddings": 32768, "max_window_layers": 24,
  "model_type": "qwen2", "num_attention_heads": 14, "num_hidden_layers": 24, "num_key_value_heads": 2,
  "rms_norm_eps": 1e-06, "rope_theta": 1000000.0, "sliding_window": 32768, "tie_word_embeddings": true,
  "torch_dtype": "bfloat16", "transformers_version": "4.40.1", "use_cache": true, "use_mrope": false,
  "use_sliding_window": false, "vocab_size": 151936})";

const char* kQwen3_06B = R"({
  "architectures": ["Qwen3ForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
  "bos_token_id": 151643, "eos_token_id": 151645, "head_dim": 128, "hidden_act": "silu",
  "hidden_size": 1024, "initializer_range": 0.02, "intermediate_size": 3072,
  "max_position_embeddings": 40960, "max_window_layers": 28, "model_type": "qwen3",
  "num_attention_heads": 16, "num_hidden_layers": 28, "num_key_value_heads": 8, "rms_norm_eps": 1e-06,
  "rope_scaling": null, "rope_theta": 1000000, "sliding_window": null, "tie_word_embeddings": true,
  "torch_dtype": "bfloat16", "transformers_version": "4.51.0", "use_cache": true,
  "use_sliding_window": false, "vocab_size": 151936})";

const char* kMistral7B_v01 = R"({
  "architectures": ["MistralForCausalLM"], "bos_token_id": 1, "eos_token_id": 2, "hidden_act": "silu",
  "hidden_size": 4096, "initializer_range": 0.02, "intermediate_size": 14336,
  "max_position_embeddings": 32768, "model_type": "mistral", "num_attention_heads": 32,
  "num_hidden_layers": 32, "num_key_value_heads": 8, "rms_norm_eps": 1e-05, "rope_theta": 10000.0,
  "sliding_window": 4096, "tie_word_embeddings": false, "torch_dtype": "bfloat16",
  "transformers_version": "4.34.0.dev0", "use_cache": true, "vocab_size": 32000})";

const char* kMistral7B_v03 = R"({
  "architectures": ["MistralForCausalLM"], "attention_dropout": 0.0, "bos_token_id": 1,
  "eos_token_id": 2, "hidden_act": "silu", "hidden_size": 4096, "initializer_range": 0.02,
  "intermediate_size": 14336, "max_position_embeddings": 32768, "model_type": "mistral",
  "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8, "rms_norm_eps": 1e-05,
  "rope_theta": 1000000.0, "sliding_window": null, "tie_word_embeddings": false,
  "torch_dtype": "bfloat16", "transformers_version": "4.42.0.dev0", "use_cache": true, "vocab_size": 32768})";

ModelConfig Parse(const char* text) {
  auto r = ModelConfig::FromHfJson(json::parse(text));
  EXPECT_TRUE(r.ok()) << r.status();
  return r.ok() ? r.value() : ModelConfig{};
}

// The error for `base` with `patch` merged in; asserts it is an InvalidArgument naming `field`.
std::string ErrorFor(const char* base, const json& patch, const std::string& field) {
  json j = json::parse(base);
  j.merge_patch(patch);
  auto r = ModelConfig::FromHfJson(j);
  EXPECT_FALSE(r.ok()) << "accepted " << patch.dump();
  if (r.ok()) return "";
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("'" + field + "'"), std::string::npos)
      << "error does not name '" << field << "': " << r.status().message();
  return r.status().message();
}

void ExpectSame(const ModelConfig& a, const ModelConfig& b) {
  EXPECT_EQ(a.model_type, b.model_type);
  EXPECT_EQ(a.vocab_size, b.vocab_size);
  EXPECT_EQ(a.hidden_size, b.hidden_size);
  EXPECT_EQ(a.intermediate_size, b.intermediate_size);
  EXPECT_EQ(a.num_hidden_layers, b.num_hidden_layers);
  EXPECT_EQ(a.num_attention_heads, b.num_attention_heads);
  EXPECT_EQ(a.num_key_value_heads, b.num_key_value_heads);
  EXPECT_EQ(a.head_dim, b.head_dim);
  EXPECT_EQ(a.max_position_embeddings, b.max_position_embeddings);
  EXPECT_EQ(a.rms_norm_eps, b.rms_norm_eps);
  EXPECT_EQ(a.rope_theta, b.rope_theta);
  EXPECT_EQ(a.rope_scaling.type, b.rope_scaling.type);
  EXPECT_EQ(a.rope_scaling.factor, b.rope_scaling.factor);
  EXPECT_EQ(a.rope_scaling.low_freq_factor, b.rope_scaling.low_freq_factor);
  EXPECT_EQ(a.rope_scaling.high_freq_factor, b.rope_scaling.high_freq_factor);
  EXPECT_EQ(a.rope_scaling.original_max_position_embeddings, b.rope_scaling.original_max_position_embeddings);
  EXPECT_EQ(a.tie_word_embeddings, b.tie_word_embeddings);
  EXPECT_EQ(a.attention_bias, b.attention_bias);
  EXPECT_EQ(a.qk_norm, b.qk_norm);
  EXPECT_EQ(a.initializer_range, b.initializer_range);
  EXPECT_EQ(a.torch_dtype, b.torch_dtype);
  EXPECT_EQ(a.bos_token_id, b.bos_token_id);
  EXPECT_EQ(a.eos_token_id, b.eos_token_id);
  EXPECT_EQ(a.pad_token_id, b.pad_token_id);
}

TEST(ModelConfigTest, Llama32WithLlama3RopeScaling) {
  ModelConfig c = Parse(kLlama32_1B);
  EXPECT_EQ(c.model_type, "llama");
  EXPECT_EQ(c.head_dim, 64);
  EXPECT_EQ(c.num_key_value_heads, 8);
  EXPECT_EQ(c.rope_theta, 500000.0);
  EXPECT_EQ(c.rope_scaling.type, "llama3");
  EXPECT_EQ(c.rope_scaling.factor, 32.0);
  EXPECT_EQ(c.rope_scaling.original_max_position_embeddings, 8192);
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_FALSE(c.attention_bias);
  EXPECT_FALSE(c.qk_norm);
  EXPECT_EQ(c.eos_token_id, 128001);  // a list: the first one
  EXPECT_EQ(c.pad_token_id, -1);
  EXPECT_EQ(c.NumParameters(), 1235814400);  // the published count of Llama-3.2-1B
}

TEST(ModelConfigTest, Qwen25HasQkvBias) {
  ModelConfig c = Parse(kQwen25_05B);
  EXPECT_TRUE(c.attention_bias);
  EXPECT_FALSE(c.qk_norm);
  EXPECT_EQ(c.head_dim, 64);
  EXPECT_TRUE(c.rope_scaling.type.empty());
  EXPECT_EQ(c.NumParameters(), 494032768);  // Qwen2.5-0.5B
}

TEST(ModelConfigTest, Qwen3HeadDimDiffersFromHiddenOverHeads) {
  ModelConfig c = Parse(kQwen3_06B);
  EXPECT_EQ(c.head_dim, 128);
  EXPECT_NE(c.head_dim, c.hidden_size / c.num_attention_heads);
  EXPECT_TRUE(c.qk_norm);
  EXPECT_FALSE(c.attention_bias);
  EXPECT_EQ(c.eos_token_id, 151645);
  EXPECT_EQ(c.NumParameters(), 596049920);  // Qwen3-0.6B
}

TEST(ModelConfigTest, MistralSlidingWindowIsRefusedUnlessNull) {
  std::string msg = ErrorFor(kMistral7B_v01, json::object(), "sliding_window");
  EXPECT_NE(msg.find("sliding window attention is not supported"), std::string::npos) << msg;
  ModelConfig c = Parse(kMistral7B_v03);
  EXPECT_EQ(c.model_type, "mistral");
  EXPECT_FALSE(c.tie_word_embeddings);
  EXPECT_EQ(c.head_dim, 128);
  EXPECT_EQ(c.NumParameters(), 7248023552);  // Mistral-7B-v0.3
  // A window that covers every position is plain causal attention.
  json j = json::parse(kMistral7B_v01);
  j["sliding_window"] = 32768;
  EXPECT_TRUE(ModelConfig::FromHfJson(j).ok());
}

TEST(ModelConfigTest, DefaultsWhenFieldsAreAbsent) {
  json j = json::parse(kMistral7B_v03);
  for (const char* key : {"num_key_value_heads", "rope_theta", "tie_word_embeddings", "initializer_range",
                          "sliding_window", "hidden_act", "eos_token_id"})
    j.erase(key);
  auto r = ModelConfig::FromHfJson(j);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->num_key_value_heads, 32);
  EXPECT_EQ(r->rope_theta, 10000.0);
  EXPECT_FALSE(r->tie_word_embeddings);
  EXPECT_EQ(r->initializer_range, 0.02);
  EXPECT_EQ(r->eos_token_id, -1);
  // The older "type" key names the rope scaling too.
  json l = json::parse(kLlama32_1B);
  l["rope_scaling"].erase("rope_type");
  l["rope_scaling"]["type"] = "llama3";
  auto rl = ModelConfig::FromHfJson(l);
  ASSERT_TRUE(rl.ok()) << rl.status();
  EXPECT_EQ(rl->rope_scaling.type, "llama3");
}

TEST(ModelConfigTest, EveryRefusalNamesTheField) {
  std::string msg = ErrorFor(kLlama32_1B, {{"model_type", "gpt2"}}, "model_type");
  EXPECT_NE(msg.find("llama, qwen2, qwen3, mistral"), std::string::npos) << msg;
  for (const char* type : {"linear", "dynamic", "yarn"}) {
    msg = ErrorFor(kLlama32_1B, {{"rope_scaling", {{"rope_type", type}, {"factor", 2.0}}}}, "rope_scaling.rope_type");
    EXPECT_NE(msg.find(type), std::string::npos) << msg;
  }
  ErrorFor(kLlama32_1B, {{"rope_scaling", {{"factor", nullptr}}}}, "rope_scaling.factor");
  ErrorFor(kLlama32_1B, {{"hidden_act", "gelu"}}, "hidden_act");
  ErrorFor(kLlama32_1B, {{"attention_dropout", 0.1}}, "attention_dropout");
  ErrorFor(kLlama32_1B, {{"mlp_bias", true}}, "mlp_bias");
  ErrorFor(kLlama32_1B, {{"attention_bias", true}}, "attention_bias");
  ErrorFor(kQwen25_05B, {{"use_sliding_window", true}}, "use_sliding_window");
  ErrorFor(kQwen25_05B, {{"head_dim", 128}}, "head_dim");
  ErrorFor(kLlama32_1B, {{"hidden_size", nullptr}}, "hidden_size");
  ErrorFor(kLlama32_1B, {{"hidden_size", "2048"}}, "hidden_size");
  ErrorFor(kLlama32_1B, {{"num_hidden_layers", 0}}, "num_hidden_layers");
  ErrorFor(kLlama32_1B, {{"num_key_value_heads", 5}}, "num_key_value_heads");
  ErrorFor(kLlama32_1B, {{"head_dim", 63}}, "head_dim");
  ErrorFor(kLlama32_1B, {{"tie_word_embeddings", "yes"}}, "tie_word_embeddings");
  ErrorFor(kLlama32_1B, {{"torch_dtype", "float8"}}, "torch_dtype");
  ErrorFor(kLlama32_1B, {{"eos_token_id", "</s>"}}, "eos_token_id");
  // original_max_position_embeddings past int64 was cast from a double (undefined; found by
  // fuzz/model_config_fuzz.cc: fuzz/regressions/model_config/rope-original-context-1.8e21); a
  // fraction is no context length either. A whole float (8192.0) is one.
  json rope = {{"rope_type", "llama3"}, {"factor", 8.0}, {"low_freq_factor", 1.0}, {"high_freq_factor", 4.0}};
  for (json bad : {json::parse("1844674407370955161632"), json(1e300), json(8192.5)}) {
    rope["original_max_position_embeddings"] = bad;
    ErrorFor(kLlama32_1B, {{"rope_scaling", rope}}, "rope_scaling.original_max_position_embeddings");
  }
  rope["original_max_position_embeddings"] = 8192.0;
  json whole = json::parse(kLlama32_1B);
  whole["rope_scaling"] = rope;
  auto w = ModelConfig::FromHfJson(whole);
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_EQ(w->rope_scaling.original_max_position_embeddings, 8192);
  json no_heads_dim = json::parse(kMistral7B_v03);
  no_heads_dim["num_attention_heads"] = 30;
  no_heads_dim["num_key_value_heads"] = 10;
  EXPECT_FALSE(ModelConfig::FromHfJson(no_heads_dim).ok());  // 4096 % 30 != 0 and no head_dim
}

// transformers 5 writes RoPE as one rope_parameters block (rope_type, rope_theta and the scaling
// fields) instead of top-level rope_theta + rope_scaling. Both spellings are the same model.
TEST(ModelConfigTest, Transformers5RopeParametersMeanTheSameAsRopeScaling) {
  json v5 = json::parse(kLlama32_1B);
  v5["rope_parameters"] = v5["rope_scaling"];
  v5["rope_parameters"]["rope_theta"] = v5["rope_theta"];
  v5.erase("rope_scaling");
  v5.erase("rope_theta");
  auto r = ModelConfig::FromHfJson(v5);
  ASSERT_TRUE(r.ok()) << r.status();
  ExpectSame(*r, Parse(kLlama32_1B));

  // Plain RoPE with its theta inside the block (Qwen3 saved by transformers 5).
  json qwen = json::parse(kQwen25_05B);
  qwen.erase("rope_theta");
  qwen["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 1000000.0}};
  auto q = ModelConfig::FromHfJson(qwen);
  ASSERT_TRUE(q.ok()) << q.status();
  ExpectSame(*q, Parse(kQwen25_05B));

  // Both present: rope_parameters is what transformers 5 uses.
  json both = json::parse(kLlama32_1B);
  both["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 250000.0}};
  auto b = ModelConfig::FromHfJson(both);
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(b->rope_theta, 250000.0);
  EXPECT_TRUE(b->rope_scaling.type.empty());

  // Refusals name the block's fields.
  std::string msg = ErrorFor(kLlama32_1B, {{"rope_parameters", {{"rope_type", "yarn"}, {"factor", 4.0}}}},
                             "rope_parameters.rope_type");
  EXPECT_NE(msg.find("yarn"), std::string::npos) << msg;
  ErrorFor(kLlama32_1B, {{"rope_parameters", {{"rope_type", "llama3"}, {"factor", 8.0}}}}, "rope_parameters.low_freq_factor");
  ErrorFor(kLlama32_1B, {{"rope_parameters", {{"rope_type", "default"}, {"rope_theta", -1.0}}}}, "rope_parameters.rope_theta");
  msg = ErrorFor(kLlama32_1B,
                 {{"rope_parameters", {{"full_attention", {{"rope_type", "default"}}}, {"sliding_attention", {{"rope_type", "default"}}}}}},
                 "rope_parameters");
  EXPECT_NE(msg.find("per-layer-type"), std::string::npos) << msg;
}

TEST(ModelConfigTest, ToHfJsonRoundTrips) {
  for (const char* text : {kLlama32_1B, kQwen25_05B, kQwen3_06B, kMistral7B_v03}) {
    ModelConfig c = Parse(text);
    c.pad_token_id = 7;
    json out = c.ToHfJson();
    EXPECT_EQ(out["hidden_act"], "silu");
    EXPECT_EQ(out["use_cache"], true);
    EXPECT_EQ(out["transformers_version"], "4.46.0");
    EXPECT_EQ(out["model_type"], c.model_type);
    EXPECT_EQ(out["architectures"][0], json::parse(text)["architectures"][0]);
    // Through text, as it reaches the disk.
    auto back = ModelConfig::FromHfJson(json::parse(out.dump()));
    ASSERT_TRUE(back.ok()) << back.status() << "\n" << out.dump(2);
    ExpectSame(c, back.value());
  }
  EXPECT_TRUE(Parse(kQwen25_05B).ToHfJson()["rope_scaling"].is_null());
  EXPECT_EQ(Parse(kLlama32_1B).ToHfJson()["rope_scaling"]["rope_type"], "llama3");
}

TEST(ModelConfigTest, FromHfDir) {
  const std::string dir = ::testing::TempDir() + "/eft_model_config_test";
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/config.json") << kQwen3_06B;
  auto r = ModelConfig::FromHfDir(dir);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->head_dim, 128);
  std::ofstream(dir + "/config.json") << "{not json";
  EXPECT_EQ(ModelConfig::FromHfDir(dir).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ModelConfig::FromHfDir(dir + "/missing").status().code(), StatusCode::kNotFound);
  std::filesystem::remove_all(dir);
}

TEST(ModelConfigTest, TrainingFlopsPerToken) {
  // Untied: the input embedding is a lookup (no FLOPs), the head is a matmul.
  ModelConfig m = Parse(kMistral7B_v03);
  const double n_matmul = static_cast<double>(m.NumParameters()) - 32768.0 * 4096;
  EXPECT_DOUBLE_EQ(m.TrainingFlopsPerToken(4096), 6 * n_matmul + 12.0 * 32 * 32 * 128 * 4096);
  // Tied: the one matrix is both, and counts once as the head.
  ModelConfig q = Parse(kQwen3_06B);
  EXPECT_DOUBLE_EQ(q.TrainingFlopsPerToken(1024),
                   6.0 * q.NumParameters() + 12.0 * 28 * 16 * 128 * 1024);
}

}  // namespace
}  // namespace eft::trainer
