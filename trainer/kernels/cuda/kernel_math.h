// The arithmetic of eft's fused CUDA kernels, one element or one pair at a time, in fp32: what
// kernel_bodies.h calls for each element on the GPU and on the host (host_kernels.cc), so the CPU
// tests (tests/unit/trainer/kernels) check it against the ATen composites the kernels replace.
#pragma once

#include <cmath>

#ifdef __CUDACC__
#define EFT_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define EFT_HOST_DEVICE inline
#endif

namespace eft::trainer::kernels {

// RoPE on one pair (x[j], x[j + D/2]) of a head, HF's rotate_half layout:
//   out[j]        = x[j] cos[j] - x[j + D/2] sin[j]
//   out[j + D/2]  = x[j + D/2] cos[j + D/2] + x[j] sin[j + D/2]
EFT_HOST_DEVICE void RopePair(float lo, float hi, float cos_lo, float sin_lo, float cos_hi, float sin_hi,
                              float* out_lo, float* out_hi) {
  *out_lo = lo * cos_lo - hi * sin_lo;
  *out_hi = hi * cos_hi + lo * sin_hi;
}

// The gradient of RopePair with respect to (lo, hi) for output gradients (g_lo, g_hi): the transpose
// of the rotation, i.e. RoPE by the negative angle when the two halves' tables agree.
EFT_HOST_DEVICE void RopePairBackward(float g_lo, float g_hi, float cos_lo, float sin_lo, float cos_hi,
                                      float sin_hi, float* d_lo, float* d_hi) {
  *d_lo = g_lo * cos_lo + g_hi * sin_hi;
  *d_hi = g_hi * cos_hi - g_lo * sin_lo;
}

EFT_HOST_DEVICE float Sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

// SwiGLU: silu(gate) * up.
EFT_HOST_DEVICE float SwiGlu(float gate, float up) { return gate * Sigmoid(gate) * up; }

// Its gradients for an output gradient g: d up = g silu(gate), d gate = g up silu'(gate) with
// silu'(x) = s (1 + x (1 - s)), s = sigmoid(x).
EFT_HOST_DEVICE void SwiGluBackward(float g, float gate, float up, float* d_gate, float* d_up) {
  const float s = Sigmoid(gate);
  *d_up = g * gate * s;
  *d_gate = g * up * s * (1.0f + gate * (1.0f - s));
}

// Online log-sum-exp (Milakov & Gimelshein): a running maximum and the sum of exp(x - maximum), so
// one pass over a row suffices and two partial states merge exactly.
struct LogSumExpState {
  float max = -INFINITY;
  float sum = 0.0f;
};
EFT_HOST_DEVICE void LogSumExpAdd(LogSumExpState& s, float x) {
  if (x == -INFINITY) return;  // adds exp(-inf) = 0; below it would be exp(-inf - -inf) = NaN
  if (x > s.max) {
    s.sum = s.sum * expf(s.max - x) + 1.0f;  // exp(-inf) = 0 for the first element
    s.max = x;
  } else {
    s.sum += expf(x - s.max);
  }
}
EFT_HOST_DEVICE LogSumExpState LogSumExpMerge(LogSumExpState a, LogSumExpState b) {
  if (b.max == -INFINITY) return a;
  if (a.max == -INFINITY) return b;
  if (a.max >= b.max) return {a.max, a.sum + b.sum * expf(b.max - a.max)};
  return {b.max, b.sum + a.sum * expf(a.max - b.max)};
}
EFT_HOST_DEVICE float LogSumExpValue(LogSumExpState s) { return s.max + logf(s.sum); }

// The cross-entropy gradient of one logit: softmax(z)[j] - [j == target] = exp(z[j] - lse) - onehot.
EFT_HOST_DEVICE float CrossEntropyGrad(float z, float lse, bool is_target) {
  return expf(z - lse) - (is_target ? 1.0f : 0.0f);
}

// AdamW on one element, in the order of AdamW::Step's ATen ops (trainer/optim/adamw.h), with the
// scalars as those ops round them to fp32:
//   p *= decay (where the mask is set); m = lerp(m, g, 1 - b1) in ATen's two-sided form;
//   v = v * b2, then v += (1 - b2) * g * g; p += -step_size * m / (sqrt(v) / sqrt(1 - b2^t) + eps).
struct AdamWScalars {
  float decay = 1, one_minus_b1 = 0, b2 = 0, one_minus_b2 = 0, bias_correction2_sqrt = 1, eps = 0, neg_step_size = 0;
};
EFT_HOST_DEVICE void AdamWElement(float& p, float g, float& m, float& v, float decay_mask, const AdamWScalars& s) {
  if (decay_mask != 0.0f) p *= s.decay;
  const float w = s.one_minus_b1;
  m = w < 0.5f ? m + w * (g - m) : g - (g - m) * (1.0f - w);
  v *= s.b2;
  v += s.one_minus_b2 * g * g;
  const float denom = sqrtf(v) / s.bias_correction2_sqrt + s.eps;
  p += s.neg_step_size * (m / denom);
}

}  // namespace eft::trainer::kernels
