// eft's model on real pretrained weights (SmolLM2-135M-Instruct, scripts/real-model.sh) against
// Hugging Face transformers itself: the logits and loss of two chat conversations rendered with the
// model's own template. tests/reference/real_model.py ("logits") writes transformers' outputs in
// fp32 and in fp64; ctest runs this with the model directory and that file in the environment
// (EFT_REAL_MODEL_DIR, EFT_REAL_MODEL_REFERENCE; tests/unit/trainer/model/CMakeLists.txt).
//
// Tolerance, derived on the machine that runs it rather than measured once: eft and transformers
// compute the same fp32 formulas with reductions in other orders, so each lands within fp32
// rounding of the exact (fp64) result, by amounts of the same size: the same dot-product lengths
// over the same values in the same 30 layers. transformers' own fp32 error, max |hf32 - hf64|, is
// that size on this CPU and BLAS; eft's must be within 4 times it (the largest of thousands of
// roughly normal rounding errors varies by far less between two such computations). A real mistake
// (a wrong RoPE base, a missing norm, untied embeddings) moves the logits by 0.1 and more. The loss
// follows from the logits: within twice their bound.
#include <cstdlib>
#include <iostream>

#include <gtest/gtest.h>

#include "tiny_model.h"
#include "trainer/io/safetensors.h"

namespace eft::trainer {
namespace {

std::string Env(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr ? v : "";
}

TEST(RealModel, LogitsAndLossMatchTransformers) {
  const std::string dir = Env("EFT_REAL_MODEL_DIR"), reference = Env("EFT_REAL_MODEL_REFERENCE");
  ASSERT_FALSE(dir.empty() || reference.empty())
      << "EFT_REAL_MODEL_DIR and EFT_REAL_MODEL_REFERENCE must name the model and transformers' outputs "
         "(ctest sets them: RealModel.EftLogitsMatchTransformers)";
  auto model = testing::LoadModelDir(dir);
  ASSERT_TRUE(model.ok()) << model.status();
  ASSERT_EQ(model->config.num_hidden_layers, 30);
  ASSERT_TRUE(model->config.tie_word_embeddings);
  auto ref = SafetensorsFile::Open(reference);
  ASSERT_TRUE(ref.ok()) << ref.status();
  auto get = [&](const char* key) {
    const auto* e = (*ref)->Find(key);
    EXPECT_NE(e, nullptr) << key;
    return e ? (*ref)->View(*e).clone() : at::Tensor();
  };
  const at::Tensor input_ids = get("input_ids"), labels = get("labels");
  const at::Tensor hf32 = get("logits32"), hf64 = get("logits64");
  const double loss64 = get("loss64").item<double>();
  const Batch batch = testing::BatchFromHf(input_ids, labels);
  const testing::Output out = testing::RunModel(*model, batch);
  ASSERT_EQ(out.logits.sizes(), hf64.sizes());
  const double hf_error = testing::MaxAbsDiff(hf32, hf64);
  const double eft_error = testing::MaxAbsDiff(out.logits, hf64);
  const double peak = hf64.abs().max().item<double>();
  // A floor of 2^-20 of the largest logit (16 ulps) for a run where transformers' fp32 happens to be
  // nearly exact.
  const double bound = 4 * hf_error + std::ldexp(peak, -20);
  EXPECT_LE(eft_error, bound);
  const double loss = out.loss.item<double>() / static_cast<double>(batch.trained_tokens);
  // The loss is a mean of logsumexp(z) - z_label, and both terms move by at most max |dz| when the
  // logits z do: within twice the logits' bound.
  const double loss_bound = 2 * bound;
  EXPECT_LE(std::abs(loss - loss64), loss_bound);
  std::cout << "SmolLM2-135M-Instruct, " << input_ids.size(0) << " x " << input_ids.size(1)
            << " tokens: max |logit| " << peak << "; max |eft - fp64| " << eft_error << ", transformers fp32's "
            << hf_error << " (bound " << bound << "); loss " << loss << " vs " << loss64 << " (|diff| "
            << std::abs(loss - loss64) << ", bound " << loss_bound << ")\n";
}

}  // namespace
}  // namespace eft::trainer
