// eft's fused CUDA kernels: RoPE, SwiGLU, the cross-entropy gradient and AdamW, each one pass where the
// ATen composites they replace launch several and write fp32 or bf16 intermediates. Each thread's
// work is kernel_bodies.h's, which host_kernels.cc runs on the CPU for the tests; this file adds
// the threads, blocks and the cross-entropy's in-block reduction.
#include "trainer/kernels/cuda/fused_kernels.h"

#include <algorithm>

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

namespace eft::trainer::kernels {

// The element types' conversions, for kernel_bodies.h (host_kernels.cc defines the host ones).
__device__ __forceinline__ float Load(const float* p) { return *p; }
__device__ __forceinline__ float Load(const __nv_bfloat16* p) { return __bfloat162float(*p); }
__device__ __forceinline__ float Load(const __half* p) { return __half2float(*p); }
__device__ __forceinline__ void Store(float* p, float v) { *p = v; }
__device__ __forceinline__ void Store(__nv_bfloat16* p, float v) { *p = __float2bfloat16_rn(v); }
__device__ __forceinline__ void Store(__half* p, float v) { *p = __float2half_rn(v); }

}  // namespace eft::trainer::kernels

#include "trainer/kernels/cuda/kernel_bodies.h"

namespace eft::trainer::kernels {
namespace {

constexpr int kThreads = 256;

// Element-wise kernels loop over their elements with a grid stride; a grid of at most 2^16 blocks
// (x 256 threads) fills any current GPU many times over.
unsigned ElementwiseBlocks(int64_t n) {
  return static_cast<unsigned>(std::clamp<int64_t>((n + kThreads - 1) / kThreads, 1, int64_t{1} << 16));
}

__device__ __forceinline__ int64_t FirstIndex() { return blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; }
__device__ __forceinline__ int64_t GridStride() { return static_cast<int64_t>(gridDim.x) * blockDim.x; }

// RoPE: blocks take positions (x: t, y: b, grid-stride), a block's threads the pairs of every head
// at that position (x: the pair, y: the head); no index arithmetic beyond the loops.
template <typename T>
__global__ void RopeKernel(RopeArgs a) {
  const int64_t half = a.D / 2;
  for (int64_t b = blockIdx.y; b < a.B; b += gridDim.y)
    for (int64_t t = blockIdx.x; t < a.T; t += gridDim.x)
      for (int64_t h = threadIdx.y; h < a.H; h += blockDim.y)
        for (int64_t j = threadIdx.x; j < half; j += blockDim.x) RopeAt<T>(a, b, t, h, j);
}

// SwiGLU: blocks take rows (grid-stride), threads the features of a row: no division per element.
template <typename T>
__global__ void SwiGluKernel(SwiGluArgs a) {
  for (int64_t row = blockIdx.x; row < a.rows; row += gridDim.x)
    for (int64_t j = threadIdx.x; j < a.width; j += blockDim.x) SwiGluAt<T>(a, row, j);
}

template <typename T>
__global__ void SwiGluBackwardKernel(SwiGluBackwardArgs a) {
  for (int64_t row = blockIdx.x; row < a.rows; row += gridDim.x)
    for (int64_t j = threadIdx.x; j < a.width; j += blockDim.x) SwiGluBackwardAt<T>(a, row, j);
}

// 16-byte accesses: a memory-bound kernel moving 2-byte elements one at a time leaves much of the
// bandwidth unused. Each thread takes kVec<T> neighbours of a row (8 bf16/fp16, 4 fp32) in one load
// or store per operand, and computes each lane exactly as the one-element kernel (kernel_math.h), so
// the results are the same bits; used where every operand's rows allow it (VectorizableRows).
template <typename T>
constexpr int kVec = 16 / static_cast<int>(sizeof(T));
template <typename T>
struct alignas(16) Pack {
  T lane[kVec<T>];
};
template <typename T>
__device__ __forceinline__ Pack<T> LoadPack(const T* p) { return *reinterpret_cast<const Pack<T>*>(p); }
template <typename T>
__device__ __forceinline__ void StorePack(T* p, const Pack<T>& v) { *reinterpret_cast<Pack<T>*>(p) = v; }

template <typename T>
__global__ void SwiGluPackedKernel(SwiGluArgs a) {
  constexpr int V = kVec<T>;
  for (int64_t row = blockIdx.x; row < a.rows; row += gridDim.x) {
    const T* gate = static_cast<const T*>(a.gate) + row * a.gate_row_stride;
    const T* up = static_cast<const T*>(a.up) + row * a.up_row_stride;
    T* out = static_cast<T*>(a.out) + row * a.width;
    for (int64_t j = threadIdx.x * int64_t{V}; j < a.width; j += blockDim.x * int64_t{V}) {
      const Pack<T> g = LoadPack(gate + j), u = LoadPack(up + j);
      Pack<T> o;
#pragma unroll
      for (int l = 0; l < V; ++l) Store(&o.lane[l], SwiGlu(Load(&g.lane[l]), Load(&u.lane[l])));
      StorePack(out + j, o);
    }
  }
}

template <typename T>
__global__ void SwiGluBackwardPackedKernel(SwiGluBackwardArgs a) {
  constexpr int V = kVec<T>;
  for (int64_t row = blockIdx.x; row < a.rows; row += gridDim.x) {
    const T* grad = static_cast<const T*>(a.grad) + row * a.width;
    const T* gate = static_cast<const T*>(a.gate) + row * a.gate_row_stride;
    const T* up = static_cast<const T*>(a.up) + row * a.up_row_stride;
    T* d_gate = static_cast<T*>(a.d_gate) + row * a.d_gate_row_stride;
    T* d_up = static_cast<T*>(a.d_up) + row * a.d_up_row_stride;
    for (int64_t j = threadIdx.x * int64_t{V}; j < a.width; j += blockDim.x * int64_t{V}) {
      const Pack<T> g = LoadPack(grad + j), x = LoadPack(gate + j), u = LoadPack(up + j);
      Pack<T> dg, du;
#pragma unroll
      for (int l = 0; l < V; ++l) {
        float d_gate_l, d_up_l;
        SwiGluBackward(Load(&g.lane[l]), Load(&x.lane[l]), Load(&u.lane[l]), &d_gate_l, &d_up_l);
        Store(&dg.lane[l], d_gate_l);
        Store(&du.lane[l], d_up_l);
      }
      StorePack(d_gate + j, dg);
      StorePack(d_up + j, du);
    }
  }
}

unsigned RowBlocks(int64_t rows) { return static_cast<unsigned>(std::clamp<int64_t>(rows, 1, int64_t{1} << 16)); }

constexpr int kRowThreads = kCrossEntropyRowThreads;

// One block per row: each thread an online log-sum-exp over every 512th logit, merged by xor
// butterfly within warps and by thread 0 over the warps in order; then the gradient pass.
template <typename T>
__global__ void __launch_bounds__(kRowThreads) CrossEntropyKernel(CrossEntropyArgs a) {
  const int64_t row = blockIdx.x;
  constexpr int V = kVec<T>;
  // Packed: the same groups in the same order as CrossEntropyPartial's, one 16-byte load each.
  const bool packed = a.lanes == V;
  LogSumExpState s;
  if (packed) {
    const T* z = static_cast<const T*>(a.logits) + row * a.vocab;
    for (int64_t g = threadIdx.x; g * V < a.vocab; g += kRowThreads) {
      const Pack<T> v = LoadPack(z + g * V);
#pragma unroll
      for (int l = 0; l < V; ++l) LogSumExpAdd(s, Load(&v.lane[l]));
    }
  } else {
    s = CrossEntropyPartial<T>(a, row, threadIdx.x, kRowThreads);
  }
  for (int offset = 16; offset > 0; offset >>= 1) {
    const LogSumExpState other{__shfl_xor_sync(0xffffffffu, s.max, offset), __shfl_xor_sync(0xffffffffu, s.sum, offset)};
    s = LogSumExpMerge(s, other);
  }
  __shared__ float warp_max[kRowThreads / 32], warp_sum[kRowThreads / 32];
  __shared__ float row_lse;
  if (threadIdx.x % 32 == 0) {
    warp_max[threadIdx.x / 32] = s.max;
    warp_sum[threadIdx.x / 32] = s.sum;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    LogSumExpState total;
    for (int w = 0; w < kRowThreads / 32; ++w) total = LogSumExpMerge(total, {warp_max[w], warp_sum[w]});
    row_lse = LogSumExpValue(total);
    CrossEntropyLossOf<T>(a, row, row_lse);  // reads the target's logit before the gradient pass
  }
  if (!a.write_grad) return;
  __syncthreads();
  const float lse = row_lse;
  const int64_t target = a.targets[row];
  if (packed) {
    T* z = static_cast<T*>(a.logits) + row * a.vocab;
    for (int64_t g = threadIdx.x; g * V < a.vocab; g += kRowThreads) {
      Pack<T> v = LoadPack(z + g * V);
#pragma unroll
      for (int l = 0; l < V; ++l) Store(&v.lane[l], CrossEntropyGrad(Load(&v.lane[l]), lse, g * V + l == target));
      StorePack(z + g * V, v);
    }
    return;
  }
  for (int64_t j = threadIdx.x; j < a.vocab; j += kRowThreads) CrossEntropyGradAt<T>(a, row, j, lse, target);
}

__global__ void AdamWKernel(AdamWArgs a) {
  for (int64_t i = FirstIndex(); i < a.n; i += GridStride()) AdamWAt(a, i);
}

}  // namespace

#define EFT_DISPATCH_DTYPE(dtype, KERNEL, grid, block, stream, args)                              \
  switch (dtype) {                                                                                \
    case DType::kFloat32: KERNEL<float><<<grid, block, 0, stream>>>(args); break;                 \
    case DType::kBFloat16: KERNEL<__nv_bfloat16><<<grid, block, 0, stream>>>(args); break;        \
    case DType::kFloat16: KERNEL<__half><<<grid, block, 0, stream>>>(args); break;                \
  }

int LaunchRope(const RopeArgs& a, void* stream) {
  const int64_t half = a.D / 2;
  if (a.B * a.T * a.H * half == 0) return 0;
  // A block holds one position's pairs: half of them across x, heads across y, 256 threads at most.
  const unsigned pairs = static_cast<unsigned>(std::min<int64_t>(half, kThreads));
  const unsigned heads = static_cast<unsigned>(std::clamp<int64_t>(kThreads / pairs, 1, a.H));
  const dim3 grid(static_cast<unsigned>(std::min<int64_t>(a.T, int64_t{1} << 16)),
                  static_cast<unsigned>(std::min<int64_t>(a.B, 65535)));
  EFT_DISPATCH_DTYPE(a.dtype, RopeKernel, grid, dim3(pairs, heads), static_cast<cudaStream_t>(stream), a);
  return static_cast<int>(cudaGetLastError());
}

int LaunchSwiGlu(const SwiGluArgs& a, void* stream) {
  if (a.rows * a.width == 0) return 0;
  if (VectorizableRows(a.dtype, a.width, {a.gate, a.up, a.out}, {a.gate_row_stride, a.up_row_stride, a.width})) {
    EFT_DISPATCH_DTYPE(a.dtype, SwiGluPackedKernel, RowBlocks(a.rows), kThreads, static_cast<cudaStream_t>(stream), a);
  } else {
    EFT_DISPATCH_DTYPE(a.dtype, SwiGluKernel, RowBlocks(a.rows), kThreads, static_cast<cudaStream_t>(stream), a);
  }
  return static_cast<int>(cudaGetLastError());
}

int LaunchSwiGluBackward(const SwiGluBackwardArgs& a, void* stream) {
  if (a.rows * a.width == 0) return 0;
  if (VectorizableRows(a.dtype, a.width, {a.grad, a.gate, a.up, a.d_gate, a.d_up},
                       {a.width, a.gate_row_stride, a.up_row_stride, a.d_gate_row_stride, a.d_up_row_stride})) {
    EFT_DISPATCH_DTYPE(a.dtype, SwiGluBackwardPackedKernel, RowBlocks(a.rows), kThreads,
                       static_cast<cudaStream_t>(stream), a);
  } else {
    EFT_DISPATCH_DTYPE(a.dtype, SwiGluBackwardKernel, RowBlocks(a.rows), kThreads, static_cast<cudaStream_t>(stream), a);
  }
  return static_cast<int>(cudaGetLastError());
}

int LaunchCrossEntropyGradInPlace(const CrossEntropyArgs& a, void* stream) {
  if (a.rows == 0) return 0;
  // One block per row: rows come in chunks (LossSum's chunk_rows, 1024 by default), far below the
  // 2^31 - 1 blocks a grid may have.
  EFT_DISPATCH_DTYPE(a.dtype, CrossEntropyKernel, static_cast<unsigned>(a.rows), kRowThreads,
                     static_cast<cudaStream_t>(stream), a);
  return static_cast<int>(cudaGetLastError());
}

int LaunchAdamW(const AdamWArgs& a, void* stream) {
  if (a.n == 0) return 0;
  AdamWKernel<<<ElementwiseBlocks(a.n), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(a);
  return static_cast<int>(cudaGetLastError());
}

const char* KernelErrorString(int code) { return cudaGetErrorString(static_cast<cudaError_t>(code)); }

}  // namespace eft::trainer::kernels
