// Which examples each optimizer step trains on, and which of them each rank computes.
//
// The order is a pure function of (seed, epoch, step) and never of the world size: the epoch's
// permutation comes from a portable generator (SplitMix64 + Fisher-Yates, identical on every
// platform and library version), step s of an epoch takes positions [s*G, (s+1)*G) of it (the last
// step of an epoch may be smaller). Within a step, rank r computes the step's examples at positions
// r, r+W, r+2W, ...; all ranks run the same number of micro-batches (some may be empty) so that
// their collectives line up when W does not divide the global batch.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "common/mutex.h"
#include "common/thread_annotations.h"
#include "trainer/data/batch.h"
#include "trainer/data/token_dataset.h"

namespace eft::trainer {

// SplitMix64 (Steele, Lea, Flood 2014; Vigna's reference constants). Changing anything here changes
// every job's sample order, which breaks resuming a run mid-epoch: the tests pin its outputs.
class SplitMix64 {
 public:
  explicit SplitMix64(uint64_t state) : state_(state) {}
  uint64_t Next();
  // Uniform in [0, bound) for bound >= 1, without modulo bias: draws below 2^64 mod bound are
  // rejected, then the draw is reduced mod bound. Only 64-bit integer arithmetic, so portable.
  uint64_t Below(uint64_t bound);
  // SplitMix64's output function on its own: a bijection on 64-bit values.
  static uint64_t Mix(uint64_t z);

 private:
  uint64_t state_;
};

// The permutation of [0, n) for `epoch`: the generator starts from Mix(Mix(seed) ^ epoch) (distinct
// epochs of one seed get distinct, unrelated streams because Mix is a bijection), then Fisher-Yates
// from the back: for i = n-1 down to 1, swap(perm[i], perm[Below(i + 1)]).
std::vector<int64_t> EpochPermutation(int64_t n, uint64_t seed, int64_t epoch);

class GlobalSampler {
 public:
  // Throws std::invalid_argument unless num_examples >= 0 and global_batch_size >= 1.
  GlobalSampler(int64_t num_examples, int64_t global_batch_size, uint64_t seed);
  // ceil(num_examples / global_batch_size).
  int64_t steps_per_epoch() const;
  // Example indices of step `step_in_epoch` of `epoch`, in order. Throws std::out_of_range for a step
  // outside [0, steps_per_epoch()) or a negative epoch. The epoch's permutation is cached, so walking
  // an epoch step by step costs one shuffle; safe to call from several threads.
  std::vector<int64_t> StepExamples(int64_t epoch, int64_t step_in_epoch) const EXCLUDES(mu_);

 private:
  const int64_t num_examples_, global_batch_size_;
  const uint64_t seed_;
  mutable Mutex mu_;
  mutable int64_t cached_epoch_ GUARDED_BY(mu_) = -1;
  mutable std::vector<int64_t> cached_perm_ GUARDED_BY(mu_);
};

// The examples rank `rank` of `world` computes for one step (positions rank, rank + world, ... of
// `step_examples`), split into micro-batches of at most `micro_batch_size`. Always returns
// NumMicroBatches(step size, world, micro_batch_size) lists; trailing ones may be empty.
std::vector<std::vector<int64_t>> RankMicroBatches(const std::vector<int64_t>& step_examples, int rank, int world,
                                                   int64_t micro_batch_size);
// The same split as positions in `step_examples` (0-based) instead of example indices: the position
// of an example in its step's global batch does not depend on the world size, so it identifies
// the example within the step (Batch::sample_keys).
std::vector<std::vector<int64_t>> RankMicroBatchPositions(int64_t step_examples, int rank, int world,
                                                          int64_t micro_batch_size);
// The busiest rank's micro-batch count: ceil(ceil(step_examples / world) / micro_batch_size).
int64_t NumMicroBatches(int64_t step_examples, int world, int64_t micro_batch_size);

// Pads examples to the longest in the micro-batch and shifts labels (Batch::labels[t] = label[t+1]
// within a document; a packed example's documents get segments 1, 2, ... and positions from 0);
// an empty list gives an empty Batch. Padding: input_ids = pad_token_id (0 when negative),
// labels = -100, position_ids = 0, segment_ids = 0; real tokens have segment 1 and positions 0..len-1.
// Tensors are int64 on the CPU.
Batch Collate(const TokenDataset& dataset, const std::vector<int64_t>& indices, int64_t pad_token_id);

}  // namespace eft::trainer
