#include "trainer/model/llama.h"

#include <c10/core/GradMode.h>
#include <algorithm>
#include <cmath>
#include <iostream>
#include <map>

#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>

#include "tiny_model.h"
#include "trainer/model/llama_internal.h"

namespace eft::trainer {
namespace {

using testing::MakeBatch;
using testing::MaxAbsDiff;
using testing::RandomTokens;
using testing::RowSpec;
using testing::TinyConfig;
using testing::TinyModel;

const std::vector<std::string> kArchs = {"llama", "qwen2", "qwen3", "mistral"};

// Three rows of 12: a single document at large positions (RoPE far from identity), two packed
// documents, and a short document followed by padding.
Batch StandardBatch(const ModelConfig& c) {
  const int64_t pad = c.pad_token_id >= 0 ? c.pad_token_id : 0;
  return MakeBatch({{{RandomTokens(12, c.vocab_size, 1)}, 0, 3, 40},
                    {{RandomTokens(7, c.vocab_size, 2), RandomTokens(5, c.vocab_size, 3)}, 0, 1, 0},
                    {{RandomTokens(8, c.vocab_size, 4)}, 4, 2, 0}},
                   pad);
}

// ---------------------------------------------------------------------------------------------
// Against the independent Python reference

class ReferenceTest : public ::testing::TestWithParam<std::string> {};

TEST_P(ReferenceTest, LogitsLossAndGradientsMatchPython) {
  if (std::string why = testing::ReferenceUnavailableReason(); !why.empty()) {
    std::cerr << "\n*** SKIPPING the Python reference comparison: " << why << " ***\n\n";
    GTEST_SKIP() << why;
  }
  const ModelConfig config = TinyConfig(GetParam());
  TinyModel model = TinyModel::Random(config, /*seed=*/11);
  const Batch batch = StandardBatch(config);
  model.RequireGrad();
  testing::Output out = testing::RunModel(model, batch, /*chunk_rows=*/5);
  out.loss.backward();
  testing::ReferenceResult ref = testing::RunReference(model, batch, /*want_grads=*/true);

  // Both sides are fp32 and evaluate the same maths with reductions (matmuls, norms, softmax) in a
  // different order and through different formulations (complex rotation, einsum, 1/sqrt vs
  // rsqrt), so they agree to a few ulps of the intermediate values, which here are O(1-10):
  // ~1e-6. 1e-5 leaves margin for that and still catches any real mistake, which moves logits by
  // 1e-3 or more with these weights.
  const double logits_diff = MaxAbsDiff(out.logits, ref.logits);
  const double loss = out.loss.item<double>();
  const double loss_rel = std::abs(loss - ref.loss_sum) / std::abs(ref.loss_sum);
  EXPECT_LE(logits_diff, 1e-5);
  EXPECT_LE(loss_rel, 1e-5);
  EXPECT_EQ(ref.trained_tokens, batch.trained_tokens);
  EXPECT_FALSE(out.logits.isnan().any().item<bool>());

  // Gradients: relative to the largest entry of each parameter's reference gradient, since small
  // entries are differences of larger terms.
  double worst_grad = 0;
  std::string worst_name;
  std::map<std::string, at::Tensor> ref_grads(ref.grads.begin(), ref.grads.end());
  const auto named = model.Named();
  ASSERT_EQ(ref_grads.size(), named.size());
  for (const auto& [name, param] : named) {
    ASSERT_TRUE(ref_grads.count(name)) << "the reference has no gradient for " << name;
    const at::Tensor& mine = param.grad();
    ASSERT_TRUE(mine.defined()) << name << " has no gradient";
    const double scale = std::max(ref_grads[name].abs().max().item<double>(), 1e-3);
    const double rel = MaxAbsDiff(mine, ref_grads[name]) / scale;
    if (rel > worst_grad) worst_grad = rel, worst_name = name;
  }
  EXPECT_LE(worst_grad, 1e-4) << worst_name;
  std::cout << "[" << GetParam() << "] max |logit| " << ref.logits.abs().max().item<double>()
            << ", max |logits - ref| = " << logits_diff << ", loss " << loss << " vs "
            << ref.loss_sum << " (rel " << loss_rel << "), worst relative grad diff " << worst_grad << " ("
            << worst_name << ")\n";
}

INSTANTIATE_TEST_SUITE_P(Archs, ReferenceTest, ::testing::ValuesIn(kArchs));

// ---------------------------------------------------------------------------------------------
// Packing and padding

class PackingTest : public ::testing::TestWithParam<std::tuple<std::string, at::ScalarType>> {};

TEST_P(PackingTest, PackedRowEqualsDocumentsAlone) {
  const auto [arch, dtype] = GetParam();
  const ModelConfig config = TinyConfig(arch);
  const TinyModel model = TinyModel::Random(config, 5, dtype);
  const auto a = RandomTokens(3, config.vocab_size, 21), b = RandomTokens(2, config.vocab_size, 22);
  const auto c = RandomTokens(6, config.vocab_size, 23), d = RandomTokens(4, config.vocab_size, 24);
  // Packed rows (segment ids 1,1,1,2,2 with positions 0,1,2,0,1, then padding) vs each document alone.
  Batch packed = MakeBatch({{{a, b}, 3}, {{c, d}, 0}}, 0);
  testing::Output p = testing::RunModel(model, packed);
  at::Tensor sum_alone = at::zeros({}, at::kDouble);
  const std::vector<std::tuple<std::vector<int64_t>, int64_t, int64_t>> docs = {
      {a, 0, 0}, {b, 0, 3}, {c, 1, 0}, {d, 1, 6}};
  double worst = 0;
  for (const auto& [doc, row, offset] : docs) {
    testing::Output alone = testing::RunModel(model, MakeBatch({{{doc}}}, 0));
    const int64_t n = static_cast<int64_t>(doc.size());
    worst = std::max(worst, MaxAbsDiff(p.logits[row].narrow(0, offset, n), alone.logits[0]));
    sum_alone += alone.loss.to(at::kDouble);
  }
  // Masked weights are exactly zero (-inf before softmax), so the only differences come from
  // matmul blocking over different T: a few ulps in fp32, none to speak of in fp64.
  // Relative to the largest logit: 2e-6 is ~16 ulps in fp32.
  const double scale = std::max(1.0, p.logits.abs().max().item<double>());
  const double tol = (dtype == at::kDouble ? 1e-13 : 2e-6) * scale;
  EXPECT_LE(worst, tol);
  EXPECT_NEAR(p.loss.item<double>(), sum_alone.item<double>(), (dtype == at::kDouble ? 1e-12 : 1e-6) * std::abs(sum_alone.item<double>()));
  EXPECT_FALSE(p.logits.isnan().any().item<bool>()) << "padding produced NaN";
  std::cout << "[" << arch << "/" << c10::toString(dtype) << "] packed vs alone max diff " << worst
            << " (max |logit| " << scale << ")\n";
}

INSTANTIATE_TEST_SUITE_P(Archs, PackingTest,
                         ::testing::Combine(::testing::Values("llama", "qwen3"),
                                            ::testing::Values(at::kFloat, at::kDouble)));

// RmsNorm on a GPU is ATen's fused kernel (internal::FusedRmsNorm), here run on the CPU against the
// composite, which is HF's arithmetic. Bounds, with u the unit roundoff (2^-24 fp32, 2^-8 bf16) and
// n = 64 features: the mean of squares summed in another order differs by at most n u relative, so
// rstd by about (n / 2 + 1) u; the composite then rounds the product twice (the normalised value,
// then the weight's product) where the fused kernel rounds once, one or two u more. fp32: (n + 4) u
// of the exact magnitude; bf16: statistics in fp32 on both sides, so 3 u_bf16. The gradients (fp32)
// sum n products per entry: (2 n + 8) u of the largest entry.
TEST(LlamaTest, FusedRmsNormIsTheCompositeWithinItsRoundings) {
  const int64_t n = 64;
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(7);
  const at::Tensor x0 = at::randn({3, 5, n}, gen) * 3.0;
  const at::Tensor w0 = at::rand({n}, gen) + 0.5;
  const at::Tensor exact =
      (x0.to(at::kDouble) * at::rsqrt(x0.to(at::kDouble).pow(2).mean(-1, true) + 1e-6) * w0.to(at::kDouble)).abs();
  for (at::ScalarType dtype : {at::kFloat, at::kBFloat16}) {
    const double u = dtype == at::kFloat ? std::ldexp(1.0, -24) : std::ldexp(1.0, -8);
    const double k = dtype == at::kFloat ? n + 4 : 3;
    at::Tensor x = x0.to(dtype), w = w0.to(dtype);
    const at::Tensor fused = internal::FusedRmsNorm(x, w, 1e-6).to(at::kDouble);
    const at::Tensor composite = RmsNorm(x, w, 1e-6).to(at::kDouble);
    const at::Tensor excess = (fused - composite).abs() - exact * (k * u) - 1e-30;
    EXPECT_LE(excess.max().item<double>(), 0.0) << dtype << ": worst " << (fused - composite).abs().max().item<double>();
  }
  // Gradients through both, fp32.
  const at::Tensor g = at::randn({3, 5, n}, gen);
  std::vector<at::Tensor> grads[2];
  for (int fused : {0, 1}) {
    at::Tensor x = x0.clone().requires_grad_(true), w = w0.clone().requires_grad_(true);
    at::Tensor y = fused ? internal::FusedRmsNorm(x, w, 1e-6) : RmsNorm(x, w, 1e-6);
    (y * g).sum().backward();
    grads[fused] = {x.grad(), w.grad()};
  }
  const double u = std::ldexp(1.0, -24);
  for (size_t i = 0; i < 2; ++i) {
    const double worst = (grads[0][i] - grads[1][i]).abs().max().item<double>();
    EXPECT_LE(worst, (2 * n + 8) * u * grads[0][i].abs().max().item<double>()) << (i == 0 ? "d/dx" : "d/dweight");
  }
}

// FlashAttention's variable-length kernel sees packed rows as runs of one segment id: a document,
// or a row's padding; a run never continues into the next row, even with the same id there.
TEST(LlamaTest, SegmentRunsCutPackedRowsIntoDocumentsAndPadding) {
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
  const ModelConfig c = TinyConfig("qwen2");
  const Batch batch = MakeBatch({{{RandomTokens(7, c.vocab_size, 2), RandomTokens(5, c.vocab_size, 3)}, 0, 1, 0}}, 0);
  const AttentionContext ctx = MakeAttentionContext(c, batch, at::kBFloat16);
  EXPECT_FALSE(ctx.cu_seqlens.defined());
  EXPECT_TRUE(ctx.additive_mask.defined());
}

// What a GPU runs, merged q/k/v and gate/up products, here on the CPU against separate ones (qwen2,
// so with q/k/v biases): the same dot products, so outputs and gradients differ only by how the
// GEMM blocks each sum. A sum of n terms rounds to within gamma_n = n u (u = 2^-24) of the sum of
// the terms' magnitudes: each output entry sums hidden terms |x| |W| (plus |b|), each weight
// gradient entry B T terms |dy| |x|, each bias gradient entry B T terms |dy|. Both sides are within
// that of the exact value, so they are within twice it of each other.
TEST(LlamaTest, MergedProjectionsAreTheSeparateOnesWithinTheirRoundings) {
  const ModelConfig c = TinyConfig("qwen2");
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(3);
  const std::vector<ParamSpec> specs = LayerParamSpecs(c, 0);
  std::vector<at::Tensor> tensors;
  for (const ParamSpec& spec : specs) tensors.push_back(at::randn(spec.shape, gen) * 0.5);
  const at::Tensor x = at::randn({2, 7, c.hidden_size}, gen);
  const double u = std::ldexp(1.0, -24);
  std::map<std::string, at::Tensor> out[2], grad[2];
  for (int merged : {0, 1}) {
    std::vector<at::Tensor> leaves;
    for (const at::Tensor& t : tensors) leaves.push_back(t.clone().requires_grad_(true));
    const LayerWeights w = BindLayer(c, leaves);
    const auto qkv = internal::QkvProjections(w, x, merged);
    const auto gate_up = internal::GateUpProjections(w, x, merged);
    const std::pair<const char*, at::Tensor> named[] = {
        {"q_proj", qkv[0]}, {"k_proj", qkv[1]}, {"v_proj", qkv[2]}, {"gate_proj", gate_up[0]}, {"up_proj", gate_up[1]}};
    at::Tensor total = at::zeros({}, at::kFloat);
    for (const auto& [name, y] : named) {
      out[merged][name] = y.detach();
      total = total + (y * y).sum();  // dL/dy = 2 y
    }
    total.backward();
    for (size_t i = 0; i < specs.size(); ++i) {
      if (leaves[i].grad().defined()) grad[merged][specs[i].name] = leaves[i].grad();
    }
  }
  const at::Tensor ax = x.abs().reshape({-1, c.hidden_size}).to(at::kDouble);
  const double bt = static_cast<double>(ax.size(0));
  const std::string p = "model.layers.0.";
  for (const auto& [module, block_name] : std::map<std::string, std::string>{
           {"q_proj", "self_attn"}, {"k_proj", "self_attn"}, {"v_proj", "self_attn"}, {"gate_proj", "mlp"}, {"up_proj", "mlp"}}) {
    const std::string prefix = p + block_name + "." + module;  // a name the lambdas capture (clang 14: no bindings)
    const at::Tensor weight = tensors[std::find_if(specs.begin(), specs.end(), [&](const ParamSpec& s) {
                                        return s.name == prefix + ".weight";
                                      }) - specs.begin()].to(at::kDouble);
    const at::Tensor dy = (2 * out[0][module]).abs().reshape({-1, weight.size(0)}).to(at::kDouble);
    // Outputs: hidden terms each, and the bias.
    const auto bias_at = std::find_if(specs.begin(), specs.end(),
                                      [&](const ParamSpec& s) { return s.name == prefix + ".bias"; });
    const at::Tensor bias_abs =
        bias_at == specs.end() ? at::zeros({weight.size(0)}, at::kDouble) : tensors[bias_at - specs.begin()].abs().to(at::kDouble);
    const at::Tensor out_bound = 2 * (c.hidden_size + 1) * u * (at::matmul(ax, weight.abs().t()) + bias_abs);
    EXPECT_TRUE(((out[0][module] - out[1][module]).abs().reshape({-1, weight.size(0)}).to(at::kDouble) <= out_bound)
                    .all()
                    .item<bool>())
        << module;
    // The weight's gradient: B T terms each.
    const std::string name = prefix + ".weight";
    ASSERT_TRUE(grad[0].count(name) && grad[1].count(name)) << name;
    const at::Tensor grad_bound = 2 * bt * u * at::matmul(dy.t(), ax);
    EXPECT_TRUE(((grad[0][name] - grad[1][name]).abs().to(at::kDouble) <= grad_bound + 1e-30).all().item<bool>())
        << name << ": worst " << (grad[0][name] - grad[1][name]).abs().max().item<double>();
    const std::string bias = prefix + ".bias";
    if (grad[0].count(bias)) {
      EXPECT_TRUE(((grad[0][bias] - grad[1][bias]).abs().to(at::kDouble) <= 2 * bt * u * dy.sum(0) + 1e-30)
                      .all()
                      .item<bool>())
          << bias;
    }
  }
}

TEST(LlamaTest, PaddingStaysFiniteThroughBackward) {
  const ModelConfig config = TinyConfig("qwen2");
  TinyModel model = TinyModel::Random(config, 6);
  model.RequireGrad();
  // Rows that are all padding, and padding in the middle of nothing trained.
  Batch batch = MakeBatch({{{RandomTokens(3, config.vocab_size, 31)}, 5}, {{}, 8}}, config.pad_token_id);
  testing::Output out = testing::RunModel(model, batch);
  out.loss.backward();
  EXPECT_TRUE(out.logits.isfinite().all().item<bool>());
  for (const auto& [name, t] : model.Named()) EXPECT_TRUE(t.grad().isfinite().all().item<bool>()) << name;
}

TEST(LlamaTest, AttentionContextFlagsAndMask) {
  const ModelConfig config = TinyConfig("llama");
  const auto doc = RandomTokens(4, config.vocab_size, 41);
  AttentionContext single = MakeAttentionContext(config, MakeBatch({{{doc}, 2}, {{doc}}}, 0), at::kFloat);
  EXPECT_TRUE(single.causal_only);
  EXPECT_EQ(single.cos.sizes(), (std::vector<int64_t>{2, 6, config.head_dim}));
  ASSERT_TRUE(single.additive_mask.defined());  // CPU always runs the math path with a mask
  EXPECT_EQ(single.additive_mask.sizes(), (std::vector<int64_t>{2, 1, 6, 6}));
  // The diagonal is always allowed (padding attends to itself); the future never is.
  EXPECT_TRUE(single.additive_mask.diagonal(0, -2, -1).eq(0).all().item<bool>());
  EXPECT_TRUE(at::isinf(single.additive_mask.triu(1).sum()).item<bool>());
  EXPECT_FALSE(MakeAttentionContext(config, MakeBatch({{{doc, doc}}}, 0), at::kFloat).causal_only);
  Batch leading_pad = MakeBatch({{{doc}}}, 0);
  leading_pad.segment_ids[0][0] = 0;
  EXPECT_FALSE(MakeAttentionContext(config, leading_pad, at::kFloat).causal_only);
  AttentionContext bf16 = MakeAttentionContext(config, MakeBatch({{{doc}}}, 0), at::kBFloat16);
  EXPECT_EQ(bf16.cos.scalar_type(), at::kBFloat16);
  EXPECT_EQ(bf16.additive_mask.scalar_type(), at::kBFloat16);
}

// ---------------------------------------------------------------------------------------------
// Gradients against finite differences (fp64, so the check is limited by nothing but the maths)

class FiniteDifferenceTest : public ::testing::TestWithParam<std::string> {};

TEST_P(FiniteDifferenceTest, AutogradMatchesFiniteDifferences) {
  nlohmann::json j = testing::TinyConfigJson(GetParam());
  j["vocab_size"] = 13;
  j["hidden_size"] = 16;
  j["intermediate_size"] = 24;
  j["num_attention_heads"] = 2;
  j["num_key_value_heads"] = 1;
  if (GetParam() == "qwen3") j["head_dim"] = 16;  // != 16 / 2
  if (j["pad_token_id"].is_number()) j["pad_token_id"] = 0;
  auto parsed = ModelConfig::FromHfJson(j);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  const ModelConfig config = parsed.value();
  TinyModel model = TinyModel::Random(config, 7, at::kDouble);
  const Batch batch = MakeBatch({{{RandomTokens(4, 13, 51), RandomTokens(3, 13, 52)}, 0, 0, 0},
                                 {{RandomTokens(5, 13, 53)}, 2, 1, 9}},
                                0);
  model.RequireGrad();
  // chunk_rows 3: the custom backward's chunk boundaries fall inside the batch.
  auto loss_of = [&] { return testing::RunModel(model, batch, 3).loss; };
  loss_of().backward();

  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(99);
  const double eps = 1e-6;
  double worst = 0;
  std::string worst_name;
  int checked = 0;
  for (auto& [name, param] : model.Named()) {
    at::Tensor flat = param.detach().view({-1});  // shares storage with the parameter
    at::Tensor grad = param.grad().view({-1});
    at::Tensor picks = at::randint(flat.numel(), {3}, gen, at::TensorOptions().dtype(at::kLong));
    for (int k = 0; k < 3; ++k) {
      const int64_t i = picks[k].item<int64_t>();
      const double orig = flat[i].item<double>();
      c10::NoGradGuard no_grad;
      flat[i].fill_(orig + eps);
      const double up = loss_of().item<double>();
      flat[i].fill_(orig - eps);
      const double down = loss_of().item<double>();
      flat[i].fill_(orig);
      const double numeric = (up - down) / (2 * eps), analytic = grad[i].item<double>();
      // Central differences: truncation O(eps^2) and rounding ~1e-16 * |loss| / eps, both < 1e-8.
      const double err = std::abs(numeric - analytic) / std::max(1.0, std::abs(analytic));
      if (err > worst) worst = err, worst_name = name;
      ++checked;
    }
  }
  EXPECT_LE(worst, 1e-6) << worst_name;
  std::cout << "[" << GetParam() << "] " << checked << " finite-difference checks, worst error " << worst << " ("
            << worst_name << ")\n";
}

INSTANTIATE_TEST_SUITE_P(Archs, FiniteDifferenceTest, ::testing::Values("llama", "qwen2", "qwen3"));

// ---------------------------------------------------------------------------------------------
// bf16 and the chunked loss

TEST(LlamaTest, Bf16LogitsCloseToFp32) {
  for (const std::string arch : {"llama", "qwen3"}) {
    const ModelConfig config = TinyConfig(arch);
    const TinyModel fp32 = TinyModel::Random(config, 8);
    const Batch batch = StandardBatch(config);
    testing::Output ref = testing::RunModel(fp32, batch);
    testing::Output half = testing::RunModel(fp32.To(at::kBFloat16), batch);
    EXPECT_EQ(half.logits.scalar_type(), at::kBFloat16);
    EXPECT_EQ(half.loss.scalar_type(), at::kFloat);
    // bf16 keeps 8 significant bits: every weight, activation and matmul output is rounded to a
    // relative 2^-9, and these errors add up along two residual layers and the head; the final
    // rounding of a logit near 4 alone is up to 2^-6 = 0.016. Measured: the worst logit is off by
    // 2.0-2.4% of the largest logit, the mean error is 1.3-1.6% of the mean |logit|. The bounds (5%, 3%)
    // leave margin while a real bug (a wrong dtype path, overflow, NaN) is off by far more.
    const double scale = ref.logits.abs().max().item<double>();
    const double diff = MaxAbsDiff(half.logits, ref.logits);
    const double mean_rel = (half.logits.to(at::kFloat) - ref.logits).abs().mean().item<double>() /
                            ref.logits.abs().mean().item<double>();
    EXPECT_LE(diff, 0.05 * scale) << arch;
    EXPECT_LE(mean_rel, 0.03) << arch;
    const double loss_rel = std::abs(half.loss.item<double>() / ref.loss.item<double>() - 1);
    EXPECT_LE(loss_rel, 0.01) << arch;
    std::cout << "[" << arch << "] bf16 vs fp32: max |logits diff| " << diff << " (max |logit| " << scale
              << "), mean |diff| / mean |logit| " << mean_rel << ", loss rel diff " << loss_rel << "\n";
  }
}

// Rounding-error bounds for LossSum's gradients, derived instead of measured (a measured bf16 margin
// held on one CPU and failed on another, whose bf16 kernels round at other points).
//
// A value computed with rounding to a unit roundoff u (bf16: 2^-8, fp32: 2^-24) is off by at most
// u * |value| per rounding, and a sum of n terms accumulated in fp32 by at most n * 2^-24 * sum|terms|
// (Higham, "Accuracy and Stability of Numerical Algorithms", 2nd ed., eq. 3.5). So every entry of a
// gradient that passes through k roundings is within k * u * A of the exact value on the same
// (already rounded) inputs, where A is the sum of the absolute values of the terms that make it up:
// the same formula as the gradient with every factor replaced by its magnitude. Two computations of
// the same gradient differ by at most the sum of their two bounds. The magnitudes here are computed
// in fp64 from the model's own (rounded) weights, so the bound follows each host's values.
struct HeadGradientMagnitudes {
  at::Tensor hidden, final_norm, lm_head;  // A per entry, shaped like the gradients
  double max_abs_logit = 0;
  int64_t longest_sum = 0;  // the most terms any fp32 accumulation adds (vocab, tokens or hidden)
};

HeadGradientMagnitudes MagnitudesOfHeadGradients(const ModelConfig& c, const RootWeights& root, const at::Tensor& hidden,
                                                 const at::Tensor& labels, double upstream) {
  const int64_t H = hidden.size(-1);
  const at::Tensor flat_labels = labels.reshape({-1});
  const at::Tensor index = flat_labels.ne(-100).nonzero().squeeze(1);
  const at::Tensor x = hidden.reshape({-1, H}).index_select(0, index).to(at::kDouble);
  const at::Tensor w = root.final_norm.to(at::kDouble), head = root.lm_head.to(at::kDouble);
  // RMSNorm: y = x * s, s = (mean(x^2) + eps)^-1/2, rows = w * y.
  const at::Tensor s = at::rsqrt(x.pow(2).mean(-1, true) + c.rms_norm_eps);
  const at::Tensor y = x * s, rows = y * w;
  const at::Tensor logits = rows.mm(head.t());
  // softmax - onehot is bounded entrywise by softmax + onehot, which also bounds how far a logit's
  // own rounding (|dz| <= u |z|) moves softmax: |d softmax_v| <= softmax_v * 2 u max|z|.
  const at::Tensor onehot = at::zeros_like(logits).scatter_(1, flat_labels.index_select(0, index).unsqueeze(1), 1.0);
  const at::Tensor d = (at::softmax(logits, -1) + onehot) * upstream;
  HeadGradientMagnitudes m;
  m.lm_head = d.t().mm(rows.abs()).to(at::kFloat);
  const at::Tensor grad_rows = d.mm(head.abs());  // bounds d(loss)/d(rows)
  m.final_norm = (grad_rows * y.abs()).sum(0).to(at::kFloat);
  // d/dx of RMSNorm: s * (w g) - y * s * sum(w g y) / H; both terms by magnitude.
  const at::Tensor wg = grad_rows * w.abs();
  const at::Tensor grad_x = s * wg + y.abs() * s * (wg * y.abs()).sum(-1, true) / H;
  m.hidden = at::zeros({flat_labels.size(0), H}, at::kDouble).index_copy_(0, index, grad_x).view(hidden.sizes()).to(at::kFloat);
  m.max_abs_logit = logits.abs().max().item<double>();
  m.longest_sum = std::max({c.vocab_size, H, index.size(0)});
  return m;
}

// (arch, dtype, vocabulary size: 0 for the tiny model's own). A vocabulary of 200,000 makes the
// composite loss widen its logits in blocks of 5 rows (loss.cc, kWideBlockElements), fewer than a chunk.
class LossSumChunkingTest : public ::testing::TestWithParam<std::tuple<std::string, at::ScalarType, int64_t>> {};

TEST_P(LossSumChunkingTest, EqualsUnchunkedLossAndGradients) {
  const auto [arch, dtype, vocab] = GetParam();  // mistral: untied head; qwen2: tied
  ModelConfig config = TinyConfig(arch);
  if (vocab > 0) config.vocab_size = vocab;
  const TinyModel model = TinyModel::Random(config, 9, dtype);
  const Batch batch = StandardBatch(config);
  const at::Tensor hidden = testing::RunHidden(model, batch).detach();
  // Not 1, as in training (loss_sum / global tokens): backward must scale what forward computed.
  const double upstream = 1.0 / 37;

  auto leaves = [&] {
    const RootWeights root = BindRoot(config, model.root);
    return std::vector<at::Tensor>{hidden.clone().requires_grad_(true), root.final_norm.clone().requires_grad_(true),
                                   root.lm_head.clone().requires_grad_(true)};
  };
  auto root_of = [&](const std::vector<at::Tensor>& t) {
    RootWeights r = BindRoot(config, model.root);
    r.final_norm = t[1];
    r.lm_head = t[2];
    return r;
  };
  // Unchunked: the full [tokens, vocab] logits through plain autograd, upcast to fp32 as HF does.
  std::vector<at::Tensor> full = leaves();
  at::Tensor logits = Logits(config, root_of(full), full[0]).to(at::kFloat);
  at::Tensor expected = at::cross_entropy_loss(logits.view({-1, config.vocab_size}), batch.labels.view({-1}), {},
                                               at::Reduction::Sum, -100);
  (expected * upstream).backward();

  // Roundings to the compute dtype on each path, where the two paths do not share them:
  //   unchunked: the logits' gradient cast from fp32 (1), the matmul's output (1);
  //   chunked:   the logits' gradient cast (1), each chunk's matmul output (1), and for the head the
  //              cast of its fp32 sum (1); the scaling by the upstream gradient (1).
  //   both:      the logits themselves (moving softmax by up to 2 u max|z| of itself, on each path).
  // After the head, RMSNorm's backward runs on each path with its own roundings: the weight's
  // gradient (the product, the sum: 2) and the input's (the product w g, the final cast: 2).
  const double u = dtype == at::kFloat ? std::ldexp(1.0, -24) : std::ldexp(1.0, -8);
  const HeadGradientMagnitudes a = MagnitudesOfHeadGradients(config, BindRoot(config, model.root), hidden,
                                                             batch.labels, upstream);
  const double logit_roundings = 2 * (2 * a.max_abs_logit);
  const double head_roundings = 2 + 4 + logit_roundings, rows_roundings = 2 + 3 + logit_roundings;
  const double k[3] = {rows_roundings + 4, rows_roundings + 4, head_roundings};  // hidden, final_norm, lm_head
  const at::Tensor magnitude[3] = {a.hidden, a.final_norm, a.lm_head};
  const double accumulation = 2 * a.longest_sum * std::ldexp(1.0, -24);  // fp32 sums, both paths
  double worst_of_all = 0;
  for (int64_t chunk : {1, 3, 7, 1024}) {
    std::vector<at::Tensor> t = leaves();
    at::Tensor loss = LossSum(config, root_of(t), t[0], batch.labels, chunk);
    EXPECT_EQ(loss.scalar_type(), at::kFloat);
    (loss * upstream).backward();
    EXPECT_NEAR(loss.item<double>(), expected.item<double>(), 1e-5 * expected.item<double>()) << chunk;
    for (int i = 0; i < 3; ++i) {
      const at::Tensor bound = magnitude[i] * (k[i] * u + accumulation);
      const at::Tensor diff = (t[i].grad().to(at::kFloat) - full[i].grad().to(at::kFloat)).abs();
      const double worst = (diff / bound.clamp_min(1e-30)).max().item<double>();
      EXPECT_LE(worst, 1.0) << "chunk " << chunk << " input " << i << ": the largest difference is " << worst
                            << " times its rounding bound";
      EXPECT_TRUE(diff.masked_select(bound.eq(0)).eq(0).all().item<bool>()) << "an entry with no terms differs";
      worst_of_all = std::max(worst_of_all, worst);
    }
  }
  std::cout << "[" << arch << "/" << c10::toString(dtype) << "/vocab " << config.vocab_size
            << "] largest difference / rounding bound: " << worst_of_all
            << "\n";
  {  // Evaluation: no autograd, no gradient work, same value.
    c10::NoGradGuard no_grad;
    std::vector<at::Tensor> t = leaves();
    at::Tensor loss = LossSum(config, root_of(t), t[0], batch.labels, 4);
    EXPECT_FALSE(loss.requires_grad());
    EXPECT_NEAR(loss.item<double>(), expected.item<double>(), 1e-5 * expected.item<double>());
  }
}

INSTANTIATE_TEST_SUITE_P(Archs, LossSumChunkingTest,
                         ::testing::Combine(::testing::Values("mistral", "qwen2"),
                                            ::testing::Values(at::kFloat, at::kBFloat16),
                                            ::testing::Values(int64_t{0}, int64_t{200000})));

TEST(LlamaTest, LossSumWithNothingTrainedIsZeroAndDifferentiable) {
  const ModelConfig config = TinyConfig("llama");
  TinyModel model = TinyModel::Random(config, 10);
  model.RequireGrad();
  Batch batch = MakeBatch({{{RandomTokens(5, config.vocab_size, 61)}, 0, /*prompt=*/5}}, 0);
  ASSERT_EQ(batch.trained_tokens, 0);
  testing::Output out = testing::RunModel(model, batch);
  EXPECT_EQ(out.loss.item<double>(), 0.0);
  out.loss.backward();  // the step still runs backward on every rank
  EXPECT_EQ(model.root[0].grad().abs().sum().item<double>(), 0.0);
}

TEST(LlamaTest, LossSumRejectsLabelsOutsideTheVocabulary) {
  const ModelConfig config = TinyConfig("llama");
  const TinyModel model = TinyModel::Random(config, 10);
  Batch batch = MakeBatch({{{RandomTokens(5, config.vocab_size, 61)}}}, 0);
  batch.labels[0][1] = config.vocab_size;
  EXPECT_THROW(testing::RunModel(model, batch), c10::Error);
}

// ---------------------------------------------------------------------------------------------
// Parameter layout and initialisation

TEST(LlamaTest, ParamSpecsCoverNumParameters) {
  for (const std::string& arch : kArchs) {
    const ModelConfig c = TinyConfig(arch);
    int64_t total = 0;
    for (int l = 0; l < c.num_hidden_layers; ++l)
      for (const ParamSpec& s : LayerParamSpecs(c, l)) {
        total += s.numel();
        const bool no_decay = s.name.ends_with("norm.weight") || s.name.ends_with(".bias");
        EXPECT_EQ(s.decay, !no_decay) << s.name;
      }
    auto root = RootParamSpecs(c);
    for (const ParamSpec& s : root) total += s.numel();
    EXPECT_EQ(total, c.NumParameters()) << arch;
    EXPECT_EQ(root.size(), c.tie_word_embeddings ? 2u : 3u) << arch;
  }
  auto qwen2 = LayerParamSpecs(TinyConfig("qwen2"), 1);
  EXPECT_EQ(qwen2[2].name, "model.layers.1.self_attn.q_proj.bias");
  auto qwen3 = LayerParamSpecs(TinyConfig("qwen3"), 0);
  bool has_q_norm = false;
  for (const ParamSpec& s : qwen3) {
    if (s.name == "model.layers.0.self_attn.q_norm.weight") {
      has_q_norm = true;
      EXPECT_EQ(s.shape, std::vector<int64_t>{32});
    }
    if (s.name == "model.layers.0.self_attn.q_proj.weight") {
      EXPECT_EQ(s.shape, (std::vector<int64_t>{128, 64}));
    }
  }
  EXPECT_TRUE(has_q_norm);
  const TinyModel m = TinyModel::Random(TinyConfig("llama"), 1);
  std::vector<at::Tensor> short_list(m.layers[0].begin(), m.layers[0].end() - 1);
  EXPECT_THROW(BindLayer(m.config, short_list), c10::Error);
  std::vector<at::Tensor> swapped = m.layers[0];
  std::swap(swapped[1], swapped[2]);  // q [64,64] where k [32,64] belongs
  EXPECT_THROW(BindLayer(m.config, swapped), c10::Error);
}

TEST(LlamaTest, InitParameterIsDeterministicPerSeedAndName) {
  ModelConfig c = TinyConfig("qwen2");
  const ParamSpec big{"model.layers.0.mlp.gate_proj.weight", {512, 256}, true};
  const ParamSpec other{"model.layers.1.mlp.gate_proj.weight", {512, 256}, true};
  at::Tensor a = InitParameter(c, big, 42);
  EXPECT_EQ(a.scalar_type(), at::kFloat);
  EXPECT_TRUE(a.equal(InitParameter(c, big, 42)));
  EXPECT_FALSE(a.equal(InitParameter(c, other, 42)));
  EXPECT_FALSE(a.equal(InitParameter(c, big, 43)));
  EXPECT_NEAR(a.std().item<double>(), c.initializer_range, 0.02 * c.initializer_range);
  EXPECT_NEAR(a.mean().item<double>(), 0.0, 0.01 * c.initializer_range);
  EXPECT_TRUE(InitParameter(c, {"model.layers.0.input_layernorm.weight", {64}, false}, 1).eq(1).all().item<bool>());
  EXPECT_TRUE(InitParameter(c, {"model.layers.0.self_attn.q_norm.weight", {32}, false}, 1).eq(1).all().item<bool>());
  EXPECT_TRUE(InitParameter(c, {"model.norm.weight", {64}, false}, 1).eq(1).all().item<bool>());
  EXPECT_TRUE(InitParameter(c, {"model.layers.0.self_attn.k_proj.bias", {32}, false}, 1).eq(0).all().item<bool>());
  // HF zeroes the padding token's embedding row.
  at::Tensor embed = InitParameter(c, {"model.embed_tokens.weight", {97, 64}, true}, 1);
  EXPECT_TRUE(embed[c.pad_token_id].eq(0).all().item<bool>());
  EXPECT_GT(embed[1].abs().sum().item<double>(), 0);
  c.initializer_range = 0.1;
  EXPECT_NEAR(InitParameter(c, big, 42).std().item<double>(), 0.1, 0.002);
}

}  // namespace
}  // namespace eft::trainer
