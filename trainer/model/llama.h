// The Llama-family decoder as plain functions over weight tensors.
//
// Weights are not owned here: the caller (FSDP) hands in views of gathered flat parameters, one
// decoder layer (or the root: embeddings, final norm, untied head) at a time. Parameter names and
// shapes follow Hugging Face exactly, so a checkpoint maps 1:1. Numerics follow HF's modeling code:
// RMSNorm in fp32 then cast back, RoPE tables in fp32, softmax in fp32, everything else in the
// weights' dtype (bf16 or fp32).
#pragma once

#include <string>
#include <vector>

#include <ATen/ATen.h>

#include "trainer/data/batch.h"
#include "trainer/model/model_config.h"

namespace eft::trainer {

struct ParamSpec {
  std::string name;            // HF name, e.g. "model.layers.3.self_attn.q_proj.weight"
  std::vector<int64_t> shape;
  bool decay = true;           // AdamW weight decay applies (false for norms and biases)
  int64_t numel() const;
};

// The parameters of decoder layer `layer`, in flat-parameter order.
std::vector<ParamSpec> LayerParamSpecs(const ModelConfig& config, int layer);
// Embeddings, final norm, and lm_head when untied, in flat-parameter order.
std::vector<ParamSpec> RootParamSpecs(const ModelConfig& config);

struct LayerWeights {
  at::Tensor input_norm, q_proj, k_proj, v_proj, o_proj;
  at::Tensor q_bias, k_bias, v_bias;  // qwen2 / attention_bias only
  at::Tensor q_norm, k_norm;          // qwen3 only
  at::Tensor post_norm, gate_proj, up_proj, down_proj;
};
struct RootWeights {
  at::Tensor embed;       // [vocab, hidden]
  at::Tensor final_norm;  // [hidden]
  at::Tensor lm_head;     // [vocab, hidden]; the embedding itself when tied
  int64_t padding_idx = -1;  // config.pad_token_id when inside the vocabulary (set by BindRoot)
};

// LoRA (docs/lora.md): a targeted linear layer computes y = x W^T + scale * dropout(x) A^T B^T with
// A [r, in] and B [out, r] kept (and trained) in fp32 and cast to the compute dtype for the
// forward, as the base weights are.
// The adapters of decoder layer `layer` for `modules` (HF names, layer order: q_proj, k_proj, v_proj,
// o_proj, gate_proj, up_proj, down_proj), A then B for each, named as PEFT saves them:
// "base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight".
std::vector<ParamSpec> LoraParamSpecs(const ModelConfig& config, int layer, const std::vector<std::string>& modules,
                                      int64_t r);
struct LoraAdapter {
  at::Tensor a, b;  // undefined: the module has no adapter
};
struct LayerLora {
  LoraAdapter q, k, v, o, gate, up, down;
  double scale = 1;
  double dropout = 0;  // 0: none (always so when evaluating)
  // [B] int64 on the CPU, one per row of the batch: dropout masks are a function of (row seed,
  // module, position, feature) only (LoraDropoutMask), so a recompute repeats them and a row's mask
  // does not depend on the other rows of its micro-batch or on its padding. Needed when dropout > 0.
  at::Tensor dropout_row_seeds;
};
// The dropout mask of one module for rows with `row_seeds` ([B] int64) and inputs [B, T, features]:
// float, 1 where kept, 0 where dropped (the caller scales by 1 / (1 - p)), on the CPU. Element
// (b, t, j) is kept when a counter-based hash (SplitMix64) of (row_seeds[b], module, t, j), as a
// uniform number in [0, 1), is >= p: deterministic, the same on every platform and thread count.
at::Tensor LoraDropoutMask(const at::Tensor& row_seeds, uint64_t module, int64_t T, int64_t features, double p);
// scale * dropout(x) A^T B^T for `adapter` (module number `module` of its layer: q_proj 0 ... down_proj 6,
// which keys its dropout mask) on x [B, T, in], computed in `dtype` (the compute dtype).
at::Tensor LoraUpdate(const at::Tensor& x, const LoraAdapter& adapter, const LayerLora& lora, uint64_t module,
                      at::ScalarType dtype);
// `tensors` in the order of LoraParamSpecs(config, *, modules, r).
LayerLora BindLora(const std::vector<std::string>& modules, const std::vector<at::Tensor>& tensors);

// `tensors` in the order of LayerParamSpecs / RootParamSpecs (e.g. views of a gathered flat param).
LayerWeights BindLayer(const ModelConfig& config, const std::vector<at::Tensor>& tensors);
RootWeights BindRoot(const ModelConfig& config, const std::vector<at::Tensor>& tensors);

// Per-micro-batch tensors every layer shares: RoPE cos/sin for the batch's positions and what the
// attention needs to stay causal and inside each packed segment.
struct AttentionContext {
  at::Tensor cos, sin;       // [B, T, head_dim], compute dtype
  at::Tensor segment_ids;    // [B, T]
  at::Tensor additive_mask;  // [B, 1, T, T] 0 / -inf in the compute dtype (CPU path), or undefined
  // Every row is one document followed only by (optional) padding: plain causal attention is exact
  // for every non-padding position, so a fused causal kernel may ignore the mask. On PyTorch 2.x
  // CUDA the mask is then not built at all.
  bool causal_only = false;
  // Packed rows on a GPU in bf16/fp16 with the fused kernels (kernels.h): FlashAttention's
  // variable-length kernel keeps the documents apart with no mask. The flattened [B * T] tokens cut
  // into runs of one segment each (a document, or a row's padding), cu_seqlens [runs + 1] the runs'
  // starts then B * T (int32, on the device), max_seqlen the longest run. Then no mask is built.
  at::Tensor cu_seqlens;
  int64_t max_seqlen = 0;
};
// The runs of equal segment id in each row of segment_ids [B, T] (CPU, int64), as
// AttentionContext::cu_seqlens (on the CPU) and their longest length.
std::pair<at::Tensor, int64_t> SegmentRuns(const at::Tensor& segment_ids);
AttentionContext MakeAttentionContext(const ModelConfig& config, const Batch& batch, at::ScalarType dtype);

// Causal attention that never crosses a segment: q [B, H, T, D], k/v [B, KV, T, D] (GQA: H % KV == 0).
// The one place that chooses the kernel (SDPA/flash on PyTorch 2.x CUDA, explicit math on CPU).
// Returns [B, T, H * D], ready for o_proj. A padding position attends to itself (and to earlier
// padding), so no row is fully masked and nothing becomes NaN.
at::Tensor Attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const AttentionContext& ctx);

at::Tensor RmsNorm(const at::Tensor& x, const at::Tensor& weight, double eps);
// [B, T, hidden]. Like HF's nn.Embedding(padding_idx=pad_token_id): the pad token's row gets no
// gradient from here (it still does through a tied lm_head).
at::Tensor Embed(const RootWeights& root, const at::Tensor& input_ids);
at::Tensor DecoderLayer(const ModelConfig& config, const LayerWeights& w, const at::Tensor& hidden,
                        const AttentionContext& ctx, const LayerLora* lora = nullptr);
at::Tensor Logits(const ModelConfig& config, const RootWeights& root, const at::Tensor& hidden);  // [B, T, vocab]
// Sum over positions with label != -100 of the token cross-entropy (fp32). Computes the head in
// chunks of rows so the [tokens, vocab] logits never exist all at once.
// `hidden` is the last decoder layer's output (the final norm is applied here, as in Logits); only
// rows with a trained label reach the head. A custom autograd function computes each chunk's
// gradients in forward (for a unit upstream gradient; backward scales them), so peak memory is one
// chunk of logits and the head weight is not saved for backward. When autograd is recording, that
// gradient work is done even if backward never runs: evaluate under c10::NoGradGuard.
// The loss is fp32 (fp64 for fp64 weights); its gradient reaches `hidden`, the final norm and the
// head (the embedding when tied). Throws c10::Error for a label outside [0, vocab) other than -100.
at::Tensor LossSum(const ModelConfig& config, const RootWeights& root, const at::Tensor& hidden,
                   const at::Tensor& labels, int64_t chunk_rows = 1024);

// Hugging Face's initialisation: normal(0, initializer_range) for linear and embedding weights,
// zeros for biases, ones for norms (and, as HF, a zero embedding row for pad_token_id), fp32.
// LoRA adapters as PEFT: A Kaiming-uniform (a = sqrt(5): uniform(-1/sqrt(in), 1/sqrt(in))), B zeros.
// Deterministic in (seed, parameter name), so any sharding of the
// parameters initialises them identically.
at::Tensor InitParameter(const ModelConfig& config, const ParamSpec& spec, uint64_t seed);

}  // namespace eft::trainer
