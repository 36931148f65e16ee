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

}  // namespace
}  // namespace eft::cli
