#include "trainer/optim/clip.h"

#include <gtest/gtest.h>

#include <barrier>
#include <cmath>
#include <random>
#include <sstream>
#include <thread>

#include "python_torch.h"

namespace eft::trainer {
namespace {

using testing::MaxRelDiff;

std::vector<at::Tensor> RandomGrads(uint64_t seed, const std::vector<int64_t>& sizes, double scale) {
  std::mt19937 rng(static_cast<uint32_t>(seed));
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<at::Tensor> out;
  for (int64_t n : sizes) {
    at::Tensor t = at::empty({n}, at::kFloat);
    for (int64_t i = 0; i < n; ++i) t.data_ptr<float>()[i] = static_cast<float>(normal(rng) * scale);
    out.push_back(t);
  }
  return out;
}

std::vector<at::Tensor> Clone(const std::vector<at::Tensor>& ts) {
  std::vector<at::Tensor> out;
  for (const auto& t : ts) out.push_back(t.clone());
  return out;
}

const auto kOneRank = [](at::Tensor&) {};

constexpr const char* kClipScript = R"PY(
import sys, torch
d = sys.argv[1]
cfg = open(d + "/config.txt").read().split()
max_norm = float(cfg[0])
sizes = [int(x) for x in cfg[1:]]
params = []
for k, n in enumerate(sizes):
    p = torch.zeros(n, requires_grad=True)
    p.grad = torch.frombuffer(bytearray(open("%s/grad%d.bin" % (d, k), "rb").read()), dtype=torch.float32).clone()
    params.append(p)
norm = torch.nn.utils.clip_grad_norm_(params, max_norm)
open(d + "/norm.txt", "w").write(repr(float(norm)))
for k, p in enumerate(params):
    open("%s/out%d.bin" % (d, k), "wb").write(p.grad.numpy().tobytes())
)PY";

void CompareWithTorch(double max_norm, double scale) {
  const std::vector<int64_t> sizes = {1000, 37, 4099};
  std::vector<at::Tensor> grads = RandomGrads(42, sizes, scale);
  testing::ScratchDir dir;
  std::ostringstream cfg;
  cfg.precision(17);
  cfg << max_norm;
  for (size_t k = 0; k < sizes.size(); ++k) {
    cfg << " " << sizes[k];
    testing::WriteTensor(dir / ("grad" + std::to_string(k) + ".bin"), grads[k]);
  }
  std::ofstream(dir / "config.txt") << cfg.str() << "\n";
  testing::CommandResult r = testing::RunPython(dir, kClipScript);
  ASSERT_EQ(r.status, 0) << r.output;
  std::ifstream norm_in(dir / "norm.txt");
  double torch_norm = 0;
  norm_in >> torch_norm;

  const double norm = ClipGradNorm(grads, max_norm, kOneRank);
  std::printf("max_norm %g: norm %.9g (torch %.9g, relative difference %.3g)\n", max_norm, norm, torch_norm,
              std::abs(norm - torch_norm) / torch_norm);
  EXPECT_NEAR(norm, torch_norm, 1e-6 * torch_norm);
  for (size_t k = 0; k < sizes.size(); ++k) {
    at::Tensor theirs = testing::ReadTensor(dir / ("out" + std::to_string(k) + ".bin"), sizes[k]);
    const double rel = MaxRelDiff(grads[k], theirs);
    std::printf("  grad %zu: max relative difference vs torch %.3g\n", k, rel);
    EXPECT_LE(rel, 1e-6) << "grad " << k;
  }
}

TEST(ClipTest, MatchesTorchWhenClipping) {
  const std::string missing = testing::PythonTorchMissing();
  if (!missing.empty()) GTEST_SKIP() << "SKIPPING the comparison with torch.nn.utils.clip_grad_norm_: " << missing;
  CompareWithTorch(1.0, 0.1);  // norm ~7.3: scaled down
}

TEST(ClipTest, MatchesTorchWhenNotClipping) {
  const std::string missing = testing::PythonTorchMissing();
  if (!missing.empty()) GTEST_SKIP() << "SKIPPING the comparison with torch.nn.utils.clip_grad_norm_: " << missing;
  CompareWithTorch(100.0, 0.1);
}

TEST(ClipTest, BelowMaxNormLeavesGradientsUntouched) {
  std::vector<at::Tensor> grads = RandomGrads(3, {100, 20}, 0.01);
  std::vector<at::Tensor> before = Clone(grads);
  const double norm = ClipGradNorm(grads, 10.0, kOneRank);
  EXPECT_GT(norm, 0);
  EXPECT_LT(norm, 10.0);
  for (size_t k = 0; k < grads.size(); ++k) EXPECT_TRUE(at::equal(grads[k], before[k]));
}

TEST(ClipTest, ClippedNormIsMaxNorm) {
  std::vector<at::Tensor> grads = RandomGrads(5, {300, 300}, 1.0);
  const double norm = ClipGradNorm(grads, 0.5, kOneRank);
  EXPECT_GT(norm, 0.5);
  const double after = ClipGradNorm(grads, 0.0, kOneRank);  // max_norm 0: measure only
  EXPECT_NEAR(after, 0.5, 1e-6);
}

// Ranks as threads: each contributes its value, all wait, each reads the sum in rank order.
class FakeWorld {
 public:
  explicit FakeWorld(int world) : values_(static_cast<size_t>(world)), sync_(world) {}
  void AllReduceSum(int rank, at::Tensor& t) {
    values_[static_cast<size_t>(rank)] = t.clone();
    sync_.arrive_and_wait();
    at::Tensor sum = at::zeros_like(t);
    for (const auto& v : values_) sum.add_(v);
    sync_.arrive_and_wait();  // nobody overwrites a slot before everyone has read them all
    t.copy_(sum);
  }

 private:
  std::vector<at::Tensor> values_;
  std::barrier<> sync_;
};

TEST(ClipTest, SplitAcrossRanksEqualsUnsplit) {
  const std::vector<int64_t> sizes = {1001, 17, 4096};
  std::vector<at::Tensor> whole = RandomGrads(9, sizes, 0.2);
  std::vector<at::Tensor> original = Clone(whole);
  const double whole_norm = ClipGradNorm(whole, 1.0, kOneRank);
  ASSERT_GT(whole_norm, 1.0);

  for (int world : {2, 3, 5}) {
    // Rank r holds the r-th contiguous slice of every gradient (some slices empty for tiny tensors),
    // as flat-parameter sharding does; the slices are views, so clipping writes into `split`.
    std::vector<at::Tensor> split = Clone(original);
    std::vector<std::vector<at::Tensor>> rank_grads(static_cast<size_t>(world));
    for (const at::Tensor& g : split) {
      const int64_t chunk = (g.numel() + world - 1) / world;
      for (int r = 0; r < world; ++r) {
        const int64_t begin = std::min(g.numel(), r * chunk), end = std::min(g.numel(), begin + chunk);
        rank_grads[static_cast<size_t>(r)].push_back(g.narrow(0, begin, end - begin));
      }
    }
    FakeWorld fake(world);
    std::vector<double> norms(static_cast<size_t>(world));
    std::vector<std::thread> threads;
    for (int r = 0; r < world; ++r) {
      threads.emplace_back([&, r] {
        norms[static_cast<size_t>(r)] = ClipGradNorm(rank_grads[static_cast<size_t>(r)], 1.0,
                                                     [&](at::Tensor& t) { fake.AllReduceSum(r, t); });
      });
    }
    for (auto& t : threads) t.join();
    for (int r = 0; r < world; ++r) {
      // fp64 partial sums added in another order: equal up to a few fp64 ulps.
      EXPECT_NEAR(norms[static_cast<size_t>(r)], whole_norm, 1e-13 * whole_norm) << "world " << world << " rank " << r;
      EXPECT_EQ(norms[static_cast<size_t>(r)], norms[0]) << "every rank must see the same norm";
    }
    for (size_t k = 0; k < sizes.size(); ++k) {
      EXPECT_TRUE(at::equal(split[k], whole[k]))
          << "world " << world << " grad " << k << ": max relative difference " << MaxRelDiff(split[k], whole[k]);
    }
  }
}

TEST(ClipTest, NonFiniteNormIsNotApplied) {
  for (float bad : {NAN, INFINITY}) {
    std::vector<at::Tensor> grads = RandomGrads(1, {10, 10}, 1.0);
    grads[1][3] = bad;
    std::vector<at::Tensor> before = Clone(grads);
    const double norm = ClipGradNorm(grads, 1.0, kOneRank);
    EXPECT_FALSE(std::isfinite(norm));
    EXPECT_TRUE(at::equal(grads[0], before[0]));
    EXPECT_EQ(grads[1][0].item<float>(), before[1][0].item<float>());
  }
}

TEST(ClipTest, NoGradientsStillJoinsTheAllReduce) {
  int calls = 0;
  const double norm = ClipGradNorm({}, 1.0, [&](at::Tensor& t) {
    ++calls;
    ASSERT_EQ(t.scalar_type(), at::kDouble);
    ASSERT_EQ(t.numel(), 1);
    t.fill_(16.0);  // the other ranks' squares
  });
  EXPECT_EQ(calls, 1);
  EXPECT_DOUBLE_EQ(norm, 4.0);
}

}  // namespace
}  // namespace eft::trainer
