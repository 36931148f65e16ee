#include "trainer/data/sampler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <stdexcept>

namespace eft::trainer {
namespace {

std::vector<int64_t> Iota(int64_t n) {
  std::vector<int64_t> v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), 0);
  return v;
}

std::vector<int64_t> Sorted(std::vector<int64_t> v) {
  std::sort(v.begin(), v.end());
  return v;
}

// Vigna's reference splitmix64.c from state 1234567: pins the generator itself.
TEST(SplitMix64Test, MatchesReferenceOutputs) {
  SplitMix64 rng(1234567);
  EXPECT_EQ(rng.Next(), 6457827717110365317ull);
  EXPECT_EQ(rng.Next(), 3203168211198807973ull);
  EXPECT_EQ(rng.Next(), 9817491932198370423ull);
  EXPECT_EQ(rng.Next(), 4593380528125082431ull);
  EXPECT_EQ(rng.Next(), 16408922859458223821ull);
}

TEST(SplitMix64Test, BelowStaysInRangeAndIsUniform) {
  SplitMix64 rng(99);
  for (uint64_t bound : {1ull, 2ull, 3ull, 1000003ull, (1ull << 63) + 1, ~0ull}) {
    for (int i = 0; i < 1000; ++i) ASSERT_LT(rng.Below(bound), bound);
  }
  std::vector<int> counts(3);
  const int draws = 30000;
  for (int i = 0; i < draws; ++i) ++counts[rng.Below(3)];
  for (int c : counts) EXPECT_NEAR(c, draws / 3, draws / 3 * 0.05);
}

// Expected values come from an independent Python transcription of the documented algorithm. If this
// test fails, every job's sample order changed and mid-epoch resumes of older runs would diverge.
TEST(EpochPermutationTest, IsPinned) {
  EXPECT_EQ(EpochPermutation(10, 42, 0), (std::vector<int64_t>{2, 8, 9, 7, 1, 4, 6, 0, 5, 3}));
  EXPECT_EQ(EpochPermutation(10, 42, 1), (std::vector<int64_t>{3, 1, 6, 8, 4, 5, 9, 7, 2, 0}));
  EXPECT_EQ(EpochPermutation(10, 0, 0), (std::vector<int64_t>{6, 3, 2, 9, 8, 1, 4, 7, 0, 5}));
  EXPECT_EQ(EpochPermutation(16, 12345, 3),
            (std::vector<int64_t>{10, 5, 0, 14, 11, 1, 3, 6, 4, 13, 9, 2, 15, 12, 7, 8}));
  EXPECT_EQ(EpochPermutation(1, 42, 0), (std::vector<int64_t>{0}));
  EXPECT_TRUE(EpochPermutation(0, 42, 0).empty());
}

TEST(EpochPermutationTest, DependsOnSeedAndEpoch) {
  const auto a = EpochPermutation(1000, 42, 0);
  EXPECT_EQ(a, EpochPermutation(1000, 42, 0));
  EXPECT_NE(a, EpochPermutation(1000, 42, 1));
  EXPECT_NE(a, EpochPermutation(1000, 43, 0));
  EXPECT_EQ(Sorted(a), Iota(1000));
}

TEST(GlobalSamplerTest, EveryExampleExactlyOncePerEpoch) {
  GlobalSampler sampler(103, 10, 7);
  ASSERT_EQ(sampler.steps_per_epoch(), 11);
  for (int64_t epoch : {0, 1, 5}) {
    std::vector<int64_t> all;
    for (int64_t s = 0; s < sampler.steps_per_epoch(); ++s) {
      auto step = sampler.StepExamples(epoch, s);
      EXPECT_EQ(step.size(), s + 1 < sampler.steps_per_epoch() ? 10u : 3u) << "step " << s;
      all.insert(all.end(), step.begin(), step.end());
    }
    EXPECT_EQ(all, EpochPermutation(103, 7, epoch));  // steps are consecutive slices of the permutation
    EXPECT_EQ(Sorted(all), Iota(103));
  }
}

TEST(GlobalSamplerTest, DeterministicAndEpochDependent) {
  GlobalSampler a(50, 8, 42), b(50, 8, 42), c(50, 8, 43);
  // Visiting steps out of order (as a resume does) gives the same answers.
  EXPECT_EQ(a.StepExamples(3, 2), b.StepExamples(3, 2));
  EXPECT_EQ(a.StepExamples(0, 0), b.StepExamples(0, 0));
  EXPECT_EQ(a.StepExamples(3, 2), b.StepExamples(3, 2));
  EXPECT_NE(a.StepExamples(0, 0), a.StepExamples(1, 0));
  EXPECT_NE(a.StepExamples(0, 0), c.StepExamples(0, 0));
}

TEST(GlobalSamplerTest, StepsPerEpochAndRangeChecks) {
  EXPECT_EQ(GlobalSampler(128, 128, 1).steps_per_epoch(), 1);
  EXPECT_EQ(GlobalSampler(129, 128, 1).steps_per_epoch(), 2);
  EXPECT_EQ(GlobalSampler(5, 128, 1).steps_per_epoch(), 1);
  EXPECT_EQ(GlobalSampler(5, 128, 1).StepExamples(0, 0).size(), 5u);
  EXPECT_EQ(GlobalSampler(0, 4, 1).steps_per_epoch(), 0);
  GlobalSampler s(10, 4, 1);
  EXPECT_THROW(s.StepExamples(0, 3), std::out_of_range);
  EXPECT_THROW(s.StepExamples(0, -1), std::out_of_range);
  EXPECT_THROW(s.StepExamples(-1, 0), std::out_of_range);
  EXPECT_THROW(GlobalSampler(10, 0, 1), std::invalid_argument);
}

TEST(MicroBatchTest, NumMicroBatchesIsTheBusiestRanksCount) {
  EXPECT_EQ(NumMicroBatches(10, 4, 2), 2);  // ceil(ceil(10 / 4) / 2) = ceil(3 / 2)
  EXPECT_EQ(NumMicroBatches(128, 8, 2), 8);
  EXPECT_EQ(NumMicroBatches(3, 4, 1), 1);   // rank 3 gets nothing but still runs one (empty) micro-batch
  EXPECT_EQ(NumMicroBatches(1, 1, 3), 1);
  EXPECT_EQ(NumMicroBatches(0, 4, 2), 0);
}

TEST(MicroBatchTest, RanksPartitionEveryStepForAnyWorldSize) {
  GlobalSampler sampler(103, 10, 3);
  const std::vector<std::vector<int64_t>> steps = {sampler.StepExamples(0, 0), sampler.StepExamples(0, 10), {42}};
  for (const auto& step : steps) {
    const int64_t m = static_cast<int64_t>(step.size());
    for (int world = 1; world <= 7; ++world) {
      for (int64_t mb = 1; mb <= 3; ++mb) {
        const int64_t expected_count = NumMicroBatches(m, world, mb);
        std::vector<int64_t> union_of_ranks;
        for (int rank = 0; rank < world; ++rank) {
          auto micro = RankMicroBatches(step, rank, world, mb);
          ASSERT_EQ(static_cast<int64_t>(micro.size()), expected_count)
              << "rank " << rank << " of " << world << ", mb " << mb << ", step of " << m;
          std::vector<int64_t> mine;
          bool seen_empty = false;
          for (const auto& list : micro) {
            EXPECT_LE(static_cast<int64_t>(list.size()), mb);
            if (list.empty()) seen_empty = true;
            EXPECT_TRUE(list.empty() || !seen_empty) << "empty micro-batches only at the end";
            mine.insert(mine.end(), list.begin(), list.end());
          }
          // Rank r takes positions r, r + W, r + 2W, ... in order.
          std::vector<int64_t> strided;
          for (int64_t pos = rank; pos < m; pos += world) strided.push_back(step[static_cast<size_t>(pos)]);
          EXPECT_EQ(mine, strided);
          union_of_ranks.insert(union_of_ranks.end(), mine.begin(), mine.end());
        }
        EXPECT_EQ(Sorted(union_of_ranks), Sorted(step)) << "world " << world << ", mb " << mb;
      }
    }
  }
}

// The positions (LoRA dropout's sample keys) are the same split: each of a step's positions on exactly
// one rank, and the examples at them are the rank's micro-batches.
TEST(MicroBatchTest, PositionsAreTheSameSplit) {
  GlobalSampler sampler(103, 10, 3);
  const std::vector<int64_t> step = sampler.StepExamples(0, 4);
  for (int world = 1; world <= 4; ++world) {
    std::vector<int64_t> all;
    for (int rank = 0; rank < world; ++rank) {
      auto positions = RankMicroBatchPositions(static_cast<int64_t>(step.size()), rank, world, 2);
      auto examples = RankMicroBatches(step, rank, world, 2);
      ASSERT_EQ(positions.size(), examples.size());
      for (size_t k = 0; k < positions.size(); ++k) {
        ASSERT_EQ(positions[k].size(), examples[k].size());
        for (size_t i = 0; i < positions[k].size(); ++i) {
          EXPECT_EQ(step[static_cast<size_t>(positions[k][i])], examples[k][i]);
          all.push_back(positions[k][i]);
        }
      }
    }
    EXPECT_EQ(Sorted(all), (std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9})) << "world " << world;
  }
}

TEST(MicroBatchTest, RejectsBadRank) {
  EXPECT_THROW(RankMicroBatches({1, 2}, 2, 2, 1), std::invalid_argument);
  EXPECT_THROW(RankMicroBatches({1, 2}, 0, 1, 0), std::invalid_argument);
}

std::vector<int64_t> Row(const at::Tensor& t, int64_t r) {
  at::Tensor row = t[r].contiguous();
  return {row.data_ptr<int64_t>(), row.data_ptr<int64_t>() + row.numel()};
}

TEST(CollateTest, PadsAndShiftsExactly) {
  TokenDataset ds = TokenDataset::FromExamples({
      {{11, 12, 13}, {-100, 12, 13}},
      {{21, 22, 23, 24, 25}, {-100, -100, 23, -100, 25}},
      {{31}, {31}},
  });
  Batch b = Collate(ds, {1, 0, 2}, 7);
  ASSERT_FALSE(b.empty());
  ASSERT_EQ(b.input_ids.sizes(), (std::vector<int64_t>{3, 5}));
  for (const at::Tensor* t : {&b.input_ids, &b.labels, &b.position_ids, &b.segment_ids}) {
    EXPECT_EQ(t->scalar_type(), at::kLong);
    EXPECT_TRUE(t->device().is_cpu());
    EXPECT_EQ(t->sizes(), b.input_ids.sizes());
  }
  EXPECT_EQ(Row(b.input_ids, 0), (std::vector<int64_t>{21, 22, 23, 24, 25}));
  EXPECT_EQ(Row(b.labels, 0), (std::vector<int64_t>{-100, 23, -100, 25, -100}));
  EXPECT_EQ(Row(b.position_ids, 0), (std::vector<int64_t>{0, 1, 2, 3, 4}));
  EXPECT_EQ(Row(b.segment_ids, 0), (std::vector<int64_t>{1, 1, 1, 1, 1}));

  EXPECT_EQ(Row(b.input_ids, 1), (std::vector<int64_t>{11, 12, 13, 7, 7}));
  EXPECT_EQ(Row(b.labels, 1), (std::vector<int64_t>{12, 13, -100, -100, -100}));
  EXPECT_EQ(Row(b.position_ids, 1), (std::vector<int64_t>{0, 1, 2, 0, 0}));
  EXPECT_EQ(Row(b.segment_ids, 1), (std::vector<int64_t>{1, 1, 1, 0, 0}));

  EXPECT_EQ(Row(b.input_ids, 2), (std::vector<int64_t>{31, 7, 7, 7, 7}));
  EXPECT_EQ(Row(b.labels, 2), (std::vector<int64_t>{-100, -100, -100, -100, -100}));
  EXPECT_EQ(Row(b.position_ids, 2), (std::vector<int64_t>{0, 0, 0, 0, 0}));
  EXPECT_EQ(Row(b.segment_ids, 2), (std::vector<int64_t>{1, 0, 0, 0, 0}));

  EXPECT_EQ(b.trained_tokens, 2 + 2 + 0);
  EXPECT_EQ(b.trained_tokens, b.labels.ne(-100).sum().item<int64_t>());
  EXPECT_EQ(b.tokens, 5 + 3 + 1);
}

TEST(CollateTest, NegativePadIdPadsWithZeroAndEmptyListIsEmpty) {
  TokenDataset ds = TokenDataset::FromExamples({{{5, 6}, {5, 6}}, {{8}, {8}}});
  Batch b = Collate(ds, {1, 0}, -1);
  EXPECT_EQ(Row(b.input_ids, 0), (std::vector<int64_t>{8, 0}));
  EXPECT_EQ(b.trained_tokens, 1);
  EXPECT_TRUE(Collate(ds, {}, 0).empty());
  EXPECT_EQ(Collate(ds, {}, 0).trained_tokens, 0);
}

}  // namespace
}  // namespace eft::trainer
