// AdamW on flat fp32 parameter shards (ZeRO-3: each rank updates only its slice), with decoupled
// weight decay masked per element (no decay on norms and biases), as torch.optim.AdamW computes it.
//
// The update is element-wise, so it does not matter how a tensor is cut into shards: two AdamW
// params covering the halves of a tensor produce bit-for-bit the update of the whole tensor. That is
// what lets a checkpoint written at one world size resume at another.
#pragma once

#include <cstdint>
#include <vector>

#include <ATen/ATen.h>

namespace eft::trainer {

struct AdamWConfig {
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.0;
  bool operator==(const AdamWConfig&) const = default;
};

class AdamW {
 public:
  explicit AdamW(AdamWConfig config) : config_(config) {}

  // `param` and `grad` are fp32 tensors of equal shape on one device that outlive the optimizer;
  // `decay_mask` is 1.0 where weight decay applies and 0.0 elsewhere (same shape, fp32). The moment
  // buffers are allocated here (zeros) so that a checkpoint can be loaded into them before the first
  // step. Throws c10::Error when the tensors do not fit together (a programming error).
  void AddParam(at::Tensor param, at::Tensor grad, at::Tensor decay_mask);

  // One update with learning rate `lr`, in torch 1.13's `_single_tensor_adamw` order of operations
  // (same ATen kernels, same scalars), so results agree with torch.optim.AdamW bit for bit on CPU:
  //   t += 1
  //   p *= 1 - lr * wd                      (only where decay_mask != 0)
  //   m  = m * b1 + (1 - b1) * g
  //   v  = v * b2 + (1 - b2) * g * g
  //   p += -(lr / (1 - b1^t)) * m / (sqrt(v) / sqrt(1 - b2^t) + eps)
  // On a GPU the same arithmetic runs as one fused kernel per param (trainer/kernels/kernels.h), in
  // fp32 with the same scalars; the compiler may fuse a multiply and an add, so it agrees with the
  // ATen ops to a few ulps rather than bit for bit.
  void Step(double lr);

  int64_t step() const { return step_; }
  // State for checkpoints: per param, exp_avg and exp_avg_sq (same shape as the param).
  struct ParamState {
    at::Tensor param, grad, decay_mask, exp_avg, exp_avg_sq;
  };
  std::vector<ParamState>& params() { return params_; }
  void set_step(int64_t step) { step_ = step; }

 private:
  AdamWConfig config_;
  int64_t step_ = 0;
  std::vector<ParamState> params_;
};

}  // namespace eft::trainer
