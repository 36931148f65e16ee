// A Hugging Face model directory eft trains (config.json + safetensors, one file or shards, tied or
// untied embeddings, tokenizer.json) exported as one GGUF file that llama.cpp runs: the names,
// metadata and tensor layouts of llama.cpp's own convert_hf_to_gguf.py for these architectures.
//
//   model_type llama, mistral -> GGUF architecture "llama"; qwen2 -> "qwen2"; qwen3 -> "qwen3".
//
// What changes on the way:
// - Names: model.embed_tokens -> token_embd, layers.N.self_attn.q_proj -> blk.N.attn_q, ... (kTensorNames
//   in gguf_export.cc); lm_head is dropped when tied (llama.cpp then uses token_embd).
// - Layout of Q and K for "llama": HF applies RoPE to the two halves of each head (rotate_half), ggml's
//   "llama" RoPE to adjacent pairs, so the rows of each q/k head are reordered: row (h, j, i), with
//   j in {0, 1} the half and i < head_dim/2, goes to row (h, i, j) (PermuteForGgmlRope). qwen2 and qwen3
//   use ggml's NEOX RoPE, which is HF's layout: no reordering, as convert_hf_to_gguf.py does.
// - RoPE scaling "llama3": llama.cpp has no metadata for it; like the converter, eft writes the
//   per-frequency factors as the tensor rope_freqs.weight.
// - Types: every 1-D tensor (norms, biases, rope_freqs) stays f32, as in llama.cpp's files; the matrices
//   are f32, f16, bf16 or q8_0 (a matrix whose rows are not a multiple of 32 falls back to f16, as the
//   converter does). f16 and q8_0 refuse values beyond fp16's range instead of writing inf.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include <ATen/ATen.h>

#include "common/status.h"
#include "trainer/export/gguf_writer.h"

namespace eft::trainer {

enum class GgufFileType { kF32, kF16, kBF16, kQ8_0 };

// "f32" | "f16" | "bf16" | "q8_0"; InvalidArgument naming the choices otherwise.
Result<GgufFileType> ParseGgufFileType(const std::string& name);
const char* GgufFileTypeName(GgufFileType type);

struct GgufExportSummary {
  std::string architecture;  // GGUF's: llama, qwen2, qwen3
  size_t tensors = 0;
  uint64_t bytes = 0;        // of the file
};

// Writes `out_path` atomically (gguf_writer.h). Errors name the file and the reason: InvalidArgument
// (an architecture or tokenizer eft cannot export, values beyond the type's range), NotFound (no
// config.json or weights), DataLoss (malformed or missing tensors), IoError (an unwritable output).
// `progress`, when given, is called after each tensor with (done, total). `name` is general.name (what
// llama.cpp's tools show); empty: the directory's name.
Result<GgufExportSummary> ExportGguf(const std::string& model_dir, const std::string& out_path, GgufFileType type,
                                     const std::function<void(size_t, size_t)>& progress = nullptr,
                                     const std::string& name = "");

// The q/k row reordering described above, for a weight [n_head * head_dim, in] or a bias
// [n_head * head_dim].
at::Tensor PermuteForGgmlRope(const at::Tensor& w, int64_t n_head);

// ggml's Q8_0 blocks of a float tensor whose element count is a multiple of 32, in row-major order:
// per block of 32, an fp16 scale d then 32 int8 q with x ~ q * d. d is amax/127 rounded to fp16 (the
// smallest positive fp16 when that rounds to 0 but amax is not 0) and q = clamp(round(x / d), -127, 127)
// with that d, so every element satisfies |x - q * d| <= d / 2. InvalidArgument when amax/127 exceeds
// fp16's largest value.
Result<std::string> QuantizeQ8_0(const at::Tensor& x, const std::string& name);

}  // namespace eft::trainer
