// Helpers shared by the model's translation units; not part of the trainer-facing API.
#pragma once

#include <ATen/ATen.h>

#include "trainer/model/llama.h"

namespace eft::trainer::internal {

// Rotates x [B, heads, T, D] by the context's cos/sin [B, T, D] (HF's half-split rotate_half layout).
at::Tensor ApplyRope(const at::Tensor& x, const AttentionContext& ctx);

// RoPE inverse frequencies [head_dim / 2], fp32, with llama3 scaling applied when configured.
at::Tensor RopeInverseFrequencies(const ModelConfig& config);

}  // namespace eft::trainer::internal
