// Batch: what the data pipeline hands the model for one micro-batch on one rank.
//
// Sequences may be packed: several documents in one row, told apart by `segment_ids` (1, 2, ...;
// 0 = padding). Attention never crosses a segment boundary and positions restart at 0 for each
// document, so a packed row computes exactly what its documents would compute alone.
#pragma once

#include <cstdint>

#include <ATen/ATen.h>

namespace eft::trainer {

struct Batch {
  at::Tensor input_ids;    // [B, T] int64
  at::Tensor labels;       // [B, T] int64, already shifted: labels[b][t] is the target for position t; -100 = not trained
  at::Tensor position_ids; // [B, T] int64
  at::Tensor segment_ids;  // [B, T] int64; 0 = padding
  int64_t trained_tokens = 0;  // count of labels != -100
  int64_t tokens = 0;          // count of non-padding tokens
  // [B] int64 (CPU): each row's identity within its optimizer step, the same at every world size
  // (the trainer uses the example's position in the step's global batch). LoRA dropout masks are
  // keyed by it (docs/lora.md); undefined when nothing needs it.
  at::Tensor sample_keys;
  bool empty() const { return !input_ids.defined() || input_ids.numel() == 0; }
};

}  // namespace eft::trainer
