#include "trainer/model/model_config.h"

#include <cmath>
#include <map>
#include <optional>

#include "common/file_util.h"
#include "common/json_int.h"

namespace eft::trainer {
namespace {

using json = nlohmann::json;

constexpr const char* kSupportedTypes = "llama, qwen2, qwen3, mistral";

// Upper bounds far above any real model (Llama 3.1 405B: hidden 16384, intermediate 53248, 126
// layers, 128 heads; the largest vocabularies ~256k; contexts up to ~10M). A config.json beyond
// them is corrupt or hostile, and must be refused here: the trainer allocates the model from these
// numbers before it reads a weight, and their products must not overflow int64.
constexpr int64_t kMaxWidth = int64_t{1} << 20;          // hidden, intermediate, head_dim
constexpr int64_t kMaxVocab = int64_t{1} << 24;
constexpr int64_t kMaxLayers = 4096;
constexpr int64_t kMaxHeads = 16384;
constexpr int64_t kMaxPositions = int64_t{1} << 30;
constexpr int64_t kMaxParameters = int64_t{1} << 42;     // ~4.4T, 10x the largest dense model

Status FieldError(const std::string& field, const std::string& problem) {
  return Status::InvalidArgument("config.json: field '" + field + "' " + problem);
}

// Absent and null both mean "use the default": HF writes explicit nulls for many optional fields.
bool Present(const json& j, const std::string& key) { return j.contains(key) && !j.at(key).is_null(); }

// A positive integer, at most `max`.
Result<int64_t> GetInt(const json& j, const std::string& key, std::optional<int64_t> fallback,
                       int64_t max = INT64_MAX) {
  if (!Present(j, key)) {
    if (fallback) return *fallback;
    return FieldError(key, "is required");
  }
  const json& v = j.at(key);
  int64_t x = 0;
  if (v.is_number_integer()) {
    x = v.get<int64_t>();
  } else if (v.is_number_float() && v.get<double>() == std::floor(v.get<double>()) && std::abs(v.get<double>()) < 1e15) {
    x = static_cast<int64_t>(v.get<double>());  // some exporters write 2048.0
  } else {
    return FieldError(key, "must be an integer, got " + v.dump());
  }
  if (x <= 0) return FieldError(key, "must be > 0, got " + v.dump());
  if (x > max) {
    return FieldError(key, "is " + std::to_string(x) + ", more than any model has (the limit is " + std::to_string(max) +
                               "): is config.json corrupt?");
  }
  return x;
}

Result<double> GetDouble(const json& j, const std::string& key, double fallback) {
  if (!Present(j, key)) return fallback;
  const json& v = j.at(key);
  if (!v.is_number()) return FieldError(key, "must be a number, got " + v.dump());
  return v.get<double>();
}

Result<bool> GetBool(const json& j, const std::string& key, bool fallback) {
  if (!Present(j, key)) return fallback;
  const json& v = j.at(key);
  if (!v.is_boolean()) return FieldError(key, "must be true or false, got " + v.dump());
  return v.get<bool>();
}

// Token ids: null/absent -> -1; a list (eos in Llama 3 instruct configs) -> its first element.
Result<int64_t> GetTokenId(const json& j, const std::string& key) {
  if (!Present(j, key)) return int64_t{-1};
  const json* v = &j.at(key);
  if (v->is_array()) {
    if (v->empty()) return int64_t{-1};
    v = &v->at(0);
  }
  if (!v->is_number_integer()) return FieldError(key, "must be a token id (integer or list of integers), got " + j.at(key).dump());
  return v->get<int64_t>();
}

// One RoPE scaling block, `r`, found under `field` (rope_scaling, or rope_parameters).
Result<RopeScaling> ParseRopeScalingBlock(const json& r, const std::string& field) {
  RopeScaling rs;
  if (!r.is_object()) return FieldError(field, "must be null or an object, got " + r.dump());
  // Newer configs say "rope_type", older ones "type"; both name the same thing.
  std::string type;
  for (const char* key : {"rope_type", "type"}) {
    if (Present(r, key)) {
      if (!r.at(key).is_string()) return FieldError(field + "." + key, "must be a string");
      type = r.at(key).get<std::string>();
      break;
    }
  }
  if (type.empty() && field == "rope_parameters" && !r.empty() && r.begin()->is_object()) {
    return FieldError(field, "per-layer-type RoPE parameters (" + r.begin().key() + ": ...) are not supported");
  }
  if (type.empty() || type == "default") return rs;  // "default" is plain RoPE
  if (type != "llama3") {
    return FieldError(field + ".rope_type",
                      "\"" + type + "\" is not supported (supported: \"llama3\", or plain RoPE)");
  }
  rs.type = "llama3";
  auto need = [&](const char* key) -> Result<double> {
    if (!Present(r, key) || !r.at(key).is_number())
      return FieldError(field + "." + key, "is required (a number) for rope_type llama3");
    return r.at(key).get<double>();
  };
  EFT_ASSIGN_OR_RETURN(rs.factor, need("factor"));
  EFT_ASSIGN_OR_RETURN(rs.low_freq_factor, need("low_freq_factor"));
  EFT_ASSIGN_OR_RETURN(rs.high_freq_factor, need("high_freq_factor"));
  EFT_RETURN_IF_ERROR(need("original_max_position_embeddings").status());
  // An integer (or a whole float) in int64's range: a cast of 1.8e21 would be undefined (found by
  // fuzz/model_config_fuzz.cc).
  std::string why;
  const auto orig = TryJsonInt<int64_t>(r.at("original_max_position_embeddings"), &why);
  if (!orig) return FieldError(field + ".original_max_position_embeddings", "must be a whole number: " + why);
  rs.original_max_position_embeddings = *orig;
  if (rs.factor <= 0) return FieldError(field + ".factor", "must be > 0");
  if (rs.original_max_position_embeddings <= 0)
    return FieldError(field + ".original_max_position_embeddings", "must be > 0");
  // The smoothing interpolation divides by (high - low).
  if (!(rs.high_freq_factor > rs.low_freq_factor) || rs.low_freq_factor <= 0)
    return FieldError(field + ".high_freq_factor", "must be greater than low_freq_factor (> 0)");
  return rs;
}

// transformers < 5 writes rope_theta and rope_scaling at the top level; transformers 5 writes one
// rope_parameters block holding rope_type, rope_theta and the scaling fields. Either is read; when
// both are present, rope_parameters (what transformers 5 itself uses) wins.
Status ParseRope(const json& j, ModelConfig* c) {
  EFT_ASSIGN_OR_RETURN(c->rope_theta, GetDouble(j, "rope_theta", 10000.0));
  if (Present(j, "rope_parameters")) {
    const json& r = j.at("rope_parameters");
    EFT_ASSIGN_OR_RETURN(c->rope_scaling, ParseRopeScalingBlock(r, "rope_parameters"));
    if (r.is_object() && Present(r, "rope_theta")) {
      if (!r.at("rope_theta").is_number()) return FieldError("rope_parameters.rope_theta", "must be a number");
      c->rope_theta = r.at("rope_theta").get<double>();
    }
    if (c->rope_theta <= 0) return FieldError("rope_parameters.rope_theta", "must be > 0");
    return Status::Ok();
  }
  if (c->rope_theta <= 0) return FieldError("rope_theta", "must be > 0");
  if (Present(j, "rope_scaling")) {
    EFT_ASSIGN_OR_RETURN(c->rope_scaling, ParseRopeScalingBlock(j.at("rope_scaling"), "rope_scaling"));
  }
  return Status::Ok();
}

// NumParameters without int64 overflow, for the plausibility check.
double ApproxParameters(const ModelConfig& c) {
  const double h = static_cast<double>(c.hidden_size), d = static_cast<double>(c.head_dim);
  const double q = static_cast<double>(c.num_attention_heads) * d, kv = static_cast<double>(c.num_key_value_heads) * d;
  const double layer = 2 * h + h * q + 2 * h * kv + q * h + 3 * h * static_cast<double>(c.intermediate_size);
  return static_cast<double>(c.vocab_size) * h * 2 + static_cast<double>(c.num_hidden_layers) * layer;
}

// Features HF supports that we do not implement. Each refusal names the field and how to fix it.
Status CheckUnsupported(const json& j, const ModelConfig& c) {
  std::string act = "silu";
  if (Present(j, "hidden_act")) {
    if (!j.at("hidden_act").is_string()) return FieldError("hidden_act", "must be a string");
    act = j.at("hidden_act").get<std::string>();
  }
  if (act != "silu") return FieldError("hidden_act", "\"" + act + "\" is not supported (only \"silu\")");

  EFT_ASSIGN_OR_RETURN(double dropout, GetDouble(j, "attention_dropout", 0.0));
  if (dropout != 0.0)
    return FieldError("attention_dropout", "must be 0 (attention dropout is not supported), got " + j.at("attention_dropout").dump());
  EFT_ASSIGN_OR_RETURN(bool mlp_bias, GetBool(j, "mlp_bias", false));
  if (mlp_bias) return FieldError("mlp_bias", "true is not supported (MLP projections have no bias here)");

  if (c.model_type == "mistral") {
    // Mistral 7B v0.1 uses a 4096-token window; v0.2+ set it to null. A window at least as long as
    // any sequence the model can see is plain causal attention, so that is accepted too.
    if (Present(j, "sliding_window")) {
      EFT_ASSIGN_OR_RETURN(int64_t window, GetInt(j, "sliding_window", std::nullopt));
      if (window < c.max_position_embeddings) {
        return FieldError("sliding_window",
                          "is " + std::to_string(window) + " (< max_position_embeddings " +
                              std::to_string(c.max_position_embeddings) +
                              "): sliding window attention is not supported; use a checkpoint whose "
                              "sliding_window is null (e.g. Mistral-7B-v0.3)");
      }
    }
  }
  // Qwen2/Qwen3 configs carry a sliding_window value but only use it when use_sliding_window is true.
  EFT_ASSIGN_OR_RETURN(bool use_sw, GetBool(j, "use_sliding_window", false));
  if (use_sw)
    return FieldError("use_sliding_window", "true is not supported: sliding window attention is not implemented");

  if (Present(j, "attention_bias") && c.model_type != "qwen2") {
    EFT_ASSIGN_OR_RETURN(bool bias, GetBool(j, "attention_bias", false));
    // For llama/qwen3 HF adds a bias to o_proj as well, which this model does not carry; mistral
    // ignores the field entirely. Refusing keeps checkpoints and our parameters 1:1.
    if (bias) return FieldError("attention_bias", "true is not supported for " + c.model_type);
  }
  return Status::Ok();
}

}  // namespace

Result<ModelConfig> ModelConfig::FromHfJson(const json& j) {
  if (!j.is_object()) return Status::InvalidArgument("config.json: must be a JSON object");
  ModelConfig c;
  if (!Present(j, "model_type") || !j.at("model_type").is_string())
    return FieldError("model_type", std::string("is required (supported: ") + kSupportedTypes + ")");
  c.model_type = j.at("model_type").get<std::string>();
  if (c.model_type != "llama" && c.model_type != "qwen2" && c.model_type != "qwen3" && c.model_type != "mistral") {
    return FieldError("model_type",
                      "\"" + c.model_type + "\" is not supported (supported: " + kSupportedTypes + ")");
  }

  EFT_ASSIGN_OR_RETURN(c.vocab_size, GetInt(j, "vocab_size", std::nullopt, kMaxVocab));
  EFT_ASSIGN_OR_RETURN(c.hidden_size, GetInt(j, "hidden_size", std::nullopt, kMaxWidth));
  EFT_ASSIGN_OR_RETURN(c.intermediate_size, GetInt(j, "intermediate_size", std::nullopt, kMaxWidth));
  EFT_ASSIGN_OR_RETURN(c.num_hidden_layers, GetInt(j, "num_hidden_layers", std::nullopt, kMaxLayers));
  EFT_ASSIGN_OR_RETURN(c.num_attention_heads, GetInt(j, "num_attention_heads", std::nullopt, kMaxHeads));
  EFT_ASSIGN_OR_RETURN(c.num_key_value_heads, GetInt(j, "num_key_value_heads", c.num_attention_heads, kMaxHeads));
  EFT_ASSIGN_OR_RETURN(c.max_position_embeddings, GetInt(j, "max_position_embeddings", std::nullopt, kMaxPositions));
  if (c.num_attention_heads % c.num_key_value_heads != 0) {
    return FieldError("num_key_value_heads", "(" + std::to_string(c.num_key_value_heads) +
                                                 ") must divide num_attention_heads (" +
                                                 std::to_string(c.num_attention_heads) + ")");
  }
  if (Present(j, "head_dim")) {
    EFT_ASSIGN_OR_RETURN(c.head_dim, GetInt(j, "head_dim", std::nullopt, kMaxWidth));
    // transformers' Qwen2 attention always uses hidden_size / heads and ignores head_dim.
    if (c.model_type == "qwen2" && c.head_dim * c.num_attention_heads != c.hidden_size)
      return FieldError("head_dim", "must equal hidden_size / num_attention_heads for qwen2");
  } else {
    if (c.hidden_size % c.num_attention_heads != 0)
      return FieldError("hidden_size", "must be divisible by num_attention_heads when head_dim is not given");
    c.head_dim = c.hidden_size / c.num_attention_heads;
  }
  if (c.head_dim % 2 != 0) return FieldError("head_dim", "must be even (RoPE rotates pairs), got " + std::to_string(c.head_dim));
  // Counted in floating point: fields within their bounds can still multiply past int64.
  if (const double params = ApproxParameters(c); params > static_cast<double>(kMaxParameters)) {
    char count[32];
    std::snprintf(count, sizeof(count), "%.3g", params);
    return Status::InvalidArgument(std::string("config.json: these sizes make ") + count +
                                   " parameters, more than any model has (the limit is " +
                                   std::to_string(kMaxParameters) + "): is config.json corrupt?");
  }

  EFT_ASSIGN_OR_RETURN(c.rms_norm_eps, GetDouble(j, "rms_norm_eps", 1e-6));
  if (c.rms_norm_eps <= 0) return FieldError("rms_norm_eps", "must be > 0");
  EFT_RETURN_IF_ERROR(ParseRope(j, &c));
  EFT_ASSIGN_OR_RETURN(c.tie_word_embeddings, GetBool(j, "tie_word_embeddings", false));
  c.attention_bias = c.model_type == "qwen2";  // Qwen2's q/k/v always have a bias (o_proj none)
  c.qk_norm = c.model_type == "qwen3";
  EFT_ASSIGN_OR_RETURN(c.initializer_range, GetDouble(j, "initializer_range", 0.02));
  if (c.initializer_range < 0) return FieldError("initializer_range", "must be >= 0");

  // transformers >= 4.56 writes "dtype" instead of "torch_dtype".
  for (const char* key : {"torch_dtype", "dtype"}) {
    if (!Present(j, key)) continue;
    if (!j.at(key).is_string()) return FieldError(key, "must be a string");
    std::string d = j.at(key).get<std::string>();
    if (d != "bfloat16" && d != "float16" && d != "float32")
      return FieldError(key, "\"" + d + "\" is not supported (bfloat16, float16 or float32)");
    c.torch_dtype = d;
    break;
  }
  EFT_ASSIGN_OR_RETURN(c.bos_token_id, GetTokenId(j, "bos_token_id"));
  EFT_ASSIGN_OR_RETURN(c.eos_token_id, GetTokenId(j, "eos_token_id"));
  EFT_ASSIGN_OR_RETURN(c.pad_token_id, GetTokenId(j, "pad_token_id"));
  EFT_RETURN_IF_ERROR(CheckUnsupported(j, c));
  return c;
}

Result<ModelConfig> ModelConfig::FromHfDir(const std::string& dir) {
  const std::string path = dir + "/config.json";
  Result<std::string> text = ReadFileToString(path);
  if (!text.ok()) return Status::NotFound("cannot open " + path + " (is '" + dir + "' a Hugging Face model directory?)");
  json j = json::parse(*text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return Status::InvalidArgument(path + ": not valid JSON");
  auto r = FromHfJson(j);
  if (!r.ok()) return r.status().WithContext(path);
  return r;
}

json ModelConfig::ToHfJson() const {
  static const std::map<std::string, std::string> kArch = {{"llama", "LlamaForCausalLM"},
                                                           {"qwen2", "Qwen2ForCausalLM"},
                                                           {"qwen3", "Qwen3ForCausalLM"},
                                                           {"mistral", "MistralForCausalLM"}};
  auto token = [](int64_t id) { return id < 0 ? json(nullptr) : json(id); };
  json j;
  auto it = kArch.find(model_type);
  j["architectures"] = json::array({it == kArch.end() ? std::string("LlamaForCausalLM") : it->second});
  j["model_type"] = model_type;
  j["vocab_size"] = vocab_size;
  j["hidden_size"] = hidden_size;
  j["intermediate_size"] = intermediate_size;
  j["num_hidden_layers"] = num_hidden_layers;
  j["num_attention_heads"] = num_attention_heads;
  j["num_key_value_heads"] = num_key_value_heads;
  j["head_dim"] = head_dim;
  j["max_position_embeddings"] = max_position_embeddings;
  j["rms_norm_eps"] = rms_norm_eps;
  j["rope_theta"] = rope_theta;
  if (rope_scaling.type.empty()) {
    j["rope_scaling"] = nullptr;
  } else {
    j["rope_scaling"] = {{"rope_type", rope_scaling.type},
                         {"factor", rope_scaling.factor},
                         {"low_freq_factor", rope_scaling.low_freq_factor},
                         {"high_freq_factor", rope_scaling.high_freq_factor},
                         {"original_max_position_embeddings", rope_scaling.original_max_position_embeddings}};
  }
  j["tie_word_embeddings"] = tie_word_embeddings;
  // Qwen2Config has no attention_bias field (its q/k/v bias is unconditional).
  if (model_type != "qwen2") j["attention_bias"] = false;
  if (model_type == "llama") j["mlp_bias"] = false;
  j["attention_dropout"] = 0.0;
  if (model_type == "mistral") j["sliding_window"] = nullptr;
  if (model_type == "qwen2" || model_type == "qwen3") {
    j["use_sliding_window"] = false;
    j["sliding_window"] = nullptr;
  }
  j["hidden_act"] = "silu";
  j["initializer_range"] = initializer_range;
  j["torch_dtype"] = torch_dtype;
  j["bos_token_id"] = token(bos_token_id);
  j["eos_token_id"] = token(eos_token_id);
  j["pad_token_id"] = token(pad_token_id);
  j["use_cache"] = true;
  j["transformers_version"] = "4.46.0";
  return j;
}

int64_t ModelConfig::NumParameters() const {
  const int64_t h = hidden_size, q = num_attention_heads * head_dim, kv = num_key_value_heads * head_dim;
  int64_t layer = 2 * h                  // input / post-attention norms
                  + h * q + 2 * h * kv   // q, k, v projections
                  + q * h                // o_proj
                  + 3 * h * intermediate_size;
  if (attention_bias) layer += q + 2 * kv;
  if (qk_norm) layer += 2 * head_dim;
  const int64_t root = vocab_size * h * (tie_word_embeddings ? 1 : 2) + h;
  return root + num_hidden_layers * layer;
}

// FLOPs per trained token for forward + backward (backward = 2x forward), the PaLM-paper convention:
//   6 * N  +  12 * L * (heads * head_dim) * seq_len
// where N counts the parameters that take part in a matmul per token: every decoder-layer parameter
// plus the lm_head (V*H, whether tied or not), but not the input embedding, which is a lookup.
// (Norm weights are counted too; they are a negligible 0.01%.) The attention term counts QK^T and
// PV over the full T x T square (2 matmuls * 2 FLOPs/MAC * 3 for fwd+bwd), not the causal half, as
// MFU numbers in the literature do.
double ModelConfig::TrainingFlopsPerToken(int64_t seq_len) const {
  const double embedding = static_cast<double>(vocab_size) * hidden_size;
  const double matmul_params = static_cast<double>(NumParameters()) - embedding * (tie_word_embeddings ? 0 : 1);
  const double attention = 12.0 * num_hidden_layers * num_attention_heads * head_dim * static_cast<double>(seq_len);
  return 6.0 * matmul_params + attention;
}

}  // namespace eft::trainer
