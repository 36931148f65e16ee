// The sampler against the definitions: softmax(logits / T) restricted to the top k, then to the
// smallest most-likely set reaching top_p, renormalised; draws follow that distribution.
#include "trainer/generate/sampler.h"

#include <cmath>
#include <map>

#include <gtest/gtest.h>

namespace eft::trainer {
namespace {

at::Tensor Logits(std::vector<float> v) { return at::tensor(v); }

// softmax(logits / T) in double, written out.
std::vector<double> Softmax(const std::vector<float>& logits, double t) {
  double max = *std::max_element(logits.begin(), logits.end()), total = 0;
  std::vector<double> p;
  for (float x : logits) p.push_back(std::exp((x - max) / t)), total += p.back();
  for (double& x : p) x /= total;
  return p;
}

TEST(Sampler, GreedyIsArgmaxWhateverTheSeed) {
  const at::Tensor logits = Logits({0.5f, 2.0f, -1.0f, 1.9f});
  for (uint64_t seed : {0, 1, 99}) {
    Sampler s({.temperature = 0, .top_k = 0, .top_p = 0.5, .seed = seed});
    for (int i = 0; i < 5; ++i) EXPECT_EQ(s.Next(logits), 1);
  }
  // Ties go to the lowest id, as torch.argmax.
  EXPECT_EQ(Sampler({}).Next(Logits({1.0f, 3.0f, 3.0f})), 1);
}

TEST(Sampler, DistributionFollowsTheDefinitions) {
  const std::vector<float> x = {2.0f, 1.0f, 0.0f, -1.0f, 3.0f, 1.0f};
  const auto p = Softmax(x, 0.8);  // order by probability: 4, 0, 1, 5, 2, 3 (1 and 5 tie: lower id first)
  auto dist = SamplingDistribution(Logits(x), {.temperature = 0.8, .top_k = 0, .top_p = 1.0});
  ASSERT_EQ(dist.size(), 6u);
  const std::vector<int32_t> order = {4, 0, 1, 5, 2, 3};
  for (size_t i = 0; i < 6; ++i) {
    EXPECT_EQ(dist[i].first, order[i]);
    EXPECT_NEAR(dist[i].second, p[order[i]], 1e-12);
  }
  // top_k 3: the three most likely, renormalised.
  dist = SamplingDistribution(Logits(x), {.temperature = 0.8, .top_k = 3, .top_p = 1.0});
  ASSERT_EQ(dist.size(), 3u);
  const double mass3 = p[4] + p[0] + p[1];
  EXPECT_NEAR(dist[0].second, p[4] / mass3, 1e-12);
  EXPECT_NEAR(dist[2].second, p[1] / mass3, 1e-12);
  // top_p: keep the most likely tokens until their mass reaches top_p (the crossing one stays).
  ASSERT_LT(p[4], 0.8);
  ASSERT_GT(p[4] + p[0], 0.8);
  dist = SamplingDistribution(Logits(x), {.temperature = 0.8, .top_k = 0, .top_p = 0.8});
  ASSERT_EQ(dist.size(), 2u);
  EXPECT_NEAR(dist[0].second, p[4] / (p[4] + p[0]), 1e-12);
  // Both: top_k first, then top_p on the renormalised top k.
  dist = SamplingDistribution(Logits(x), {.temperature = 0.8, .top_k = 2, .top_p = 0.5});
  ASSERT_EQ(dist.size(), 1u);
  EXPECT_EQ(dist[0].first, 4);
  // A tiny top_p still keeps one token; temperature flattens or sharpens.
  EXPECT_EQ(SamplingDistribution(Logits(x), {.temperature = 1, .top_k = 0, .top_p = 1e-9}).size(), 1u);
  const double hot = SamplingDistribution(Logits(x), {.temperature = 5, .top_k = 0, .top_p = 1})[0].second;
  const double cold = SamplingDistribution(Logits(x), {.temperature = 0.2, .top_k = 0, .top_p = 1})[0].second;
  EXPECT_NEAR(hot, Softmax(x, 5)[4], 1e-12);
  EXPECT_NEAR(cold, Softmax(x, 0.2)[4], 1e-12);
  EXPECT_LT(hot, p[4]);
  EXPECT_GT(cold, p[4]);
}

TEST(Sampler, DrawsFollowTheDistribution) {
  const std::vector<float> x = {2.0f, 1.0f, 0.0f, -1.0f, 3.0f, 1.5f};
  const SamplingOptions options{.temperature = 0.7, .top_k = 4, .top_p = 0.97, .seed = 5};
  std::map<int32_t, double> want;
  for (auto [id, p] : SamplingDistribution(Logits(x), options)) want[id] = p;
  ASSERT_EQ(want.size(), 4u);  // top_k 4 leaves {4, 0, 5, 1}; 0.97 of their mass needs all four
  Sampler sampler(options);
  const int n = 40000;
  std::map<int32_t, int> count;
  for (int i = 0; i < n; ++i) ++count[sampler.Next(Logits(x))];
  for (auto [id, c] : count) ASSERT_TRUE(want.count(id)) << "token " << id << " was cut by top-k/top-p";
  for (auto [id, p] : want) {
    // Binomial counts: 5 standard deviations (a false failure ~1 in 3 million per token).
    const double sd = std::sqrt(n * p * (1 - p));
    EXPECT_NEAR(count[id], n * p, 5 * sd + 1) << "token " << id;
  }
}

TEST(Sampler, SeedReproducesAndTopKOneIsGreedy) {
  at::Tensor logits = at::randn({50}, at::TensorOptions().dtype(at::kFloat));
  auto draw = [&](SamplingOptions o) {
    Sampler s(o);
    std::vector<int32_t> v;
    for (int i = 0; i < 40; ++i) v.push_back(s.Next(logits));
    return v;
  };
  const SamplingOptions o{.temperature = 2.0, .top_k = 0, .top_p = 1.0, .seed = 123};
  EXPECT_EQ(draw(o), draw(o));
  SamplingOptions other = o;
  other.seed = 124;
  EXPECT_NE(draw(o), draw(other));
  other.top_k = 1;
  EXPECT_EQ(draw(other), std::vector<int32_t>(40, static_cast<int32_t>(logits.argmax().item<int64_t>())));
}

TEST(Sampler, ValidatesOptions) {
  EXPECT_TRUE(ValidateSamplingOptions({}).ok());
  EXPECT_FALSE(ValidateSamplingOptions({.temperature = -1}).ok());
  EXPECT_FALSE(ValidateSamplingOptions({.temperature = NAN}).ok());
  EXPECT_FALSE(ValidateSamplingOptions({.temperature = 1, .top_k = -2}).ok());
  EXPECT_FALSE(ValidateSamplingOptions({.temperature = 1, .top_k = 0, .top_p = 0}).ok());
  EXPECT_FALSE(ValidateSamplingOptions({.temperature = 1, .top_k = 0, .top_p = 1.5}).ok());
}

}  // namespace
}  // namespace eft::trainer
