// Evaluation during training (issue 19) as users run it: `eft-train train` with data.eval or
// data.eval_fraction, its eval events (EFT_EVENTS_FD) and progress lines, at world sizes 1, 2, 3.
// The eval loss's own numerics (the token-weighted mean against the PyTorch reference) are
// tests/unit/trainer/train/evaluation_test.cc's.
#include <gtest/gtest.h>

#include <set>

#include "tests/e2e/trainer_fixture.h"

namespace eft::testing {
namespace {

struct EvalPoint {
  int64_t step;
  double loss;
  int64_t tokens;
};

class EvalTest : public TrainerTest {
 protected:
  static std::vector<EvalPoint> Evals(const Run& r) {
    std::vector<EvalPoint> out;
    for (const auto& e : r.events) {
      if (e["event"] == "eval") {
        out.push_back({e["step"].get<int64_t>(), e["loss"].get<double>(), e["tokens"].get<int64_t>()});
      }
    }
    return out;
  }
};

// 40 examples, 10% held out: 36 train (9 steps of 4 per epoch, not 10), evaluated before training,
// every 3 steps and at the end, the same numbers at W = 1, 2, 3. fp32: the ranks' sums are added
// in another order (a few ulps of ~5 over a few hundred tokens), and the weights the evaluations
// see after training steps differ by the training's own cross-W rounding (trainer_test holds
// that to 1e-5): 1e-4 relative covers both.
TEST_F(EvalTest, HeldOutLossIsReportedOnScheduleAndIsWorldSizeIndependent) {
  epochs_ = 1;
  InitModel();
  WriteData(40);
  const std::string spec = WriteSpec(4, 1, 3e-3);
  const std::string eval = " --set data.eval_fraction=0.1 --set training.eval_every_steps=3";
  std::vector<EvalPoint> base;
  for (int world : {1, 2, 3}) {
    SCOPED_TRACE("world size " + std::to_string(world));
    Run r = TrainRun("w" + std::to_string(world), world, spec, 0, eval);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_EQ(r.losses.size(), 9u) << "4 of 40 examples are held out";
    std::vector<EvalPoint> evals = Evals(r);
    ASSERT_EQ(evals.size(), 4u) << r.output;
    const std::vector<int64_t> steps = {0, 3, 6, 9};
    for (size_t i = 0; i < evals.size(); ++i) EXPECT_EQ(evals[i].step, steps[i]);
    EXPECT_NE(r.output.find("eval_loss"), std::string::npos) << r.output;
    if (world == 1) {
      base = evals;
      // Memorising random tokens does not generalise: held-out loss is only checked to be finite.
      for (const auto& e : evals) EXPECT_TRUE(std::isfinite(e.loss) && e.loss > 0);
      continue;
    }
    for (size_t i = 0; i < evals.size(); ++i) {
      EXPECT_EQ(evals[i].tokens, base[i].tokens);
      EXPECT_NEAR(evals[i].loss, base[i].loss, 1e-4 * base[i].loss) << "at step " << evals[i].step;
    }
  }
}

// Named eval sets (data.eval as a list): every set evaluated at the same steps, in the list's order,
// each event and progress line named; a set's losses are those of a run that evaluates it alone
// (the same forward passes on the same weights: evaluating another set in between changes no
// state, so 1e-6 relative only allows for a different summation order, which there should not be).
TEST_F(EvalTest, NamedSetsAreEachEvaluatedAsIfAlone) {
  InitModel();
  WriteData(8, 6, 20, /*seed=*/5);
  std::filesystem::rename(dir_ / "data.jsonl", dir_ / "unseen.jsonl");
  WriteData(8);
  const std::string spec = WriteSpec(8, 2, 1e-2);
  const std::string seen = (dir_ / "data.jsonl").string(), unseen = (dir_ / "unseen.jsonl").string();
  Run both = TrainRun("named", 2, spec, 6,
                      " --set 'data.eval=[{name: seen, path: " + seen + "}, {name: unseen, path: " + unseen +
                          "}]' --set training.eval_every_steps=3");
  Run alone = TrainRun("alone", 2, spec, 6, " --set data.eval=" + unseen + " --set training.eval_every_steps=3");
  ASSERT_EQ(both.exit_code, 0) << both.output;
  ASSERT_EQ(alone.exit_code, 0) << alone.output;
  std::vector<json> named, single;
  for (const auto& e : both.events) if (e["event"] == "eval") named.push_back(e);
  for (const auto& e : alone.events) if (e["event"] == "eval") single.push_back(e);
  ASSERT_EQ(named.size(), 6u) << both.output;
  ASSERT_EQ(single.size(), 3u) << alone.output;
  for (size_t i = 0; i < named.size(); ++i) {
    EXPECT_EQ(named[i]["step"], std::vector<int>({0, 0, 3, 3, 6, 6})[i]);
    EXPECT_EQ(named[i]["set"], i % 2 == 0 ? "seen" : "unseen");
    EXPECT_EQ(named[i]["index"], i % 2);
  }
  for (size_t k = 0; k < single.size(); ++k) {
    EXPECT_EQ(single[k]["set"], "eval") << "one unnamed file is a set named eval";
    const double want = single[k]["loss"].get<double>();
    EXPECT_NEAR(named[2 * k + 1]["loss"].get<double>(), want, 1e-6 * want) << "at step " << single[k]["step"];
  }
  EXPECT_LT(named[4]["loss"].get<double>(), named[0]["loss"].get<double>()) << "the trained-on set's loss falls";
  EXPECT_NE(both.output.find("| seen eval_loss "), std::string::npos) << both.output;
  EXPECT_NE(both.output.find("| unseen eval_loss "), std::string::npos) << both.output;
}

// data.eval: a file of its own; by default evaluated before training, at every full checkpoint
// and at the end. On the training file itself the eval loss must track the training loss: after
// memorising it for a while both are small.
TEST_F(EvalTest, AnEvalFileIsEvaluatedAtFullCheckpointsAndAtTheEnd) {
  InitModel();
  WriteData(8);
  extra_yaml_ = "checkpoint: {dir: " + (dir_ / "ckpt").string() + ", every_steps: 0, full_every_steps: 10}\n";
  const std::string spec = WriteSpec(8, 2, 1e-2);
  Run r = TrainRun("file", 1, spec, 25, " --set data.eval=" + (dir_ / "data.jsonl").string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::vector<EvalPoint> evals = Evals(r);
  ASSERT_EQ(evals.size(), 4u) << r.output;
  EXPECT_EQ(evals[0].step, 0);
  EXPECT_EQ(evals[1].step, 10);
  EXPECT_EQ(evals[2].step, 20);
  EXPECT_EQ(evals[3].step, 25);
  EXPECT_LT(evals[3].loss, 0.5 * evals[0].loss) << r.output;
  // Same data, same weights as the last step's forward minus one update: the two losses are close.
  EXPECT_LT(evals[3].loss, 1.5 * r.losses.back() + 0.05) << r.output;
}

// checkpoint.keep_best with keep_last 1: what is left is the newest checkpoint and the one saved
// at the step with the lowest eval loss (whichever that turns out to be), nothing else. A high
// learning rate on random tokens makes the held-out loss move both ways.
TEST_F(EvalTest, KeepBestLeavesTheNewestAndTheLowestEvalLoss) {
  epochs_ = 1;
  InitModel();
  WriteData(40);
  extra_yaml_ = "checkpoint: {dir: " + (dir_ / "ckpt").string() + ", every_steps: 1, keep_last: 1, keep_best: true}\n";
  const std::string spec = WriteSpec(4, 1, 5e-2);
  Run r = TrainRun("best", 2, spec, 8, " --set data.eval_fraction=0.25 --set training.eval_every_steps=1");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::vector<EvalPoint> evals = Evals(r);
  ASSERT_EQ(evals.size(), 9u) << r.output;  // steps 0..8
  int64_t best_step = 1;
  double best = evals[1].loss;
  for (size_t i = 1; i < evals.size(); ++i) {  // step 0 has no checkpoint
    if (evals[i].loss <= best) {  // the newest of equals
      best = evals[i].loss;
      best_step = evals[i].step;
    }
  }
  std::set<std::string> want = {"step-8", "step-" + std::to_string(best_step)}, left;
  for (const auto& e : fs::directory_iterator(dir_ / "ckpt")) {
    if (e.path().filename().string().rfind("step-", 0) == 0) left.insert(e.path().filename().string());
  }
  EXPECT_EQ(left, want) << "eval losses: " << [&] {
    std::string s;
    for (const auto& e : evals) s += std::to_string(e.step) + ":" + std::to_string(e.loss) + " ";
    return s;
  }();
  // Every checkpoint retention deleted was reported, so the controller never offers it.
  int reported = 0;
  for (const auto& e : r.events) reported += e["event"] == "checkpoint_deleted";
  EXPECT_EQ(reported, 8 - static_cast<int>(want.size())) << "8 checkpoints written, " << want.size() << " kept";
}

TEST_F(EvalTest, BadEvalConfigurationsExitTwoWithTheReason) {
  InitModel();
  WriteData(8);
  const std::string spec = WriteSpec(4, 1, 1e-3);
  std::string out;
  EXPECT_EQ(Shell(Train() + " train --config " + spec + " --set checkpoint.keep_best=true", &out), 2) << out;
  EXPECT_NE(out.find("keep_best needs eval data"), std::string::npos) << out;
  EXPECT_EQ(Shell(Train() + " train --config " + spec + " --set data.eval=" + (dir_ / "missing.jsonl").string(), &out),
            2)
      << out;
  EXPECT_NE(out.find("spec.data.eval"), std::string::npos) << out;
  EXPECT_EQ(Shell(Train() + " train --config " + spec + " --set data.eval_fraction=0.95", &out), 2) << out;
  EXPECT_NE(out.find("nothing to train on"), std::string::npos) << out;
  // Held-out examples whose labels are all -100: no loss to compute, said so rather than "0".
  std::ofstream(dir_ / "untrained.jsonl") << "{\"input_ids\": [1, 2, 3], \"labels\": [-100, -100, -100]}\n";
  EXPECT_EQ(Shell(Train() + " train --config " + spec + " --set data.eval=" + (dir_ / "untrained.jsonl").string(), &out),
            2)
      << out;
  EXPECT_NE(out.find("no trained tokens"), std::string::npos) << out;
}

}  // namespace
}  // namespace eft::testing
