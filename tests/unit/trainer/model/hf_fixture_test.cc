// eft's model against Hugging Face transformers itself: tests/fixtures/hf/<case>/ holds tiny
// random models that transformers saved (save_pretrained) together with the logits and loss it
// computed for fixed inputs (tests/reference/hf_fixtures.py). Here eft loads each directory with its
// own loader and must reproduce them. ctest runs this twice: on the committed fixtures, and on the
// ones the pinned transformers in .venv makes again (EFT_HF_FIXTURES; tests/unit/trainer/model/
// CMakeLists.txt, which also checks the two sets agree).
//
// Tolerance: both sides are fp32 on the CPU computing the same formulas with reductions in a
// different order (transformers' eager attention vs eft's; RoPE tables built differently), which
// moves logits of magnitude ~10 by a few 1e-6. 1e-4 (the bound) leaves margin; a real
// mistake (a wrong RoPE band, a missing bias or norm) moves them by 1e-2 or more with these weights.
#include <filesystem>
#include <iostream>

#include <gtest/gtest.h>

#include "tiny_model.h"
#include "trainer/io/safetensors.h"

namespace eft::trainer {
namespace {

namespace fs = std::filesystem;

std::string FixtureRoot() {
  if (const char* dir = std::getenv("EFT_HF_FIXTURES"); dir != nullptr && *dir != '\0') return dir;
  const char* env = std::getenv("EFT_SOURCE_DIR");
  std::string src = env != nullptr && *env != '\0' ? env : EFT_SOURCE_DIR_DEFAULT;
  return src + "/tests/fixtures/hf";
}

std::vector<std::string> Cases() {
  std::vector<std::string> cases;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(FixtureRoot(), ec)) {
    if (fs::exists(e.path() / "reference.safetensors")) cases.push_back(e.path().filename().string());
  }
  std::sort(cases.begin(), cases.end());
  return cases;
}

TEST(HfFixtureTest, LogitsAndLossMatchTransformers) {
  const std::vector<std::string> cases = Cases();
  const std::vector<std::string> expected = {"llama", "llama3-rope", "mistral", "qwen2", "qwen3"};
  ASSERT_EQ(cases, expected) << "fixtures in " << FixtureRoot() << " (tests/reference/hf_fixtures.py makes them)";
  for (const std::string& name : cases) {
    SCOPED_TRACE(name);
    const std::string dir = FixtureRoot() + "/" + name;
    auto model = testing::LoadModelDir(dir);
    ASSERT_TRUE(model.ok()) << model.status();
    auto ref = SafetensorsFile::Open(dir + "/reference.safetensors");
    ASSERT_TRUE(ref.ok()) << ref.status();
    auto get = [&](const char* key) {
      const auto* e = (*ref)->Find(key);
      EXPECT_NE(e, nullptr) << key;
      return e ? (*ref)->View(*e).clone() : at::Tensor();
    };
    const at::Tensor input_ids = get("input_ids"), hf_labels = get("labels"), hf_logits = get("logits");
    const double hf_loss = get("loss").item<double>();
    const Batch batch = testing::BatchFromHf(input_ids, hf_labels);
    testing::Output out = testing::RunModel(*model, batch);
    ASSERT_EQ(out.logits.sizes(), hf_logits.sizes());
    const double logits_diff = testing::MaxAbsDiff(out.logits, hf_logits);
    const double loss = out.loss.item<double>() / static_cast<double>(batch.trained_tokens);
    EXPECT_LE(logits_diff, 1e-4);
    EXPECT_NEAR(loss, hf_loss, 1e-5 * std::abs(hf_loss));
    std::cout << "[" << name << "] max |logit| " << hf_logits.abs().max().item<double>() << ", max |logits - HF| "
              << logits_diff << ", loss " << loss << " vs HF " << hf_loss << "\n";
  }
}

}  // namespace
}  // namespace eft::trainer
