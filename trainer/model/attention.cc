// RoPE, the per-micro-batch attention context, and the attention kernel choice.
#include <algorithm>
#include <cmath>
#include <limits>
#include <numbers>
#include <utility>
#include <vector>

#include <torch/version.h>

#include "trainer/kernels/kernels.h"
#include "trainer/model/llama.h"
#include "trainer/model/llama_internal.h"

// at::scaled_dot_product_attention's enable_gqa and at::_flash_attention_forward's present form.
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 5)
#define EFT_TORCH_2_5 1
#else
#define EFT_TORCH_2_5 0
#endif

namespace eft::trainer {
namespace internal {

at::Tensor RopeInverseFrequencies(const ModelConfig& c) {
  // fp32 throughout, in the order HF evaluates it, so the tables agree with a model trained there.
  const int64_t d = c.head_dim;
  at::Tensor exponent = at::arange(0, d, 2, at::kLong).to(at::kFloat) / static_cast<double>(d);
  at::Tensor inv_freq = at::reciprocal(at::pow(c.rope_theta, exponent));
  if (c.rope_scaling.type != "llama3") return inv_freq;

  // Llama 3.1 scaling: long wavelengths (low frequencies) are stretched by `factor`, short ones kept,
  // and the band in between interpolated smoothly between the two.
  const RopeScaling& rs = c.rope_scaling;
  const double orig = static_cast<double>(rs.original_max_position_embeddings);
  const double low_freq_wavelen = orig / rs.low_freq_factor;
  const double high_freq_wavelen = orig / rs.high_freq_factor;
  at::Tensor wavelen = (2.0 * std::numbers::pi) / inv_freq;
  at::Tensor scaled = inv_freq / rs.factor;
  at::Tensor smooth = (orig / wavelen - rs.low_freq_factor) / (rs.high_freq_factor - rs.low_freq_factor);
  at::Tensor medium = (1.0 - smooth) * inv_freq / rs.factor + smooth * inv_freq;
  at::Tensor out = at::where(wavelen > low_freq_wavelen, scaled, inv_freq);
  return at::where((wavelen >= high_freq_wavelen) & (wavelen <= low_freq_wavelen), medium, out);
}

at::Tensor ApplyRope(const at::Tensor& x, const AttentionContext& ctx) {
  const int64_t half = x.size(-1) / 2;
  at::Tensor cos = ctx.cos.unsqueeze(1), sin = ctx.sin.unsqueeze(1);  // broadcast over heads
  at::Tensor rotated = at::cat({-x.narrow(-1, half, half), x.narrow(-1, 0, half)}, -1);
  return x * cos + rotated * sin;
}

}  // namespace internal

namespace {

// True when every row is a single document, possibly followed by padding: then causal attention
// alone is exact for every non-padding position.
bool IsCausalOnly(const at::Tensor& seg) {
  if (seg.size(1) <= 1) return true;
  at::Tensor one_doc = ((seg == seg.narrow(1, 0, 1)) | (seg == 0)).all();
  at::Tensor real = seg != 0;
  at::Tensor trailing_padding = real.narrow(1, 1, seg.size(1) - 1).le(real.narrow(1, 0, seg.size(1) - 1)).all();
  return (one_doc & trailing_padding).item<bool>();
}

// PyTorch's scaled_dot_product_attention (flash / memory-efficient kernels) on a GPU.
bool UseSdpa(const at::Tensor& t) {
#if TORCH_VERSION_MAJOR >= 2
  return t.is_cuda();
#else
  (void)t;
  return false;
#endif
}

// FlashAttention's variable-length kernel (at::_flash_attention_forward with cumulative sequence
// lengths; autograd has its backward): PyTorch 2.5 or later on a GPU, bf16 or fp16 (flash has no
// fp32), a head size flash takes, and eft's GPU speed-ups on (EFT_FUSED_KERNELS).
bool UseVarlenFlash(const ModelConfig& c, const at::Device& device, at::ScalarType dtype) {
#if EFT_TORCH_2_5
  return device.is_cuda() && (dtype == at::kBFloat16 || dtype == at::kHalf) && c.head_dim % 8 == 0 &&
         c.head_dim <= 256 && UseFusedKernels(device, dtype);
#else
  (void)c, (void)device, (void)dtype;
  return false;
#endif
}

}  // namespace

std::pair<at::Tensor, int64_t> SegmentRuns(const at::Tensor& segment_ids) {
  TORCH_CHECK(segment_ids.dim() == 2 && segment_ids.scalar_type() == at::kLong && segment_ids.device().is_cpu(),
              "SegmentRuns: segment_ids must be [B, T] int64 on the CPU");
  const int64_t B = segment_ids.size(0), T = segment_ids.size(1);
  const at::Tensor seg = segment_ids.contiguous();
  const int64_t* s = seg.data_ptr<int64_t>();
  std::vector<int32_t> starts = {0};
  int64_t longest = 0;
  for (int64_t i = 1; i <= B * T; ++i) {  // a run ends at the end, at a row's end, or where the id changes
    if (i == B * T || i % T == 0 || s[i] != s[i - 1]) {
      longest = std::max<int64_t>(longest, i - starts.back());
      starts.push_back(static_cast<int32_t>(i));
    }
  }
  return {at::tensor(starts, at::kInt), longest};
}

AttentionContext MakeAttentionContext(const ModelConfig& c, const Batch& batch, at::ScalarType dtype) {
  const auto device = batch.input_ids.device();
  TORCH_CHECK(batch.position_ids.defined() && batch.segment_ids.defined(),
              "MakeAttentionContext: the batch needs position_ids and segment_ids");
  TORCH_CHECK(batch.position_ids.sizes() == batch.input_ids.sizes() && batch.segment_ids.sizes() == batch.input_ids.sizes(),
              "MakeAttentionContext: input_ids, position_ids and segment_ids must all be [B, T]");
  AttentionContext ctx;
  // Positions up to 2^24 are exact in fp32; the product with inv_freq is what HF computes too.
  at::Tensor inv_freq = internal::RopeInverseFrequencies(c).to(device);
  at::Tensor freqs = batch.position_ids.to(device, at::kFloat).unsqueeze(-1) * inv_freq;  // [B, T, D/2]
  at::Tensor angles = at::cat({freqs, freqs}, -1);
  ctx.cos = angles.cos().to(dtype);
  ctx.sin = angles.sin().to(dtype);
  ctx.segment_ids = batch.segment_ids.to(device);
  // The causal-only test and the runs are host work on a small [B, T]: one copy for both, where on a
  // GPU the test alone took several kernels and a synchronisation.
  const at::Tensor host_segment_ids = batch.segment_ids.to(at::kCPU);
  ctx.causal_only = IsCausalOnly(host_segment_ids);
  if (ctx.causal_only && UseSdpa(ctx.segment_ids)) return ctx;  // is_causal needs no mask
  if (UseVarlenFlash(c, device, dtype)) {
    TORCH_CHECK(batch.segment_ids.numel() < (int64_t{1} << 31), "Attention: more tokens in a micro-batch than int32 counts");
    auto [runs, longest] = SegmentRuns(host_segment_ids);
    ctx.cu_seqlens = runs.to(device);
    ctx.max_seqlen = longest;
    return ctx;
  }

  // Allowed: earlier-or-same position in the same segment. Padding (segment 0) therefore attends to
  // itself and earlier padding only, so every row keeps its diagonal and softmax never sees a row of
  // -inf (which would be NaN). -inf, not a large negative, so masked weights are exactly zero and a
  // packed row computes what its documents compute alone, up to matmul summation order.
  const int64_t T = ctx.segment_ids.size(1);
  at::Tensor same = ctx.segment_ids.unsqueeze(2) == ctx.segment_ids.unsqueeze(1);  // [B, T, T]
  at::Tensor causal = at::ones({T, T}, at::TensorOptions().dtype(at::kBool).device(device)).tril();
  at::Tensor allowed = (same & causal).unsqueeze(1);
  ctx.additive_mask = at::zeros(allowed.sizes(), at::TensorOptions().dtype(dtype).device(device))
                          .masked_fill_(allowed.logical_not(), -std::numeric_limits<double>::infinity());
  return ctx;
}

namespace {

// GQA: each group of H/KV query heads shares one k/v head (head h uses kv head h / (H/KV)).
at::Tensor RepeatKv(const at::Tensor& x, int64_t heads) {
  const int64_t kv = x.size(1);
  return kv == heads ? x : x.repeat_interleave(heads / kv, 1);
}

// The explicit computation HF's eager attention does: scores in the compute dtype, mask added,
// softmax in fp32, cast back before multiplying by v.
at::Tensor MathAttention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& mask) {
  TORCH_CHECK(mask.defined(), "Attention: the math path needs AttentionContext::additive_mask");
  const double scale = 1.0 / std::sqrt(static_cast<double>(q.size(-1)));
  // A power-of-two scale (head sizes 4^n: 64, 256) commutes with every rounding, so it may scale q
  // ([T, D] per head) instead of the scores ([T, T]): the same values, a pass over far fewer elements
  // forward and backward. The mask is added in place: the product's output is saved by nobody.
  int exponent = 0;
  at::Tensor scores = std::frexp(scale, &exponent) == 0.5 ? at::matmul(q * scale, k.transpose(-2, -1))
                                                          : at::matmul(q, k.transpose(-2, -1)) * scale;
  scores.add_(mask);
  at::Tensor probs = at::softmax(scores, -1, at::promote_types(q.scalar_type(), at::kFloat)).to(q.scalar_type());
  return at::matmul(probs, v);
}

}  // namespace

at::Tensor Attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const AttentionContext& ctx) {
  const int64_t B = q.size(0), H = q.size(1), T = q.size(2), D = q.size(3);
  TORCH_CHECK(k.size(1) == v.size(1) && H % k.size(1) == 0, "Attention: ", H,
              " query heads are not a multiple of ", k.size(1), " key/value heads");
  at::Tensor out;
#if EFT_TORCH_2_5
  if (ctx.cu_seqlens.defined()) {
    // Packed rows: every document (and padding run) its own causal sequence of the flattened tokens,
    // [B * T, heads, D]; grouped-query k/v as they are.
    const int64_t KV = k.size(1);
    const at::Tensor qf = q.transpose(1, 2).reshape({B * T, H, D}), kf = k.transpose(1, 2).reshape({B * T, KV, D}),
                     vf = v.transpose(1, 2).reshape({B * T, KV, D});
    out = std::get<0>(at::_flash_attention_forward(qf, kf, vf, ctx.cu_seqlens, ctx.cu_seqlens, ctx.max_seqlen,
                                                   ctx.max_seqlen, 0.0, /*is_causal=*/true, /*return_debug_mask=*/false));
    return out.reshape({B, T, H * D});
  }
#endif
#if TORCH_VERSION_MAJOR >= 2
  if (UseSdpa(q)) {
    // PyTorch 2.x picks flash / memory-efficient kernels itself; is_causal (no mask) is what lets
    // it use flash. Default scale is 1/sqrt(D), as here.
    if (ctx.causal_only) {
#if EFT_TORCH_2_5
      // Flash reads each k/v head for its group of query heads itself (enable_gqa): no copies of k
      // and v H / KV times over, forward and backward. With eft's other GPU speed-ups (kernels.h).
      if (k.size(1) != H && UseFusedKernels(q))
        out = at::scaled_dot_product_attention(q, k, v, {}, 0.0, /*is_causal=*/true, std::nullopt, /*enable_gqa=*/true);
#endif
      if (!out.defined()) out = at::scaled_dot_product_attention(q, RepeatKv(k, H), RepeatKv(v, H), {}, 0.0, true);
    } else {
      out = at::scaled_dot_product_attention(q, RepeatKv(k, H), RepeatKv(v, H), ctx.additive_mask, 0.0, false);
    }
  }
#endif
  if (!out.defined()) out = MathAttention(q, RepeatKv(k, H), RepeatKv(v, H), ctx.additive_mask);
  return out.transpose(1, 2).reshape({B, T, H * D});
}

}  // namespace eft::trainer
