// eft's fused ops (trainer/kernels/kernels.h) against the ATen composites they replace, on every
// device this machine has: the CPU (the kernels' host twins, the same per-element code, in CI) and a
// GPU where there is one (bench/gpu/run.sh runs this binary there: the CUDA kernels themselves).
// The ops compute in fp32 and round once on store where the composites round after each op
// (bf16: unit roundoff u = 2^-8; fp32: u = 2^-24), so each bound is the composite's roundings plus
// the op's one, in units of the magnitudes involved: a formula, not a measurement.
#include <cmath>
#include <functional>
#include <utility>
#include <limits>
#include <vector>

#include <gtest/gtest.h>
#include <torch/cuda.h>

#include "trainer/kernels/cuda/fused_kernels.h"
#include "trainer/kernels/gpu_info.h"
#include "trainer/kernels/kernels.h"
#include "trainer/model/llama_internal.h"
#include "trainer/optim/adamw.h"

namespace eft::trainer {
namespace {

std::vector<at::DeviceType> DevicesHere() {
  std::vector<at::DeviceType> devices = {at::kCPU};
  if (torch::cuda::is_available()) devices.push_back(at::kCUDA);
  return devices;
}
std::vector<at::DeviceType> GpusHere() { return torch::cuda::is_available() ? std::vector{at::kCUDA} : std::vector<at::DeviceType>{}; }
std::string DeviceName(const ::testing::TestParamInfo<at::DeviceType>& info) {
  return info.param == at::kCUDA ? "Cuda" : "Cpu";
}

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

// Two packed documents per row, so positions restart mid-row.
Batch PackedPositions(int64_t B, int64_t T, at::DeviceType device) {
  const auto longs = at::TensorOptions().dtype(at::kLong);
  Batch b;
  b.input_ids = at::zeros({B, T}, longs);
  b.position_ids = at::cat({at::arange(T / 3, longs), at::arange(T - T / 3, longs)}).unsqueeze(0).repeat({B, 1});
  b.segment_ids = at::cat({at::ones({T / 3}, longs), at::full({T - T / 3}, 2, longs)}).unsqueeze(0).repeat({B, 1});
  for (at::Tensor* t : {&b.input_ids, &b.position_ids, &b.segment_ids}) *t = t->to(device);
  return b;
}

class FusedOpsTest : public ::testing::TestWithParam<at::DeviceType> {
 protected:
  at::TensorOptions On() const { return at::TensorOptions().device(GetParam()); }
};
INSTANTIATE_TEST_SUITE_P(Devices, FusedOpsTest, ::testing::ValuesIn(DevicesHere()), DeviceName);

// RoPE sums two products: the composite rounds each product and the sum (3 roundings of at most
// u (|a| + |b|) each), the op only the sum, so they differ by at most 4 u (|a| + |b|) (first order;
// 4 rather than 3 covers the op's fp32 sum and the second-order terms). q is taken as the decoder
// takes it, a [B, T, H, D] view of the merged q/k/v product (row stride (H + 2 KV) D).
TEST_P(FusedOpsTest, RopeOnAMergedProjectionsViewIsTheCompositeWithinItsRoundings) {
  const int64_t B = 2, T = 96, H = 14, KV = 2, Dh = 64;
  const ModelConfig c = QwenShape(H, KV, Dh);
  const Batch batch = PackedPositions(B, T, GetParam());
  for (at::ScalarType dtype : {at::kFloat, at::kBFloat16}) {
    const double u = UnitRoundoff(dtype);
    const AttentionContext ctx = MakeAttentionContext(c, batch, dtype);
    at::Tensor qkv = (at::randn({B, T, (H + 2 * KV) * Dh}, On()) * 2).to(dtype).requires_grad_(true);
    const at::Tensor g = at::randn({B, T, H, Dh}, On()).to(dtype);
    auto q_of = [&](const at::Tensor& t) { return t.narrow(-1, 0, H * Dh).view({B, T, H, Dh}); };
    at::Tensor fused = FusedRope(q_of(qkv), ctx.cos, ctx.sin);
    (fused * g).sum().backward();
    const at::Tensor fused_grad = qkv.grad().clone();
    qkv.mutable_grad().reset();
    at::Tensor composite = internal::ApplyRope(q_of(qkv).transpose(1, 2), ctx).transpose(1, 2);
    (composite * g).sum().backward();
    // |x| |cos| + |rotate_half(x)| |sin|: the magnitudes the rotation sums (the same of g backward).
    auto magnitudes = [&](const at::Tensor& x) {
      const at::Tensor a = D(x).abs();
      const at::Tensor rot = at::cat({a.narrow(-1, Dh / 2, Dh / 2), a.narrow(-1, 0, Dh / 2)}, -1);
      return a * D(ctx.cos).abs().unsqueeze(2) + rot * D(ctx.sin).abs().unsqueeze(2);
    };
    EXPECT_LE(((D(fused) - D(composite)).abs() - 4 * u * magnitudes(q_of(qkv))).max().item<double>(), 0.0) << dtype;
    EXPECT_LE(((D(q_of(fused_grad)) - D(q_of(qkv.grad()))).abs() - 4 * u * magnitudes(g)).max().item<double>(), 0.0) << dtype;
    EXPECT_EQ(D(fused_grad.narrow(-1, H * Dh, 2 * KV * Dh)).abs().max().item<double>(), 0.0) << "k and v got a gradient";
    EXPECT_TRUE(fused.is_contiguous());
    EXPECT_GT((D(fused) - D(q_of(qkv))).abs().max().item<double>(), 0.1) << "the rotation moved nothing";
  }
}

// SwiGLU: the composite rounds silu(gate), then the product (backward: g * up, then silu_backward;
// g * silu(gate) for d up), 2 roundings against the op's 1. fp32's exp, reciprocal and the silu'
// expression 1 + x (1 - s) (which cancels near x = -1.28) add a few fp32 ulps of the magnitudes
// involved: 2^-21 |g up| s (1 + |x|) covers 8 of them. Both forms: merged (the gradient one buffer)
// and separate tensors (LoRA on gate or up). Qwen2.5-0.5B's width takes the GPU's 16-byte packed
// kernels (kernels::VectorizableRows), an odd one the one-element kernels.
TEST_P(FusedOpsTest, SwiGluMergedAndSeparateAreTheCompositeWithinTheirRoundings) {
  const double slack = std::ldexp(1.0, -21);
  for (const auto& [width, dtype] : {std::pair{int64_t{4864}, at::kFloat}, {int64_t{4864}, at::kBFloat16},
                                     {int64_t{102}, at::kBFloat16}}) {
    const double u = UnitRoundoff(dtype);
    const at::Tensor base = (at::randn({3, 257, 2 * width}, On()) * 4).to(dtype);  // 771 rows: no block multiple
    const at::Tensor g = at::randn({3, 257, width}, On()).to(dtype);
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
    const at::Tensor exact_dgate = (dy * up * s * (1 + x * (1 - s))).abs();
    const at::Tensor cancel = slack * (dy * up).abs() * s * (1 + x.abs());
    for (int form : {1, 2}) {
      EXPECT_LE(((outs[form] - outs[0]).abs() - (3 * u + slack) * exact_out).max().item<double>(), 0.0)
          << dtype << form << " width " << width;
      EXPECT_LE(((grads[form].narrow(-1, width, width) - grads[0].narrow(-1, width, width)).abs() -
                 (3 * u + slack) * exact_dup).max().item<double>(), 0.0) << dtype << form << " width " << width;
      EXPECT_LE(((grads[form].narrow(-1, 0, width) - grads[0].narrow(-1, 0, width)).abs() -
                 (3 * u + slack) * exact_dgate - cancel).max().item<double>(), 0.0) << dtype << form << " width " << width;
    }
  }
}

// The kernels are built for sm_80 and sm_90; 8.x cards run the sm_80 code, older GPUs none of it.
TEST(FusedKernelsRunOn, ComputeCapabilityEightAndLater) {
  auto gpu = [](int capability) {
    GpuProperties g;
    g.capability = capability;
    return g;
  };
  for (int capability : {80, 86, 89, 90, 100}) EXPECT_TRUE(FusedKernelsRunOn(gpu(capability))) << capability;
  for (int capability : {-1, 60, 70, 75}) EXPECT_FALSE(FusedKernelsRunOn(gpu(capability))) << capability;
}

// When the SwiGLU kernels move 16 bytes per access: widths, row strides and starts that allow it.
TEST(VectorizableRows, EveryOperandMustAllowSixteenByteAccesses) {
  using kernels::DType;
  alignas(16) static char buffer[256];
  const void* aligned = buffer;
  const void* off_by_two = buffer + 2;
  EXPECT_TRUE(kernels::VectorizableRows(DType::kBFloat16, 4864, {aligned, aligned}, {9728, 4864}));
  EXPECT_TRUE(kernels::VectorizableRows(DType::kFloat32, 12, {aligned}, {12}));
  EXPECT_FALSE(kernels::VectorizableRows(DType::kBFloat16, 12, {aligned}, {16})) << "12 bf16: not a multiple of 8";
  EXPECT_FALSE(kernels::VectorizableRows(DType::kBFloat16, 16, {aligned, off_by_two}, {16, 16})) << "a start";
  EXPECT_FALSE(kernels::VectorizableRows(DType::kBFloat16, 16, {aligned, aligned}, {16, 20})) << "a row stride";
  EXPECT_FALSE(kernels::VectorizableRows(DType::kFloat32, 6, {aligned}, {6}));
}

// The loss over Qwen's 151,936 logits per row. A row's log-sum-exp in fp32: each thread of the
// 512 adds at most k terms (groups of 8 bf16 or 4 fp32 where 16-byte accesses fit: ceil(V / 8 / 512)
// groups of 8, k = 304 for Qwen; one at a time otherwise; each addition and each rescaling when the
// maximum moves rounds by u of the partial sum, exp by about one more), 5 + 16 merges once each:
// relative error <= (2k + 44) u of the sum, its absolute error in log space; log and the final
// addition add 2 u |lse|. The gradient values differ by p (2 lse errors + 4 u) before both round
// once to the dtype (u_d each). An odd vocabulary takes the one-logit-at-a-time kernels.
TEST_P(FusedOpsTest, CrossEntropyOverQwensVocabularyIsTheCompositeWithinItsRoundings) {
  for (const int64_t vocab : {int64_t{151936}, int64_t{1001}}) {
    const int64_t rows = GetParam() == at::kCUDA ? 300 : 24, k = 8 * ((vocab + 8 * 512 - 1) / (8 * 512));
    const at::Tensor targets = at::randint(6, vocab, {rows}, On().dtype(at::kLong));  // never the masked column 5
    for (at::ScalarType dtype : {at::kFloat, at::kBFloat16}) {
      at::Tensor logits = (at::randn({rows, vocab}, On()) * 4).to(dtype);
      logits.index_put_({at::arange(rows, On().dtype(at::kLong)), targets}, 20.0);  // confident rows, as after training
      logits.narrow(1, 5, 1).fill_(-std::numeric_limits<double>::infinity());     // a masked logit adds nothing
      const at::Tensor z = logits.to(at::kFloat);
      const at::Tensor lse = at::logsumexp(z, -1, true);
      const at::Tensor ref_loss = (lse - z.gather(1, targets.unsqueeze(1))).squeeze(1);
      at::Tensor ref_grad = (z - lse).exp();
      ref_grad.scatter_add_(1, targets.unsqueeze(1), at::full({rows, 1}, -1.0, ref_grad.options()));
      at::Tensor grad = logits.clone();
      const at::Tensor loss = CrossEntropyGradInPlace(grad, targets);
      at::Tensor untouched = logits.clone();
      const at::Tensor loss_only = CrossEntropyGradInPlace(untouched, targets, /*write_grad=*/false);
      const double u = std::ldexp(1.0, -24);
      const at::Tensor lse_error = (2 * k + 44) * u + 2 * u * D(lse).abs().squeeze(1);
      EXPECT_LE(((D(loss) - D(ref_loss)).abs() - 2 * lse_error - 2 * u * D(z).abs().amax(-1)).max().item<double>(), 0.0)
          << dtype << " vocab " << vocab;
      EXPECT_TRUE(at::equal(loss, loss_only)) << dtype;
      EXPECT_TRUE(at::equal(untouched, logits)) << "write_grad=false must leave the logits alone";
      const double ud = UnitRoundoff(dtype);
      const at::Tensor p = D((z - lse).exp());
      const at::Tensor bound = ud * (D(grad).abs() + D(ref_grad).abs()) + p * (2 * lse_error.unsqueeze(1) + 4 * u) + 1e-30;
      EXPECT_LE(((D(grad) - D(ref_grad.to(dtype))).abs() - bound).max().item<double>(), 0.0) << dtype << " vocab " << vocab;
      EXPECT_EQ(D(grad.narrow(1, 5, 1)).abs().max().item<double>(), 0.0) << "a masked logit's gradient";
    }
  }
}

// AdamW in one op against AdamW::Step's ATen ops on the CPU (bit for bit torch.optim.AdamW), 5 steps
// with weight decay where the mask is set and one step of tiny gradients (small v). Each step rounds
// each quantity about 8 times, each by at most u of the magnitudes involved (p and the update
// lr |m| / denom <= lr / (1 - b1) for p, |g| for m, g^2 for v): 64 u of them covers 5 steps. The
// vectorised ATen kernels and the GPU may fuse multiply-adds where the host loop does not.
TEST_P(FusedOpsTest, AdamWInOneOpIsAdamWStepWithinItsRoundings) {
  const int64_t n = (1 << 18) + 3;
  const at::Tensor p0 = at::randn({n}), mask = (at::rand({n}) > 0.3).to(at::kFloat);
  const AdamWConfig config{0.9, 0.95, 1e-8, 0.1};
  AdamW reference(config);
  at::Tensor p_ref = p0.clone(), g_ref = at::zeros({n});
  reference.AddParam(p_ref, g_ref, mask);
  at::Tensor p = p0.clone().to(GetParam()), m = at::zeros_like(p), v = at::zeros_like(p), g = at::zeros_like(p);
  const at::Tensor mask_here = mask.to(GetParam());
  const double lr = 1e-2;
  double max_g = 0;
  for (int step = 1; step <= 5; ++step) {
    g_ref.copy_(at::randn({n}) * (step == 3 ? 1e-4 : 1.0));
    g.copy_(g_ref);
    max_g = std::max(max_g, g_ref.abs().max().item<double>());
    reference.Step(lr);
    AdamWStepScalars s;
    s.decay = 1 - lr * config.weight_decay;
    s.beta1 = config.beta1, s.beta2 = config.beta2, s.eps = config.eps;
    s.step_size = lr / (1 - std::pow(config.beta1, step));
    s.bias_correction2_sqrt = std::sqrt(1 - std::pow(config.beta2, step));
    FusedAdamWStep(p, g, m, v, mask_here, s);
  }
  const double u = std::ldexp(1.0, -24);
  const auto& r = reference.params()[0];
  EXPECT_LE(((D(p) - D(r.param)).abs() - 64 * u * (D(r.param).abs() + lr / (1 - config.beta1))).max().item<double>(), 0.0);
  EXPECT_LE(((D(m) - D(r.exp_avg)).abs() - 64 * u * max_g).max().item<double>(), 0.0);
  EXPECT_LE(((D(v) - D(r.exp_avg_sq)).abs() - 64 * u * max_g * max_g).max().item<double>(), 0.0);
  EXPECT_GT((D(p) - D(p0)).abs().max().item<double>(), 1e-3) << "the steps moved nothing";
}

// What the trainer takes: the fused ops on a GPU only (on the CPU its composites are HF's
// arithmetic bit for bit), and tensors that do not fit are refused with a reason.
TEST_P(FusedOpsTest, TheTrainerTakesThemOnAGpuOnlyAndMisfitsAreRefused) {
  const at::Tensor x = at::randn({1, 2, 2, 4}, On());
  EXPECT_EQ(UseFusedKernels(x), GetParam() == at::kCUDA && UseFusedKernels(at::kCUDA, at::kFloat));
  EXPECT_FALSE(UseFusedKernels(x.to(at::kDouble)));
  EXPECT_THROW(FusedRope(x.to(at::kDouble), at::ones({1, 2, 4}, On()), at::zeros({1, 2, 4}, On())), c10::Error);
  EXPECT_THROW(FusedRope(x, at::ones({1, 2, 4}, On()).to(at::kBFloat16), at::zeros({1, 2, 4}, On())), c10::Error);
  EXPECT_THROW(FusedSwiGlu(at::randn({2, 3}, On())), c10::Error);  // odd merged width
  at::Tensor logits = at::randn({4, 10}, On());
  EXPECT_THROW(CrossEntropyGradInPlace(logits, at::zeros({3}, On().dtype(at::kLong))), c10::Error);
}

// Attention on the GPU: flash kernels of PyTorch's, reached with eft's GPU speed-ups on.
class FlashAttentionTest : public FusedOpsTest {};
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(FlashAttentionTest);
INSTANTIATE_TEST_SUITE_P(Gpus, FlashAttentionTest, ::testing::ValuesIn(GpusHere()), DeviceName);

// Attention(q, k, v, ctx) against `reference` (SDPA with k and v repeated per query head) on the same
// random bf16 q [B, H, T, D], k and v [B, KV, T, D], forward and backward. Both kernels sum in fp32
// and round their output once to bf16 (u of the output's magnitude, itself at most max |v|); the k/v
// gradients sum a group of H / KV heads' contributions, in fp32 inside flash, in bf16 in repeat's
// backward (H / KV roundings of the partial sums, bounded by their magnitudes' sum).
void ExpectAttentionIsTheRepeatedOne(const AttentionContext& ctx, int64_t B, int64_t T, int64_t H, int64_t KV,
                                     const at::TensorOptions& on,
                                     const std::function<at::Tensor(const at::Tensor&, const at::Tensor&, const at::Tensor&)>& reference) {
  const int64_t Dh = 64;
  const double u = std::ldexp(1.0, -8);
  at::Tensor q = at::randn({B, H, T, Dh}, on).to(at::kBFloat16).requires_grad_(true);
  at::Tensor k = at::randn({B, KV, T, Dh}, on).to(at::kBFloat16).requires_grad_(true);
  at::Tensor v = at::randn({B, KV, T, Dh}, on).to(at::kBFloat16).requires_grad_(true);
  const at::Tensor g = at::randn({B, T, H * Dh}, on).to(at::kBFloat16);
  at::Tensor out = Attention(q, k, v, ctx);
  out.backward(g);
  const std::vector<at::Tensor> grads = {D(q.grad()), D(k.grad()), D(v.grad())};
  for (at::Tensor* t : {&q, &k, &v}) t->mutable_grad().reset();
  at::Tensor ref = reference(q, k.repeat_interleave(H / KV, 1), v.repeat_interleave(H / KV, 1))
                       .transpose(1, 2).reshape({B, T, H * Dh});
  ref.backward(g);
  EXPECT_LE((D(out) - D(ref)).abs().max().item<double>(), 2 * u * D(v).abs().max().item<double>());
  const std::vector<at::Tensor> ref_grads = {D(q.grad()), D(k.grad()), D(v.grad())};
  for (size_t i = 0; i < 3; ++i) {
    const double scale = ref_grads[i].abs().max().item<double>() * (i == 0 ? 1 : H / KV);
    EXPECT_LE((grads[i] - ref_grads[i]).abs().max().item<double>(), (H / KV + 2) * u * scale) << "gradient " << i;
  }
}

// Grouped-query attention without copies of k and v (flash's enable_gqa) against SDPA on k and v
// repeated per query head.
TEST_P(FlashAttentionTest, GroupedQueryAttentionWithoutCopiesIsTheRepeatedOne) {
  const int64_t B = 2, T = 256, H = 14, KV = 2;
  Batch batch;
  batch.input_ids = at::zeros({B, T}, On().dtype(at::kLong));
  batch.position_ids = at::arange(T, batch.input_ids.options()).unsqueeze(0).repeat({B, 1});
  batch.segment_ids = at::ones({B, T}, batch.input_ids.options());
  const AttentionContext ctx = MakeAttentionContext(QwenShape(H, KV, 64), batch, at::kBFloat16);
  ASSERT_TRUE(ctx.causal_only);
  ExpectAttentionIsTheRepeatedOne(ctx, B, T, H, KV, On(), [](const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
    return at::scaled_dot_product_attention(q, k, v, {}, 0.0, /*is_causal=*/true);
  });
}

// Packed rows through FlashAttention's variable-length kernel (no mask) against SDPA with the
// block-diagonal mask and k/v repeated per head (what packed rows ran before): the same causal sums
// inside each document.
TEST_P(FlashAttentionTest, PackedRowsThroughVarlenFlashAreTheMaskedAttention) {
  const int64_t B = 2, T = 384, H = 14, KV = 2;
  const Batch batch = PackedPositions(B, T, GetParam());
  const AttentionContext ctx = MakeAttentionContext(QwenShape(H, KV, 64), batch, at::kBFloat16);
  ASSERT_TRUE(ctx.cu_seqlens.defined());
  ASSERT_FALSE(ctx.additive_mask.defined());
  EXPECT_EQ(ctx.max_seqlen, T - T / 3);
  const at::Tensor seg = batch.segment_ids;
  const at::Tensor allowed =
      ((seg.unsqueeze(2) == seg.unsqueeze(1)) & at::ones({T, T}, seg.options().dtype(at::kBool)).tril()).unsqueeze(1);
  const at::Tensor mask = at::zeros(allowed.sizes(), On().dtype(at::kBFloat16))
                              .masked_fill_(allowed.logical_not(), -std::numeric_limits<double>::infinity());
  ExpectAttentionIsTheRepeatedOne(ctx, B, T, H, KV, On(), [&](const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
    return at::scaled_dot_product_attention(q, k, v, mask);
  });
}

// AddConverted is add_ element for element: above one chunk (1M elements) on the CPU it adds in chunks,
// below it, for other dtypes or layouts, it is add_ itself; exact equality either way.
TEST(AddConverted, EqualsAddInEveryCase) {
  at::manual_seed(7);
  const int64_t chunk = int64_t{1} << 20;
  for (const int64_t rows : {int64_t{3}, chunk / 576 + 5, 3 * chunk / 576 + 1}) {
    const at::Tensor sum = at::randn({rows, 576});
    const at::Tensor grad = at::randn({rows, 576}).to(at::kBFloat16);
    at::Tensor expected = sum.clone();
    expected.add_(grad);
    at::Tensor got = sum.clone();
    AddConverted(got, grad);
    EXPECT_TRUE(at::equal(got, expected)) << rows << " rows";
    at::Tensor transposed = sum.t().contiguous().t();  // not contiguous: add_ itself
    at::Tensor want_t = transposed.clone();
    want_t.add_(grad);
    AddConverted(transposed, grad);
    EXPECT_TRUE(at::equal(transposed, want_t)) << rows << " rows, transposed";
  }
  at::Tensor same = at::ones({chunk + 3});
  AddConverted(same, at::ones({chunk + 3}));
  EXPECT_TRUE(at::equal(same, at::full({chunk + 3}, 2.0)));
}

}  // namespace
}  // namespace eft::trainer
