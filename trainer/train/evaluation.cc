#include "trainer/train/evaluation.h"

#include <cmath>
#include <numeric>

#include "common/stopwatch.h"
#include "trainer/data/sampler.h"

namespace eft::trainer {
namespace {

// The held-out permutation's seed: a constant, not training.seed (see the header). Changing it
// changes every job's eval set.
constexpr uint64_t kHeldOutSeed = 0x65667465766131ULL;  // "eftevala"

}  // namespace

Result<HeldOutSplit> SplitHeldOut(const TokenDataset& documents, double fraction) {
  const int64_t n = documents.size();
  if (!(fraction > 0) || !(fraction < 1)) {
    return Status::InvalidArgument("data.eval_fraction (" + std::to_string(fraction) + ") must be > 0 and < 1");
  }
  const int64_t held = std::max<int64_t>(1, std::llround(fraction * static_cast<double>(n)));
  if (n < 2 || held >= n) {
    return Status::InvalidArgument("data.eval_fraction " + std::to_string(fraction) + " of " + std::to_string(n) +
                                   " examples leaves nothing to train on; use a smaller fraction, more data, or "
                                   "data.eval");
  }
  std::vector<char> is_eval(static_cast<size_t>(n), 0);
  const std::vector<int64_t> perm = EpochPermutation(n, kHeldOutSeed, 0);
  for (int64_t i = 0; i < held; ++i) is_eval[static_cast<size_t>(perm[static_cast<size_t>(i)])] = 1;
  TokenDataset::Builder train, eval;
  for (int64_t i = 0; i < n; ++i) {
    const ExampleView ex = documents[i];
    TokenDataset::Builder& to = is_eval[static_cast<size_t>(i)] ? eval : train;
    to.Append(ex.input_ids, ex.labels);
    to.EndRow(ex.document_lengths.ToVector());
  }
  return HeldOutSplit{train.Finish(), eval.Finish()};
}

EvalResult Evaluate(ShardedLlama& model, Communicator& comm, const TokenDataset& eval, int64_t micro_batch_size,
                    int64_t pad_token_id, const Clock* clock) {
  const Stopwatch watch(clock);
  std::vector<int64_t> rows(static_cast<size_t>(eval.size()));
  std::iota(rows.begin(), rows.end(), 0);
  // Every rank gets the same number of micro-batches (trailing ones may be empty), so the
  // per-layer gathers line up.
  const auto micro = RankMicroBatches(rows, comm.rank(), comm.world(), micro_batch_size);
  int64_t tokens = 0;
  const double loss_sum = model.EvalLossSum(static_cast<int64_t>(micro.size()), [&](int64_t i) {
    Batch b = Collate(eval, micro[static_cast<size_t>(i)], pad_token_id);
    tokens += b.trained_tokens;
    return b;
  });
  at::Tensor totals = at::tensor({loss_sum, static_cast<double>(tokens)}, at::kDouble);
  comm.AllReduceSum(totals);
  EvalResult r;
  r.tokens = static_cast<int64_t>(totals[1].item<double>());
  r.loss = r.tokens > 0 ? totals[0].item<double>() / static_cast<double>(r.tokens) : 0.0;
  r.rows = eval.size();
  r.seconds = watch.Seconds();
  return r;
}

}  // namespace eft::trainer
