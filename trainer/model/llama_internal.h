// Helpers shared by the model's translation units; not part of the trainer-facing API.
#pragma once

#include <array>

#include <ATen/ATen.h>

#include "trainer/model/llama.h"

namespace eft::trainer::internal {

// Rotates x [B, heads, T, D] by the context's cos/sin [B, T, D] (HF's half-split rotate_half layout).
at::Tensor ApplyRope(const at::Tensor& x, const AttentionContext& ctx);

// A layer's q, k and v projections (before LoRA and reshaping), and its gate and up projections:
// `merged`, one matrix product over the concatenated weights each (what a GPU runs: fewer, larger
// GEMMs, the small k/v ones of grouped-query attention included), else one per weight (the CPU).
// Both compute the same dot products; only the GEMM's blocking may round differently (llama_test).
std::array<at::Tensor, 3> QkvProjections(const LayerWeights& w, const at::Tensor& x, bool merged);
std::array<at::Tensor, 2> GateUpProjections(const LayerWeights& w, const at::Tensor& x, bool merged);
// The merged gate/up product itself, [..., 2 * intermediate] with gate first (what FusedSwiGlu takes).
at::Tensor MergedGateUpProjection(const LayerWeights& w, const at::Tensor& x);

// ATen's fused RMSNorm (what RmsNorm runs on a GPU): statistics in fp32, the weight applied before
// the one rounding to x's dtype, where HF's composite rounds the normalised value first and then the
// product: within one unit in the last place of x's dtype of RmsNorm's composite (llama_test).
at::Tensor FusedRmsNorm(const at::Tensor& x, const at::Tensor& weight, double eps);

// RoPE inverse frequencies [head_dim / 2], fp32, with llama3 scaling applied when configured.
at::Tensor RopeInverseFrequencies(const ModelConfig& config);

}  // namespace eft::trainer::internal
