// eft's fused kernels beside the ATen composites they replace, at the benchmark's shape (Qwen2.5-0.5B,
// bf16, 4 x 2048 tokens): each op's forward + backward (or step) time, median of 20 after 3 warm-up
// runs. bench/gpu/run.sh runs it on the GPU machine; correctness is tests/unit/trainer/kernels.
//   kernel_times        (needs a CUDA device)
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <vector>

#include <ATen/ATen.h>
#include <torch/cuda.h>

#include "trainer/kernels/kernels.h"
#include "trainer/model/llama_internal.h"

namespace eft::trainer {
namespace {

double MedianMs(const std::function<void()>& f) {
  for (int i = 0; i < 3; ++i) f();
  std::vector<double> ms;
  for (int i = 0; i < 20; ++i) {
    torch::cuda::synchronize();
    const auto t0 = std::chrono::steady_clock::now();
    f();
    torch::cuda::synchronize();
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  std::nth_element(ms.begin(), ms.begin() + ms.size() / 2, ms.end());
  return ms[ms.size() / 2];
}

void Report(const char* what, double composite, double fused) {
  std::printf("| %s | %.3f | %.3f | %.2fx |\n", what, composite, fused, composite / fused);
}

int Main() {
  if (!torch::cuda::is_available()) {
    std::fprintf(stderr, "kernel_times: no CUDA device\n");
    return 2;
  }
  const int64_t B = 4, T = 2048, H = 14, KV = 2, Dh = 64, I = 4864, V = 151936;
  const auto bf16 = at::TensorOptions().dtype(at::kBFloat16).device(at::kCUDA);
  ModelConfig c;
  c.hidden_size = H * Dh, c.num_attention_heads = H, c.num_key_value_heads = KV, c.head_dim = Dh, c.rope_theta = 1e6;
  Batch batch;
  batch.input_ids = at::zeros({B, T}, bf16.dtype(at::kLong));
  batch.position_ids = at::arange(T, batch.input_ids.options()).unsqueeze(0).repeat({B, 1});
  batch.segment_ids = at::ones({B, T}, batch.input_ids.options());
  const AttentionContext ctx = MakeAttentionContext(c, batch, at::kBFloat16);
  std::printf("| op (Qwen2.5-0.5B shape, bf16, 4 x 2048 tokens) | ATen composite ms | fused ms | speed-up |\n|---|---|---|---|\n");

  const at::Tensor qkv = at::randn({B, T, (H + 2 * KV) * Dh}, bf16).requires_grad_(true);
  const at::Tensor q = qkv.narrow(-1, 0, H * Dh).view({B, T, H, Dh});
  const at::Tensor gq = at::randn({B, H, T, Dh}, bf16);
  Report("RoPE on q, forward + backward",
         MedianMs([&] { internal::ApplyRope(q.transpose(1, 2), ctx).backward(gq); }),
         MedianMs([&] { FusedRope(q, ctx.cos, ctx.sin).transpose(1, 2).backward(gq); }));

  const at::Tensor gate_up = at::randn({B, T, 2 * I}, bf16).requires_grad_(true);
  const at::Tensor gs = at::randn({B, T, I}, bf16);
  Report("SwiGLU, forward + backward",
         MedianMs([&] {
           std::vector<at::Tensor> p = gate_up.chunk(2, -1);
           (at::silu(p[0]) * p[1]).backward(gs);
         }),
         MedianMs([&] { FusedSwiGlu(gate_up).backward(gs); }));

  const int64_t rows = 3072;  // LossSum's chunk on the fused path (3 x 1024)
  const at::Tensor logits = at::randn({rows, V}, bf16);
  const at::Tensor targets = at::randint(V, {rows}, bf16.dtype(at::kLong));
  Report("cross-entropy + gradient, 3072 x 151936",
         MedianMs([&] {
           at::Tensor z = logits.to(at::kFloat);
           at::Tensor lse = at::logsumexp(z, -1, true);
           (void)(lse - z.gather(1, targets.unsqueeze(1))).sum();
           at::Tensor d = z.sub_(lse).exp_();
           d.scatter_add_(1, targets.unsqueeze(1), at::full({rows, 1}, -1.0, d.options()));
           (void)d.to(at::kBFloat16);
         }),
         MedianMs([&] {
           at::Tensor z = logits.clone();
           (void)CrossEntropyGradInPlace(z, targets).sum();
         }));

  // AdamW over 494M parameters as one flat fp32 shard (world size 1).
  const auto fp32 = bf16.dtype(at::kFloat);
  at::Tensor p = at::randn({494'000'000}, fp32), g = at::randn_like(p), m = at::zeros_like(p), v = at::zeros_like(p);
  const at::Tensor mask = at::ones_like(p);
  const AdamWStepScalars s{1 - 1e-5, 0.9, 0.95, 1e-8, 1e-4, 0.5};
  Report("AdamW step, 494M fp32 parameters",
         MedianMs([&] {  // AdamW::Step's ATen ops
           p.mul_(at::where(mask.ne(0), at::scalar_tensor(s.decay, fp32), at::scalar_tensor(1.0, fp32)));
           m.lerp_(g, 1 - s.beta1);
           v.mul_(s.beta2).addcmul_(g, g, 1 - s.beta2);
           at::Tensor denom = v.sqrt();
           denom.div_(s.bias_correction2_sqrt).add_(s.eps);
           p.addcdiv_(m, denom, -s.step_size);
         }),
         MedianMs([&] { FusedAdamWStep(p, g, m, v, mask, s); }));
  return 0;
}

}  // namespace
}  // namespace eft::trainer

int main() { return eft::trainer::Main(); }
