// InferenceModel: a Hugging Face decoder (llama, qwen2, qwen3, mistral) held whole in one process
// for generation: no FSDP, no autograd. The layer math is llama.h's (RmsNorm, Embed, MathAttention's formulas,
// Logits, the same RoPE tables); what is new is the cached path: a forward of n new tokens runs
// only those n positions, attending to the keys and values a KvCache holds for the earlier ones.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <ATen/ATen.h>

#include "common/status.h"
#include "trainer/generate/kv_cache.h"
#include "trainer/model/llama.h"
#include "trainer/model/model_config.h"

namespace eft::trainer {

class InferenceModel {
 public:
  // config.json and the safetensors weights of `dir` (one file or shards), converted to `dtype`
  // (kFloat or kBFloat16). NotFound / InvalidArgument / DataLoss naming the file or tensor.
  static Result<std::unique_ptr<InferenceModel>> Load(const std::string& dir, at::ScalarType dtype);
  // Weights already in memory: each layer's tensors in LayerParamSpecs order, the root's in
  // RootParamSpecs order (as BindLayer/BindRoot take them), all of one dtype.
  static Result<std::unique_ptr<InferenceModel>> FromTensors(const ModelConfig& config,
                                                             std::vector<std::vector<at::Tensor>> layers,
                                                             std::vector<at::Tensor> root);

  const ModelConfig& config() const { return config_; }
  at::ScalarType dtype() const { return dtype_; }
  // The most positions one sequence may hold: config.json's max_position_embeddings.
  int64_t max_positions() const { return config_.max_position_embeddings; }

  KvCache NewCache() const;

  enum class LogitsFor { kLastPosition, kEveryPosition };
  // Runs `tokens` at positions cache->length() .. cache->length() + n - 1, appending their keys and
  // values to `cache`. Returns fp32 logits [n, vocab] (kEveryPosition) or [1, vocab].
  // InvalidArgument for an empty list, an id outside the vocabulary, or more positions than
  // max_positions().
  Result<at::Tensor> Forward(const std::vector<int32_t>& tokens, KvCache* cache, LogitsFor which) const;

 private:
  InferenceModel() = default;
  at::Tensor CachedLayer(int64_t layer, const at::Tensor& hidden, const AttentionContext& ctx, KvCache* cache) const;

  ModelConfig config_;
  at::ScalarType dtype_ = at::kFloat;
  std::vector<std::vector<at::Tensor>> layer_tensors_;  // owns what layers_ views
  std::vector<at::Tensor> root_tensors_;
  std::vector<LayerWeights> layers_;
  RootWeights root_;
  at::Tensor inv_freq_;  // RoPE, fp32 [head_dim / 2]
};

}  // namespace eft::trainer
