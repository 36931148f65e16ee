// Packing: best-fit decreasing places documents as it should, packed rows keep documents apart
// in Collate, and a packed batch gives the same per-token losses as its documents run one by one.
#include "trainer/data/packing.h"

#include <gtest/gtest.h>

#include "tests/unit/trainer/model/tiny_model.h"
#include "trainer/data/sampler.h"

namespace eft::trainer {
namespace {

TEST(Packing, BestFitDecreasingFillsTheTightestRow) {
  // Sorted: 7(0) 6(3) 5(1) 4(4) 3(2) 2(5) 1(6). Rows of 10: 7 -> r0 (3 left); 6 -> r1 (4 left);
  // 5 -> r2 (5 left); 4 -> r1 (best fit: 4 left there, 0 after); 3 -> r0 (0 left); 2 -> r2 (3 left);
  // 1 -> r2 (2 left).
  auto rows = PackBestFitDecreasing({7, 5, 3, 6, 4, 2, 1}, 10);
  ASSERT_EQ(rows.size(), 3u);
  EXPECT_EQ(rows[0], (std::vector<int64_t>{0, 2}));
  EXPECT_EQ(rows[1], (std::vector<int64_t>{3, 4}));
  EXPECT_EQ(rows[2], (std::vector<int64_t>{1, 5, 6}));
  EXPECT_THROW(PackBestFitDecreasing({3, 11}, 10), std::invalid_argument);
  EXPECT_THROW(PackBestFitDecreasing({0}, 10), std::invalid_argument);
  EXPECT_TRUE(PackBestFitDecreasing({}, 10).empty());
}

TEST(Packing, EveryDocumentLandsOnceAndRowsNeverOverflow) {
  std::vector<int64_t> lengths;
  uint64_t x = 12345;
  for (int i = 0; i < 2000; ++i) {
    x = x * 6364136223846793005ULL + 1442695040888963407ULL;
    lengths.push_back(1 + static_cast<int64_t>((x >> 33) % 512));
  }
  auto rows = PackBestFitDecreasing(lengths, 512);
  std::vector<int> seen(lengths.size(), 0);
  int64_t total = 0;
  for (const auto& row : rows) {
    int64_t used = 0;
    for (int64_t d : row) {
      ++seen[static_cast<size_t>(d)];
      used += lengths[static_cast<size_t>(d)];
    }
    EXPECT_LE(used, 512);
    total += used;
  }
  for (int s : seen) ASSERT_EQ(s, 1);
  // Uniform lengths up to the row size pack well under BFD; the lower bound is total / 512 rows.
  const double efficiency = static_cast<double>(total) / (static_cast<double>(rows.size()) * 512);
  EXPECT_GT(efficiency, 0.95) << rows.size() << " rows";
}

TEST(Packing, CollateGivesEachDocumentItsOwnSegmentPositionsAndTargets) {
  Example a{{1, 2, 3}, {-100, 2, 3}, {}}, b{{4, 5}, {4, 5}, {}};
  TokenDataset docs = TokenDataset::FromExamples({a, b});
  PackingStats stats;
  TokenDataset packed = PackDataset(docs, 8, &stats);
  ASSERT_EQ(packed.size(), 1);
  EXPECT_EQ(stats.rows, 1);
  EXPECT_EQ(stats.tokens, 5);
  EXPECT_DOUBLE_EQ(stats.efficiency(), 5.0 / 8);
  EXPECT_EQ(packed[0].document_lengths, (std::vector<int64_t>{3, 2}));
  Batch batch = Collate(packed, {0}, 0);
  auto row = [](const at::Tensor& t) { return std::vector<int64_t>(t.data_ptr<int64_t>(), t.data_ptr<int64_t>() + t.size(1)); };
  EXPECT_EQ(row(batch.input_ids), (std::vector<int64_t>{1, 2, 3, 4, 5}));
  EXPECT_EQ(row(batch.segment_ids), (std::vector<int64_t>{1, 1, 1, 2, 2}));
  EXPECT_EQ(row(batch.position_ids), (std::vector<int64_t>{0, 1, 2, 0, 1}));
  // Shifted within each document; the last token of a document predicts nothing.
  EXPECT_EQ(row(batch.labels), (std::vector<int64_t>{2, 3, -100, 5, -100}));
  EXPECT_EQ(batch.trained_tokens, 3);
}

// Per-token cross-entropy of every position, from the logits of one forward pass.
at::Tensor PerTokenLoss(const testing::TinyModel& m, const Batch& batch) {
  at::Tensor logits = testing::RunModel(m, batch).logits.to(at::kDouble);
  return at::cross_entropy_loss(logits.reshape({-1, logits.size(-1)}), batch.labels.reshape({-1}), {},
                                at::Reduction::None, -100)
      .reshape(batch.labels.sizes());
}

TEST(Packing, APackedBatchGivesTheSameLossesAsItsDocumentsAlone) {
  const ModelConfig config = testing::TinyConfig("qwen3");
  const testing::TinyModel model = testing::TinyModel::Random(config, 7);
  std::vector<Example> documents;
  for (int64_t len : {9, 5, 13, 3, 7, 11}) {
    Example e;
    e.input_ids = testing::RandomTokens(len, config.vocab_size, static_cast<uint64_t>(len));
    e.labels = e.input_ids;
    for (int64_t t = 0; t < 2; ++t) e.labels[static_cast<size_t>(t)] = -100;  // a prompt
    documents.push_back(e);
  }
  TokenDataset docs = TokenDataset::FromExamples(documents);
  PackingStats stats;
  TokenDataset packed = PackDataset(docs, 16, &stats);
  ASSERT_LT(stats.rows, docs.size()) << "something was packed";
  std::vector<int64_t> all_rows(static_cast<size_t>(packed.size()));
  for (int64_t r = 0; r < packed.size(); ++r) all_rows[static_cast<size_t>(r)] = r;
  Batch batch = Collate(packed, all_rows, 0);
  at::Tensor losses = PerTokenLoss(model, batch);

  // Walk the packed rows and compare each document's stretch with the document run alone.
  auto rows = PackBestFitDecreasing({9, 5, 13, 3, 7, 11}, 16);
  double worst = 0;
  for (size_t r = 0; r < rows.size(); ++r) {
    int64_t offset = 0;
    for (int64_t d : rows[r]) {
      const int64_t len = static_cast<int64_t>(documents[static_cast<size_t>(d)].input_ids.size());
      at::Tensor alone = PerTokenLoss(model, Collate(docs, {d}, 0))[0];
      at::Tensor in_row = losses[static_cast<int64_t>(r)].narrow(0, offset, len);
      worst = std::max(worst, (alone - in_row).abs().max().item<double>());
      offset += len;
    }
  }
  // fp32 model, same math on the same tokens; only the summation order inside a wider matmul row
  // may differ: ~1e-6 on losses of ~5.
  EXPECT_LT(worst, 1e-5);
}

}  // namespace
}  // namespace eft::trainer
