// FSDP correctness with real c10d Gloo process groups: W ranks run as threads of this test, each
// with its own TCPStore client and ProcessGroupGloo over loopback, exactly as separate processes
// would. Reference: the same model unsharded (world size 1).
#include "trainer/parallel/sharded_llama.h"

#include <gtest/gtest.h>

#include "tests/unit/trainer/parallel/rank_threads.h"

namespace eft::trainer {
namespace {

ModelConfig TinyConfig(const std::string& arch, bool tied) {
  nlohmann::json j = {{"model_type", arch},         {"hidden_size", 32},        {"intermediate_size", 48},
                      {"num_hidden_layers", 3},      {"num_attention_heads", 4}, {"num_key_value_heads", 2},
                      {"vocab_size", 61},            {"max_position_embeddings", 128},
                      {"tie_word_embeddings", tied}, {"rms_norm_eps", 1e-6},     {"hidden_act", "silu"}};
  auto c = ModelConfig::FromHfJson(j);
  EXPECT_TRUE(c.ok()) << c.status();
  return *c;
}

// Two rows: a packed row with two documents, and a padded row.
Batch TinyBatch() {
  Batch b;
  b.input_ids = at::tensor({5, 9, 11, 3, 7, 2, 8, 40, 13, 0, 0, 0}, at::kLong).view({2, 6});
  b.labels = at::tensor({9, 11, -100, 7, 2, -100, 40, 13, -100, -100, -100, -100}, at::kLong).view({2, 6});
  b.position_ids = at::tensor({0, 1, 2, 0, 1, 2, 0, 1, 2, 0, 0, 0}, at::kLong).view({2, 6});
  b.segment_ids = at::tensor({1, 1, 1, 2, 2, 2, 1, 1, 1, 0, 0, 0}, at::kLong).view({2, 6});
  b.trained_tokens = 6;
  b.tokens = 9;
  return b;
}

struct Outcome {
  double loss = 0;
  std::vector<std::pair<std::string, at::Tensor>> grads;  // whole, by name
  at::Tensor logits;
};

// One ForwardBackward on `world` ranks; rank 0's view of the whole gradients and logits. `staged`:
// the collectives go through host copies (StageThroughHost, what GPU ranks sharing a GPU use).
Outcome RunModel(int world, const ModelConfig& config, ShardingOptions options, int empty_rank = -1,
                 bool staged = false) {
  Outcome out;
  RunRankComms(world, [&](std::unique_ptr<Communicator> gloo) {
    std::unique_ptr<Communicator> owned = staged ? StageThroughHost(std::move(gloo), options.device) : std::move(gloo);
    Communicator& comm = *owned;
    ShardedLlama model(config, &comm, options);
    ASSERT_TRUE(model.InitRandom(7).ok());
    model.BeginStep();
    // Every rank computes the same batch, except `empty_rank`, which has none: the gradient is then
    // the batch's gradient times the number of non-empty ranks.
    Batch batch = comm.rank() == empty_rank ? Batch() : TinyBatch();
    double loss = model.ForwardBackward(batch, 1.0 / 6);
    model.EndStep();
    // Collect whole gradients: gather each unit's fp32 grad slice.
    std::vector<std::pair<std::string, at::Tensor>> grads;
    for (auto& u : model.units()) {
      at::Tensor full = at::empty({u->padded_numel()}, at::kFloat);
      comm.AllGather(u->grad(), full);
      auto views = u->Views(full);
      for (size_t i = 0; i < views.size(); ++i) grads.emplace_back(u->specs()[i].name, views[i].clone());
    }
    at::Tensor logits = model.ForwardLogits(TinyBatch());
    if (comm.rank() == 0) {
      out.loss = loss;
      out.grads = grads;
      out.logits = logits;
    }
  });
  return out;
}

double MaxDiff(const at::Tensor& a, const at::Tensor& b) { return (a - b).abs().max().item<double>(); }

// fp32 sums over ranks happen in a different order than one rank's local sum; for these magnitudes
// (gradients ~1e-2, a handful of terms) that moves results by a few ulps, far below 1e-6.
constexpr double kGradTolerance = 1e-6;

TEST(ShardedLlama, ShardedGradientsEqualUnshardedAtEveryWorldSize) {
  for (bool tied : {false, true}) {
    ModelConfig config = TinyConfig("llama", tied);
    ShardingOptions options(ShardingStrategy::kFull, true);
    Outcome ref = RunModel(1, config, options);
    ASSERT_GT(ref.loss, 0);
    for (int world : {2, 3, 4}) {
      Outcome got = RunModel(world, config, options);
      EXPECT_NEAR(got.loss, ref.loss, 1e-9);
      ASSERT_EQ(got.grads.size(), ref.grads.size());
      for (size_t i = 0; i < ref.grads.size(); ++i) {
        // Each of the `world` ranks computed the same batch, so the reduced gradient is world x.
        EXPECT_LT(MaxDiff(got.grads[i].second, ref.grads[i].second * world), kGradTolerance * world)
            << "tied=" << tied << " world=" << world << " " << ref.grads[i].first;
      }
      EXPECT_LT(MaxDiff(got.logits, ref.logits), 1e-6) << "world=" << world;
    }
  }
}

// The host-staged collectives move the same bytes as Gloo's own: identical losses, gradients and
// logits, whatever the sharding strategy.
TEST(ShardedLlama, CollectivesStagedThroughHostGiveGloosBits) {
  ModelConfig config = TinyConfig("qwen2", true);
  for (ShardingStrategy strategy : {ShardingStrategy::kFull, ShardingStrategy::kGradOp, ShardingStrategy::kNoShard}) {
    const ShardingOptions options(strategy, true);
    Outcome direct = RunModel(2, config, options);
    Outcome staged = RunModel(2, config, options, /*empty_rank=*/-1, /*staged=*/true);
    const std::string what = ShardingStrategyName(strategy);
    EXPECT_EQ(staged.loss, direct.loss) << what;
    ASSERT_EQ(staged.grads.size(), direct.grads.size());
    for (size_t i = 0; i < direct.grads.size(); ++i) {
      EXPECT_TRUE(at::equal(staged.grads[i].second, direct.grads[i].second)) << what << " " << direct.grads[i].first;
    }
    EXPECT_TRUE(at::equal(staged.logits, direct.logits)) << what;
  }
}

TEST(ShardedLlama, ActivationCheckpointingGivesIdenticalGradients) {
  for (const char* arch : {"llama", "qwen2", "qwen3"}) {
    ModelConfig config = TinyConfig(arch, false);
    const ShardingOptions with(ShardingStrategy::kFull, true), without(ShardingStrategy::kFull, false);
    for (int world : {1, 2}) {
      Outcome a = RunModel(world, config, with), b = RunModel(world, config, without);
      EXPECT_EQ(a.loss, b.loss);
      for (size_t i = 0; i < a.grads.size(); ++i) {
        EXPECT_TRUE(at::equal(a.grads[i].second, b.grads[i].second)) << arch << " world=" << world << " "
                                                                      << a.grads[i].first;
      }
    }
  }
}

TEST(ShardedLlama, AnEmptyMicroBatchJoinsTheCollectivesAndAddsNothing) {
  ModelConfig config = TinyConfig("llama", false);
  for (bool checkpointing : {true, false}) {
    const ShardingOptions options(ShardingStrategy::kFull, checkpointing);
    Outcome ref = RunModel(1, config, options);
    Outcome got = RunModel(3, config, options, /*empty_rank=*/1);  // two ranks have the batch, one has none
    for (size_t i = 0; i < ref.grads.size(); ++i) {
      EXPECT_LT(MaxDiff(got.grads[i].second, ref.grads[i].second * 2), 2 * kGradTolerance) << ref.grads[i].first;
    }
  }
}

TEST(ShardedLlama, Bf16ComputeStaysCloseToFp32) {
  ModelConfig config = TinyConfig("qwen3", false);
  ShardingOptions fp32(ShardingStrategy::kFull, true), bf16(ShardingStrategy::kFull, true);
  bf16.compute_dtype = at::kBFloat16;
  Outcome a = RunModel(2, config, fp32), b = RunModel(2, config, bf16);
  // bf16 keeps 8 bits of mantissa (relative error ~4e-3 per rounding); over 3 tiny layers the
  // mean token loss (~4.1 = ln 61) moves by well under 1e-2.
  EXPECT_NEAR(a.loss / 6, b.loss / 6, 1e-2);
}

// A batch that differs by rank and micro-batch (token ids shifted), so summing over micro-batches
// and ranks in the wrong place would show.
Batch ShiftedBatch(int shift) {
  Batch b = TinyBatch();
  b.input_ids = (b.input_ids + shift) % 61;
  b.labels = at::where(b.labels >= 0, (b.labels + shift) % 61, b.labels);
  return b;
}

struct StepOutcome {
  std::vector<double> losses;                  // rank 0's loss sum, per step
  std::vector<std::vector<at::Tensor>> grads;  // whole gradients per step, by unit
};

// `steps` steps of `micro` micro-batches each, with a plain SGD update of the shards between steps
// (so the second step sees the first step's update, which kNoShard must refresh). Rank 1 has an
// empty last micro-batch when micro > 1, as a rank with fewer examples would.
StepOutcome RunSteps(int world, const ModelConfig& config, ShardingOptions options, int steps, int micro,
                     double lr = 0.5) {
  StepOutcome out;
  RunRanks(world, [&](Communicator& comm) {
    ShardedLlama model(config, &comm, options);
    ASSERT_TRUE(model.InitRandom(11).ok());
    std::vector<double> losses;
    std::vector<std::vector<at::Tensor>> grads;
    for (int s = 0; s < steps; ++s) {
      model.BeginStep(micro);
      double loss = 0;
      for (int m = 0; m < micro; ++m) {
        const bool empty = comm.rank() == 1 && micro > 1 && m == micro - 1;
        loss += model.ForwardBackward(empty ? Batch() : ShiftedBatch(comm.rank() * 7 + m * 3 + s), 0.05);
      }
      model.EndStep();
      std::vector<at::Tensor> step_grads;
      for (auto& u : model.units()) {
        at::Tensor full = at::empty({u->padded_numel()}, at::kFloat);
        comm.AllGather(u->grad(), full);
        step_grads.push_back(full);
        u->shard().sub_(u->grad() * lr);
      }
      model.AfterOptimizerStep();
      model.ZeroGrad();
      losses.push_back(loss);
      grads.push_back(step_grads);
    }
    if (comm.rank() == 0) out = {losses, grads};
  });
  return out;
}

TEST(ShardedLlama, EveryShardingStrategyGivesTheSameGradientsOverStepsAndMicroBatches) {
  ModelConfig config = TinyConfig("qwen3", false);
  for (bool checkpointing : {true, false}) {
    for (int world : {1, 2, 3}) {
      const ShardingOptions full(ShardingStrategy::kFull, checkpointing);
      StepOutcome ref = RunSteps(world, config, full, 2, 3);
      ASSERT_EQ(ref.grads.size(), 2u);
      for (ShardingStrategy strategy : {ShardingStrategy::kGradOp, ShardingStrategy::kNoShard}) {
        ShardingOptions options = full;
        options.strategy = strategy;
        StepOutcome got = RunSteps(world, config, options, 2, 3);
        const std::string what = ShardingStrategyName(strategy) + " world=" + std::to_string(world) +
                                 " checkpointing=" + std::to_string(checkpointing);
        for (size_t s = 0; s < 2; ++s) {
          // The same forward computation; only the order of the fp32 gradient sums differs
          // (micro-batches summed before, not after, the reduction): a few ulps in the gradients,
          // so identical first-step losses and, after the update, second-step losses (fp32 sums
          // near 72, ulp 7.6e-6) within a relative 1e-6.
          EXPECT_NEAR(got.losses[s], ref.losses[s], s == 0 ? 1e-9 : 1e-6 * std::abs(ref.losses[s]))
              << what << " step " << s;
          for (size_t u = 0; u < ref.grads[s].size(); ++u) {
            EXPECT_LT(MaxDiff(got.grads[s][u], ref.grads[s][u]), kGradTolerance * 3 * world)
                << what << " step " << s << " unit " << u;
            // One rank reduces nothing: every strategy adds each micro-batch into the gradient
            // slice in the same order (docs/architecture.md, "Sharding strategies").
            if (world == 1) EXPECT_TRUE(at::equal(got.grads[s][u], ref.grads[s][u])) << what << " unit " << u;
          }
          if (world == 1) EXPECT_EQ(got.losses[s], ref.losses[s]) << what << " step " << s;
        }
      }
    }
  }
}

TEST(ShardedLlama, TheSecondStepSeesTheFirstUpdate) {
  // Guards the test above: if the update did not change the second step's gradients, a strategy
  // that kept stale parameters would pass it.
  ModelConfig config = TinyConfig("llama", false);
  const ShardingOptions full(ShardingStrategy::kFull, true);
  StepOutcome updated = RunSteps(2, config, full, 2, 1), frozen = RunSteps(2, config, full, 2, 1, /*lr=*/0.0);
  EXPECT_TRUE(at::equal(updated.grads[0][1], frozen.grads[0][1]));
  EXPECT_GT(MaxDiff(updated.grads[1][1], frozen.grads[1][1]), 1e-4);
}

TEST(ShardedLlama, MoreMicroBatchesThanAnnouncedIsAnError) {
  ModelConfig config = TinyConfig("llama", false);
  for (ShardingStrategy strategy : {ShardingStrategy::kFull, ShardingStrategy::kGradOp}) {
    RunRanks(1, [&](Communicator& comm) {
      const ShardingOptions options(strategy, true);
      ShardedLlama model(config, &comm, options);
      ASSERT_TRUE(model.InitRandom(7).ok());
      model.BeginStep(1);
      model.ForwardBackward(TinyBatch(), 1.0);
      EXPECT_THROW(model.ForwardBackward(TinyBatch(), 1.0), c10::Error);
    });
  }
}

TEST(ShardedLlama, ShardingStrategyNamesRoundTrip) {
  for (const char* name : {"full", "grad_op", "no_shard"}) {
    auto s = ParseShardingStrategy(name);
    ASSERT_TRUE(s.ok());
    EXPECT_EQ(ShardingStrategyName(*s), name);
  }
  auto bad = ParseShardingStrategy("zero3");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().ToString().find("full, grad_op, no_shard"), std::string::npos);
}

TEST(ShardedLlama, NoShardKeepsWholeParametersAndSaysSo) {
  ModelConfig config = TinyConfig("llama", false);
  RunRanks(2, [&](Communicator& comm) {
    ShardingOptions full(ShardingStrategy::kFull, true), no_shard(ShardingStrategy::kNoShard, true);
    no_shard.compute_dtype = at::kBFloat16;
    ShardedLlama a(config, &comm, full), b(config, &comm, no_shard);
    int64_t whole = 0;
    for (auto& u : b.units()) whole += u->padded_numel() * 2;
    EXPECT_EQ(b.ShardBytes(), a.ShardBytes() + whole);
  });
}

TEST(ShardedLlama, EachRankKeepsOneWthOfTheParameters) {
  ModelConfig config = TinyConfig("llama", false);
  int64_t one = 0;
  RunRanks(1, [&](Communicator& comm) { one = ShardedLlama(config, &comm, ShardingOptions(ShardingStrategy::kFull, true)).ShardBytes(); });
  for (int world : {2, 4}) {
    std::vector<int64_t> bytes(world);
    RunRanks(world, [&](Communicator& comm) { bytes[comm.rank()] = ShardedLlama(config, &comm, ShardingOptions(ShardingStrategy::kFull, true)).ShardBytes(); });
    for (int64_t b : bytes) {
      // Each unit is padded to a multiple of W, so at most W-1 extra elements per unit.
      EXPECT_LE(b, one / world + 4 * 2 * world * 4) << "world=" << world;
      EXPECT_GE(b, one / world);
    }
  }
}

}  // namespace
}  // namespace eft::trainer
