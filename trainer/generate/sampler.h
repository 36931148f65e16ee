// Choosing the next token from a position's logits: greedy (temperature 0) or sampling from the
// softmax at `temperature`, restricted to the `top_k` most likely tokens and then to the smallest
// set of most likely tokens whose probability reaches `top_p` (Hugging Face's order and
// definitions). The random draws come from a generator seeded with `seed`, so a seed reproduces a
// generation exactly (on the same build: the logits themselves depend on the BLAS).
#pragma once

#include <cstdint>
#include <random>
#include <utility>
#include <vector>

#include <ATen/ATen.h>

#include "common/status.h"

namespace eft::trainer {

struct SamplingOptions {
  double temperature = 0.0;  // 0: greedy (the other fields are then ignored)
  int64_t top_k = 0;         // 0: no limit
  double top_p = 1.0;        // (0, 1]; 1: no limit
  uint64_t seed = 0;
};

// InvalidArgument naming the field: temperature < 0, top_k < 0, top_p outside (0, 1].
Status ValidateSamplingOptions(const SamplingOptions& options);

// The distribution Sampler draws from, for logits [vocab]: (token id, probability) in decreasing
// probability (ties: lower id first), only the tokens that survive top-k and top-p, probabilities
// renormalised to sum to 1. Greedy is the single most likely token with probability 1.
std::vector<std::pair<int32_t, double>> SamplingDistribution(const at::Tensor& logits, const SamplingOptions& options);

class Sampler {
 public:
  explicit Sampler(const SamplingOptions& options);  // options must be valid
  // The next token for logits [vocab] (any float dtype).
  int32_t Next(const at::Tensor& logits);

 private:
  SamplingOptions options_;
  std::mt19937_64 rng_;
};

}  // namespace eft::trainer
