#include "trainer/generate/sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace eft::trainer {

Status ValidateSamplingOptions(const SamplingOptions& o) {
  if (!(o.temperature >= 0) || !std::isfinite(o.temperature))
    return Status::InvalidArgument("--temperature must be a finite number >= 0 (0: greedy)");
  if (o.top_k < 0) return Status::InvalidArgument("--top-k must be >= 0 (0: no limit)");
  if (!(o.top_p > 0 && o.top_p <= 1)) return Status::InvalidArgument("--top-p must be in (0, 1] (1: no limit)");
  return Status::Ok();
}

namespace {

int32_t Argmax(const at::Tensor& logits) {
  // First maximum, as torch.argmax: ties go to the lowest id.
  return static_cast<int32_t>(logits.to(at::kFloat).argmax().item<int64_t>());
}

}  // namespace

std::vector<std::pair<int32_t, double>> SamplingDistribution(const at::Tensor& logits, const SamplingOptions& o) {
  TORCH_CHECK(logits.dim() == 1 && logits.numel() > 0, "SamplingDistribution: logits must be [vocab]");
  if (o.temperature == 0) return {{Argmax(logits), 1.0}};
  // Double precision from here: exp of (logit - max) / T over a 150k vocabulary, and the cumulative
  // sum top-p compares against, are then exact far beyond what the choice depends on.
  at::Tensor scaled = logits.detach().to(at::kCPU, at::kDouble).contiguous();
  const double* x = scaled.data_ptr<double>();
  const int64_t vocab = scaled.numel();
  std::vector<int32_t> order(static_cast<size_t>(vocab));
  std::iota(order.begin(), order.end(), 0);
  const int64_t keep_k = o.top_k > 0 ? std::min(o.top_k, vocab) : vocab;
  auto more_likely = [&](int32_t a, int32_t b) { return x[a] > x[b] || (x[a] == x[b] && a < b); };
  // Only the top k need ordering (k is usually small against the vocabulary).
  std::partial_sort(order.begin(), order.begin() + keep_k, order.end(), more_likely);
  order.resize(static_cast<size_t>(keep_k));

  std::vector<std::pair<int32_t, double>> dist;
  dist.reserve(order.size());
  const double top = x[order[0]];
  double total = 0;
  for (int32_t id : order) {
    const double p = std::exp((x[id] - top) / o.temperature);
    dist.emplace_back(id, p);
    total += p;
  }
  for (auto& [id, p] : dist) p /= total;
  if (o.top_p < 1.0) {
    // Keep the most likely tokens until their mass reaches top_p (the token that crosses it stays,
    // and so at least one token always does).
    double mass = 0;
    size_t keep = 0;
    while (keep < dist.size() && mass < o.top_p) mass += dist[keep++].second;
    dist.resize(keep);
    for (auto& [id, p] : dist) p /= mass;
  }
  return dist;
}

Sampler::Sampler(const SamplingOptions& options) : options_(options), rng_(options.seed) {}

int32_t Sampler::Next(const at::Tensor& logits) {
  if (options_.temperature == 0) return Argmax(logits);
  const auto dist = SamplingDistribution(logits, options_);
  // 53 random bits: a uniform double in [0, 1), the same on every platform (std::uniform_real_
  // distribution's algorithm is implementation-defined).
  const double u = static_cast<double>(rng_() >> 11) * 0x1.0p-53;
  double cumulative = 0;
  for (const auto& [id, p] : dist) {
    cumulative += p;
    if (u < cumulative) return id;
  }
  return dist.back().first;  // u within rounding of 1
}

}  // namespace eft::trainer
