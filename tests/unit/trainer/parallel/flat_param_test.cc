// FlatParamUnit's gradient forms: the flat vector a reduction takes (FlatGradient) and the in-place
// sum used where nothing is reduced (AddGradients), on a unit whose 3 + 4 = 7 elements are padded
// to 8 at world size 2 (real Gloo ranks as threads).
#include "trainer/parallel/flat_param.h"

#include <gtest/gtest.h>

#include "tests/unit/trainer/parallel/rank_threads.h"

namespace eft::trainer {
namespace {

std::vector<ParamSpec> Specs() { return {{"a", {3}, true}, {"b", {2, 2}, false}}; }

TEST(FlatParamUnit, FlatGradientPutsEachGradientAtItsOffsetInTheAskedDtype) {
  RunRanks(2, [](Communicator& comm) {
    FlatParamUnit unit("u", Specs(), &comm);
    ASSERT_EQ(unit.padded_numel(), 8);
    const at::Tensor a = at::tensor({1.5f, -2.0f, 3.0f}).to(at::kBFloat16);
    const at::Tensor b = at::tensor({4.0f, 5.0f, 6.0f, 7.0f}).view({2, 2}).to(at::kBFloat16);
    const at::Tensor flat = unit.FlatGradient({a, b}, at::kFloat);
    EXPECT_EQ(flat.scalar_type(), at::kFloat);
    EXPECT_TRUE(at::equal(flat, at::tensor({1.5f, -2.0f, 3.0f, 4.0f, 5.0f, 6.0f, 7.0f, 0.0f})));
    // A parameter without a gradient (unused in the forward) is zero.
    EXPECT_TRUE(at::equal(unit.FlatGradient({at::Tensor(), b}, at::kFloat),
                          at::tensor({0.0f, 0.0f, 0.0f, 4.0f, 5.0f, 6.0f, 7.0f, 0.0f})));
  });
}

TEST(FlatParamUnit, AddGradientsAddsInPlaceSkipsMissingOnesAndLeavesThePadding) {
  RunRanks(2, [](Communicator& comm) {
    FlatParamUnit unit("u", Specs(), &comm);
    at::Tensor flat = at::arange(8, at::kFloat);
    const at::Tensor storage = flat;
    const at::Tensor b = at::tensor({0.5f, 0.25f, -1.0f, 2.0f}).view({2, 2}).to(at::kBFloat16);
    unit.AddGradients({at::Tensor(), b}, flat);
    EXPECT_EQ(flat.data_ptr(), storage.data_ptr()) << "not in place";
    EXPECT_TRUE(at::equal(flat, at::tensor({0.0f, 1.0f, 2.0f, 3.5f, 4.25f, 4.0f, 8.0f, 7.0f})));
    // The same sum as adding FlatGradient's vector: one rounding per element, in fp32.
    at::Tensor via_flat = at::arange(8, at::kFloat);
    via_flat.add_(unit.FlatGradient({at::Tensor(), b}, at::kFloat));
    EXPECT_TRUE(at::equal(flat, via_flat));
  });
}

TEST(FlatParamUnit, AddGradientsRefusesAMisfit) {
  RunRanks(2, [](Communicator& comm) {
    FlatParamUnit unit("u", Specs(), &comm);
    at::Tensor flat = at::zeros({8});
    const at::Tensor a = at::ones({3}), b = at::ones({2, 2});
    EXPECT_THROW(unit.AddGradients({a}, flat), c10::Error);  // one gradient per parameter
    at::Tensor shard_sized = at::zeros({4});
    EXPECT_THROW(unit.AddGradients({a, b}, shard_sized), c10::Error);  // laid out like the whole vector
    EXPECT_TRUE(at::equal(flat, at::zeros({8})));
  });
}

}  // namespace
}  // namespace eft::trainer
