#include "trainer/optim/adamw.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <sstream>

#include "python_torch.h"

namespace eft::trainer {
namespace {

using testing::MaxRelDiff;

at::Tensor Randn(std::mt19937& rng, std::vector<int64_t> shape, double scale) {
  at::Tensor t = at::empty(shape, at::kFloat);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  float* p = t.data_ptr<float>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = static_cast<float>(normal(rng) * scale);
  return t;
}

at::Tensor RandomMask(std::mt19937& rng, std::vector<int64_t> shape) {
  at::Tensor t = at::empty(shape, at::kFloat);
  std::bernoulli_distribution coin(0.7);
  float* p = t.data_ptr<float>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = coin(rng) ? 1.0f : 0.0f;
  return t;
}

// torch.optim.AdamW has no per-element decay mask, but its update is element-wise, so the decayed
// and non-decayed elements of each tensor become two params in groups with and without weight decay.
constexpr const char* kAdamWScript = R"PY(
import sys, torch
d = sys.argv[1]
cfg = open(d + "/config.txt").read().split()
b1, b2, eps, wd = (float(x) for x in cfg[:4])
steps, nparams = int(cfg[4]), int(cfg[5])
sizes = [int(x) for x in cfg[6:6 + nparams]]
lrs = [float(x) for x in cfg[6 + nparams:]]
def load(name, n):
    return torch.frombuffer(bytearray(open(d + "/" + name, "rb").read()), dtype=torch.float32)[:n].clone()
decayed, plain, masks = [], [], []
for k, n in enumerate(sizes):
    p = load("param%d.bin" % k, n)
    m = load("mask%d.bin" % k, n) != 0
    masks.append(m)
    decayed.append(p[m].clone().requires_grad_())
    plain.append(p[~m].clone().requires_grad_())
opt = torch.optim.AdamW([{"params": decayed, "weight_decay": wd}, {"params": plain, "weight_decay": 0.0}],
                        lr=lrs[0], betas=(b1, b2), eps=eps, foreach=False)
for s in range(steps):
    for g in opt.param_groups:
        g["lr"] = lrs[s]
    for k, n in enumerate(sizes):
        g = load("grad%d_%d.bin" % (k, s), n)
        decayed[k].grad = g[masks[k]].clone()
        plain[k].grad = g[~masks[k]].clone()
    opt.step()
def join(a, b, m):
    out = torch.empty(m.numel(), dtype=torch.float32)
    out[m] = a.detach()
    out[~m] = b.detach()
    return out
for k in range(len(sizes)):
    m = masks[k]
    sa, sb = opt.state[decayed[k]], opt.state[plain[k]]
    for name, t in (("param", join(decayed[k], plain[k], m)),
                    ("exp_avg", join(sa["exp_avg"], sb["exp_avg"], m)),
                    ("exp_avg_sq", join(sa["exp_avg_sq"], sb["exp_avg_sq"], m))):
        open("%s/out_%s%d.bin" % (d, name, k), "wb").write(t.numpy().tobytes())
)PY";

TEST(AdamWTest, MatchesTorchAdamWWithMaskedWeightDecay) {
  const std::string missing = testing::PythonTorchMissing();
  if (!missing.empty()) GTEST_SKIP() << "SKIPPING the comparison with torch.optim.AdamW: " << missing;

  std::mt19937 rng(1234);
  AdamWConfig config;
  config.beta1 = 0.9;
  config.beta2 = 0.95;
  config.eps = 1e-8;
  config.weight_decay = 0.1;
  const int steps = 20;
  // {3, 17001}: large enough for several threads' shares of each ATen op, and not a whole number of vectors.
  const std::vector<std::vector<int64_t>> shapes = {{37, 29}, {1001}, {5}, {3, 17001}};
  std::vector<double> lrs;
  for (int s = 0; s < steps; ++s) lrs.push_back(s == 0 ? 0.0 : 1e-3 * (1.0 + 0.1 * s));  // warmup-like start at 0

  testing::ScratchDir dir;
  AdamW opt(config);
  std::vector<at::Tensor> params, grads, masks;
  for (size_t k = 0; k < shapes.size(); ++k) {
    params.push_back(Randn(rng, shapes[k], 1.0));
    grads.push_back(at::zeros(shapes[k], at::kFloat));
    masks.push_back(RandomMask(rng, shapes[k]));
    testing::WriteTensor(dir / ("param" + std::to_string(k) + ".bin"), params[k]);
    testing::WriteTensor(dir / ("mask" + std::to_string(k) + ".bin"), masks[k]);
    opt.AddParam(params[k], grads[k], masks[k]);
  }
  for (int s = 0; s < steps; ++s) {
    for (size_t k = 0; k < shapes.size(); ++k) {
      // Gradient scales vary over orders of magnitude so that eps and tiny second moments matter.
      at::Tensor g = Randn(rng, shapes[k], std::pow(10.0, -(s % 5)));
      grads[k].copy_(g);
      testing::WriteTensor(dir / ("grad" + std::to_string(k) + "_" + std::to_string(s) + ".bin"), g);
    }
    opt.Step(lrs[static_cast<size_t>(s)]);
  }
  EXPECT_EQ(opt.step(), steps);

  std::ostringstream cfg;
  cfg.precision(17);
  cfg << config.beta1 << " " << config.beta2 << " " << config.eps << " " << config.weight_decay << " " << steps << " "
      << shapes.size();
  for (const auto& p : params) cfg << " " << p.numel();
  for (double lr : lrs) cfg << " " << lr;
  std::ofstream(dir / "config.txt") << cfg.str() << "\n";
  testing::CommandResult r = testing::RunPython(dir, kAdamWScript);
  ASSERT_EQ(r.status, 0) << r.output;

  for (size_t k = 0; k < shapes.size(); ++k) {
    const int64_t n = params[k].numel();
    const auto& st = opt.params()[k];
    const std::pair<const char*, at::Tensor> outs[] = {
        {"param", params[k]}, {"exp_avg", st.exp_avg}, {"exp_avg_sq", st.exp_avg_sq}};
    for (const auto& [name, ours] : outs) {
      at::Tensor theirs = testing::ReadTensor(dir / ("out_" + std::string(name) + std::to_string(k) + ".bin"), n);
      at::Tensor flat = ours.reshape({-1});
      const double rel = MaxRelDiff(flat, theirs);
      const int64_t same = flat.eq(theirs).sum().item<int64_t>();
      std::printf("param %zu %-10s: max relative difference vs torch %.3g, %lld of %lld elements bit-identical\n", k,
                  name, rel, static_cast<long long>(same), static_cast<long long>(n));
      EXPECT_LE(rel, 1e-6) << name << " of param " << k;
      EXPECT_EQ(same, n) << name << " of param " << k << ": the same ATen kernels on the same elements";
    }
  }
}

TEST(AdamWTest, ShardedUpdateEqualsUnshardedExactly) {
  std::mt19937 rng(7);
  AdamWConfig config;
  config.weight_decay = 0.05;
  const int64_t n = 100003;  // odd, and past ATen's parallel grain, so the halves cut vector lanes
  const int64_t half = n / 2 + 1;
  at::Tensor p0 = Randn(rng, {n}, 1.0), mask = RandomMask(rng, {n});
  at::Tensor whole_p = p0.clone(), whole_g = at::zeros({n}, at::kFloat);
  at::Tensor split_p = p0.clone(), split_g = at::zeros({n}, at::kFloat);
  AdamW whole(config), split(config);
  whole.AddParam(whole_p, whole_g, mask);
  split.AddParam(split_p.narrow(0, 0, half), split_g.narrow(0, 0, half), mask.narrow(0, 0, half));
  split.AddParam(split_p.narrow(0, half, n - half), split_g.narrow(0, half, n - half), mask.narrow(0, half, n - half));
  for (int s = 0; s < 10; ++s) {
    at::Tensor g = Randn(rng, {n}, 0.01);
    whole_g.copy_(g);
    split_g.copy_(g);
    whole.Step(1e-3);
    split.Step(1e-3);
  }
  EXPECT_TRUE(at::equal(whole_p, split_p)) << "max diff " << (whole_p - split_p).abs().max().item<float>();
  EXPECT_TRUE(at::equal(whole.params()[0].exp_avg_sq,
                        at::cat({split.params()[0].exp_avg_sq, split.params()[1].exp_avg_sq})));
}

TEST(AdamWTest, ResumingFromSavedStateContinuesIdentically) {
  std::mt19937 rng(11);
  AdamWConfig config;
  config.weight_decay = 0.1;
  const int64_t n = 257;
  at::Tensor mask = RandomMask(rng, {n});
  at::Tensor p = Randn(rng, {n}, 1.0), g = at::zeros({n}, at::kFloat);
  std::vector<at::Tensor> gs;
  for (int s = 0; s < 8; ++s) gs.push_back(Randn(rng, {n}, 0.1));

  AdamW straight(config);
  at::Tensor p_straight = p.clone();
  straight.AddParam(p_straight, g, mask);
  for (int s = 0; s < 8; ++s) {
    g.copy_(gs[static_cast<size_t>(s)]);
    straight.Step(1e-2);
  }

  AdamW first(config);
  at::Tensor p_resumed = p.clone();
  first.AddParam(p_resumed, g, mask);
  for (int s = 0; s < 4; ++s) {
    g.copy_(gs[static_cast<size_t>(s)]);
    first.Step(1e-2);
  }
  // What a checkpoint carries: the step count and both moments.
  AdamW second(config);
  second.AddParam(p_resumed, g, mask);
  second.set_step(first.step());
  second.params()[0].exp_avg.copy_(first.params()[0].exp_avg);
  second.params()[0].exp_avg_sq.copy_(first.params()[0].exp_avg_sq);
  for (int s = 4; s < 8; ++s) {
    g.copy_(gs[static_cast<size_t>(s)]);
    second.Step(1e-2);
  }
  EXPECT_TRUE(at::equal(p_straight, p_resumed));
  EXPECT_EQ(second.step(), 8);
}

TEST(AdamWTest, MaskedElementsAreNotDecayed) {
  AdamWConfig config;
  config.weight_decay = 0.5;
  at::Tensor p = at::full({4}, 2.0f), g = at::zeros({4}, at::kFloat);
  at::Tensor mask = at::tensor({1.0f, 0.0f, 1.0f, 0.0f});
  AdamW opt(config);
  opt.AddParam(p, g, mask);
  opt.Step(0.1);  // zero gradient: only the decay moves anything
  EXPECT_FLOAT_EQ(p[0].item<float>(), 2.0f * (1 - 0.1f * 0.5f));
  EXPECT_EQ(p[1].item<float>(), 2.0f);
  EXPECT_EQ(p[3].item<float>(), 2.0f);
}

TEST(AdamWTest, AddParamRejectsMismatchedTensors) {
  AdamW opt(AdamWConfig{});
  EXPECT_THROW(opt.AddParam(at::zeros({4}), at::zeros({5}), at::ones({4})), c10::Error);
  EXPECT_THROW(opt.AddParam(at::zeros({4}), at::zeros({4}, at::kDouble), at::ones({4})), c10::Error);
  EXPECT_TRUE(opt.params().empty());
}

}  // namespace
}  // namespace eft::trainer
