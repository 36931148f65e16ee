#include "trainer/optim/adamw.h"

#include <c10/core/GradMode.h>
#include <cmath>

#include <c10/util/Exception.h>

#include "trainer/kernels/kernels.h"

namespace eft::trainer {

void AdamW::AddParam(at::Tensor param, at::Tensor grad, at::Tensor decay_mask) {
  TORCH_CHECK(param.defined() && grad.defined() && decay_mask.defined(), "AdamW::AddParam: undefined tensor");
  TORCH_CHECK(param.scalar_type() == at::kFloat && grad.scalar_type() == at::kFloat &&
                  decay_mask.scalar_type() == at::kFloat,
              "AdamW::AddParam: param, grad and decay_mask must be fp32 (got ", param.scalar_type(), ", ",
              grad.scalar_type(), ", ", decay_mask.scalar_type(), ")");
  TORCH_CHECK(param.sizes() == grad.sizes() && param.sizes() == decay_mask.sizes(),
              "AdamW::AddParam: shapes differ: param ", param.sizes(), ", grad ", grad.sizes(), ", decay_mask ",
              decay_mask.sizes());
  TORCH_CHECK(param.device() == grad.device() && param.device() == decay_mask.device(),
              "AdamW::AddParam: param, grad and decay_mask must be on one device");
  ParamState s;
  s.exp_avg = at::zeros_like(param, at::MemoryFormat::Contiguous);
  s.exp_avg_sq = at::zeros_like(param, at::MemoryFormat::Contiguous);
  s.param = std::move(param);
  s.grad = std::move(grad);
  s.decay_mask = std::move(decay_mask);
  params_.push_back(std::move(s));
}

void AdamW::Step(double lr) {
  ++step_;
  const double b1 = config_.beta1, b2 = config_.beta2;
  // Scalars are computed in double exactly as Python computes them, and handed to the same ATen
  // kernels torch.optim.AdamW uses; that is what makes the results bit-identical, not just close.
  const double step = static_cast<double>(step_);
  const double bias_correction1 = 1 - std::pow(b1, step);
  const double bias_correction2 = 1 - std::pow(b2, step);
  const double step_size = lr / bias_correction1;
  const double bias_correction2_sqrt = std::sqrt(bias_correction2);
  const double decay = 1 - lr * config_.weight_decay;

  c10::NoGradGuard no_grad;
  for (ParamState& s : params_) {
    if (s.param.numel() == 0) continue;
    if (UseFusedKernels(s.param)) {  // a GPU: the same arithmetic in one kernel (trainer/kernels/kernels.h)
      FusedAdamWStep(s.param, s.grad, s.exp_avg, s.exp_avg_sq, s.decay_mask,
                     {decay, b1, b2, config_.eps, step_size, bias_correction2_sqrt});
      continue;
    }
    if (decay != 1.0) {
      // torch multiplies by the scalar (rounded to fp32); masked-out elements are multiplied by
      // exactly 1, which leaves them untouched, so a per-element factor reproduces both cases.
      const auto opts = s.param.options();
      at::Tensor factor = at::where(s.decay_mask.ne(0), at::scalar_tensor(decay, opts), at::scalar_tensor(1.0, opts));
      s.param.mul_(factor);
    }
    s.exp_avg.lerp_(s.grad, 1 - b1);  // PyTorch 2.x's form (1.13 had mul_ + add_: other roundings)
    s.exp_avg_sq.mul_(b2).addcmul_(s.grad, s.grad, 1 - b2);
    at::Tensor denom = s.exp_avg_sq.sqrt();
    denom.div_(bias_correction2_sqrt).add_(config_.eps);
    s.param.addcdiv_(s.exp_avg, denom, -step_size);
  }
}

}  // namespace eft::trainer
