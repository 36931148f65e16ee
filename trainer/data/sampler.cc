#include "trainer/data/sampler.h"

#include <algorithm>
#include <stdexcept>
#include <string>
#include <utility>

namespace eft::trainer {
namespace {

constexpr int64_t kIgnore = -100;

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

}  // namespace

uint64_t SplitMix64::Mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

uint64_t SplitMix64::Next() {
  state_ += 0x9E3779B97F4A7C15ull;
  return Mix(state_);
}

uint64_t SplitMix64::Below(uint64_t bound) {
  // (2^64 - bound) mod bound == 2^64 mod bound: the size of the short last bucket to reject.
  const uint64_t threshold = (0 - bound) % bound;
  for (;;) {
    const uint64_t r = Next();
    if (r >= threshold) return r % bound;
  }
}

std::vector<int64_t> EpochPermutation(int64_t n, uint64_t seed, int64_t epoch) {
  std::vector<int64_t> perm(static_cast<size_t>(std::max<int64_t>(0, n)));
  for (size_t i = 0; i < perm.size(); ++i) perm[i] = static_cast<int64_t>(i);
  SplitMix64 rng(SplitMix64::Mix(SplitMix64::Mix(seed) ^ static_cast<uint64_t>(epoch)));
  for (size_t i = perm.size(); i > 1; --i) {
    const size_t j = static_cast<size_t>(rng.Below(i));
    std::swap(perm[i - 1], perm[j]);
  }
  return perm;
}

GlobalSampler::GlobalSampler(int64_t num_examples, int64_t global_batch_size, uint64_t seed)
    : num_examples_(num_examples), global_batch_size_(global_batch_size), seed_(seed) {
  if (num_examples < 0) throw std::invalid_argument("GlobalSampler: num_examples must be >= 0");
  if (global_batch_size < 1) throw std::invalid_argument("GlobalSampler: global_batch_size must be >= 1");
}

int64_t GlobalSampler::steps_per_epoch() const { return CeilDiv(num_examples_, global_batch_size_); }

std::vector<int64_t> GlobalSampler::StepExamples(int64_t epoch, int64_t step_in_epoch) const {
  if (epoch < 0 || step_in_epoch < 0 || step_in_epoch >= steps_per_epoch()) {
    throw std::out_of_range("GlobalSampler::StepExamples: epoch " + std::to_string(epoch) + ", step " +
                            std::to_string(step_in_epoch) + " is outside [0, " + std::to_string(steps_per_epoch()) +
                            ")");
  }
  MutexLock lock(&mu_);
  if (cached_epoch_ != epoch) {
    cached_perm_ = EpochPermutation(num_examples_, seed_, epoch);
    cached_epoch_ = epoch;
  }
  const int64_t begin = step_in_epoch * global_batch_size_;
  const int64_t end = std::min(num_examples_, begin + global_batch_size_);
  return {cached_perm_.begin() + begin, cached_perm_.begin() + end};
}

int64_t NumMicroBatches(int64_t step_examples, int world, int64_t micro_batch_size) {
  if (step_examples <= 0 || world < 1 || micro_batch_size < 1) return 0;
  return CeilDiv(CeilDiv(step_examples, world), micro_batch_size);
}

std::vector<std::vector<int64_t>> RankMicroBatchPositions(int64_t step_examples, int rank, int world,
                                                          int64_t micro_batch_size) {
  if (world < 1 || rank < 0 || rank >= world || micro_batch_size < 1) {
    throw std::invalid_argument("RankMicroBatches: rank " + std::to_string(rank) + " of world " +
                                std::to_string(world) + " with micro_batch_size " + std::to_string(micro_batch_size));
  }
  std::vector<std::vector<int64_t>> out(static_cast<size_t>(NumMicroBatches(step_examples, world, micro_batch_size)));
  size_t k = 0;
  for (int64_t pos = rank; pos < step_examples; pos += world, ++k) {
    out[k / static_cast<size_t>(micro_batch_size)].push_back(pos);
  }
  return out;
}

std::vector<std::vector<int64_t>> RankMicroBatches(const std::vector<int64_t>& step_examples, int rank, int world,
                                                   int64_t micro_batch_size) {
  auto out = RankMicroBatchPositions(static_cast<int64_t>(step_examples.size()), rank, world, micro_batch_size);
  for (auto& micro : out) {
    for (int64_t& pos : micro) pos = step_examples[static_cast<size_t>(pos)];
  }
  return out;
}

Batch Collate(const TokenDataset& dataset, const std::vector<int64_t>& indices, int64_t pad_token_id) {
  Batch b;
  if (indices.empty()) return b;
  const int64_t rows = static_cast<int64_t>(indices.size());
  int64_t cols = 0;
  for (int64_t i : indices) cols = std::max(cols, static_cast<int64_t>(dataset[i].input_ids.size()));
  const int64_t pad = pad_token_id >= 0 ? pad_token_id : 0;
  const auto opts = at::TensorOptions().dtype(at::kLong);
  b.input_ids = at::full({rows, cols}, pad, opts);
  b.labels = at::full({rows, cols}, kIgnore, opts);
  b.position_ids = at::zeros({rows, cols}, opts);
  b.segment_ids = at::zeros({rows, cols}, opts);
  int64_t* ids = b.input_ids.data_ptr<int64_t>();
  int64_t* labels = b.labels.data_ptr<int64_t>();
  int64_t* pos = b.position_ids.data_ptr<int64_t>();
  int64_t* seg = b.segment_ids.data_ptr<int64_t>();
  for (int64_t r = 0; r < rows; ++r) {
    const ExampleView ex = dataset[indices[static_cast<size_t>(r)]];
    const int64_t len = static_cast<int64_t>(ex.input_ids.size());
    const int64_t row = r * cols;
    // Each document of a packed row is its own segment with positions from 0, and its last token
    // predicts nothing (the next token belongs to another document).
    std::vector<int64_t> docs = ex.document_lengths.empty() ? std::vector<int64_t>{len} : ex.document_lengths.ToVector();
    int64_t t = 0;
    for (size_t d = 0; d < docs.size(); ++d) {
      const int64_t end = t + docs[d];
      for (int64_t p = 0; t < end; ++t, ++p) {
        ids[row + t] = ex.input_ids[static_cast<size_t>(t)];
        pos[row + t] = p;
        seg[row + t] = static_cast<int64_t>(d) + 1;
        // The target of position t is the token at t + 1 of the same document.
        if (t + 1 < end) labels[row + t] = ex.labels[static_cast<size_t>(t + 1)];
        if (labels[row + t] != kIgnore) ++b.trained_tokens;
      }
    }
    b.tokens += len;
  }
  return b;
}

}  // namespace eft::trainer
