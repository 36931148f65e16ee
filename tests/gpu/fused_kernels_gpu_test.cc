// eft's fused CUDA kernels (trainer/kernels/kernels.h) on a GPU against the ATen composites they
// replace, run there by the same GPU: the bounds are kernel_math_test.cc's (the composites' roundings
// plus the kernel's one, in units of the magnitudes involved), now with the real indexing, strides,
// launches and warp reductions. Also prints each kernel's time beside the composite's at the
// benchmark's shape (Qwen2.5-0.5B, bf16, 4 x 2048 tokens). bench/gpu/run.sh runs it.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <limits>

#include <ATen/cuda/CUDAContext.h>
#include <gtest/gtest.h>

#include "trainer/kernels/kernels.h"
#include "trainer/model/llama_internal.h"
#include "trainer/optim/adamw.h"

namespace eft::trainer {
namespace {

class FusedKernelsGpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!at::cuda::is_available()) GTEST_FAIL() << "no CUDA device: this test is for the GPU machine (bench/gpu/run.sh)";
    ASSERT_TRUE(UseFusedKernels(at::zeros({1}, at::kCUDA))) << "fused kernels off (EFT_FUSED_KERNELS=0?)";
  }
};

double UnitRoundoff(at::ScalarType t) { return std::ldexp(1.0, t == at::kBFloat16 ? -8 : -24); }
at::Tensor D(const at::Tensor& t) { return t.detach().to(at::kCPU, at::kDouble); }

ModelConfig QwenShape(int64_t heads, int64_t kv_heads, int64_t head_dim) {
  ModelConfig c;
  c.hidden_size = heads * head_dim;
  c.num_attention_heads = heads;
  c.num_key_value_heads = kv_heads;
  c.head_dim = head_dim;
  c.rope_theta = 1000000.0;
  return c;
}

// Two packed documents per row, so positions restart mid-row; on the GPU.
Batch PackedPositions(int64_t B, int64_t T) {
  Batch b;
  b.input_ids = at::zeros({B, T}, at::TensorOptions().dtype(at::kLong).device(at::kCUDA));
  at::Tensor first = at::arange(T / 3, at::kLong), second = at::arange(T - T / 3, at::kLong);
  b.position_ids = at::cat({first, second}).unsqueeze(0).repeat({B, 1});
  b.segment_ids = at::cat({at::ones({T / 3}, at::kLong), at::full({T - T / 3}, 2, at::kLong)}).unsqueeze(0).repeat({B, 1});
  b.position_ids = b.position_ids.cuda();
  b.segment_ids = b.segment_ids.cuda();
  return b;
}

TEST_F(FusedKernelsGpuTest, RopeOnAMergedProjectionsViewIsTheCompositeWithinItsRoundings) {
  const int64_t B = 2, T = 96, H = 14, KV = 2, Dh = 64;
  const ModelConfig c = QwenShape(H, KV, Dh);
  const Batch batch = PackedPositions(B, T);
  for (at::ScalarType dtype : {at::kFloat, at::kBFloat16}) {
    const double u = UnitRoundoff(dtype);
    const AttentionContext ctx = MakeAttentionContext(c, batch, dtype);
    // q as the decoder sees it: a [B, T, H, D] view of the merged q/k/v product (row stride (H + 2 KV) D).
    at::Tensor qkv = (at::randn({B, T, (H + 2 * KV) * Dh}, at::kCUDA) * 2).to(dtype).requires_grad_(true);
    const at::Tensor g = at::randn({B, T, H, Dh}, at::kCUDA).to(dtype);
    auto q_of = [&](const at::Tensor& t) { return t.narrow(-1, 0, H * Dh).view({B, T, H, Dh}); };
    at::Tensor fused = FusedRope(q_of(qkv), ctx.cos, ctx.sin);
    (fused * g).sum().backward();
    const at::Tensor fused_grad = qkv.grad().clone();
    qkv.mutable_grad().reset();
    at::Tensor composite = internal::ApplyRope(q_of(qkv).transpose(1, 2), ctx).transpose(1, 2);
    (composite * g).sum().backward();
    // Magnitudes |x| |cos| + |rotate_half(x)| |sin| (forward) and the same of g (backward).
    auto magnitudes = [&](const at::Tensor& x) {
      const at::Tensor a = D(x).abs();
      const at::Tensor rot = at::cat({a.narrow(-1, Dh / 2, Dh / 2), a.narrow(-1, 0, Dh / 2)}, -1);
      return a * D(ctx.cos).abs().unsqueeze(2) + rot * D(ctx.sin).abs().unsqueeze(2);
    };
    EXPECT_LE(((D(fused) - D(composite)).abs() - 4 * u * magnitudes(q_of(qkv))).max().item<double>(), 0.0) << dtype;
    EXPECT_LE(((D(q_of(fused_grad)) - D(q_of(qkv.grad()))).abs() - 4 * u * magnitudes(g)).max().item<double>(), 0.0) << dtype;
    // Nothing reached k and v's columns.
    EXPECT_EQ(D(fused_grad.narrow(-1, H * Dh, 2 * KV * Dh)).abs().max().item<double>(), 0.0);
    EXPECT_TRUE(fused.is_contiguous());
  }
}

TEST_F(FusedKernelsGpuTest, SwiGluMergedAndSeparateAreTheCompositeWithinTheirRoundings) {
  const int64_t rows = 3 * 257, width = 4864;  // odd row count: no multiple of any block size
  const double slack = std::ldexp(1.0, -21);
  for (at::ScalarType dtype : {at::kFloat, at::kBFloat16}) {
    const double u = UnitRoundoff(dtype);
    const at::Tensor base = (at::randn({3, 257, 2 * width}, at::kCUDA) * 4).to(dtype);
    const at::Tensor g = at::randn({3, 257, width}, at::kCUDA).to(dtype);
    std::vector<at::Tensor> outs, grads;
    for (int form : {0, 1, 2}) {  // composite, fused merged, fused separate
      at::Tensor gate_up = base.clone().requires_grad_(true);
      at::Tensor gate = gate_up.narrow(-1, 0, width), up = gate_up.narrow(-1, width, width);
      at::Tensor out = form == 0 ? at::silu(gate) * up : form == 1 ? FusedSwiGlu(gate_up) : FusedSwiGlu(gate, up);
      (out * g).sum().backward();
      outs.push_back(D(out));
      grads.push_back(D(gate_up.grad()));
    }
    const at::Tensor x = D(base).narrow(-1, 0, width), up = D(base).narrow(-1, width, width), dy = D(g);
    const at::Tensor s = at::sigmoid(x);
    const at::Tensor exact_out = (x * s * up).abs(), exact_dup = (dy * x * s).abs();
    const at::Tensor exact_dgate = (dy * up * s * (1 + x * (1 - s))).abs() + slack * (dy * up).abs() * s * (1 + x.abs());
    for (int form : {1, 2}) {
      EXPECT_LE(((outs[form] - outs[0]).abs() - (3 * u + slack) * exact_out).max().item<double>(), 0.0) << dtype << form;
      EXPECT_LE(((grads[form].narrow(-1, width, width) - grads[0].narrow(-1, width, width)).abs() -
                 (3 * u + slack) * exact_dup).max().item<double>(), 0.0) << dtype << form;
      EXPECT_LE(((grads[form].narrow(-1, 0, width) - grads[0].narrow(-1, 0, width)).abs() -
                 (3 * u + slack) * exact_dgate).max().item<double>(), 0.0) << dtype << form;
    }
    EXPECT_EQ(rows, outs[1].numel() / width);
  }
}

TEST_F(FusedKernelsGpuTest, CrossEntropyOverQwensVocabularyIsTheCompositeWithinItsRoundings) {
  const int64_t rows = 300, vocab = 151936, k = (vocab + 511) / 512;
  const at::Tensor targets = at::randint(vocab, {rows}, at::TensorOptions().dtype(at::kLong).device(at::kCUDA));
  for (at::ScalarType dtype : {at::kFloat, at::kBFloat16}) {
    at::Tensor logits = (at::randn({rows, vocab}, at::kCUDA) * 4).to(dtype);
    logits.index_put_({at::arange(rows, at::kCUDA), targets}, 20.0);  // confident rows, as after training
    const at::Tensor z = logits.to(at::kFloat);
    const at::Tensor lse = at::logsumexp(z, -1, true);
    const at::Tensor ref_loss = (lse - z.gather(1, targets.unsqueeze(1))).squeeze(1);
    at::Tensor ref_grad = (z - lse).exp();
    ref_grad.scatter_add_(1, targets.unsqueeze(1), at::full({rows, 1}, -1.0, ref_grad.options()));
    at::Tensor grad = logits.clone();
    const at::Tensor loss = CrossEntropyGradInPlace(grad, targets);
    at::Tensor loss_only_logits = logits.clone();
    const at::Tensor loss_only = CrossEntropyGradInPlace(loss_only_logits, targets, /*write_grad=*/false);
    // kernel_math_test's bound on a row's log-sum-exp (fp32 sums of k terms per thread, merges, log).
    const double u = std::ldexp(1.0, -24);
    const at::Tensor lse_error = (2 * k + 44) * u + 2 * u * D(lse).abs().squeeze(1);
    EXPECT_LE(((D(loss) - D(ref_loss)).abs() - 2 * lse_error - 2 * u * D(z).abs().amax(-1)).max().item<double>(), 0.0) << dtype;
    EXPECT_TRUE(at::equal(loss, loss_only)) << dtype;
    EXPECT_TRUE(at::equal(loss_only_logits, logits)) << "write_grad=false must leave the logits alone";
    // The gradient: both sides round their fp32 values once to dtype (u_d each), which differ by
    // p (2 lse_error + 4 u).
    const double ud = UnitRoundoff(dtype);
    const at::Tensor p = D((z - lse).exp());
    const at::Tensor bound = ud * (D(grad).abs() + D(ref_grad).abs()) + p * (2 * lse_error.unsqueeze(1) + 4 * u) + 1e-30;
    EXPECT_LE(((D(grad) - D(ref_grad.to(dtype))).abs() - bound).max().item<double>(), 0.0) << dtype;
  }
}

// Grouped-query attention without copies of k and v (flash's enable_gqa, taken with the fused
// kernels) against SDPA on k and v repeated per query head: the same per-head sums; flash rounds its
// output once to bf16 (u of the output's magnitude, itself at most max |v|), and the k/v gradients
// sum a group of H / KV = 7 heads' contributions, in fp32 inside flash, in bf16 in repeat's backward
// (7 roundings of the partial sums, bounded by their magnitudes' sum).
TEST_F(FusedKernelsGpuTest, GroupedQueryAttentionWithoutCopiesIsTheRepeatedOne) {
  const int64_t B = 2, T = 256, H = 14, KV = 2, Dh = 64;
  ModelConfig c = QwenShape(H, KV, Dh);
  Batch batch;
  batch.input_ids = at::zeros({B, T}, at::TensorOptions().dtype(at::kLong).device(at::kCUDA));
  batch.position_ids = at::arange(T, batch.input_ids.options()).unsqueeze(0).repeat({B, 1});
  batch.segment_ids = at::ones({B, T}, batch.input_ids.options());
  const AttentionContext ctx = MakeAttentionContext(c, batch, at::kBFloat16);
  ASSERT_TRUE(ctx.causal_only);
  const double u = std::ldexp(1.0, -8);
  at::Tensor q = at::randn({B, H, T, Dh}, at::kCUDA).to(at::kBFloat16).requires_grad_(true);
  at::Tensor k = at::randn({B, KV, T, Dh}, at::kCUDA).to(at::kBFloat16).requires_grad_(true);
  at::Tensor v = at::randn({B, KV, T, Dh}, at::kCUDA).to(at::kBFloat16).requires_grad_(true);
  const at::Tensor g = at::randn({B, T, H * Dh}, at::kCUDA).to(at::kBFloat16);
  at::Tensor out = Attention(q, k, v, ctx);
  out.backward(g);
  const std::vector<at::Tensor> grads = {D(q.grad()), D(k.grad()), D(v.grad())};
  for (at::Tensor* t : {&q, &k, &v}) t->mutable_grad().reset();
  at::Tensor ref = at::scaled_dot_product_attention(q, k.repeat_interleave(H / KV, 1), v.repeat_interleave(H / KV, 1),
                                                    {}, 0.0, /*is_causal=*/true)
                       .transpose(1, 2).reshape({B, T, H * Dh});
  ref.backward(g);
  const double vmax = D(v).abs().max().item<double>();
  EXPECT_LE((D(out) - D(ref)).abs().max().item<double>(), 2 * u * vmax);
  const std::vector<at::Tensor> ref_grads = {D(q.grad()), D(k.grad()), D(v.grad())};
  for (size_t i = 0; i < 3; ++i) {
    // Per k/v head, the group's contributions' magnitudes: at most 7 times the largest gradient entry.
    const double scale = ref_grads[i].abs().max().item<double>() * (i == 0 ? 1 : H / KV);
    EXPECT_LE((grads[i] - ref_grads[i]).abs().max().item<double>(), (H / KV + 2) * u * scale) << "gradient " << i;
  }
}

// Packed rows through FlashAttention's variable-length kernel (no mask) against SDPA with the
// block-diagonal mask and k/v repeated per head (what packed rows ran before): the same causal sums
// inside each document, fp32 inside both kernels, one rounding of the output to bf16 each.
TEST_F(FusedKernelsGpuTest, PackedRowsThroughVarlenFlashAreTheMaskedAttention) {
  const int64_t B = 2, T = 384, H = 14, KV = 2, Dh = 64;
  const ModelConfig c = QwenShape(H, KV, Dh);
  const Batch batch = PackedPositions(B, T);
  const AttentionContext ctx = MakeAttentionContext(c, batch, at::kBFloat16);
  ASSERT_TRUE(ctx.cu_seqlens.defined());
  ASSERT_FALSE(ctx.additive_mask.defined());
  EXPECT_EQ(ctx.max_seqlen, T - T / 3);
  const double u = std::ldexp(1.0, -8);
  at::Tensor q = at::randn({B, H, T, Dh}, at::kCUDA).to(at::kBFloat16).requires_grad_(true);
  at::Tensor k = at::randn({B, KV, T, Dh}, at::kCUDA).to(at::kBFloat16).requires_grad_(true);
  at::Tensor v = at::randn({B, KV, T, Dh}, at::kCUDA).to(at::kBFloat16).requires_grad_(true);
  const at::Tensor g = at::randn({B, T, H * Dh}, at::kCUDA).to(at::kBFloat16);
  at::Tensor out = Attention(q, k, v, ctx);
  out.backward(g);
  const std::vector<at::Tensor> grads = {D(q.grad()), D(k.grad()), D(v.grad())};
  for (at::Tensor* t : {&q, &k, &v}) t->mutable_grad().reset();
  const at::Tensor seg = batch.segment_ids;
  const at::Tensor allowed = ((seg.unsqueeze(2) == seg.unsqueeze(1)) &
                              at::ones({T, T}, seg.options().dtype(at::kBool)).tril()).unsqueeze(1);
  const at::Tensor mask = at::zeros(allowed.sizes(), q.options().requires_grad(false))
                              .masked_fill_(allowed.logical_not(), -std::numeric_limits<double>::infinity());
  at::Tensor ref = at::scaled_dot_product_attention(q, k.repeat_interleave(H / KV, 1), v.repeat_interleave(H / KV, 1), mask)
                       .transpose(1, 2).reshape({B, T, H * Dh});
  ref.backward(g);
  EXPECT_LE((D(out) - D(ref)).abs().max().item<double>(), 2 * u * D(v).abs().max().item<double>());
  const std::vector<at::Tensor> ref_grads = {D(q.grad()), D(k.grad()), D(v.grad())};
  for (size_t i = 0; i < 3; ++i) {
    const double scale = ref_grads[i].abs().max().item<double>() * (i == 0 ? 1 : H / KV);
    EXPECT_LE((grads[i] - ref_grads[i]).abs().max().item<double>(), (H / KV + 2) * u * scale) << "gradient " << i;
  }
}

// AdamW on the GPU (one fused kernel per param) against AdamW on the CPU (ATen's ops, bit for bit
// torch.optim.AdamW): kernel_math_test's bound, 64 u of the magnitudes over 5 steps; the GPU may
// also fuse multiply-adds and its sqrt and division round to nearest as the CPU's do.
TEST_F(FusedKernelsGpuTest, AdamWInOneKernelIsAdamWOnTheCpuWithinItsRoundings) {
  const int64_t n = (1 << 20) + 3;
  const at::Tensor p0 = at::randn({n}), mask = (at::rand({n}) > 0.3).to(at::kFloat);
  const AdamWConfig config{0.9, 0.95, 1e-8, 0.1};
  AdamW cpu(config), gpu(config);
  at::Tensor p_cpu = p0.clone(), g_cpu = at::zeros({n}), p_gpu = p0.cuda(), g_gpu = at::zeros({n}, at::kCUDA);
  cpu.AddParam(p_cpu, g_cpu, mask);
  gpu.AddParam(p_gpu, g_gpu, mask.cuda());
  const double lr = 1e-2;
  double max_g = 0;
  for (int step = 1; step <= 5; ++step) {
    g_cpu.copy_(at::randn({n}) * (step == 3 ? 1e-4 : 1.0));
    g_gpu.copy_(g_cpu);
    max_g = std::max(max_g, g_cpu.abs().max().item<double>());
    cpu.Step(lr);
    gpu.Step(lr);
  }
  const double u = std::ldexp(1.0, -24);
  const auto &c = cpu.params()[0], &g = gpu.params()[0];
  EXPECT_LE(((D(g.param) - D(c.param)).abs() - 64 * u * (D(c.param).abs() + lr / (1 - config.beta1))).max().item<double>(), 0.0);
  EXPECT_LE(((D(g.exp_avg) - D(c.exp_avg)).abs() - 64 * u * max_g).max().item<double>(), 0.0);
  EXPECT_LE(((D(g.exp_avg_sq) - D(c.exp_avg_sq)).abs() - 64 * u * max_g * max_g).max().item<double>(), 0.0);
}

// The composite's and the kernel's time for each op at the benchmark's shape; printed, not asserted
// (the step's speed is measured by bench/gpu/run.sh's benchmark).
TEST_F(FusedKernelsGpuTest, PrintsTimesBesideTheComposites) {
  const int64_t B = 4, T = 2048, H = 14, KV = 2, Dh = 64, I = 4864, V = 151936;
  const ModelConfig c = QwenShape(H, KV, Dh);
  const Batch batch = PackedPositions(B, T);
  const AttentionContext ctx = MakeAttentionContext(c, batch, at::kBFloat16);
  auto time_ms = [](const std::function<void()>& f) {
    for (int i = 0; i < 3; ++i) f();
    at::cuda::device_synchronize();
    const auto t0 = std::chrono::steady_clock::now();
    const int reps = 20;
    for (int i = 0; i < reps; ++i) f();
    at::cuda::device_synchronize();
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() / reps;
  };
  auto report = [](const char* what, double composite, double fused) {
    std::printf("%-44s composite %8.3f ms  fused %8.3f ms  (%.2fx)\n", what, composite, fused, composite / fused);
  };
  const at::Tensor qkv = at::randn({B, T, (H + 2 * KV) * Dh}, at::kCUDA).to(at::kBFloat16).requires_grad_(true);
  const at::Tensor q = qkv.narrow(-1, 0, H * Dh).view({B, T, H, Dh});
  const at::Tensor gq = at::randn({B, H, T, Dh}, at::kCUDA).to(at::kBFloat16);
  report("RoPE on q, forward + backward",
         time_ms([&] { internal::ApplyRope(q.transpose(1, 2), ctx).backward(gq); }),
         time_ms([&] { FusedRope(q, ctx.cos, ctx.sin).transpose(1, 2).backward(gq); }));
  const at::Tensor gate_up = at::randn({B, T, 2 * I}, at::kCUDA).to(at::kBFloat16).requires_grad_(true);
  const at::Tensor gs = at::randn({B, T, I}, at::kCUDA).to(at::kBFloat16);
  report("SwiGLU, forward + backward",
         time_ms([&] {
           std::vector<at::Tensor> p = gate_up.chunk(2, -1);
           (at::silu(p[0]) * p[1]).backward(gs);
         }),
         time_ms([&] { FusedSwiGlu(gate_up).backward(gs); }));
  const int64_t rows = 1024;  // LossSum's chunk
  const at::Tensor logits = at::randn({rows, V}, at::kCUDA).to(at::kBFloat16);
  const at::Tensor targets = at::randint(V, {rows}, at::TensorOptions().dtype(at::kLong).device(at::kCUDA));
  report("cross-entropy + gradient, 1024 x 151936",
         time_ms([&] {
           at::Tensor z = logits.to(at::kFloat);
           at::Tensor lse = at::logsumexp(z, -1, true);
           (void)(lse - z.gather(1, targets.unsqueeze(1))).sum();
           at::Tensor d = z.sub_(lse).exp_();
           d.scatter_add_(1, targets.unsqueeze(1), at::full({rows, 1}, -1.0, d.options()));
           (void)d.to(at::kBFloat16);
         }),
         time_ms([&] {
           at::Tensor z = logits.clone();
           (void)CrossEntropyGradInPlace(z, targets).sum();
         }));
  // AdamW over the 494M parameters as one flat fp32 shard (world size 1).
  const int64_t params = 494'000'000;
  at::Tensor p = at::randn({params}, at::kCUDA), g = at::randn({params}, at::kCUDA), m = at::zeros_like(p),
             v = at::zeros_like(p), mask = at::ones_like(p);
  AdamWStepScalars s{1 - 1e-5, 0.9, 0.95, 1e-8, 1e-4, 0.5};
  report("AdamW step, 494M fp32 parameters",
         time_ms([&] {  // AdamW::Step's ATen ops
           p.mul_(at::where(mask.ne(0), at::scalar_tensor(s.decay, p.options()), at::scalar_tensor(1.0, p.options())));
           m.lerp_(g, 1 - s.beta1);
           v.mul_(s.beta2).addcmul_(g, g, 1 - s.beta2);
           at::Tensor denom = v.sqrt();
           denom.div_(s.bias_correction2_sqrt).add_(s.eps);
           p.addcdiv_(m, denom, -s.step_size);
         }),
         time_ms([&] { FusedAdamWStep(p, g, m, v, mask, s); }));
}

}  // namespace
}  // namespace eft::trainer
