// eft's fused kernels beside the ATen composites they replace: each op's forward + backward (or step)
// time, median of 20 after 3 warm-up runs. On the GPU at the GPU benchmark's shape (Qwen2.5-0.5B,
// bf16, 4 x 2048 tokens); with `cpu`, the kernels' host twins (host_kernels.cc: the same per-element
// code in threaded loops) at SmolLM2-135M's shape (bf16, 1 x 2048 tokens), the data for deciding which
// fused ops the CPU should take (docs/benchmarks.md, "Fused ops on the CPU"). bench/gpu/run.sh runs it
// on the GPU machine; correctness is tests/unit/trainer/kernels.
//   kernel_times        (needs a CUDA device)
//   kernel_times cpu
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <torch/cuda.h>

#include "trainer/kernels/kernels.h"
#include "trainer/model/llama_internal.h"

namespace eft::trainer {
namespace {

bool on_gpu = true;

void Sync() {
  if (on_gpu) torch::cuda::synchronize();
}

double MedianMs(const std::function<void()>& f) {
  for (int i = 0; i < 3; ++i) f();
  std::vector<double> ms;
  for (int i = 0; i < 20; ++i) {
    Sync();
    const auto t0 = std::chrono::steady_clock::now();
    f();
    Sync();
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  std::nth_element(ms.begin(), ms.begin() + ms.size() / 2, ms.end());
  return ms[ms.size() / 2];
}

void Report(const char* what, double composite, double fused) {
  std::printf("| %s | %.3f | %.3f | %.2fx |\n", what, composite, fused, composite / fused);
}

int Main(bool cpu) {
  on_gpu = !cpu;
  if (on_gpu && !torch::cuda::is_available()) {
    std::fprintf(stderr, "kernel_times: no CUDA device (`kernel_times cpu` times the host twins)\n");
    return 2;
  }
  // Qwen2.5-0.5B at 4 x 2048 tokens on the GPU; SmolLM2-135M at 1 x 2048 on the CPU.
  const int64_t B = cpu ? 1 : 4, T = 2048, H = cpu ? 9 : 14, KV = cpu ? 3 : 2, Dh = 64, I = cpu ? 1536 : 4864,
                V = cpu ? 49152 : 151936, rows = cpu ? 1024 : 3072, params = cpu ? 134'515'008 : 494'000'000;
  const auto bf16 = at::TensorOptions().dtype(at::kBFloat16).device(cpu ? at::kCPU : at::kCUDA);
  ModelConfig c;
  c.hidden_size = H * Dh, c.num_attention_heads = H, c.num_key_value_heads = KV, c.head_dim = Dh, c.rope_theta = 1e6;
  Batch batch;
  batch.input_ids = at::zeros({B, T}, bf16.dtype(at::kLong));
  batch.position_ids = at::arange(T, batch.input_ids.options()).unsqueeze(0).repeat({B, 1});
  batch.segment_ids = at::ones({B, T}, batch.input_ids.options());
  const AttentionContext ctx = MakeAttentionContext(c, batch, at::kBFloat16);
  std::printf("| op (%s shape, bf16, %lld x 2048 tokens, %s) | ATen composite ms | fused ms | speed-up |\n|---|---|---|---|\n",
              cpu ? "SmolLM2-135M" : "Qwen2.5-0.5B", static_cast<long long>(B), cpu ? "CPU: host twins" : "GPU");

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

  const at::Tensor logits = at::randn({rows, V}, bf16);
  const at::Tensor targets = at::randint(V, {rows}, bf16.dtype(at::kLong));
  const std::string ce = "cross-entropy + gradient, " + std::to_string(rows) + " x " + std::to_string(V);
  Report(ce.c_str(),
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

  // AdamW over the model's parameters as one flat fp32 shard (world size 1).
  const auto fp32 = bf16.dtype(at::kFloat);
  at::Tensor p = at::randn({params}, fp32), g = at::randn_like(p), m = at::zeros_like(p), v = at::zeros_like(p);
  const at::Tensor mask = at::ones_like(p);
  const AdamWStepScalars s{1 - 1e-5, 0.9, 0.95, 1e-8, 1e-4, 0.5};
  const std::string adamw = "AdamW step, " + std::to_string(params / 1'000'000) + "M fp32 parameters";
  Report(adamw.c_str(),
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

int main(int argc, char** argv) {
  const bool cpu = argc > 1 && std::string(argv[1]) == "cpu";
  if (argc > 1 && !cpu) {
    std::fprintf(stderr, "usage: kernel_times [cpu]\n");
    return 2;
  }
  return eft::trainer::Main(cpu);
}
