// DescribeJob (cli/output.h): the progress line of `eftctl job describe`, with the MFU where the
// trainer reported one (docs/gpu.md, "MFU") and without where it did not.
#include <gtest/gtest.h>

#include "cli/output.h"

namespace eft::cli {
namespace {

v1::Job Training(double mfu) {
  v1::Job j;
  j.set_id("3");
  j.set_state(v1::JOB_STATE_SUCCEEDED);
  auto* p = j.mutable_progress();
  p->set_step(40);
  p->set_total_steps(80);
  p->set_loss(1.25);
  p->set_lr(2e-5);
  p->set_tokens_per_s(95123.4);
  p->set_mfu(mfu);
  return j;
}

std::string ProgressOf(const std::string& described) {
  const size_t at = described.find("Progress:    ");
  if (at == std::string::npos) return "";
  return described.substr(at, described.find('\n', at) - at);
}

TEST(DescribeJob, ProgressCarriesTheMfuWhenReported) {
  EXPECT_EQ(ProgressOf(DescribeJob(Training(0.3415))),
            "Progress:    step 40/80 (50.0%), loss 1.25, lr 2e-05, 95123 tokens/s (MFU 34.2%)");
  EXPECT_EQ(ProgressOf(DescribeJob(Training(0))), "Progress:    step 40/80 (50.0%), loss 1.25, lr 2e-05, 95123 tokens/s")
      << "a CPU job, or a GPU whose peak eft does not know: no MFU rather than 0%";
}

// Named eval sets (spec.data.eval): a line each under "Eval:", in the spec's order; one set keeps
// the single line; the progress line and the follow view name each set too.
TEST(DescribeJob, EachNamedEvalSetHasItsLine) {
  v1::Job j = Training(0);
  auto* p = j.mutable_progress();
  p->set_eval_loss(0.5);
  p->set_eval_step(40);
  p->set_eval_tokens(300);
  const std::string one = DescribeJob(j);
  EXPECT_NE(one.find("\nEval:        loss 0.5 at step 40 (300 tokens)\n"), std::string::npos) << one;
  for (const auto& [name, loss] : {std::pair{"new", 0.5}, std::pair{"known", 1.75}}) {
    v1::EvalLoss* e = p->add_evals();
    e->set_set(name);
    e->set_loss(loss);
    e->set_step(40);
    e->set_tokens(300);
  }
  const std::string two = DescribeJob(j);
  EXPECT_NE(two.find("\nEval:\n  new: loss 0.5 at step 40 (300 tokens)\n  known: loss 1.75 at step 40 (300 tokens)\n"),
            std::string::npos)
      << two;
  EXPECT_NE(ProgressLine(j).find(" eval_loss[new] 0.5 eval_loss[known] 1.75 (step 40)"), std::string::npos)
      << ProgressLine(j);
}

}  // namespace
}  // namespace eft::cli
