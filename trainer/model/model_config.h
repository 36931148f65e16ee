// ModelConfig: the architecture of a Llama-family decoder, read from (and written back to) a
// Hugging Face `config.json`. Supported `model_type`s: llama (incl. rope_scaling "llama3"),
// qwen2 (qkv bias), qwen3 (q/k RMSNorm), mistral. Anything we do not implement is refused with an
// error that names the field and the value, never silently ignored.
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "common/status.h"

namespace eft::trainer {

struct RopeScaling {
  std::string type;  // "" (none) or "llama3"
  double factor = 1.0;
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  int64_t original_max_position_embeddings = 8192;
};

struct ModelConfig {
  std::string model_type;  // llama | qwen2 | qwen3 | mistral
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;
  int64_t num_hidden_layers = 0;
  int64_t num_attention_heads = 0;
  int64_t num_key_value_heads = 0;
  int64_t head_dim = 0;  // hidden_size / num_attention_heads unless config.json says otherwise (qwen3)
  int64_t max_position_embeddings = 0;
  double rms_norm_eps = 1e-6;
  double rope_theta = 10000.0;
  RopeScaling rope_scaling;
  bool tie_word_embeddings = false;
  bool attention_bias = false;  // bias on q/k/v projections (qwen2: always)
  bool qk_norm = false;         // RMSNorm on q and k per head (qwen3)
  double initializer_range = 0.02;
  std::string torch_dtype = "bfloat16";  // the dtype HF files of this model are saved in
  int64_t bos_token_id = -1;
  int64_t eos_token_id = -1;
  int64_t pad_token_id = -1;

  // Parses config.json. InvalidArgument (exit 2 material) naming the field for anything unsupported.
  static Result<ModelConfig> FromHfJson(const nlohmann::json& config);
  static Result<ModelConfig> FromHfDir(const std::string& dir);  // <dir>/config.json
  // A config.json that transformers' AutoConfig reads back to the same architecture.
  nlohmann::json ToHfJson() const;

  int64_t NumParameters() const;
  // Floating-point operations of one forward+backward per token at sequence length `seq_len`
  // (6 * parameters + attention), for MFU.
  double TrainingFlopsPerToken(int64_t seq_len) const;
};

}  // namespace eft::trainer
