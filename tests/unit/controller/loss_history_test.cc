// LossSeries (controller/loss_history.h): the cap holds however many points are added, the curve
// keeps its shape, a restart's re-run steps replace what they supersede, and the store is told
// exactly what changed.
#include "controller/loss_history.h"

#include <cmath>

#include <gtest/gtest.h>

namespace eft::controller {
namespace {

TEST(LossSeries, KeepsEveryPointUnderTheCap) {
  LossSeries s(8);
  for (int step = 1; step <= 8; ++step) s.Add(step, 10.0 - step);
  ASSERT_EQ(s.points().size(), 8u);
  EXPECT_EQ(s.stride(), 1);
  EXPECT_EQ(s.points()[2].step, 3);
  EXPECT_DOUBLE_EQ(s.points()[2].value, 7.0);
  EXPECT_EQ(s.points()[2].samples, 1);
}

TEST(LossSeries, TheCapHoldsForAHundredThousandStepsAndEveryStepCounts) {
  LossSeries s;  // kLossHistoryPoints
  double sum = 0;
  for (int step = 1; step <= 100000; ++step) {
    const double loss = 5.0 * std::exp(-step / 20000.0);
    sum += loss;
    s.Add(step, loss);
    ASSERT_LE(s.points().size(), kLossHistoryPoints) << step;
  }
  EXPECT_GE(s.points().size(), kLossHistoryPoints / 2);
  EXPECT_EQ(s.points().back().step, 100000);
  int64_t samples = 0;
  double weighted = 0;
  int64_t previous = 0;
  for (const auto& p : s.points()) {
    EXPECT_GT(p.step, previous) << "ascending steps";
    previous = p.step;
    samples += p.samples;
    weighted += p.value * static_cast<double>(p.samples);
  }
  EXPECT_EQ(samples, 100000) << "each point is a mean of whole reports: none lost, none twice";
  EXPECT_NEAR(weighted, sum, 1e-6 * sum);
  // The shape survives: a point's mean is close to the curve at its steps.
  const LossPointRecord& mid = s.points()[s.points().size() / 2];
  EXPECT_NEAR(mid.value, 5.0 * std::exp(-(mid.step - mid.samples / 2.0) / 20000.0), 0.01);
}

TEST(LossSeries, MergesNeighboursPairwiseAndDoublesTheStride) {
  LossSeries s(4);
  for (int step = 1; step <= 5; ++step) s.Add(step, step);
  // 5 points > 4: (1,2) (3,4) (5) with stride 2.
  ASSERT_EQ(s.points().size(), 3u);
  EXPECT_EQ(s.stride(), 2);
  EXPECT_EQ(s.points()[0].step, 2);
  EXPECT_DOUBLE_EQ(s.points()[0].value, 1.5);
  EXPECT_EQ(s.points()[0].samples, 2);
  EXPECT_EQ(s.points()[2].samples, 1);
  s.Add(6, 6);  // fills the newest point's stride
  ASSERT_EQ(s.points().size(), 3u);
  EXPECT_EQ(s.points()[2].step, 6);
  EXPECT_DOUBLE_EQ(s.points()[2].value, 5.5);
}

TEST(LossSeries, ARestartReplacesTheStepsItRunsAgain) {
  LossSeries s(100);
  for (int step = 1; step <= 30; ++step) s.Add(step, 2.0);
  s.MarkSaved();
  // The next attempt resumed from the checkpoint at step 20: its step 21 replaces 21..30.
  s.Add(21, 1.0);
  ASSERT_EQ(s.points().size(), 21u);
  EXPECT_EQ(s.points().back().step, 21);
  EXPECT_DOUBLE_EQ(s.points().back().value, 1.0);
  EXPECT_TRUE(s.dirty());
  EXPECT_EQ(s.dirty_from(), 20u);
}

TEST(LossSeries, SkipsNonFiniteLosses) {
  LossSeries s(10);
  s.Add(1, NAN);
  s.Add(2, INFINITY);
  EXPECT_TRUE(s.points().empty());
  EXPECT_FALSE(s.dirty());
}

TEST(LossSeries, DirtyTracksWhatTheStoreMustWrite) {
  LossSeries s(4);
  EXPECT_FALSE(s.dirty());
  s.Add(1, 1);
  s.Add(2, 1);
  EXPECT_EQ(s.dirty_from(), 0u);
  s.MarkSaved();
  s.Add(3, 1);
  EXPECT_EQ(s.dirty_from(), 2u);
  s.MarkSaved();
  s.Add(4, 1);
  s.Add(5, 1);  // a merge rewrites every point
  EXPECT_EQ(s.dirty_from(), 0u);
}

TEST(LossSeries, FromStoredPointsContinuesWithTheSameStride) {
  LossSeries a(4);
  for (int step = 1; step <= 11; ++step) a.Add(step, step);
  LossSeries b = LossSeries::FromPoints(a.points(), 4);
  EXPECT_EQ(b.stride(), a.stride());
  EXPECT_FALSE(b.dirty());
  for (int step = 12; step <= 40; ++step) {
    a.Add(step, step);
    b.Add(step, step);
  }
  ASSERT_EQ(a.points().size(), b.points().size());
  for (size_t i = 0; i < a.points().size(); ++i) {
    EXPECT_EQ(a.points()[i].step, b.points()[i].step);
    EXPECT_DOUBLE_EQ(a.points()[i].value, b.points()[i].value);
  }
}

}  // namespace
}  // namespace eft::controller
