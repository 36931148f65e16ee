// The fused kernels' online log-sum-exp (trainer/kernels/cuda/kernel_math.h): how partial states
// merge. The fused ops themselves are tested against the composites on every device in
// tests/unit/trainer/kernels/fused_ops_test.cc.
#include "trainer/kernels/cuda/kernel_math.h"

#include <cmath>
#include <vector>

#include <gtest/gtest.h>

namespace eft::trainer {
namespace {

using kernels::LogSumExpState;

// Merging is exact bookkeeping: any split of a row gives the sequential result within rounding,
// an empty state is the identity, and -inf never turns into NaN.
TEST(KernelMathTest, LogSumExpStatesMergeInAnyOrder) {
  const std::vector<float> z = {1.5f, -2.0f, 7.25f, 0.0f, 3.0f, -INFINITY, 6.5f};
  LogSumExpState all;
  for (float v : z) kernels::LogSumExpAdd(all, v);
  LogSumExpState left, right;
  for (size_t i = 0; i < z.size(); ++i) kernels::LogSumExpAdd(i < 3 ? left : right, z[i]);
  const double exact = std::log(std::exp(1.5) + std::exp(-2.0) + std::exp(7.25) + 1.0 + std::exp(3.0) + std::exp(6.5));
  for (const LogSumExpState& s : {all, kernels::LogSumExpMerge(left, right), kernels::LogSumExpMerge(right, left),
                                  kernels::LogSumExpMerge(all, LogSumExpState{}), kernels::LogSumExpMerge(LogSumExpState{}, all)})
    EXPECT_NEAR(kernels::LogSumExpValue(s), exact, 8 * std::ldexp(1.0, -24) * exact);
  LogSumExpState only_masked;
  kernels::LogSumExpAdd(only_masked, -INFINITY);
  EXPECT_EQ(kernels::LogSumExpValue(only_masked), -INFINITY);
}

}  // namespace
}  // namespace eft::trainer
