// The fused kernels' work for one element (or one row's slice), shared by the CUDA kernels
// (fused_kernels.cu: threads and blocks call these) and their host twins (host_kernels.cc: loops
// call them), so the CPU tests run the same indexing, strides and arithmetic as the GPU.
//
// Before including this header, define for each element type T used:
//   float Load(const T*);  void Store(T*, float);   (host or device functions, as the includer needs)
// They convert to and from fp32 (Store rounds to nearest even, once).
#pragma once

#include <cstdint>

#include "trainer/kernels/cuda/fused_kernels.h"
#include "trainer/kernels/cuda/kernel_math.h"

namespace eft::trainer::kernels {

// RoPE on pair j of head h at (b, t): rotating (x[j], x[j + D/2]). Callers loop over the four
// indices (no division per element: on a GPU a 64-bit one costs more than the pair's memory traffic).
template <typename T>
EFT_HOST_DEVICE void RopeAt(const RopeArgs& a, int64_t b, int64_t t, int64_t h, int64_t j) {
  const int64_t half = a.D / 2;
  const T* x = static_cast<const T*>(a.x) + b * a.x_stride_b + t * a.x_stride_t + h * a.x_stride_h;
  const T* cos = static_cast<const T*>(a.cos) + b * a.table_stride_b + t * a.table_stride_t;
  const T* sin = static_cast<const T*>(a.sin) + b * a.table_stride_b + t * a.table_stride_t;
  float lo, hi;
  if (a.backward) {
    RopePairBackward(Load(x + j), Load(x + j + half), Load(cos + j), Load(sin + j), Load(cos + j + half),
                     Load(sin + j + half), &lo, &hi);
  } else {
    RopePair(Load(x + j), Load(x + j + half), Load(cos + j), Load(sin + j), Load(cos + j + half), Load(sin + j + half),
             &lo, &hi);
  }
  T* out = static_cast<T*>(a.out) + ((b * a.T + t) * a.H + h) * a.D;
  Store(out + j, lo);
  Store(out + j + half, hi);
}

template <typename T>
EFT_HOST_DEVICE void SwiGluAt(const SwiGluArgs& a, int64_t row, int64_t j) {
  const float g = Load(static_cast<const T*>(a.gate) + row * a.gate_row_stride + j);
  const float u = Load(static_cast<const T*>(a.up) + row * a.up_row_stride + j);
  Store(static_cast<T*>(a.out) + row * a.width + j, SwiGlu(g, u));
}

template <typename T>
EFT_HOST_DEVICE void SwiGluBackwardAt(const SwiGluBackwardArgs& a, int64_t row, int64_t j) {
  float d_gate, d_up;
  SwiGluBackward(Load(static_cast<const T*>(a.grad) + row * a.width + j),
                 Load(static_cast<const T*>(a.gate) + row * a.gate_row_stride + j),
                 Load(static_cast<const T*>(a.up) + row * a.up_row_stride + j), &d_gate, &d_up);
  Store(static_cast<T*>(a.d_gate) + row * a.d_gate_row_stride + j, d_gate);
  Store(static_cast<T*>(a.d_up) + row * a.d_up_row_stride + j, d_up);
}

// One thread's share of a row's log-sum-exp: the groups of a.lanes logits first, first + stride, ...,
// each group's in order.
template <typename T>
EFT_HOST_DEVICE LogSumExpState CrossEntropyPartial(const CrossEntropyArgs& a, int64_t row, int64_t first, int64_t stride) {
  const T* z = static_cast<const T*>(a.logits) + row * a.vocab;
  LogSumExpState s;
  for (int64_t g = first; g * a.lanes < a.vocab; g += stride)
    for (int64_t j = g * a.lanes; j < (g + 1) * a.lanes && j < a.vocab; ++j) LogSumExpAdd(s, Load(z + j));
  return s;
}
// Once the row's lse is known: its loss (call before any gradient of the row is written).
template <typename T>
EFT_HOST_DEVICE void CrossEntropyLossOf(const CrossEntropyArgs& a, int64_t row, float lse) {
  a.loss[row] = lse - Load(static_cast<const T*>(a.logits) + row * a.vocab + a.targets[row]);
}
template <typename T>
EFT_HOST_DEVICE void CrossEntropyGradAt(const CrossEntropyArgs& a, int64_t row, int64_t j, float lse, int64_t target) {
  T* z = static_cast<T*>(a.logits) + row * a.vocab + j;
  Store(z, CrossEntropyGrad(Load(z), lse, j == target));
}
// The threads of a row: the CUDA kernel runs this many, the host twin the same partition.
constexpr int kCrossEntropyRowThreads = 512;

EFT_HOST_DEVICE void AdamWAt(const AdamWArgs& a, int64_t i) {
  float p = a.param[i], m = a.exp_avg[i], v = a.exp_avg_sq[i];
  AdamWElement(p, a.grad[i], m, v, a.decay_mask[i], a.scalars);
  a.param[i] = p;
  a.exp_avg[i] = m;
  a.exp_avg_sq[i] = v;
}

}  // namespace eft::trainer::kernels
