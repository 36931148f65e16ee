// The fused kernels' host twins: kernel_bodies.h's per-element work in plain loops (parallel over
// rows with at::parallel_for), so the CPU tests exercise the GPU's indexing, strides and arithmetic.
#include <algorithm>

#include <ATen/Parallel.h>
#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include "trainer/kernels/cuda/fused_kernels.h"

namespace eft::trainer::kernels {

// The element types' conversions for kernel_bodies.h: c10's round to nearest even, as CUDA's
// __float2bfloat16_rn / __float2half_rn.
inline float Load(const float* p) { return *p; }
inline float Load(const c10::BFloat16* p) { return static_cast<float>(*p); }
inline float Load(const c10::Half* p) { return static_cast<float>(*p); }
inline void Store(float* p, float v) { *p = v; }
inline void Store(c10::BFloat16* p, float v) { *p = c10::BFloat16(v); }
inline void Store(c10::Half* p, float v) { *p = c10::Half(v); }

}  // namespace eft::trainer::kernels

#include "trainer/kernels/cuda/kernel_bodies.h"

namespace eft::trainer::kernels {
namespace {

template <template <typename> class Body, typename Args>
void ForDType(DType dtype, const Args& a) {
  switch (dtype) {
    case DType::kFloat32: Body<float>::Run(a); break;
    case DType::kBFloat16: Body<c10::BFloat16>::Run(a); break;
    case DType::kFloat16: Body<c10::Half>::Run(a); break;
  }
}

template <typename T>
struct RopeLoop {
  static void Run(const RopeArgs& a) {
    at::parallel_for(0, a.B * a.T, 16, [&](int64_t begin, int64_t end) {
      for (int64_t bt = begin; bt < end; ++bt)
        for (int64_t h = 0; h < a.H; ++h)
          for (int64_t j = 0; j < a.D / 2; ++j) RopeAt<T>(a, bt / a.T, bt % a.T, h, j);
    });
  }
};

// Rows in parallel, each row's features in order: SwiGLU's bodies.
template <typename Args, void (*Body)(const Args&, int64_t, int64_t)>
void ForRowsAndFeatures(const Args& a) {
  at::parallel_for(0, a.rows, 16, [&](int64_t begin, int64_t end) {
    for (int64_t row = begin; row < end; ++row)
      for (int64_t j = 0; j < a.width; ++j) Body(a, row, j);
  });
}

template <typename T>
struct SwiGluLoop {
  static void Run(const SwiGluArgs& a) { ForRowsAndFeatures<SwiGluArgs, &SwiGluAt<T>>(a); }
};

template <typename T>
struct SwiGluBackwardLoop {
  static void Run(const SwiGluBackwardArgs& a) { ForRowsAndFeatures<SwiGluBackwardArgs, &SwiGluBackwardAt<T>>(a); }
};

// The CUDA kernel's reduction order: thread t of kCrossEntropyRowThreads sums logits t, t + 512, ...;
// warps of 32 merge by xor butterfly (offsets 16, 8, 4, 2, 1); lane 0 of each warp in order.
template <typename T>
struct CrossEntropyLoop {
  static void Run(const CrossEntropyArgs& a) {
    constexpr int kThreads = kCrossEntropyRowThreads;
    at::parallel_for(0, a.rows, 1, [&](int64_t begin, int64_t end) {
      LogSumExpState s[kThreads], next[kThreads];
      for (int64_t row = begin; row < end; ++row) {
        for (int t = 0; t < kThreads; ++t) s[t] = CrossEntropyPartial<T>(a, row, t, kThreads);
        for (int offset = 16; offset > 0; offset >>= 1) {
          for (int t = 0; t < kThreads; ++t) next[t] = LogSumExpMerge(s[t], s[t ^ offset]);
          std::copy(next, next + kThreads, s);
        }
        LogSumExpState total;
        for (int w = 0; w < kThreads / 32; ++w) total = LogSumExpMerge(total, s[w * 32]);
        const float lse = LogSumExpValue(total);
        CrossEntropyLossOf<T>(a, row, lse);
        if (!a.write_grad) continue;
        const int64_t target = a.targets[row];
        for (int64_t j = 0; j < a.vocab; ++j) CrossEntropyGradAt<T>(a, row, j, lse, target);
      }
    });
  }
};

}  // namespace

void HostRope(const RopeArgs& a) { ForDType<RopeLoop>(a.dtype, a); }
void HostSwiGlu(const SwiGluArgs& a) { ForDType<SwiGluLoop>(a.dtype, a); }
void HostSwiGluBackward(const SwiGluBackwardArgs& a) { ForDType<SwiGluBackwardLoop>(a.dtype, a); }
void HostCrossEntropyGradInPlace(const CrossEntropyArgs& a) { ForDType<CrossEntropyLoop>(a.dtype, a); }
void HostAdamW(const AdamWArgs& a) {
  at::parallel_for(0, a.n, 1 << 14, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) AdamWAt(a, i);
  });
}

}  // namespace eft::trainer::kernels
