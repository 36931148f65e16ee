// eft's fused CUDA kernels: RoPE, SwiGLU, the cross-entropy gradient and AdamW, each one pass where the
// ATen composites they replace launch several and write fp32 or bf16 intermediates. The arithmetic
// is kernel_math.h's (checked on the CPU); this file adds indexing, loads and stores.
#include "trainer/kernels/cuda/fused_kernels.h"

#include <algorithm>

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "trainer/kernels/cuda/kernel_math.h"

namespace eft::trainer::kernels {
namespace {

__device__ __forceinline__ float Load(const float* p) { return *p; }
__device__ __forceinline__ float Load(const __nv_bfloat16* p) { return __bfloat162float(*p); }
__device__ __forceinline__ float Load(const __half* p) { return __half2float(*p); }
__device__ __forceinline__ void Store(float* p, float v) { *p = v; }
__device__ __forceinline__ void Store(__nv_bfloat16* p, float v) { *p = __float2bfloat16_rn(v); }
__device__ __forceinline__ void Store(__half* p, float v) { *p = __float2half_rn(v); }

constexpr int kThreads = 256;

// Element-wise kernels loop over their elements with a grid stride; a grid of at most 2^16 blocks
// (x 256 threads) fills any current GPU many times over.
unsigned ElementwiseBlocks(int64_t n) {
  return static_cast<unsigned>(std::clamp<int64_t>((n + kThreads - 1) / kThreads, 1, int64_t{1} << 16));
}

__device__ __forceinline__ int64_t FirstIndex() { return blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; }
__device__ __forceinline__ int64_t GridStride() { return static_cast<int64_t>(gridDim.x) * blockDim.x; }

template <typename T>
__global__ void RopeKernel(RopeArgs a) {
  const T* x = static_cast<const T*>(a.x);
  const T* cos = static_cast<const T*>(a.cos);
  const T* sin = static_cast<const T*>(a.sin);
  T* out = static_cast<T*>(a.out);
  const int64_t half = a.D / 2, n = a.B * a.T * a.H * half;
  for (int64_t i = FirstIndex(); i < n; i += GridStride()) {
    const int64_t j = i % half;
    int64_t r = i / half;
    const int64_t h = r % a.H;
    r /= a.H;
    const int64_t t = r % a.T, b = r / a.T;
    const T* xr = x + b * a.x_stride_b + t * a.x_stride_t + h * a.x_stride_h;
    const int64_t table = b * a.table_stride_b + t * a.table_stride_t;
    const float cos_lo = Load(cos + table + j), sin_lo = Load(sin + table + j);
    const float cos_hi = Load(cos + table + j + half), sin_hi = Load(sin + table + j + half);
    float lo, hi;
    if (a.backward) {
      RopePairBackward(Load(xr + j), Load(xr + j + half), cos_lo, sin_lo, cos_hi, sin_hi, &lo, &hi);
    } else {
      RopePair(Load(xr + j), Load(xr + j + half), cos_lo, sin_lo, cos_hi, sin_hi, &lo, &hi);
    }
    T* o = out + ((b * a.T + t) * a.H + h) * a.D;
    Store(o + j, lo);
    Store(o + j + half, hi);
  }
}

// SwiGLU: blocks take rows (grid-stride), threads the features of a row: no division per element.
template <typename T>
__global__ void SwiGluKernel(SwiGluArgs a) {
  const T* gate = static_cast<const T*>(a.gate);
  const T* up = static_cast<const T*>(a.up);
  T* out = static_cast<T*>(a.out);
  for (int64_t row = blockIdx.x; row < a.rows; row += gridDim.x) {
    const T* g = gate + row * a.gate_row_stride;
    const T* u = up + row * a.up_row_stride;
    T* o = out + row * a.width;
    for (int64_t j = threadIdx.x; j < a.width; j += blockDim.x) Store(o + j, SwiGlu(Load(g + j), Load(u + j)));
  }
}

template <typename T>
__global__ void SwiGluBackwardKernel(SwiGluBackwardArgs a) {
  for (int64_t row = blockIdx.x; row < a.rows; row += gridDim.x) {
    const T* grad = static_cast<const T*>(a.grad) + row * a.width;
    const T* gate = static_cast<const T*>(a.gate) + row * a.gate_row_stride;
    const T* up = static_cast<const T*>(a.up) + row * a.up_row_stride;
    T* d_gate = static_cast<T*>(a.d_gate) + row * a.d_gate_row_stride;
    T* d_up = static_cast<T*>(a.d_up) + row * a.d_up_row_stride;
    for (int64_t j = threadIdx.x; j < a.width; j += blockDim.x) {
      float dg, du;
      SwiGluBackward(Load(grad + j), Load(gate + j), Load(up + j), &dg, &du);
      Store(d_gate + j, dg);
      Store(d_up + j, du);
    }
  }
}

unsigned RowBlocks(int64_t rows) { return static_cast<unsigned>(std::clamp<int64_t>(rows, 1, int64_t{1} << 16)); }

constexpr int kRowThreads = 512;

template <typename T>
__global__ void __launch_bounds__(kRowThreads) CrossEntropyKernel(CrossEntropyArgs a) {
  const int64_t row = blockIdx.x;
  T* z = static_cast<T*>(a.logits) + row * a.vocab;
  LogSumExpState s;
  for (int64_t j = threadIdx.x; j < a.vocab; j += kRowThreads) LogSumExpAdd(s, Load(z + j));
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
  const int64_t target = a.targets[row];
  __syncthreads();
  if (threadIdx.x == 0) {
    LogSumExpState total;
    for (int w = 0; w < kRowThreads / 32; ++w) total = LogSumExpMerge(total, {warp_max[w], warp_sum[w]});
    row_lse = LogSumExpValue(total);
    a.loss[row] = row_lse - Load(z + target);  // read before the second pass overwrites it
  }
  if (!a.write_grad) return;
  __syncthreads();
  const float lse = row_lse;
  for (int64_t j = threadIdx.x; j < a.vocab; j += kRowThreads) Store(z + j, CrossEntropyGrad(Load(z + j), lse, j == target));
}

__global__ void AdamWKernel(AdamWArgs a) {
  for (int64_t i = FirstIndex(); i < a.n; i += GridStride()) {
    float p = a.param[i], m = a.exp_avg[i], v = a.exp_avg_sq[i];
    AdamWElement(p, a.grad[i], m, v, a.decay_mask[i], a.scalars);
    a.param[i] = p;
    a.exp_avg[i] = m;
    a.exp_avg_sq[i] = v;
  }
}

}  // namespace

#define EFT_DISPATCH_DTYPE(dtype, KERNEL, grid, block, stream, args)                              \
  switch (dtype) {                                                                                \
    case DType::kFloat32: KERNEL<float><<<grid, block, 0, stream>>>(args); break;                 \
    case DType::kBFloat16: KERNEL<__nv_bfloat16><<<grid, block, 0, stream>>>(args); break;        \
    case DType::kFloat16: KERNEL<__half><<<grid, block, 0, stream>>>(args); break;                \
  }

int LaunchRope(const RopeArgs& a, void* stream) {
  const int64_t n = a.B * a.T * a.H * (a.D / 2);
  if (n == 0) return 0;
  EFT_DISPATCH_DTYPE(a.dtype, RopeKernel, ElementwiseBlocks(n), kThreads, static_cast<cudaStream_t>(stream), a);
  return static_cast<int>(cudaGetLastError());
}

int LaunchSwiGlu(const SwiGluArgs& a, void* stream) {
  if (a.rows * a.width == 0) return 0;
  EFT_DISPATCH_DTYPE(a.dtype, SwiGluKernel, RowBlocks(a.rows), kThreads,
                     static_cast<cudaStream_t>(stream), a);
  return static_cast<int>(cudaGetLastError());
}

int LaunchSwiGluBackward(const SwiGluBackwardArgs& a, void* stream) {
  if (a.rows * a.width == 0) return 0;
  EFT_DISPATCH_DTYPE(a.dtype, SwiGluBackwardKernel, RowBlocks(a.rows), kThreads,
                     static_cast<cudaStream_t>(stream), a);
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
