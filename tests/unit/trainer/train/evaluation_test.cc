// Evaluation (trainer/train/evaluation.h): the held-out split, and the eval loss over real c10d
// Gloo process groups (ranks as threads, tests/unit/trainer/parallel/rank_threads.h) against the
// independent PyTorch reference (tests/reference/llama_reference.py) on the same weights.
#include "trainer/train/evaluation.h"

#include <gtest/gtest.h>

#include <numeric>
#include <set>

#include "tests/unit/trainer/model/tiny_model.h"
#include "tests/unit/trainer/parallel/rank_threads.h"
#include "trainer/data/packing.h"
#include "trainer/data/sampler.h"

namespace eft::trainer {
namespace {

// Example i has 5 + (7 i mod 13) tokens, its first 2 labels untrained ("prompt"); its tokens
// encode i, so the tests can tell examples apart.
TokenDataset Examples(int n, int64_t vocab = 61) {
  std::vector<Example> out;
  for (int i = 0; i < n; ++i) {
    Example e;
    const int len = 5 + (7 * i) % 13;
    for (int t = 0; t < len; ++t) {
      const int64_t id = (i * 17 + t * 5 + 1) % vocab;
      e.input_ids.push_back(id);
      e.labels.push_back(t < 2 ? -100 : id);
    }
    e.input_ids[0] = i % vocab;
    out.push_back(std::move(e));
  }
  return TokenDataset::FromExamples(std::move(out));
}

std::vector<int64_t> FirstIds(const TokenDataset& ds) {
  std::vector<int64_t> ids;
  for (int64_t i = 0; i < ds.size(); ++i) ids.push_back(ds[i].input_ids[0]);
  return ids;
}

TEST(SplitHeldOut, HoldsOutTheRoundedFractionDisjointlyAndKeepsOrder) {
  const TokenDataset all = Examples(50);
  auto split = SplitHeldOut(all, 0.1);
  ASSERT_TRUE(split.ok()) << split.status();
  EXPECT_EQ(split->eval.size(), 5);
  EXPECT_EQ(split->train.size(), 45);
  const auto train = FirstIds(split->train), eval = FirstIds(split->eval);
  std::set<int64_t> both(train.begin(), train.end());
  both.insert(eval.begin(), eval.end());
  EXPECT_EQ(both.size(), 50u) << "every example lands in exactly one part";
  EXPECT_TRUE(std::is_sorted(train.begin(), train.end()));
  EXPECT_TRUE(std::is_sorted(eval.begin(), eval.end()));
  // Contents travel with the rows: ids and labels of a held-out example are the original's.
  const ExampleView held = split->eval[0];
  const ExampleView original = all[held.input_ids[0]];
  EXPECT_TRUE(held.input_ids == original.input_ids);
  EXPECT_TRUE(held.labels == original.labels);
  EXPECT_EQ(split->train.stats().tokens + split->eval.stats().tokens, all.stats().tokens);
}

TEST(SplitHeldOut, IsAPureFunctionOfTheDataSize) {
  // The same rows whatever else differs (world size, seed, resume): nothing but n goes in.
  auto a = SplitHeldOut(Examples(200, 1000), 0.02), b = SplitHeldOut(Examples(200, 1000), 0.02);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(FirstIds(a->eval), FirstIds(b->eval));
  EXPECT_EQ(a->eval.size(), 4);
  // Pinned, so a change of the held-out permutation (which changes every job's eval set) is seen.
  const std::vector<int64_t> perm = EpochPermutation(200, 0x65667465766131ULL, 0);
  std::vector<int64_t> expected(perm.begin(), perm.begin() + 4);
  std::sort(expected.begin(), expected.end());
  EXPECT_EQ(FirstIds(a->eval), expected);
}

TEST(SplitHeldOut, AtLeastOneRowAndRefusesToLeaveNothingToTrainOn) {
  auto tiny = SplitHeldOut(Examples(10), 0.01);
  ASSERT_TRUE(tiny.ok()) << tiny.status();
  EXPECT_EQ(tiny->eval.size(), 1);
  for (double bad : {0.0, -0.1, 1.0, 1.5, std::nan("")}) {
    auto r = SplitHeldOut(Examples(10), bad);
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << bad;
  }
  auto one = SplitHeldOut(Examples(1), 0.5);
  EXPECT_EQ(one.status().code(), StatusCode::kInvalidArgument);
  auto all = SplitHeldOut(Examples(4), 0.9);  // rounds to 4 of 4
  EXPECT_EQ(all.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(all.status().message().find("nothing to train on"), std::string::npos) << all.status();
}

struct EvalCase {
  int world;
  int64_t micro_batch;
  bool packed;
};

EvalResult EvaluateOn(const testing::TinyModel& m, const TokenDataset& eval, EvalCase c,
                      at::ScalarType dtype = at::kFloat) {
  EvalResult out;
  const auto named = m.Named();
  RunRanks(c.world, [&](Communicator& comm) {
    ShardingOptions o(ShardingStrategy::kFull, true);
    o.compute_dtype = dtype;
    ShardedLlama model(m.config, &comm, o);
    ASSERT_TRUE(model.InitFrom([&](const ParamSpec& spec) -> Result<at::Tensor> {
      for (const auto& [name, t] : named) {
        if (name == spec.name) return t;
      }
      return Status::NotFound(spec.name);
    }).ok());
    const TokenDataset data = c.packed ? PackDataset(eval, 40) : eval;
    EvalResult r = Evaluate(model, comm, data, c.micro_batch, /*pad_token_id=*/0);
    if (comm.rank() == 0) out = r;
  });
  return out;
}

class EvaluateTest : public ::testing::Test {
 protected:
  void SetUp() override {
    model_ = testing::TinyModel::Random(testing::TinyConfig("qwen3"), 11);
    eval_ = Examples(7);
  }
  testing::TinyModel model_;
  TokenDataset eval_;
};

// fp32 forward; ranks add their partial sums in another order than one rank does, and a row's
// padding changes the matmul shapes (so the kernels' summation order): a few ulps per token loss
// (~4), over a few hundred tokens, well below 1e-6 relative.
constexpr double kSameLossRel = 1e-6;

TEST_F(EvaluateTest, EveryWorldSizeMicroBatchAndPackingGivesTheSameLoss) {
  const EvalResult base = EvaluateOn(model_, eval_, {1, 1, false});
  EXPECT_EQ(base.tokens, eval_.stats().trained_tokens);
  EXPECT_GT(base.loss, 1.0);
  for (EvalCase c : {EvalCase{2, 1, false}, EvalCase{3, 1, false}, EvalCase{2, 2, false}, EvalCase{3, 2, true},
                     EvalCase{1, 4, true}}) {
    const EvalResult r = EvaluateOn(model_, eval_, c);
    SCOPED_TRACE("world " + std::to_string(c.world) + ", micro-batch " + std::to_string(c.micro_batch) +
                 (c.packed ? ", packed" : ""));
    EXPECT_EQ(r.tokens, base.tokens);
    EXPECT_NEAR(r.loss, base.loss, kSameLossRel * base.loss);
  }
}

// More ranks than rows: the ranks without rows still take part and add nothing.
TEST_F(EvaluateTest, RanksWithoutRowsJoinAndAddNothing) {
  TokenDataset two = Examples(2);
  const EvalResult one = EvaluateOn(model_, two, {1, 1, false});
  const EvalResult three = EvaluateOn(model_, two, {3, 1, false});
  EXPECT_EQ(three.tokens, one.tokens);
  EXPECT_NEAR(three.loss, one.loss, kSameLossRel * one.loss);
}

// The independent reference: the whole eval set as one padded batch through the PyTorch model
// written from the formulas; its loss sum over trained tokens / their count. Same fp32 weights;
// its softmax and summation differ from eft's chunked head, by ~1e-6 relative per token.
TEST_F(EvaluateTest, EqualsTheTokenWeightedMeanOfTheIndependentReference) {
  if (std::string why = testing::ReferenceUnavailableReason(); !why.empty()) GTEST_SKIP() << why;
  std::vector<int64_t> all(static_cast<size_t>(eval_.size()));
  std::iota(all.begin(), all.end(), 0);
  const Batch batch = Collate(eval_, all, 0);
  const testing::ReferenceResult ref = testing::RunReference(model_, batch, /*want_grads=*/false);
  const double expected = ref.loss_sum / static_cast<double>(ref.trained_tokens);
  const EvalResult got = EvaluateOn(model_, eval_, {2, 2, true});
  EXPECT_EQ(got.tokens, ref.trained_tokens);
  EXPECT_NEAR(got.loss, expected, 1e-5 * expected);
}

// bf16 compute stays near fp32 (bf16 keeps 8 bits of mantissa; the loss of a tiny random model
// moves by well under 1%).
TEST_F(EvaluateTest, Bf16StaysNearFp32AndIsWorldSizeIndependent) {
  const EvalResult fp32 = EvaluateOn(model_, eval_, {1, 1, false});
  const EvalResult bf16 = EvaluateOn(model_, eval_, {1, 1, false}, at::kBFloat16);
  const EvalResult bf16_w3 = EvaluateOn(model_, eval_, {3, 1, false}, at::kBFloat16);
  EXPECT_NEAR(bf16.loss, fp32.loss, 1e-2 * fp32.loss);
  // Each row is computed whole on one rank, in the same shapes at any W: only the final fp64 sum
  // is ordered differently.
  EXPECT_NEAR(bf16_w3.loss, bf16.loss, 1e-9 * bf16.loss);
}

}  // namespace
}  // namespace eft::trainer
