#include "trainer/optim/clip.h"

#include <c10/core/GradMode.h>
#include <algorithm>
#include <cmath>

namespace eft::trainer {
namespace {

// Squares are summed in fp64 chunk by chunk: fp32 accumulation over billions of elements loses
// digits, and converting a whole multi-GB shard to fp64 at once would double its memory.
constexpr int64_t kChunk = int64_t{1} << 22;

at::Tensor SumOfSquares(const std::vector<at::Tensor>& grads) {
  at::TensorOptions opts = at::TensorOptions().dtype(at::kDouble);
  for (const at::Tensor& g : grads) {
    if (g.defined()) {
      opts = opts.device(g.device());
      break;
    }
  }
  at::Tensor total = at::zeros({1}, opts);
  for (const at::Tensor& g : grads) {
    if (!g.defined() || g.numel() == 0) continue;
    at::Tensor flat = g.reshape({-1});
    for (int64_t off = 0; off < flat.numel(); off += kChunk) {
      at::Tensor chunk = flat.narrow(0, off, std::min(kChunk, flat.numel() - off)).to(at::kDouble);
      total.add_(chunk.dot(chunk).to(total.device()));
    }
  }
  return total;
}

}  // namespace

double ClipGradNorm(const std::vector<at::Tensor>& grads, double max_norm,
                    const std::function<void(at::Tensor&)>& all_reduce_sum) {
  c10::NoGradGuard no_grad;
  at::Tensor sq = SumOfSquares(grads);
  // Every rank takes part in the all-reduce, even one holding no gradients, or the others hang.
  if (all_reduce_sum) all_reduce_sum(sq);
  const double norm = std::sqrt(sq.to(at::kCPU).item<double>());
  if (!std::isfinite(norm) || !(max_norm > 0)) return norm;
  // torch.nn.utils.clip_grad_norm_'s coefficient; below 1 only when the norm exceeds max_norm.
  const double coef = max_norm / (norm + 1e-6);
  if (coef < 1.0) {
    for (const at::Tensor& g : grads) {
      if (g.defined()) g.mul_(coef);
    }
  }
  return norm;
}

}  // namespace eft::trainer
