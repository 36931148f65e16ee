// LoRA in the sharded model (docs/lora.md), with real Gloo process groups (rank_threads.h):
//  - loss and adapter gradients equal tests/reference/llama_reference.py, which computes
//    y = x W^T + (alpha / r) * (x A^T) B^T from the formula in PyTorch, at world sizes 1, 2 and 3;
//  - every sharding strategy, with and without activation checkpointing, gives the same gradients;
//  - AdamW steps give the same losses at W = 1, 2, 3 and never change the frozen base weights;
//  - dropout is a function of (seed, step, sample key, layer, module, position, feature): recomputation
//    repeats it, and a row's mask does not depend on its micro-batch, its neighbours or its padding.
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <iostream>

#include <ATen/record_function.h>

#include "tests/unit/trainer/model/tiny_model.h"
#include "tests/unit/trainer/parallel/rank_threads.h"
#include "trainer/optim/adamw.h"
#include "trainer/parallel/sharded_llama.h"

namespace eft::trainer {
namespace {

const std::vector<std::string> kAllLinear = {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj",
                                             "down_proj"};

LoraOptions Lora(int64_t r, double alpha, std::vector<std::string> modules = kAllLinear, double dropout = 0) {
  LoraOptions o;
  o.enabled = true;
  o.r = r;
  o.scale = alpha / static_cast<double>(r);
  o.modules = std::move(modules);
  o.dropout = dropout;
  o.seed = 11;
  return o;
}

// PEFT starts B at zero, which would make A's gradient zero and hide a wrong A; the tests start B
// random (uniform(-1/sqrt(r), 1/sqrt(r)), drawn as PEFT draws A, deterministic in the name).
Status InitNonZeroAdapters(ShardedLlama& model, const ModelConfig& config) {
  return model.InitAdapters([&](const ParamSpec& spec) -> Result<at::Tensor> {
    ParamSpec as_a = spec;
    as_a.name = spec.name + ".test.lora_A.weight";
    return InitParameter(config, as_a, 5);
  });
}

Batch TwoRows(const ModelConfig& config) {
  using testing::RowSpec;
  const int64_t v = config.vocab_size;
  return testing::MakeBatch({RowSpec{{testing::RandomTokens(5, v, 1), testing::RandomTokens(4, v, 2)}, 0, 1},
                             RowSpec{{testing::RandomTokens(7, v, 3)}, 2, 0}},
                            0);
}

Batch TwoRows(const ModelConfig& config, std::vector<int64_t> keys) {
  Batch b = TwoRows(config);
  b.sample_keys = at::tensor(keys, at::kLong);
  return b;
}

struct Outcome {
  std::vector<double> losses;  // per step (sum over the batch)
  std::vector<std::pair<std::string, at::Tensor>> adapter_grads;  // whole, after the first step
  std::vector<std::pair<std::string, at::Tensor>> params;         // whole base + adapters, before training
  std::vector<std::pair<std::string, at::Tensor>> base_after;     // whole base after training
  int64_t shard_bytes = 0;
};

std::vector<std::pair<std::string, at::Tensor>> Whole(FlatParamUnit& u, const at::Tensor& slice) {
  std::vector<std::pair<std::string, at::Tensor>> out;
  at::Tensor full = u.GatherSlices(slice.to(at::kFloat));
  auto views = u.Views(full);
  for (size_t i = 0; i < views.size(); ++i) out.emplace_back(u.specs()[i].name, views[i].clone());
  return out;
}

// `steps` optimizer steps on `world` ranks; every rank computes the same batch with the loss scaled
// by 1 / (world * trained tokens), so the reduced gradient is the same at every world size.
Outcome Train(int world, const ModelConfig& config, ShardingOptions options, LoraOptions lora, int steps,
              int64_t micro_batches = 1) {
  Outcome out;
  RunRanks(world, [&](Communicator& comm) {
    ShardedLlama model(config, &comm, options, lora);
    ASSERT_TRUE(model.InitRandom(3).ok());
    ASSERT_TRUE(InitNonZeroAdapters(model, config).ok());
    std::vector<std::pair<std::string, at::Tensor>> params;
    for (auto& u : model.units()) {
      auto w = Whole(*u, u->shard());
      params.insert(params.end(), w.begin(), w.end());
    }
    for (FlatParamUnit* u : model.trainable_units()) {
      auto w = Whole(*u, u->shard());
      params.insert(params.end(), w.begin(), w.end());
    }
    AdamW adamw(AdamWConfig{0.9, 0.999, 1e-8, 0.01});
    for (FlatParamUnit* u : model.trainable_units()) adamw.AddParam(u->shard(), u->grad(), u->decay_mask());
    // Every rank computes the same rows, with the same sample keys (so the same dropout masks).
    const Batch batch = TwoRows(config, {0, 1});
    const double scale = 1.0 / (world * micro_batches * static_cast<double>(batch.trained_tokens));
    std::vector<double> losses;
    std::vector<std::pair<std::string, at::Tensor>> grads;
    for (int step = 0; step < steps; ++step) {
      model.SetStep(step);
      model.BeginStep(micro_batches);
      double loss = 0;
      for (int64_t m = 0; m < micro_batches; ++m) loss += model.ForwardBackward(batch, scale);
      model.EndStep();
      losses.push_back(loss / micro_batches);
      if (step == 0) {
        for (FlatParamUnit* u : model.trainable_units()) {
          auto w = Whole(*u, u->grad());
          grads.insert(grads.end(), w.begin(), w.end());
        }
      }
      adamw.Step(1e-2);
      model.AfterOptimizerStep();
      model.ZeroGrad();
      for (FlatParamUnit* u : model.trainable_units()) {
        ASSERT_EQ(u->grad().abs().max().item<double>(), 0.0) << "ZeroGrad clears the adapters' gradients";
      }
    }
    std::vector<std::pair<std::string, at::Tensor>> base_after;
    for (auto& u : model.units()) {
      auto w = Whole(*u, u->shard());
      base_after.insert(base_after.end(), w.begin(), w.end());
    }
    if (comm.rank() == 0) {
      out.losses = losses;
      out.adapter_grads = grads;
      out.params = params;
      out.base_after = base_after;
      out.shard_bytes = model.ShardBytes();
    }
  });
  return out;
}

double MaxDiff(const at::Tensor& a, const at::Tensor& b) { return (a - b).abs().max().item<double>(); }

TEST(Lora, LossAndAdapterGradientsEqualTheReferenceFromTheFormula) {
  if (std::string why = testing::ReferenceUnavailableReason(); !why.empty()) GTEST_SKIP() << why;
  for (const char* arch : {"llama", "qwen2"}) {  // qwen2: q/k/v biases beside the adapters
    const ModelConfig config = testing::TinyConfig(arch);
    const LoraOptions lora = Lora(4, 8);
    const Batch batch = TwoRows(config);
    Outcome one = Train(1, config, ShardingOptions(ShardingStrategy::kFull, true), lora, 1);
    testing::ReferenceResult ref = testing::RunLoraReference(config, one.params, 4, 8, batch);
    ASSERT_EQ(ref.grads.size(), one.adapter_grads.size()) << "the reference trains exactly the adapters";
    const double scale = 1.0 / static_cast<double>(batch.trained_tokens);
    for (int world : {1, 2, 3}) {
      Outcome got = world == 1 ? one : Train(world, config, ShardingOptions(ShardingStrategy::kFull, true), lora, 1);
      // fp32 on both sides, the same maths in a different formulation (see llama_test.cc): a few
      // ulps of O(1-10) intermediates. 1e-5 relative leaves margin and catches any real mistake
      // (a wrong scale or a missing adapter moves the loss by 1e-2 or more here).
      EXPECT_NEAR(got.losses[0], ref.loss_sum, 1e-5 * ref.loss_sum) << arch << " W=" << world;
      std::map<std::string, at::Tensor> want(ref.grads.begin(), ref.grads.end());
      for (const auto& [name, g] : got.adapter_grads) {
        ASSERT_TRUE(want.count(name)) << name;
        const at::Tensor r = want[name] * scale;  // the reference differentiates the loss sum
        // Gradients here are O(1e-2); 1e-6 absolute is ~1e-4 relative, the same few-ulp agreement
        // after summing over every token.
        EXPECT_LT(MaxDiff(g, r), 1e-6) << arch << " W=" << world << " " << name << " max " << r.abs().max().item<double>();
        EXPECT_GT(r.abs().max().item<double>(), 1e-4) << name << ": a test that cannot see this gradient proves nothing";
      }
    }
  }
}

TEST(Lora, EveryStrategyWithAndWithoutCheckpointingGivesTheSameAdapterGradients) {
  const ModelConfig config = testing::TinyConfig("qwen3");
  const LoraOptions lora = Lora(2, 4, {"q_proj", "v_proj", "down_proj"});
  Outcome ref = Train(1, config, ShardingOptions(ShardingStrategy::kFull, true), lora, 1);
  for (auto strategy : {ShardingStrategy::kFull, ShardingStrategy::kGradOp, ShardingStrategy::kNoShard}) {
    for (bool checkpointing : {true, false}) {
      const ShardingOptions o(strategy, checkpointing);
      Outcome got = Train(2, config, o, lora, 2, /*micro_batches=*/2);
      ASSERT_EQ(got.adapter_grads.size(), ref.adapter_grads.size());
      EXPECT_NEAR(got.losses[0], ref.losses[0], 1e-9 * ref.losses[0]);
      for (size_t i = 0; i < ref.adapter_grads.size(); ++i) {
        // Summation order over ranks and micro-batches differs: a few ulps.
        EXPECT_LT(MaxDiff(got.adapter_grads[i].second, ref.adapter_grads[i].second), 1e-7)
            << ShardingStrategyName(strategy) << " checkpointing=" << checkpointing << " " << ref.adapter_grads[i].first;
      }
    }
  }
}

// Counts the matrix products that compute a base weight's gradient: [a, N] x [N, b] with N the
// micro-batch's tokens and neither side the LoRA rank (an adapter's gradient has r on one side).
std::atomic<int64_t> g_tokens{0}, g_rank{0}, g_weight_grad_products{0};

std::unique_ptr<at::ObserverContext> CountWeightGradProducts(const at::RecordFunction& fn) {
  if (std::string(fn.name()) != "aten::mm") return nullptr;
  const auto inputs = fn.inputs();
  if (inputs.size() < 2 || !inputs[0].isTensor() || !inputs[1].isTensor()) return nullptr;
  const at::Tensor& a = inputs[0].toTensor();
  const at::Tensor& b = inputs[1].toTensor();
  if (a.dim() != 2 || b.dim() != 2) return nullptr;
  if (a.size(1) == g_tokens && a.size(0) != g_rank && b.size(1) != g_rank) ++g_weight_grad_products;
  return nullptr;
}

TEST(Lora, NoGradientOfABaseWeightIsComputedUnderAnyStrategy) {
  const ModelConfig config = testing::TinyConfig("llama");
  const Batch batch = TwoRows(config, {0, 1});
  g_tokens = batch.input_ids.numel();  // 18: no dimension of the tiny model
  g_rank = 4;
  const at::CallbackHandle handle =
      at::addGlobalCallback(at::RecordFunctionCallback(CountWeightGradProducts).needsInputs(true));
  auto products = [&](ShardingOptions o, LoraOptions lora) {
    g_weight_grad_products = 0;
    RunRanks(2, [&](Communicator& comm) {
      ShardedLlama model(config, &comm, o, lora);
      ASSERT_TRUE(model.InitRandom(3).ok());
      model.BeginStep(1);
      model.ForwardBackward(batch, 1.0);
      model.EndStep();
    });
    return g_weight_grad_products.load();
  };
  for (auto strategy : {ShardingStrategy::kFull, ShardingStrategy::kGradOp, ShardingStrategy::kNoShard}) {
    for (bool checkpointing : {true, false}) {
      const ShardingOptions o(strategy, checkpointing);
      const std::string what = ShardingStrategyName(strategy) + " checkpointing=" + std::to_string(checkpointing);
      EXPECT_GT(products(o, LoraOptions()), 0) << what << ": full fine-tuning computes them (the counter works)";
      EXPECT_EQ(products(o, Lora(4, 8)), 0) << what;
    }
  }
  at::removeCallback(handle);
}

TEST(Lora, TrainingGivesTheSameLossesAtEveryWorldSizeAndLeavesTheBaseAlone) {
  const ModelConfig config = testing::TinyConfig("llama");
  const LoraOptions lora = Lora(4, 8);
  Outcome one = Train(1, config, ShardingOptions(ShardingStrategy::kFull, true), lora, 4);
  ASSERT_LT(one.losses.back(), one.losses.front()) << "the adapters learn";
  for (int world : {2, 3}) {
    Outcome got = Train(world, config, ShardingOptions(ShardingStrategy::kFull, true), lora, 4);
    for (size_t s = 0; s < one.losses.size(); ++s) {
      // Identical maths; only the order of the gradient sums differs, and AdamW amplifies that little.
      EXPECT_NEAR(got.losses[s], one.losses[s], 1e-5 * one.losses[s]) << "W=" << world << " step " << s;
    }
  }
  // Frozen means bit for bit.
  size_t base = 0;
  for (const auto& [name, t] : one.base_after) {
    EXPECT_TRUE(at::equal(t, one.params[base++].second)) << name;
  }
}

TEST(Lora, DropoutIsRepeatedByTheRecomputationAndDependsOnTheStep) {
  const ModelConfig config = testing::TinyConfig("llama");
  const ShardingOptions with(ShardingStrategy::kFull, true), without(ShardingStrategy::kFull, false);
  const LoraOptions lora = Lora(4, 8, kAllLinear, 0.3);
  Outcome a = Train(2, config, with, lora, 2), b = Train(2, config, without, lora, 2);
  Outcome none = Train(2, config, with, Lora(4, 8), 2);
  EXPECT_NE(a.losses[0], none.losses[0]) << "dropout does something";
  EXPECT_EQ(a.losses, b.losses);
  for (size_t i = 0; i < a.adapter_grads.size(); ++i) {
    EXPECT_LT(MaxDiff(a.adapter_grads[i].second, b.adapter_grads[i].second), 1e-7) << a.adapter_grads[i].first;
  }
}

// One step on W = 1 over `micro` (one micro-batch each): the loss sum and the adapter gradients.
std::pair<double, std::vector<at::Tensor>> OneStep(const ModelConfig& config, const LoraOptions& lora,
                                                   const std::vector<Batch>& micro) {
  std::pair<double, std::vector<at::Tensor>> out;
  RunRanks(1, [&](Communicator& comm) {
    ShardedLlama model(config, &comm, ShardingOptions(ShardingStrategy::kFull, true), lora);
    ASSERT_TRUE(model.InitRandom(3).ok());
    ASSERT_TRUE(InitNonZeroAdapters(model, config).ok());
    model.SetStep(5);
    model.BeginStep(static_cast<int64_t>(micro.size()));
    for (const Batch& b : micro) out.first += model.ForwardBackward(b, 1e-2);
    model.EndStep();
    for (FlatParamUnit* u : model.trainable_units()) out.second.push_back(u->grad().clone());
  });
  return out;
}

// What makes W = 1, 2, 3 draw the same masks: a row's mask is a function of its sample key, not of
// which rows share its micro-batch or how far it is padded (each world size groups and pads the
// step's examples differently).
TEST(Lora, DropoutDependsOnTheSampleKeyNotOnItsMicroBatchOrPadding) {
  using testing::RowSpec;
  const ModelConfig config = testing::TinyConfig("llama");
  const int64_t v = config.vocab_size;
  const std::vector<RowSpec> rows = {RowSpec{{testing::RandomTokens(4, v, 1)}, 0, 1},
                                     RowSpec{{testing::RandomTokens(9, v, 2)}, 0, 2},
                                     RowSpec{{testing::RandomTokens(6, v, 3), testing::RandomTokens(3, v, 4)}, 0, 1}};
  auto keyed = [](Batch b, std::vector<int64_t> keys) {
    b.sample_keys = at::tensor(keys, at::kLong);
    return b;
  };
  const LoraOptions lora = Lora(4, 8, kAllLinear, 0.3);
  // Together (rows padded to 9) and one row per micro-batch (no padding).
  auto together = OneStep(config, lora, {keyed(testing::MakeBatch(rows, 0), {0, 1, 2})});
  auto apart = OneStep(config, lora, {keyed(testing::MakeBatch({rows[0]}, 0), {0}),
                                      keyed(testing::MakeBatch({rows[1]}, 0), {1}),
                                      keyed(testing::MakeBatch({rows[2]}, 0), {2})});
  // The same sums in another order: a few ulps of a loss of ~100 and gradients of ~1e-1.
  EXPECT_NEAR(apart.first, together.first, 1e-6 * together.first);
  ASSERT_EQ(apart.second.size(), together.second.size());
  for (size_t i = 0; i < together.second.size(); ++i) {
    EXPECT_LT(MaxDiff(apart.second[i], together.second[i]), 1e-7) << "unit " << i;
  }
  // The keys are what matters: other keys, other masks.
  auto other = OneStep(config, lora, {keyed(testing::MakeBatch(rows, 0), {3, 4, 5})});
  auto none = OneStep(config, Lora(4, 8), {keyed(testing::MakeBatch(rows, 0), {0, 1, 2})});
  EXPECT_GT(std::abs(other.first - together.first), 1e-4 * together.first);
  EXPECT_GT(std::abs(none.first - together.first), 1e-4 * together.first) << "dropout does something";
  // Without keys there is no mask to draw: refused, not made up.
  RunRanks(1, [&](Communicator& comm) {
    ShardedLlama model(config, &comm, ShardingOptions(ShardingStrategy::kFull, true), lora);
    ASSERT_TRUE(model.InitRandom(3).ok());
    model.BeginStep(1);
    EXPECT_THROW(model.ForwardBackward(testing::MakeBatch(rows, 0), 1.0), c10::Error);
  });
}

TEST(Lora, DropoutMasksKeepOneMinusPAndAPrefixDoesNotDependOnTheLength) {
  const at::Tensor seeds = at::tensor(std::vector<int64_t>{7, -3}, at::kLong);
  const at::Tensor long_mask = LoraDropoutMask(seeds, 2, 40, 64, 0.25);
  const at::Tensor short_mask = LoraDropoutMask(seeds, 2, 9, 64, 0.25);
  EXPECT_TRUE(at::equal(long_mask.slice(1, 0, 9), short_mask));
  // Entries are 0 or 1 (the adapter path scales by 1 / (1 - p)); over 5120 draws the kept share is
  // 0.75 +- 0.02 (> 3 sigma).
  const at::Tensor kept = long_mask > 0;
  EXPECT_NEAR(kept.to(at::kDouble).mean().item<double>(), 0.75, 0.02);
  EXPECT_TRUE(at::equal(long_mask, kept.to(at::kFloat))) << "a mask of zeros and ones";
  EXPECT_FALSE(at::equal(LoraDropoutMask(seeds, 3, 40, 64, 0.25), long_mask)) << "each module its own mask";
  EXPECT_FALSE(at::equal(long_mask[0], long_mask[1])) << "each row its own mask";
}

TEST(Lora, UpdateIsScaleOverKeepTimesTheMaskedInputThroughAThenB) {
  at::manual_seed(5);
  const at::Tensor x = at::randn({2, 6, 32});
  LoraAdapter ad{at::randn({4, 32}).requires_grad_(true), at::randn({24, 4}).requires_grad_(true)};
  LayerLora lora;
  lora.scale = 2.0;
  lora.dropout = 0.3;
  lora.dropout_row_seeds = at::tensor(std::vector<int64_t>{11, 12}, at::kLong);
  const at::Tensor mask = LoraDropoutMask(lora.dropout_row_seeds, 4, 6, 32, 0.3);
  // The formula, written out in double: PEFT's scale * dropout(x) A^T B^T, dropout keeping 1 / (1 - p).
  const at::Tensor want = at::matmul(at::matmul(x.to(at::kDouble) * mask.to(at::kDouble) / 0.7,
                                                ad.a.detach().to(at::kDouble).t()),
                                     ad.b.detach().to(at::kDouble).t()) * 2.0;
  const double peak = want.abs().max().item<double>();
  ASSERT_GT(peak, 1.0);
  // Derived, per entry (Higham's gamma_n = n u / (1 - n u) bounds n roundings to unit roundoff u): in
  // the compute dtype the input, A, the scaled B and both products are each rounded once (5), the
  // 0/1 mask is exact; the products accumulate in fp32 over 32 and 4 terms. Each bound applies to
  // the sum of the magnitudes of the terms, |x m| |A|^T |B|^T scale / (1 - p), not to the result,
  // which may cancel.
  const at::Tensor magnitude = at::matmul(at::matmul((x.to(at::kDouble) * mask.to(at::kDouble) / 0.7).abs(),
                                                     ad.a.detach().to(at::kDouble).abs().t()),
                                          ad.b.detach().to(at::kDouble).abs().t()) * 2.0;
  auto gamma = [](double n, double u) { return n * u / (1 - n * u); };
  const double fp32_u = std::ldexp(1.0, -24), bf16_u = std::ldexp(1.0, -8);
  for (auto [dtype, u] : {std::pair{at::kFloat, fp32_u}, std::pair{at::kBFloat16, bf16_u}}) {
    const at::Tensor got = LoraUpdate(x.to(dtype), ad, lora, 4, dtype);
    EXPECT_EQ(got.scalar_type(), dtype);
    const at::Tensor bound = magnitude * (gamma(5, u) + gamma(32 + 4, fp32_u));
    const double worst = ((got.to(at::kDouble) - want).abs() / bound.clamp_min(1e-300)).max().item<double>();
    EXPECT_LE(worst, 1.0) << dtype << ": the largest error is " << worst << " times its rounding bound";
    got.sum().backward();
    EXPECT_EQ(ad.a.grad().scalar_type(), at::kFloat) << "the adapters' gradients stay fp32";
    EXPECT_GT(ad.b.grad().abs().max().item<double>(), 0.0);
    ad.a.mutable_grad().reset();
    ad.b.mutable_grad().reset();
  }
  lora.dropout = 0;  // no mask, no 1 / (1 - p)
  const at::Tensor plain = at::matmul(at::matmul(x.to(at::kDouble), ad.a.detach().to(at::kDouble).t()),
                                      ad.b.detach().to(at::kDouble).t()) * 2.0;
  EXPECT_LT((LoraUpdate(x, ad, lora, 4, at::kFloat).to(at::kDouble) - plain).abs().max().item<double>(), 1e-5 * peak);
}

TEST(Lora, OnlyTheAdaptersAreTrainableAndTheBaseIsKeptInTheComputeDtype) {
  const ModelConfig config = testing::TinyConfig("llama");
  RunRanks(2, [&](Communicator& comm) {
    for (at::ScalarType dtype : {at::kFloat, at::kBFloat16}) {
      ShardingOptions options(ShardingStrategy::kFull, true);
      options.compute_dtype = dtype;
      ShardedLlama full(config, &comm, options), lora(config, &comm, options, Lora(16, 32));
      ASSERT_EQ(lora.trainable_units().size(), static_cast<size_t>(config.num_hidden_layers));
      int64_t base = 0, adapters = 0;
      for (auto& u : lora.units()) {
        EXPECT_TRUE(u->frozen());
        EXPECT_EQ(u->shard().scalar_type(), dtype);
        base += u->shard_numel();
      }
      for (FlatParamUnit* u : lora.trainable_units()) {
        EXPECT_FALSE(u->frozen());
        EXPECT_EQ(u->specs().size(), 14u);  // A and B of 7 modules
        adapters += u->shard_numel();
      }
      // Base once in the compute dtype; adapters in fp32 with an fp32 gradient (the AdamW moments
      // are the trainer's, Trainer::PersistentBytes).
      EXPECT_EQ(lora.ShardBytes(), base * static_cast<int64_t>(at::elementSize(dtype)) + adapters * 8);
      if (comm.rank() == 0 && dtype == at::kBFloat16) {
        const int64_t full_bytes = full.ShardBytes() + 8 * base;  // + AdamW moments
        const int64_t lora_bytes = lora.ShardBytes() + 8 * adapters;
        std::cout << "tiny llama, W=2, bf16, r=16 all-linear: persistent bytes per rank " << lora_bytes << " (LoRA) vs "
                  << full_bytes << " (full), " << 100.0 * lora_bytes / full_bytes << "%\n";
      }
    }
  });
}

}  // namespace
}  // namespace eft::trainer
