// The seam between the decoder's maths and the device's kernels. On a GPU (a CUDA build, tensors on
// CUDA) RoPE, SwiGLU and the loss's softmax gradient run as eft's fused kernels (trainer/model/cuda),
// each one pass and one rounding where the ATen composite launches several and rounds after each;
// elsewhere the composites run, which are Hugging Face's arithmetic exactly (the CPU's tests and
// fixtures hold them bit for bit). docs/gpu.md: EFT_FUSED_KERNELS=0 turns the fused kernels off,
// for comparing the two.
#pragma once

#include <ATen/ATen.h>

namespace eft::trainer {

// True when this build has the fused kernels, `x` is a CUDA tensor of fp32, bf16 or fp16, and
// EFT_FUSED_KERNELS is not "0" (read once per process).
bool UseFusedKernels(const at::Tensor& x);
bool UseFusedKernels(const at::Device& device, at::ScalarType dtype);

// RoPE on x [B, T, H, D] (any strides with the last dimension contiguous, e.g. a view of a merged
// q/k/v projection) with the context's cos, sin [B, T, D] in x's dtype: a new contiguous [B, T, H, D].
// Differentiable in x. Needs UseFusedKernels(x).
at::Tensor FusedRope(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin);

// silu(gate) * up for gate, up [..., I] (rows may be strided: the halves of one projection), a new
// contiguous tensor; differentiable in both. The one-input form takes the merged [..., 2I] projection
// (gate first) and hands back its gradient as one tensor, with no concatenation. Need UseFusedKernels.
at::Tensor FusedSwiGlu(const at::Tensor& gate, const at::Tensor& up);
at::Tensor FusedSwiGlu(const at::Tensor& gate_up);

// For logits [N, V] (contiguous) and targets [N] (int64 in [0, V), unchecked here): returns each row's
// cross-entropy, logsumexp(z) - z[target], as fp32 [N], and with `write_grad` overwrites the logits
// with its gradient softmax(z) - onehot(target) in their own dtype. Not differentiable (LossSum's
// autograd function calls it). Needs UseFusedKernels(logits).
at::Tensor CrossEntropyGradInPlace(at::Tensor& logits, const at::Tensor& targets, bool write_grad = true);

}  // namespace eft::trainer
