// Test support: tiny random Llama-family models, hand-built batches, and the driver that runs the
// independent Python reference (tests/reference/llama_reference.py) on them.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include "common/status.h"
#include "trainer/data/batch.h"
#include "trainer/model/llama.h"
#include "trainer/model/model_config.h"

namespace eft::trainer::testing {

// A config.json for a tiny model of `arch`:
//   "llama"   untied, GQA 4/2, llama3 rope scaling (orig 32, so every band of it is exercised)
//   "qwen2"   tied, GQA 4/2, q/k/v bias
//   "qwen3"   tied, GQA 4/2, head_dim 32 != 64 / 4, q/k norm
//   "mistral" untied, one kv head (MQA), sliding_window null
nlohmann::json TinyConfigJson(const std::string& arch);
ModelConfig TinyConfig(const std::string& arch);

struct TinyModel {
  ModelConfig config;
  std::vector<std::vector<at::Tensor>> layers;  // in LayerParamSpecs order
  std::vector<at::Tensor> root;                 // in RootParamSpecs order

  // Random weights with enough spread that attention is far from uniform and every norm weight,
  // bias and rotation matters. Deterministic in `seed`.
  static TinyModel Random(const ModelConfig& config, uint64_t seed, at::ScalarType dtype = at::kFloat);
  TinyModel To(at::ScalarType dtype) const;  // copies, cast
  void RequireGrad();
  std::vector<std::pair<std::string, at::Tensor>> Named() const;  // HF name -> tensor
};

struct Output {
  at::Tensor logits;  // [B, T, V], compute dtype
  at::Tensor loss;    // LossSum, scalar
};
// Embed -> layers -> (Logits, LossSum), in the weights' dtype.
Output RunModel(const TinyModel& m, const Batch& batch, int64_t chunk_rows = 1024);
at::Tensor RunHidden(const TinyModel& m, const Batch& batch);

// One row per entry: the documents' token ids back to back, then `padding` pad positions.
// Labels are next-token targets inside each document (-100 on its last token and on the first
// `prompt` tokens of each document); positions restart at `first_position` for every document.
struct RowSpec {
  std::vector<std::vector<int64_t>> documents;
  int64_t padding = 0;
  int64_t prompt = 0;
  int64_t first_position = 0;
};
Batch MakeBatch(const std::vector<RowSpec>& rows, int64_t pad_id);
// Random token ids in [0, vocab).
std::vector<int64_t> RandomTokens(int64_t n, int64_t vocab, uint64_t seed);

struct ReferenceResult {
  at::Tensor logits;  // float32/float64 like the model
  double loss_sum = 0;
  int64_t trained_tokens = 0;
  std::vector<std::pair<std::string, at::Tensor>> grads;  // when requested
};
// Empty string when PyTorch's Python (tests/util/torch_python.h) can run the reference; else why not.
std::string ReferenceUnavailableReason();
// Writes model + batch to a temp dir, runs the reference, reads its outputs. Throws on failure.
ReferenceResult RunReference(const TinyModel& m, const Batch& batch, bool want_grads);

// The reference with LoRA: `params` holds the base weights under HF names and the adapters under
// PEFT's (LoraParamSpecs); only adapter gradients come back. float32.
ReferenceResult RunLoraReference(const ModelConfig& config, const std::vector<std::pair<std::string, at::Tensor>>& params,
                                 int64_t r, double alpha, const Batch& batch);

// The reference on a Hugging Face directory that it parses itself (config.json, safetensors);
// logits in float32.
ReferenceResult RunReferenceOnHfDir(const std::string& hf_dir, const ModelConfig& config, const Batch& batch);
// A model directory loaded with eft's own loader, in float32.
Result<TinyModel> LoadModelDir(const std::string& dir);

double MaxAbsDiff(const at::Tensor& a, const at::Tensor& b);

// A batch of transformers' inputs: `hf_labels` unshifted as transformers takes them (the model
// shifts), -100 untrained; eft's batch holds each position's target, the last position none.
Batch BatchFromHf(const at::Tensor& input_ids, const at::Tensor& hf_labels);

}  // namespace eft::trainer::testing
