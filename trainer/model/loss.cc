// LossSum: the lm_head and cross-entropy, chunked over rows.
//
// Plain autograd over chunks would still keep every chunk's [rows, vocab] fp32 log-probabilities
// alive until backward (log_softmax saves its output), so memory would not be bounded at all. A
// custom autograd function instead computes, chunk by chunk in forward, the loss and (when a
// backward will need them) the gradients for a unit upstream gradient; backward only scales them.
// Peak memory is one chunk of logits; the head costs 3 matmuls, as with plain autograd, not the 4
// that recomputing the logits in backward would; and the head weight is not saved for backward,
// so a sharded trainer may free the gathered weight right after forward.
#include <algorithm>
#include <atomic>

#include <torch/csrc/autograd/custom_function.h>

#include "trainer/kernels/kernels.h"
#include "trainer/model/llama.h"

namespace eft::trainer {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// Elements of the widest block of logits the composite loss widens at a time (4 MB in fp32).
constexpr int64_t kWideBlockElements = int64_t{1} << 20;

// Logits and cross-entropy in at least fp32 (fp64 stays fp64 for gradient checks).
at::ScalarType Wide(at::ScalarType t) { return at::promote_types(t, at::kFloat); }

// t *= g (a 0-dim tensor) without rounding g to t's dtype: a bf16 tensor times a bf16-rounded
// 1/num_tokens would scale the whole gradient by up to 0.2%. Done in row blocks to bound the fp32
// temporary.
void ScaleInPlace(at::Tensor& t, const at::Tensor& g) {
  if (Wide(t.scalar_type()) == t.scalar_type()) {
    t.mul_(g.to(t.scalar_type()));
    return;
  }
  const int64_t block = 4096;
  for (int64_t start = 0; start < t.size(0); start += block) {
    at::Tensor part = t.narrow(0, start, std::min(block, t.size(0) - start));
    part.copy_(part.to(Wide(t.scalar_type())).mul_(g));
  }
}

// sum += a b with a, b in bf16/fp16 and sum in fp32, cuBLAS accumulating straight into the sum: no
// [V, H] product in the compute dtype (272 MB at Qwen's vocabulary) rounded and then added. ATen's
// CUDA addmm takes an fp32 out_dtype for such inputs in the releases that have it, but some also
// require `self` in the inputs' dtype; the first refusal is remembered and the caller adds the
// rounded product instead (false).
bool AccumulateProductInFp32(at::Tensor& sum, const at::Tensor& a, const at::Tensor& b) {
  static std::atomic<bool> refused{false};
  if (refused.load()) return false;
  try {
    at::addmm_out(sum, sum, a, b, at::kFloat);
    return true;
  } catch (const c10::Error&) {
    refused.store(true);
    return false;
  }
}

struct ChunkedHeadLoss : public torch::autograd::Function<ChunkedHeadLoss> {
  // rows [N, H] (compute dtype), head [V, H], targets [N] int64 in [0, V). Returns sum of -log p.
  // `with_grads`: autograd is recording and a backward will follow.
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& rows, const at::Tensor& head,
                            const at::Tensor& targets, int64_t chunk, bool with_grads) {
    const at::ScalarType wide = Wide(rows.scalar_type());
    const bool want_rows = with_grads && rows.requires_grad(), want_head = with_grads && head.requires_grad();
    at::Tensor grad_rows = want_rows ? at::empty_like(rows) : at::Tensor();
    at::Tensor total = at::zeros({}, rows.options().dtype(wide));
    // The fused kernel needs no fp32 copy of a chunk's logits (6 bytes per logit in bf16 become 2):
    // three times the rows in the same memory, and a third as many passes over the fp32 head
    // gradient.
    const bool fused = UseFusedKernels(rows);
    if (fused && rows.scalar_type() != wide) chunk *= 3;
    // The head gradient accumulates over chunks in at least fp32, whatever the weights' dtype. With
    // one chunk (a micro-batch's rows usually fit one) the composite's product is the gradient: an fp32
    // sum of one bf16 term rounds back to that term, and no [V, H] fp32 buffer is zeroed and converted
    // per micro-batch (113 MB for SmolLM2: ~0.5 s of a 20 s step on the CPU).
    const bool product_is_gradient = want_head && !fused && rows.size(0) > 0 && rows.size(0) <= chunk;
    at::Tensor grad_head = want_head && !product_is_gradient
                               ? at::zeros(head.sizes(), head.options().dtype(Wide(head.scalar_type())))
                               : at::Tensor();
    for (int64_t start = 0; start < rows.size(0); start += chunk) {
      const int64_t n = std::min(chunk, rows.size(0) - start);
      const at::Tensor r = rows.narrow(0, start, n), t = targets.narrow(0, start, n).unsqueeze(1);
      at::Tensor dlogits;
      if (fused) {
        // One kernel: the row's log-sum-exp in fp32 and the gradient below written over the logits,
        // rounded once to the compute dtype, as the composite's last cast rounds it.
        at::Tensor logits = at::linear(r, head);
        total += CrossEntropyGradInPlace(logits, t.squeeze(1), /*write_grad=*/want_rows || want_head).sum();
        if (!want_rows && !want_head) continue;
        dlogits = logits;
      } else {
        at::Tensor logits = at::linear(r, head);
        const bool write_grad = want_rows || want_head;
        at::Tensor row_loss = at::empty({n, 1}, logits.options().dtype(wide));
        // In blocks of rows, each widened on its own: the widened block and logsumexp's temporary stay
        // in cache, and no [n, V] fp32 tensor (100 MB at SmolLM2's vocabulary, twice) is allocated
        // per micro-batch. Rows are independent, so the values are the whole chunk's.
        const int64_t block = std::max<int64_t>(1, kWideBlockElements / std::max<int64_t>(1, logits.size(1)));
        for (int64_t b = 0; b < n; b += block) {
          const int64_t m = std::min(block, n - b);
          at::Tensor z = logits.narrow(0, b, m), tb = t.narrow(0, b, m);
          at::Tensor w = z.to(wide);  // z itself when the logits are already wide
          at::Tensor lse = at::logsumexp(w, -1, /*keepdim=*/true);
          row_loss.narrow(0, b, m).copy_(lse - w.gather(1, tb));
          if (!write_grad) continue;
          // d(-log softmax(z)[t]) / dz = softmax(z) - onehot(t), written over the logits.
          w.sub_(lse).exp_();
          w.scatter_add_(1, tb, at::full({m, 1}, -1.0, w.options()));
          if (!w.is_same(z)) z.copy_(w);
        }
        total += row_loss.sum();
        if (!write_grad) continue;
        dlogits = logits;
      }
      if (want_rows) {
        at::Tensor out = grad_rows.narrow(0, start, n);  // whole rows: contiguous
        at::mm_out(out, dlogits, head);
      }
      if (product_is_gradient) {
        grad_head = at::mm(dlogits.t(), r);
      } else if (want_head) {
        if (grad_head.scalar_type() == dlogits.scalar_type()) {
          grad_head.addmm_(dlogits.t(), r);
        } else if (!(fused && AccumulateProductInFp32(grad_head, dlogits.t(), r))) {
          AddConverted(grad_head, at::mm(dlogits.t(), r));
        }
      }
    }
    if (want_head) grad_head = grad_head.to(head.scalar_type());
    if (want_rows) ctx->saved_data["grad_rows"] = grad_rows;
    if (want_head) ctx->saved_data["grad_head"] = grad_head;
    return total;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    // Taken out, so they are freed with this call even if the graph is retained.
    auto take = [&](const char* key) {
      auto it = ctx->saved_data.find(key);
      if (it == ctx->saved_data.end()) return at::Tensor();
      at::Tensor t = it->second.toTensor();
      ctx->saved_data.erase(it);
      return t;
    };
    at::Tensor grad_rows = take("grad_rows"), grad_head = take("grad_head");
    TORCH_CHECK(grad_rows.defined() || grad_head.defined(),
                "LossSum: backward without gradients computed in forward (was it run under no_grad, or "
                "backward called twice?)");
    const at::Tensor g = grad_outputs[0];
    if (grad_rows.defined()) ScaleInPlace(grad_rows, g);
    if (grad_head.defined()) ScaleInPlace(grad_head, g);
    return {grad_rows, grad_head, at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

}  // namespace

at::Tensor LossSum(const ModelConfig& c, const RootWeights& root, const at::Tensor& hidden, const at::Tensor& labels,
                   int64_t chunk_rows) {
  TORCH_CHECK(chunk_rows > 0, "LossSum: chunk_rows must be > 0");
  TORCH_CHECK(labels.sizes() == hidden.sizes().slice(0, hidden.dim() - 1), "LossSum: labels ", labels.sizes(),
              " do not match hidden ", hidden.sizes());
  at::Tensor flat_labels = labels.reshape({-1}).to(hidden.device());
  // Only trained rows reach the head (prompt tokens are often most of an SFT batch). The row
  // selection is one host sync per micro-batch.
  at::Tensor index = flat_labels.ne(-100).nonzero().squeeze(1);
  at::Tensor targets = flat_labels.index_select(0, index);
  if (targets.numel() > 0) {
    const int64_t lo = targets.min().item<int64_t>(), hi = targets.max().item<int64_t>();
    TORCH_CHECK(lo >= 0 && hi < c.vocab_size, "LossSum: label ", lo < 0 ? lo : hi,
                " is outside the vocabulary [0, ", c.vocab_size, ") and is not -100");
  }
  // RMSNorm is per row, so normalising only the selected rows is the same as Logits' full pass.
  at::Tensor rows = hidden.reshape({-1, hidden.size(-1)}).index_select(0, index);
  rows = RmsNorm(rows, root.final_norm, c.rms_norm_eps);
  const bool with_grads = at::GradMode::is_enabled() && (rows.requires_grad() || root.lm_head.requires_grad());
  return ChunkedHeadLoss::apply(rows, root.lm_head, targets, chunk_rows, with_grads);
}

}  // namespace eft::trainer
