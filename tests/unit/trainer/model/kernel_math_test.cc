// The arithmetic of eft's fused CUDA kernels (trainer/kernels/cuda/kernel_math.h) on the CPU, through
// host copies of the kernels' loops, against the ATen composites they replace. The kernels compute in
// fp32 and round once on store, where the composites round after each op (bf16: unit roundoff
// u = 2^-8; fp32: u = 2^-24), so each bound below is the composite's roundings plus the kernel's one,
// in units of the magnitudes involved: a formula, not a measurement. On a GPU, bench/gpu/run.sh
// runs the kernels themselves against the composites (tests/gpu/fused_kernels_gpu_test.cc).
#include "trainer/kernels/cuda/kernel_math.h"

#include <cmath>
#include <vector>

#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>

#include "tiny_model.h"
#include "trainer/kernels/kernels.h"
#include "trainer/model/llama_internal.h"
#include "trainer/optim/adamw.h"

namespace eft::trainer {
namespace {

using kernels::LogSumExpState;

double UnitRoundoff(at::ScalarType t) { return std::ldexp(1.0, t == at::kBFloat16 ? -8 : -24); }

// fused_kernels.cu's RopeKernel, one (b, t, h, j) pair at a time, in fp32, rounded once to `dtype`.
at::Tensor HostRope(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin, bool backward) {
  const at::Tensor xf = x.to(at::kFloat).contiguous(), cf = cos.to(at::kFloat).contiguous(),
                   sf = sin.to(at::kFloat).contiguous();
  const int64_t B = x.size(0), T = x.size(1), H = x.size(2), D = x.size(3), half = D / 2;
  at::Tensor out = at::empty({B, T, H, D}, at::kFloat);
  const float *px = xf.data_ptr<float>(), *pc = cf.data_ptr<float>(), *ps = sf.data_ptr<float>();
  float* po = out.data_ptr<float>();
  for (int64_t i = 0; i < B * T * H * half; ++i) {
    const int64_t j = i % half, h = (i / half) % H, t = (i / half / H) % T, b = i / half / H / T;
    const float* xr = px + ((b * T + t) * H + h) * D;
    const int64_t table = (b * T + t) * D;
    float* o = po + ((b * T + t) * H + h) * D;
    (backward ? kernels::RopePairBackward : kernels::RopePair)(xr[j], xr[j + half], pc[table + j], ps[table + j],
                                                              pc[table + j + half], ps[table + j + half], o + j,
                                                              o + j + half);
  }
  return out.to(x.scalar_type());
}

// |x| |cos| + |rotate_half(x)| |sin| in double: the magnitudes the rotation sums ([B, T, H, D]).
at::Tensor RopeMagnitudes(const at::Tensor& x, const AttentionContext& ctx) {
  const int64_t half = x.size(-1) / 2;
  const at::Tensor a = x.to(at::kDouble).abs();
  const at::Tensor rotated = at::cat({a.narrow(-1, half, half), a.narrow(-1, 0, half)}, -1);
  const at::Tensor c = ctx.cos.to(at::kDouble).abs().unsqueeze(2), s = ctx.sin.to(at::kDouble).abs().unsqueeze(2);
  return a * c + rotated * s;
}

// RoPE sums two products: the composite rounds each product and the sum (3 roundings of at most
// u (|a| + |b|) each), the kernel only the sum, so they differ by at most 4 u (|a| + |b|) (first
// order; the 4 instead of 3 covers the kernel's fp32 sum and the second-order terms).
TEST(KernelMathTest, RopeAndItsGradientAreTheCompositeWithinItsRoundings) {
  const ModelConfig c = testing::TinyConfig("llama");
  const Batch batch = testing::MakeBatch({{{testing::RandomTokens(12, c.vocab_size, 1)}, 0, 3, 40},
                                          {{testing::RandomTokens(7, c.vocab_size, 2), testing::RandomTokens(5, c.vocab_size, 3)}, 0, 1, 0}},
                                         0);
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(5);
  const int64_t B = batch.input_ids.size(0), T = batch.input_ids.size(1), H = c.num_attention_heads, D = c.head_dim;
  const at::Tensor x0 = at::randn({B, T, H, D}, gen) * 2.0, g0 = at::randn({B, T, H, D}, gen);
  for (at::ScalarType dtype : {at::kFloat, at::kBFloat16}) {
    const AttentionContext ctx = MakeAttentionContext(c, batch, dtype);
    const double u = UnitRoundoff(dtype);
    at::Tensor x = x0.to(dtype).clone().requires_grad_(true);
    const at::Tensor g = g0.to(dtype);
    // The composite on [B, H, T, D] as the decoder calls it; the kernel on [B, T, H, D].
    const at::Tensor composite = internal::ApplyRope(x.transpose(1, 2), ctx).transpose(1, 2);
    (composite * g).sum().backward();
    const at::Tensor fused = HostRope(x.detach(), ctx.cos, ctx.sin, /*backward=*/false);
    const at::Tensor fused_grad = HostRope(g, ctx.cos, ctx.sin, /*backward=*/true);
    const at::Tensor forward_excess =
        (fused.to(at::kDouble) - composite.detach().to(at::kDouble)).abs() - 4 * u * RopeMagnitudes(x.detach(), ctx);
    EXPECT_LE(forward_excess.max().item<double>(), 0.0) << dtype;
    const at::Tensor backward_excess =
        (fused_grad.to(at::kDouble) - x.grad().to(at::kDouble)).abs() - 4 * u * RopeMagnitudes(g, ctx);
    EXPECT_LE(backward_excess.max().item<double>(), 0.0) << dtype;
    // And not trivially: the rotation moved the values.
    EXPECT_GT((fused.to(at::kDouble) - x0.to(at::kDouble)).abs().max().item<double>(), 0.1);
  }
}

// SwiGLU: the composite rounds silu(gate), then the product (backward: g * up, then silu_backward;
// g * silu(gate) for d up), 2 roundings against the kernel's 1. fp32's exp, reciprocal and the
// silu' expression 1 + x (1 - s) (which cancels near x = -1.28) add a few fp32 ulps of the
// magnitudes involved: 2^-21 |g up| s (1 + |x|) covers 8 of them.
TEST(KernelMathTest, SwiGluAndItsGradientsAreTheCompositeWithinTheirRoundings) {
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(9);
  const at::Tensor gate0 = at::randn({64, 96}, gen) * 4.0, up0 = at::randn({64, 96}, gen), g0 = at::randn({64, 96}, gen);
  const double slack = std::ldexp(1.0, -21);
  for (at::ScalarType dtype : {at::kFloat, at::kBFloat16}) {
    const double u = UnitRoundoff(dtype);
    at::Tensor gate = gate0.to(dtype).clone().requires_grad_(true), up = up0.to(dtype).clone().requires_grad_(true);
    const at::Tensor g = g0.to(dtype);
    const at::Tensor composite = at::silu(gate) * up;
    (composite * g).sum().backward();
    // The kernels' loops, in fp32 from the same (rounded) inputs.
    const at::Tensor gf = gate.detach().to(at::kFloat).contiguous(), uf = up.detach().to(at::kFloat).contiguous(),
                     df = g.to(at::kFloat).contiguous();
    at::Tensor out = at::empty_like(gf), d_gate = at::empty_like(gf), d_up = at::empty_like(gf);
    for (int64_t i = 0; i < gf.numel(); ++i) {
      out.data_ptr<float>()[i] = kernels::SwiGlu(gf.data_ptr<float>()[i], uf.data_ptr<float>()[i]);
      kernels::SwiGluBackward(df.data_ptr<float>()[i], gf.data_ptr<float>()[i], uf.data_ptr<float>()[i],
                              d_gate.data_ptr<float>() + i, d_up.data_ptr<float>() + i);
    }
    // Exact values in double from the same inputs.
    const at::Tensor xg = gf.to(at::kDouble), xu = uf.to(at::kDouble), xd = df.to(at::kDouble);
    const at::Tensor s = at::sigmoid(xg), silu = xg * s;
    const at::Tensor cancel = slack * (xd * xu).abs() * s * (1 + xg.abs());
    auto check = [&](const at::Tensor& fused, const at::Tensor& comp, const at::Tensor& exact, const at::Tensor& extra,
                     const char* what) {
      const at::Tensor excess = (fused.to(dtype).to(at::kDouble) - comp.to(at::kDouble)).abs() -
                                (3 * u + slack) * exact.abs() - extra;
      EXPECT_LE(excess.max().item<double>(), 0.0) << dtype << " " << what;
    };
    check(out, composite.detach(), silu * xu, at::zeros_like(xg), "silu(gate) * up");
    check(d_up, up.grad(), xd * silu, at::zeros_like(xg), "d up");
    check(d_gate, gate.grad(), xd * xu * s * (1 + xg * (1 - s)), cancel, "d gate");
  }
}

// fused_kernels.cu's CrossEntropyKernel for one row: 512 threads take every 512th logit, each keeps
// an online log-sum-exp, warps merge by xor butterfly, then thread 0 merges the 16 warps in order.
float HostRowLogSumExp(const std::vector<float>& z) {
  constexpr int kThreads = 512;
  std::vector<LogSumExpState> s(kThreads);
  for (int tid = 0; tid < kThreads; ++tid)
    for (size_t j = tid; j < z.size(); j += kThreads) kernels::LogSumExpAdd(s[tid], z[j]);
  for (int offset = 16; offset > 0; offset >>= 1) {
    std::vector<LogSumExpState> next(kThreads);
    for (int tid = 0; tid < kThreads; ++tid) next[tid] = kernels::LogSumExpMerge(s[tid], s[tid ^ offset]);
    s = next;
  }
  LogSumExpState total;
  for (int w = 0; w < kThreads / 32; ++w) total = kernels::LogSumExpMerge(total, s[w * 32]);
  return kernels::LogSumExpValue(total);
}

// A row of Qwen2's 151,936 logits. The sum of exps in fp32: each of a thread's k = 297 additions
// and, when the maximum moves, rescalings rounds by u = 2^-24 relative to its partial sum, exp by
// about one more, the 5 + 16 merges once each: relative error <= (2k + 2 * 21 + 2) u of the sum,
// which is its absolute error in log space; log and the final addition add 2 u |lse|.
TEST(KernelMathTest, OnlineLogSumExpAndTheCrossEntropyGradientOverAFullVocabulary) {
  const int64_t vocab = 151936, k = (vocab + 511) / 512;
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(13);
  at::Tensor logits = at::randn({vocab}, gen) * 4.0;
  logits.narrow(0, 1000, 3).fill_(30.0);  // a few confident tokens, as in a trained model
  logits[77] = -INFINITY;                 // a masked logit adds nothing
  const std::vector<float> z(logits.data_ptr<float>(), logits.data_ptr<float>() + vocab);
  const float lse = HostRowLogSumExp(z);
  const double exact = at::logsumexp(logits.to(at::kDouble), 0).item<double>();
  const double u = std::ldexp(1.0, -24);
  EXPECT_LE(std::abs(lse - exact), (2 * k + 44) * u + 2 * u * std::abs(exact)) << lse << " vs " << exact;

  // The gradient softmax - onehot against the composite LossSum computes (fp32 logsumexp, exp),
  // before both round to the compute dtype the same way: exp's argument differs by the two lse
  // errors, so the values by p (|d lse| + a few u), p the probability.
  const int64_t target = 1001;
  const at::Tensor ref32 = (logits - at::logsumexp(logits, 0)).exp();
  at::Tensor ref = ref32.clone();
  ref[target] -= 1.0;
  at::Tensor fused = at::empty({vocab}, at::kFloat);
  for (int64_t j = 0; j < vocab; ++j) fused[j] = kernels::CrossEntropyGrad(z[j], lse, j == target);
  const double lse_error = (2 * k + 44) * u + 2 * u * std::abs(exact);
  const at::Tensor bound = ref32.to(at::kDouble) * (2 * lse_error + 4 * u) + u;
  const at::Tensor excess = (fused.to(at::kDouble) - ref.to(at::kDouble)).abs() - bound;
  EXPECT_LE(excess.max().item<double>(), 0.0);
  EXPECT_EQ(fused[77].item<float>(), 0.0f);
  EXPECT_LT(fused[target].item<float>(), -0.5f);  // the target's probability is about a third
}

// Merging is exact bookkeeping: any split of a row gives the sequential result within rounding,
// an empty state is the identity, and -inf never turns into NaN.
TEST(KernelMathTest, LogSumExpStatesMergeInAnyOrder) {
  const std::vector<float> z = {1.5f, -2.0f, 7.25f, 0.0f, 3.0f, -INFINITY, 6.5f};
  LogSumExpState all;
  for (float v : z) kernels::LogSumExpAdd(all, v);
  LogSumExpState left, right;
  for (size_t i = 0; i < z.size(); ++i) kernels::LogSumExpAdd(i < 3 ? left : right, z[i]);
  const double exact = std::log(std::exp(1.5) + std::exp(-2.0) + std::exp(7.25) + 1.0 + std::exp(3.0) + std::exp(6.5));
  for (const LogSumExpState& s : {all, kernels::LogSumExpMerge(left, right), kernels::LogSumExpMerge(right, left),
                                  kernels::LogSumExpMerge(all, LogSumExpState{}), kernels::LogSumExpMerge(LogSumExpState{}, all)})
    EXPECT_NEAR(kernels::LogSumExpValue(s), exact, 8 * std::ldexp(1.0, -24) * exact);
  LogSumExpState only_masked;
  kernels::LogSumExpAdd(only_masked, -INFINITY);
  EXPECT_EQ(kernels::LogSumExpValue(only_masked), -INFINITY);
}

// AdamW's fused kernel arithmetic against AdamW::Step's ATen ops (the CPU path, bit for bit
// torch.optim.AdamW), 5 steps with weight decay where the mask is set. Each step rounds each
// quantity about 8 times, each by at most u = 2^-24 of the magnitudes involved (p and the update
// lr * |m| / denom <= lr / (1 - b1) for m, |g| for m, g^2 for v): 64 u of them covers 5 steps with
// margin. The vectorised ATen kernels may fuse multiply-adds where the host loop does not.
TEST(KernelMathTest, AdamWElementIsAdamWStepWithinItsRoundings) {
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(21);
  const int64_t n = 4099;
  const at::Tensor p0 = at::randn({n}, gen), mask = (at::rand({n}, gen) > 0.3).to(at::kFloat);
  const AdamWConfig config{0.9, 0.95, 1e-8, 0.1};
  AdamW reference(config);
  at::Tensor p = p0.clone(), grad = at::zeros({n});
  reference.AddParam(p, grad, mask);
  std::vector<float> hp(p0.data_ptr<float>(), p0.data_ptr<float>() + n), hm(n, 0.0f), hv(n, 0.0f);
  const double lr = 1e-2;
  double max_g = 0;
  for (int step = 1; step <= 5; ++step) {
    grad.copy_(at::randn({n}, gen) * (step == 3 ? 1e-4 : 1.0));  // one step of tiny gradients: small v
    max_g = std::max(max_g, grad.abs().max().item<double>());
    reference.Step(lr);
    kernels::AdamWScalars s;
    s.decay = static_cast<float>(1 - lr * config.weight_decay);
    s.one_minus_b1 = static_cast<float>(1 - config.beta1);
    s.b2 = static_cast<float>(config.beta2);
    s.one_minus_b2 = static_cast<float>(1 - config.beta2);
    s.bias_correction2_sqrt = static_cast<float>(std::sqrt(1 - std::pow(config.beta2, step)));
    s.eps = static_cast<float>(config.eps);
    s.neg_step_size = static_cast<float>(-lr / (1 - std::pow(config.beta1, step)));
    for (int64_t i = 0; i < n; ++i)
      kernels::AdamWElement(hp[i], grad.data_ptr<float>()[i], hm[i], hv[i], mask.data_ptr<float>()[i], s);
  }
  const double u = std::ldexp(1.0, -24);
  const auto& st = reference.params()[0];
  auto host = [&](const std::vector<float>& v) { return at::tensor(v).to(at::kDouble); };
  EXPECT_LE(((host(hp) - st.param.to(at::kDouble)).abs() - 64 * u * (st.param.to(at::kDouble).abs() + lr / (1 - config.beta1)))
                .max().item<double>(), 0.0);
  EXPECT_LE(((host(hm) - st.exp_avg.to(at::kDouble)).abs() - 64 * u * max_g).max().item<double>(), 0.0);
  EXPECT_LE(((host(hv) - st.exp_avg_sq.to(at::kDouble)).abs() - 64 * u * max_g * max_g).max().item<double>(), 0.0);
  // Decay applied only where the mask says: the masked-out weights moved by the Adam update alone.
  EXPECT_GT((st.param - p0).abs().max().item<double>(), 1e-3);
}

// FlashAttention's variable-length kernel sees packed rows as runs of one segment id: a document,
// or a row's padding; a run never continues into the next row, even with the same id there.
TEST(KernelMathTest, SegmentRunsCutPackedRowsIntoDocumentsAndPadding) {
  const at::Tensor seg = at::tensor({1, 1, 1, 2, 2, 0,    // two documents, then padding
                                     1, 1, 1, 1, 1, 1,    // one document filling the row
                                     1, 2, 3, 3, 3, 3},   // a new row with the same id 1 as above
                                    at::kLong).view({3, 6});
  auto [runs, longest] = SegmentRuns(seg);
  EXPECT_TRUE(at::equal(runs, at::tensor({0, 3, 5, 6, 12, 13, 14, 18}, at::kInt))) << runs;
  EXPECT_EQ(longest, 6);
  auto [one, one_longest] = SegmentRuns(at::ones({1, 4}, at::kLong));
  EXPECT_TRUE(at::equal(one, at::tensor({0, 4}, at::kInt)));
  EXPECT_EQ(one_longest, 4);
  // The CPU builds its mask and no runs.
  const ModelConfig c = testing::TinyConfig("qwen2");
  const Batch batch = testing::MakeBatch({{{testing::RandomTokens(7, c.vocab_size, 2), testing::RandomTokens(5, c.vocab_size, 3)}, 0, 1, 0}}, 0);
  const AttentionContext ctx = MakeAttentionContext(c, batch, at::kBFloat16);
  EXPECT_FALSE(ctx.cu_seqlens.defined());
  EXPECT_TRUE(ctx.additive_mask.defined());
}

// The CPU never takes the fused kernels (its composites are HF's arithmetic bit for bit), and they
// say why when called anyway.
TEST(KernelMathTest, TheCpuKeepsTheComposites) {
  const at::Tensor x = at::randn({1, 2, 2, 4});
  EXPECT_FALSE(UseFusedKernels(x));
  EXPECT_THROW(FusedRope(x, at::ones({1, 2, 4}), at::zeros({1, 2, 4})), c10::Error);
  EXPECT_THROW(FusedSwiGlu(x), c10::Error);
}

}  // namespace
}  // namespace eft::trainer
