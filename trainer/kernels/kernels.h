// The seam between the trainer's maths and the device's kernels. On a GPU (a CUDA build, tensors on
// CUDA) RoPE, SwiGLU, the loss's softmax gradient and AdamW run as eft's fused kernels
// (trainer/kernels/cuda), each one pass and one rounding where the ATen composite launches several
// and rounds after each; the trainer uses the composites elsewhere, which are Hugging Face's
// arithmetic exactly (the CPU's tests and fixtures hold them bit for bit). docs/gpu.md:
// EFT_FUSED_KERNELS=0 turns the fused kernels off, for comparing the two.
//
// The fused ops themselves take CPU tensors too: they then run the kernels' host twins, the same
// per-element code (cuda/kernel_bodies.h) in loops, which is how the CPU tests check the GPU's
// indexing and arithmetic. Each throws c10::Error for tensors that do not fit (a programming error).
#pragma once

#include <ATen/ATen.h>

namespace eft::trainer {

// True when this build has the CUDA kernels, the device is a GPU they run on (FusedKernelsRunOn),
// the dtype fp32, bf16 or fp16, and EFT_FUSED_KERNELS is not "0" (read once per process): the
// trainer's test for taking the fused ops. EFT_FUSED_KERNELS=cpu takes them on the CPU as well
// (their host twins), for the tests of the trainer's fused paths.
bool UseFusedKernels(const at::Tensor& x);
bool UseFusedKernels(const at::Device& device, at::ScalarType dtype);
// Whether this eft-train has the CUDA kernels (`eft-train version`).
bool FusedCudaKernelsBuilt();
// Whether the CUDA kernels run on this GPU: they are built for compute capability 8.0 and later
// (sm_80, sm_90: A100, H100, and the 8.x cards), where bf16 is native too.
struct GpuProperties;
bool FusedKernelsRunOn(const GpuProperties& gpu);

// RoPE on x [B, T, H, D] (any strides with the last dimension contiguous, e.g. a view of a merged
// q/k/v projection) with the context's cos, sin [B, T, D] in x's dtype: a new contiguous [B, T, H, D].
// Differentiable in x.
at::Tensor FusedRope(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin);

// silu(gate) * up for gate, up [..., I] (rows may be strided: the halves of one projection), a new
// contiguous tensor; differentiable in both. The one-input form takes the merged [..., 2I] projection
// (gate first) and hands back its gradient as one tensor, with no concatenation.
at::Tensor FusedSwiGlu(const at::Tensor& gate, const at::Tensor& up);
at::Tensor FusedSwiGlu(const at::Tensor& gate_up);

// For logits [N, V] (contiguous) and targets [N] (int64 in [0, V), unchecked here): returns each row's
// cross-entropy, logsumexp(z) - z[target], as fp32 [N], and with `write_grad` overwrites the logits
// with its gradient softmax(z) - onehot(target) in their own dtype. Not differentiable (LossSum's
// autograd function calls it).
at::Tensor CrossEntropyGradInPlace(at::Tensor& logits, const at::Tensor& targets, bool write_grad = true);

// dst += src where src may have a narrower dtype (a bf16 gradient into an fp32 sum), each element's sum
// as add_ gives it. On the CPU add_ first converts the whole source into a new tensor: for a
// vocabulary-sized gradient (SmolLM2: 49,152 x 576, 113 MB in fp32) a fresh allocation above
// malloc's mmap threshold, whose pages fault in on every call (~250 ms a call on a 2-core VM; docs/
// benchmarks.md, "SmolLM2-135M on the CPU"). Contiguous CPU tensors are added in 1M-element chunks
// instead, converted through a 4 MB buffer the heap reuses.
void AddConverted(at::Tensor& dst, const at::Tensor& src);

// One AdamW step in one kernel over contiguous fp32 tensors of one shape (param, exp_avg and
// exp_avg_sq updated in place), with AdamW::Step's scalars (trainer/optim/adamw.h: decay = 1 - lr wd,
// step_size = lr / (1 - b1^t), bias_correction2_sqrt = sqrt(1 - b2^t)).
struct AdamWStepScalars {
  double decay = 1, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, step_size = 0, bias_correction2_sqrt = 1;
};
void FusedAdamWStep(at::Tensor& param, const at::Tensor& grad, at::Tensor& exp_avg, at::Tensor& exp_avg_sq,
                    const at::Tensor& decay_mask, const AdamWStepScalars& scalars);

}  // namespace eft::trainer
