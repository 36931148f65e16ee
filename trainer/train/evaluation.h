// Evaluation during training: the held-out set and the eval loss (docs/architecture.md,
// "Evaluation").
//
// The eval set is data.eval (tokenized like data.train, through the token cache) or a held-out
// part of data.train (data.eval_fraction). The eval loss is the token-weighted mean of the
// per-token cross-entropy over every trained target of the whole set, labelled and masked exactly
// as in training: sum over all targets / their count. Its rows are dealt out to the ranks as a
// training step deals out its examples (rank r takes rows r, r + W, ...), each rank sums its rows'
// token losses with a sharded forward pass and no backward, and one all-reduce adds the sums and
// counts, so every world size computes the same number up to float rounding.
#pragma once

#include <cstdint>

#include "common/clock.h"
#include "common/status.h"
#include "trainer/data/token_dataset.h"
#include "trainer/parallel/communicator.h"
#include "trainer/parallel/sharded_llama.h"

namespace eft::trainer {

struct HeldOutSplit {
  TokenDataset train;
  TokenDataset eval;
};

// Splits `documents` (one document per row, before packing) into a training part and an eval part
// of max(1, round(fraction * n)) rows, for 0 < fraction < 1 and n >= 2 (InvalidArgument
// otherwise, e.g. when nothing would be left to train on). Which rows are held out depends only
// on n: the first rows of a fixed-seed permutation (trainer/data/sampler.h, EpochPermutation), so
// the split is the same at every world size, on every resume and for every training.seed (runs
// with different seeds are evaluated on the same examples). Both parts keep data.train's order.
Result<HeldOutSplit> SplitHeldOut(const TokenDataset& documents, double fraction);

struct EvalResult {
  double loss = 0;      // sum of token losses / tokens; 0 when tokens is 0
  int64_t tokens = 0;   // trained targets in the whole eval set (all ranks)
  int64_t rows = 0;     // sequences evaluated (all ranks)
  double seconds = 0;
};

// Collective (every rank passes the same `eval`): the eval loss of `model` as it is between steps.
// Micro-batches of up to `micro_batch_size` rows, padded with `pad_token_id`; seconds on `clock`.
EvalResult Evaluate(ShardedLlama& model, Communicator& comm, const TokenDataset& eval, int64_t micro_batch_size,
                    int64_t pad_token_id, const Clock* clock = RealClock::Get());

}  // namespace eft::trainer
