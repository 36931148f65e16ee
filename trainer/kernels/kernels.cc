// The fused ops: their checks, autograd functions, and where they run: on CUDA tensors the kernels of
// cuda/fused_kernels.cu (built when the LibTorch has CUDA: EFT_WITH_CUDA_KERNELS), on CPU tensors
// their host twins (host_kernels.cc), which run the same per-element code for the tests.
#include "trainer/kernels/kernels.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <initializer_list>

#include <torch/csrc/autograd/custom_function.h>

#include "trainer/kernels/cuda/fused_kernels.h"
#include "trainer/kernels/gpu_info.h"

#ifdef EFT_WITH_CUDA_KERNELS
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#define EFT_CUDA_LAUNCHER(name) &kernels::Launch##name
#else
#define EFT_CUDA_LAUNCHER(name) nullptr
#endif

namespace eft::trainer {
namespace {

// EFT_FUSED_KERNELS: unset or anything else: on (GPUs); "0": off; "cpu": on, the CPU included
// (their host twins: for tests of the trainer's fused paths; the CPU composites are HF's arithmetic).
const char* FusedKernelsSetting() {
  static const char* const setting = [] {
    const char* v = std::getenv("EFT_FUSED_KERNELS");
    return v == nullptr ? "" : v;
  }();
  return setting;
}
bool FusedKernelsWanted() { return std::strcmp(FusedKernelsSetting(), "0") != 0; }
bool FusedKernelsOnTheCpu() { return std::strcmp(FusedKernelsSetting(), "cpu") == 0; }

bool SupportedDType(at::ScalarType t) { return t == at::kFloat || t == at::kBFloat16 || t == at::kHalf; }

}  // namespace

bool UseFusedKernels(const at::Device& device, at::ScalarType t) {
  if (!SupportedDType(t) || !FusedKernelsWanted()) return false;
  if (device.is_cpu()) return FusedKernelsOnTheCpu();
#ifdef EFT_WITH_CUDA_KERNELS
  return device.is_cuda() && FusedKernelsRunOn(GetGpuProperties(device));
#else
  return false;
#endif
}

bool FusedKernelsRunOn(const GpuProperties& gpu) { return gpu.capability >= 80; }

bool UseFusedKernels(const at::Tensor& x) { return UseFusedKernels(x.device(), x.scalar_type()); }

bool FusedCudaKernelsBuilt() {
#ifdef EFT_WITH_CUDA_KERNELS
  return true;
#else
  return false;
#endif
}

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

kernels::DType DTypeOf(const at::Tensor& t) {
  switch (t.scalar_type()) {
    case at::kFloat: return kernels::DType::kFloat32;
    case at::kBFloat16: return kernels::DType::kBFloat16;
    case at::kHalf: return kernels::DType::kFloat16;
    default: break;
  }
  TORCH_CHECK(false, "fused kernels: unsupported dtype ", t.scalar_type());
  return kernels::DType::kFloat32;  // not reached
}

// Runs one kernel where `on` lives: the CUDA launcher on the device's current stream, or the host
// twin on the CPU (both do nothing for no elements).
template <typename Args>
void Run(const at::Tensor& on, const Args& args, int (*cuda)(const Args&, void*), void (*host)(const Args&),
         const char* what) {
  if (on.is_cuda()) {
    TORCH_CHECK(cuda != nullptr, what, ": this eft-train was built without CUDA kernels (a LibTorch without CUDA)");
#ifdef EFT_WITH_CUDA_KERNELS
    c10::cuda::CUDAGuard guard(on.device());
    const int code = cuda(args, at::cuda::getCurrentCUDAStream(on.device().index()).stream());
    TORCH_CHECK(code == 0, what, ": CUDA error ", code, " (", kernels::KernelErrorString(code), ")");
#endif
    return;
  }
  TORCH_CHECK(on.is_cpu(), what, ": tensors on ", on.device(), " are not supported");
  host(args);
}

void CheckInput(const at::Tensor& x, const char* what) {
  TORCH_CHECK(x.defined() && (x.is_cuda() || x.is_cpu()) && SupportedDType(x.scalar_type()), what,
              ": needs a CPU or CUDA tensor of fp32, bf16 or fp16, got ",
              x.defined() ? c10::str(x.scalar_type(), " on ", x.device()) : std::string("an undefined tensor"));
}

void CheckOperand(const at::Tensor& t, const at::Tensor& like, const char* what) {
  TORCH_CHECK(t.defined() && t.device() == like.device() && t.scalar_type() == like.scalar_type(), what,
              ": every operand must be a ", like.scalar_type(), " tensor on ", like.device());
}

// The last dimension contiguous (the kernels index it directly).
at::Tensor LastDimContiguous(const at::Tensor& t) { return t.size(-1) <= 1 || t.stride(-1) == 1 ? t : t.contiguous(); }

// t [..., W] as rows of W with one row stride: the leading dimensions must collapse into one.
struct Rows {
  at::Tensor tensor;  // t, or a contiguous copy when its leading dimensions do not collapse
  int64_t rows = 0, width = 0, row_stride = 0;
};
Rows AsRows(at::Tensor t) {
  t = LastDimContiguous(t);
  if (t.dim() >= 3) {
    int64_t expected = t.stride(-2) * t.size(-2);
    bool collapses = true;
    for (int64_t d = t.dim() - 3; d >= 0; --d) {
      collapses = collapses && (t.size(d) == 1 || t.stride(d) == expected);
      expected *= t.size(d);
    }
    if (!collapses) t = t.contiguous();
  }
  Rows r;
  r.width = t.size(-1);
  r.rows = r.width == 0 ? 0 : t.numel() / r.width;
  r.row_stride = t.dim() >= 2 ? t.stride(-2) : r.width;
  r.tensor = t;
  return r;
}

// x [B, T, H, D] with a contiguous last dimension; tables [B, T, D].
at::Tensor RopeCall(at::Tensor x, const at::Tensor& cos, const at::Tensor& sin, bool backward) {
  TORCH_CHECK(x.dim() == 4 && x.size(3) % 2 == 0, "FusedRope: x must be [B, T, H, D] with D even, got ", x.sizes());
  CheckOperand(cos, x, "FusedRope");
  CheckOperand(sin, x, "FusedRope");
  TORCH_CHECK(cos.dim() == 3 && cos.sizes() == sin.sizes() && cos.strides() == sin.strides() && cos.size(0) == x.size(0) &&
                  cos.size(1) == x.size(1) && cos.size(2) == x.size(3) && cos.stride(2) == 1,
              "FusedRope: cos and sin must be [B, T, D] alike with a contiguous last dimension, got ", cos.sizes(),
              " and ", sin.sizes(), " for x ", x.sizes());
  x = LastDimContiguous(x);
  at::Tensor out = at::empty(x.sizes(), x.options().memory_format(at::MemoryFormat::Contiguous));
  kernels::RopeArgs a;
  a.x = x.data_ptr();
  a.cos = cos.data_ptr();
  a.sin = sin.data_ptr();
  a.out = out.data_ptr();
  a.B = x.size(0), a.T = x.size(1), a.H = x.size(2), a.D = x.size(3);
  a.x_stride_b = x.stride(0), a.x_stride_t = x.stride(1), a.x_stride_h = x.stride(2);
  a.table_stride_b = cos.stride(0), a.table_stride_t = cos.stride(1);
  a.dtype = DTypeOf(x);
  a.backward = backward;
  Run(x, a, EFT_CUDA_LAUNCHER(Rope), &kernels::HostRope, "FusedRope");
  return out;
}

struct RopeFunction : public torch::autograd::Function<RopeFunction> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) {
    ctx->save_for_backward({cos, sin});
    return RopeCall(x, cos, sin, /*backward=*/false);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list saved = ctx->get_saved_variables();
    return {RopeCall(grads[0], saved[0], saved[1], /*backward=*/true), at::Tensor(), at::Tensor()};
  }
};

at::Tensor SwiGluCall(const Rows& gate, const Rows& up, at::IntArrayRef out_sizes) {
  at::Tensor out = at::empty(out_sizes, gate.tensor.options().memory_format(at::MemoryFormat::Contiguous));
  kernels::SwiGluArgs a;
  a.gate = gate.tensor.data_ptr(), a.up = up.tensor.data_ptr(), a.out = out.data_ptr();
  a.rows = gate.rows, a.width = gate.width;
  a.gate_row_stride = gate.row_stride, a.up_row_stride = up.row_stride;
  a.dtype = DTypeOf(gate.tensor);
  Run(gate.tensor, a, EFT_CUDA_LAUNCHER(SwiGlu), &kernels::HostSwiGlu, "FusedSwiGlu");
  return out;
}

// Writes d_gate and d_up (row strides given, e.g. the halves of one buffer) from the output gradient.
void SwiGluBackwardCall(const at::Tensor& grad_out, const Rows& gate, const Rows& up, void* d_gate, void* d_up,
                        int64_t d_gate_row_stride, int64_t d_up_row_stride) {
  const at::Tensor grad = grad_out.contiguous();
  kernels::SwiGluBackwardArgs a;
  a.grad = grad.data_ptr(), a.gate = gate.tensor.data_ptr(), a.up = up.tensor.data_ptr();
  a.d_gate = d_gate, a.d_up = d_up;
  a.rows = gate.rows, a.width = gate.width;
  a.gate_row_stride = gate.row_stride, a.up_row_stride = up.row_stride;
  a.d_gate_row_stride = d_gate_row_stride, a.d_up_row_stride = d_up_row_stride;
  a.dtype = DTypeOf(gate.tensor);
  Run(gate.tensor, a, EFT_CUDA_LAUNCHER(SwiGluBackward), &kernels::HostSwiGluBackward, "FusedSwiGlu backward");
}

struct SwiGluFunction : public torch::autograd::Function<SwiGluFunction> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& gate, const at::Tensor& up) {
    ctx->save_for_backward({gate, up});
    return SwiGluCall(AsRows(gate), AsRows(up), gate.sizes());
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list saved = ctx->get_saved_variables();
    const Rows gate = AsRows(saved[0]), up = AsRows(saved[1]);
    at::Tensor d_gate = at::empty(saved[0].sizes(), saved[0].options().memory_format(at::MemoryFormat::Contiguous));
    at::Tensor d_up = at::empty(saved[1].sizes(), saved[1].options().memory_format(at::MemoryFormat::Contiguous));
    SwiGluBackwardCall(grads[0], gate, up, d_gate.data_ptr(), d_up.data_ptr(), gate.width, gate.width);
    return {d_gate, d_up};
  }
};

// gate_up [..., 2I] contiguous: its gradient is one [..., 2I] buffer the kernel fills by halves.
struct MergedSwiGluFunction : public torch::autograd::Function<MergedSwiGluFunction> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& gate_up) {
    ctx->save_for_backward({gate_up});
    const int64_t width = gate_up.size(-1) / 2;
    std::vector<int64_t> out_sizes = gate_up.sizes().vec();
    out_sizes.back() = width;
    return SwiGluCall(AsRows(gate_up.narrow(-1, 0, width)), AsRows(gate_up.narrow(-1, width, width)), out_sizes);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const at::Tensor gate_up = ctx->get_saved_variables()[0];
    const int64_t width = gate_up.size(-1) / 2;
    const Rows gate = AsRows(gate_up.narrow(-1, 0, width)), up = AsRows(gate_up.narrow(-1, width, width));
    at::Tensor d = at::empty(gate_up.sizes(), gate_up.options().memory_format(at::MemoryFormat::Contiguous));
    char* base = static_cast<char*>(d.data_ptr());
    SwiGluBackwardCall(grads[0], gate, up, base, base + width * d.element_size(), 2 * width, 2 * width);
    return {d};
  }
};

}  // namespace

at::Tensor FusedRope(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) {
  CheckInput(x, "FusedRope");
  return RopeFunction::apply(x, cos, sin);
}

at::Tensor FusedSwiGlu(const at::Tensor& gate, const at::Tensor& up) {
  CheckInput(gate, "FusedSwiGlu");
  CheckOperand(up, gate, "FusedSwiGlu");
  TORCH_CHECK(gate.dim() >= 1 && gate.sizes() == up.sizes(), "FusedSwiGlu: gate ", gate.sizes(), " and up ", up.sizes(),
              " must have one shape");
  return SwiGluFunction::apply(gate, up);
}

at::Tensor FusedSwiGlu(const at::Tensor& gate_up) {
  CheckInput(gate_up, "FusedSwiGlu");
  TORCH_CHECK(gate_up.dim() >= 1 && gate_up.size(-1) % 2 == 0, "FusedSwiGlu: the merged projection's last dimension (",
              gate_up.sizes(), ") must be even");
  return MergedSwiGluFunction::apply(gate_up.contiguous());
}

at::Tensor CrossEntropyGradInPlace(at::Tensor& logits, const at::Tensor& targets, bool write_grad) {
  CheckInput(logits, "CrossEntropyGradInPlace");
  TORCH_CHECK(logits.dim() == 2 && logits.is_contiguous(), "CrossEntropyGradInPlace: logits must be a contiguous [N, V], got ",
              logits.sizes());
  TORCH_CHECK(targets.scalar_type() == at::kLong && targets.dim() == 1 && targets.size(0) == logits.size(0) &&
                  targets.device() == logits.device(),
              "CrossEntropyGradInPlace: targets must be int64 [", logits.size(0), "] on ", logits.device());
  const at::Tensor t = targets.contiguous();
  at::Tensor loss = at::empty({logits.size(0)}, logits.options().dtype(at::kFloat));
  kernels::CrossEntropyArgs a;
  a.logits = logits.data_ptr(), a.targets = t.data_ptr<int64_t>(), a.loss = loss.data_ptr<float>();
  a.rows = logits.size(0), a.vocab = logits.size(1);
  a.dtype = DTypeOf(logits);
  // 16 bytes per access where the rows allow; the host twin sums in the same groups.
  if (kernels::VectorizableRows(a.dtype, a.vocab, {a.logits}, {a.vocab})) a.lanes = 16 / logits.element_size();
  a.write_grad = write_grad;
  Run(logits, a, EFT_CUDA_LAUNCHER(CrossEntropyGradInPlace), &kernels::HostCrossEntropyGradInPlace,
        "CrossEntropyGradInPlace");
  return loss;
}

void FusedAdamWStep(at::Tensor& param, const at::Tensor& grad, at::Tensor& exp_avg, at::Tensor& exp_avg_sq,
                    const at::Tensor& decay_mask, const AdamWStepScalars& s) {
  CheckInput(param, "FusedAdamWStep");
  TORCH_CHECK(param.scalar_type() == at::kFloat && param.is_contiguous(), "FusedAdamWStep: param must be a contiguous fp32 tensor");
  for (const at::Tensor* t : std::initializer_list<const at::Tensor*>{&grad, &exp_avg, &exp_avg_sq, &decay_mask}) {
    CheckOperand(*t, param, "FusedAdamWStep");
    TORCH_CHECK(t->sizes() == param.sizes() && t->is_contiguous(), "FusedAdamWStep: every tensor must be a contiguous ",
                param.sizes());
  }
  kernels::AdamWArgs a;
  a.param = param.data_ptr<float>(), a.grad = grad.data_ptr<float>();
  a.exp_avg = exp_avg.data_ptr<float>(), a.exp_avg_sq = exp_avg_sq.data_ptr<float>();
  a.decay_mask = decay_mask.data_ptr<float>();
  a.n = param.numel();
  // The fp32 values ATen's ops would round these scalars to.
  a.scalars.decay = static_cast<float>(s.decay);
  a.scalars.one_minus_b1 = static_cast<float>(1 - s.beta1);
  a.scalars.b2 = static_cast<float>(s.beta2);
  a.scalars.one_minus_b2 = static_cast<float>(1 - s.beta2);
  a.scalars.bias_correction2_sqrt = static_cast<float>(s.bias_correction2_sqrt);
  a.scalars.eps = static_cast<float>(s.eps);
  a.scalars.neg_step_size = static_cast<float>(-s.step_size);
  Run(param, a, EFT_CUDA_LAUNCHER(AdamW), &kernels::HostAdamW, "FusedAdamWStep");
}

void AddConverted(at::Tensor& dst, const at::Tensor& src) {
  constexpr int64_t kChunk = int64_t{1} << 20;
  if (src.scalar_type() == dst.scalar_type() || !dst.device().is_cpu() || dst.numel() <= kChunk ||
      !dst.is_contiguous() || !src.is_contiguous() || src.sizes() != dst.sizes()) {
    dst.add_(src);
    return;
  }
  at::Tensor d = dst.view({-1});
  const at::Tensor s = src.view({-1});
  for (int64_t begin = 0; begin < d.numel(); begin += kChunk) {
    const int64_t n = std::min(kChunk, d.numel() - begin);
    d.narrow(0, begin, n).add_(s.narrow(0, begin, n));
  }
}

}  // namespace eft::trainer
