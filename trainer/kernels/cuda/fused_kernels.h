// Launchers of eft's fused CUDA kernels (fused_kernels.cu), and their host twins (host_kernels.cc).
// Plain pointers and sizes, no ATen and no CUDA headers, so the .cu file compiles quickly and this
// header is includable anywhere; the autograd functions and checks around them are in
// trainer/kernels/kernels.cc. Each launcher enqueues on
// `stream` (a cudaStream_t) and returns 0 or a cudaError_t code (KernelErrorString names it).
// Element types: the tensors' dtype, one of DType; arithmetic is fp32 (kernel_math.h), rounded once
// on store.
#pragma once

#include <cstdint>
#include <initializer_list>

#include "trainer/kernels/cuda/kernel_math.h"

namespace eft::trainer::kernels {

enum class DType { kFloat32, kBFloat16, kFloat16 };

// RoPE over x [B, T, H, D] (strides in elements, the last dimension contiguous) with tables cos, sin
// [B, T, D] (strides as given, last dimension contiguous), written to `out`, a contiguous [B, T, H, D].
// `backward`: x holds the output's gradient and `out` receives the input's (the transposed rotation).
struct RopeArgs {
  const void* x = nullptr;
  const void* cos = nullptr;
  const void* sin = nullptr;
  void* out = nullptr;
  int64_t B = 0, T = 0, H = 0, D = 0;
  int64_t x_stride_b = 0, x_stride_t = 0, x_stride_h = 0;
  int64_t table_stride_b = 0, table_stride_t = 0;
  DType dtype = DType::kFloat32;
  bool backward = false;
};
int LaunchRope(const RopeArgs& args, void* stream);

// SwiGLU over `rows` rows of `width` features: out = silu(gate) * up, out contiguous [rows, width];
// gate and up are read with their own row strides (e.g. the two halves of one merged projection).
struct SwiGluArgs {
  const void* gate = nullptr;
  const void* up = nullptr;
  void* out = nullptr;
  int64_t rows = 0, width = 0;
  int64_t gate_row_stride = 0, up_row_stride = 0;
  DType dtype = DType::kFloat32;
};
int LaunchSwiGlu(const SwiGluArgs& args, void* stream);
// Its backward: from the output gradient `grad` (contiguous [rows, width]) and the saved inputs,
// writes d_gate and d_up with their own row strides (they may be the halves of one buffer).
struct SwiGluBackwardArgs {
  const void* grad = nullptr;
  const void* gate = nullptr;
  const void* up = nullptr;
  void* d_gate = nullptr;
  void* d_up = nullptr;
  int64_t rows = 0, width = 0;
  int64_t gate_row_stride = 0, up_row_stride = 0, d_gate_row_stride = 0, d_up_row_stride = 0;
  DType dtype = DType::kFloat32;
};
int LaunchSwiGluBackward(const SwiGluBackwardArgs& args, void* stream);

// Whether a row kernel may move 16 bytes per access (8 bf16/fp16 or 4 fp32 elements): the row width
// and every operand's row stride a multiple of that many elements, every operand's start 16-byte
// aligned. The SwiGLU kernels then take the packed form (same arithmetic per element, so the same
// bits), else one element per access; the cross-entropy reads its rows in groups of that many.
inline bool VectorizableRows(DType dtype, int64_t width, std::initializer_list<const void*> starts,
                             std::initializer_list<int64_t> row_strides) {
  const int64_t lanes = dtype == DType::kFloat32 ? 4 : 8;
  if (width % lanes != 0) return false;
  for (const void* p : starts) {
    if (reinterpret_cast<std::uintptr_t>(p) % 16 != 0) return false;
  }
  for (int64_t stride : row_strides) {
    if (stride % lanes != 0) return false;
  }
  return true;
}

// Cross-entropy over `rows` rows of logits [rows, vocab] (contiguous) with one target each (int64, in
// [0, vocab): the caller checks): loss[r] = logsumexp(z_r) - z_r[target] in fp32, and, when
// `write_grad`, the logits overwritten with the gradient softmax(z_r) - onehot(target), rounded once
// to their dtype. One block per row, two passes over it (an online log-sum-exp, then the gradient).
// A row is read in groups of `lanes` neighbours (1, or 16 bytes' worth where VectorizableRows allows:
// one access each on the GPU); thread t of the row's 512 takes groups t, t + 512, ..., which fixes the
// order of its sum (the host twin keeps it).
struct CrossEntropyArgs {
  void* logits = nullptr;
  const int64_t* targets = nullptr;
  float* loss = nullptr;
  int64_t rows = 0, vocab = 0;
  int64_t lanes = 1;
  DType dtype = DType::kFloat32;
  bool write_grad = true;
};
int LaunchCrossEntropyGradInPlace(const CrossEntropyArgs& args, void* stream);

// One AdamW step over `n` fp32 elements (kernel_math.h's AdamWElement), parameters and moments
// updated in place: one pass where AdamW::Step's ATen ops take seven.
struct AdamWArgs {
  float* param = nullptr;
  const float* grad = nullptr;
  float* exp_avg = nullptr;
  float* exp_avg_sq = nullptr;
  const float* decay_mask = nullptr;
  int64_t n = 0;
  AdamWScalars scalars;
};
int LaunchAdamW(const AdamWArgs& args, void* stream);

const char* KernelErrorString(int code);

// The same kernels on the host (host_kernels.cc): kernel_bodies.h's per-element work in loops, the
// cross-entropy with the CUDA kernel's partition of a row into 512 partial sums merged in the same
// order. What the CPU tests run the fused ops through; eft-train itself uses them only on GPUs.
void HostRope(const RopeArgs& args);
void HostSwiGlu(const SwiGluArgs& args);
void HostSwiGluBackward(const SwiGluBackwardArgs& args);
void HostCrossEntropyGradInPlace(const CrossEntropyArgs& args);
void HostAdamW(const AdamWArgs& args);

}  // namespace eft::trainer::kernels
