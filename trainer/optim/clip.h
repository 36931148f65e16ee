// Global gradient-norm clipping across ranks: every rank holds a disjoint slice of the gradients,
// so the squared norms are summed with one all-reduce before scaling.
#pragma once

#include <functional>
#include <vector>

#include <ATen/ATen.h>

namespace eft::trainer {

// Returns the global L2 norm of `grads` (before clipping) and scales them in place by
// min(1, max_norm / (norm + 1e-6)) when max_norm > 0. `all_reduce_sum` sums a 1-element fp64 tensor
// over ranks (identity on one rank); every rank must call this, even with no gradients. Squares are
// summed in fp64, so the norm does not depend on how the gradients are split across ranks beyond fp64
// rounding. Non-finite norms are returned without scaling (the caller skips the step); max_norm <= 0
// only measures.
double ClipGradNorm(const std::vector<at::Tensor>& grads, double max_norm,
                    const std::function<void(at::Tensor&)>& all_reduce_sum);

}  // namespace eft::trainer
