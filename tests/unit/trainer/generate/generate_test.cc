// Generation numerics: greedy tokens against the independent Python reference (full recompute
// every step, no cache), the cached path's logits against llama.h's training forward over the
// whole sequence, prefix reuse, eos and the context limit, and seeded sampling through the model.
#include "trainer/generate/generator.h"

#include <unistd.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tests/unit/trainer/model/tiny_model.h"
#include "tests/util/torch_python.h"
#include "trainer/io/safetensors.h"

namespace eft::trainer {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using testing::MaxAbsDiff;
using testing::TinyModel;

std::string SourceDir() {
  const char* env = std::getenv("EFT_SOURCE_DIR");
  return env && *env ? env : EFT_SOURCE_DIR_DEFAULT;
}

std::pair<int, std::string> Shell(const std::string& command) {
  FILE* pipe = popen((command + " 2>&1").c_str(), "r");
  std::string output;
  std::array<char, 4096> buf;
  while (size_t n = fread(buf.data(), 1, buf.size(), pipe)) output.append(buf.data(), n);
  const int status = pclose(pipe);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, output};
}

std::string Join(const std::vector<int32_t>& ids) {
  std::string s;
  for (int32_t id : ids) s += (s.empty() ? "" : ",") + std::to_string(id);
  return s;
}

std::vector<int32_t> RandomIds(int64_t n, int64_t vocab, uint64_t seed) {
  std::vector<int32_t> out;
  for (int64_t id : testing::RandomTokens(n, vocab, seed)) out.push_back(static_cast<int32_t>(id));
  return out;
}

// A temp HF directory holding `model` (fp32 safetensors) under `config_json`.
class HfDir {
 public:
  HfDir(const json& config_json, const TinyModel& model) {
    char tmpl[] = "/tmp/eft_gen_test_XXXXXX";
    path_ = ::mkdtemp(tmpl);
    std::ofstream(path_ + "/config.json") << config_json.dump(1);
    Status s = WriteSafetensorsDir(path_, model.Named(), uint64_t{1} << 40);
    if (!s.ok()) throw std::runtime_error(s.ToString());
  }
  ~HfDir() { fs::remove_all(path_); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

struct Variant {
  std::string name, arch;
  bool tied;
  bool rope_scaling;  // llama only: TinyConfigJson's llama3 scaling (original 32 positions)
};

json VariantConfig(const Variant& v) {
  json j = testing::TinyConfigJson(v.arch);
  j["tie_word_embeddings"] = v.tied;
  j["max_position_embeddings"] = 512;
  if (v.arch == "llama" && !v.rope_scaling) j["rope_scaling"] = nullptr;
  return j;
}

std::unique_ptr<InferenceModel> LoadModel(const std::string& dir, at::ScalarType dtype = at::kFloat) {
  auto m = InferenceModel::Load(dir, dtype);
  if (!m.ok()) throw std::runtime_error(m.status().ToString());
  return std::move(m).value();
}

// ---------------------------------------------------------------------------------------------
// Greedy tokens against the Python reference

class ReferenceGreedy : public ::testing::TestWithParam<Variant> {};

TEST_P(ReferenceGreedy, SameTokensAsFullRecomputeInPython) {
  if (std::string why = testing::ReferenceUnavailableReason(); !why.empty()) {
    std::cerr << "\n*** SKIPPING the Python reference comparison: " << why << " ***\n\n";
    GTEST_SKIP() << why;
  }
  const Variant& v = GetParam();
  const json config_json = VariantConfig(v);
  const ModelConfig config = ModelConfig::FromHfJson(config_json).value();
  // A 40-token prompt: the 24 new tokens sit at positions 40..63, past the llama3 scaling's
  // original 32, so every RoPE band is in play.
  const std::vector<int32_t> prompt = RandomIds(40, config.vocab_size, 7);
  HfDir dir(config_json, TinyModel::Random(config, /*seed=*/23));
  auto model = LoadModel(dir.path());
  DecodeSession session(*model);
  GenerateOptions options;
  options.max_new_tokens = 24;
  auto mine = Generate(session, prompt, options);
  ASSERT_TRUE(mine.ok()) << mine.status();
  EXPECT_EQ(mine->stop, StopReason::kMaxNewTokens);

  auto [rc, out] = Shell("OMP_NUM_THREADS=1 " + eft::testing::TorchPython() + " " + SourceDir() + "/tests/reference/generate_reference.py " +
                         dir.path() + " --prompt " + Join(prompt) + " --max-new-tokens 24");
  ASSERT_EQ(rc, 0) << out;
  const json ref = json::parse(out);
  const auto want = ref["tokens"].get<std::vector<int32_t>>();
  // Exact: both sides are fp32, and the smallest top-1/top-2 margin printed below is orders of
  // magnitude above the ~1e-6 the two implementations differ by (llama_test's logits tolerance).
  EXPECT_EQ(mine->tokens, want) << "reference margins per step: " << ref["margins"].dump();
  const auto margins = ref["margins"].get<std::vector<double>>();
  std::cout << "[" << v.name << "] 24 tokens equal; smallest reference margin "
            << *std::min_element(margins.begin(), margins.end()) << "\n";
}

INSTANTIATE_TEST_SUITE_P(
    Archs, ReferenceGreedy,
    ::testing::Values(Variant{"llama_llama3_untied", "llama", false, true}, Variant{"llama_tied", "llama", true, false},
                      Variant{"qwen2_bias_tied", "qwen2", true, false}, Variant{"qwen2_bias_untied", "qwen2", false, false},
                      Variant{"qwen3_qknorm_tied", "qwen3", true, false}, Variant{"qwen3_qknorm_untied", "qwen3", false, false},
                      Variant{"mistral_untied", "mistral", false, false}, Variant{"mistral_tied", "mistral", true, false}),
    [](const ::testing::TestParamInfo<Variant>& info) { return info.param.name; });

// ---------------------------------------------------------------------------------------------
// Cached logits against the full recompute of llama.h's training forward

// Logits [T, vocab] of the whole sequence through MakeAttentionContext / DecoderLayer / Logits.
at::Tensor FullRecompute(const TinyModel& m, const std::vector<int32_t>& seq) {
  std::vector<int64_t> ids(seq.begin(), seq.end());
  return testing::RunModel(m, testing::MakeBatch({{{ids}}}, 0)).logits[0].detach();
}

class CachedLogits : public ::testing::TestWithParam<std::tuple<std::string, at::ScalarType>> {};

TEST_P(CachedLogits, EqualFullRecomputeAtEveryStep) {
  const auto [arch, dtype] = GetParam();
  json config_json = testing::TinyConfigJson(arch);
  config_json["max_position_embeddings"] = 512;
  const ModelConfig config = ModelConfig::FromHfJson(config_json).value();
  const TinyModel weights = TinyModel::Random(config, 31, dtype);
  auto model = InferenceModel::FromTensors(config, weights.layers, weights.root).value();
  KvCache cache = model->NewCache();
  // A 250-token prompt and 12 single-token steps: the cache grows past its first 256 positions.
  std::vector<int32_t> seq = RandomIds(250, config.vocab_size, 3);
  std::vector<at::Tensor> cached;  // logits predicting position t + 1, for t = 0 ..
  at::Tensor prefill = model->Forward(seq, &cache, InferenceModel::LogitsFor::kEveryPosition).value();
  for (int64_t t = 0; t < prefill.size(0); ++t) cached.push_back(prefill[t]);
  for (int step = 0; step < 12; ++step) {
    const int32_t next = static_cast<int32_t>(cached.back().argmax().item<int64_t>());
    seq.push_back(next);
    cached.push_back(model->Forward({next}, &cache, InferenceModel::LogitsFor::kLastPosition).value()[0]);
  }
  EXPECT_GT(cache.capacity(), 256);
  const at::Tensor full = FullRecompute(weights, seq).to(at::kFloat);
  const at::Tensor mine = at::stack(cached);
  ASSERT_EQ(mine.sizes(), full.sizes());
  // The two paths run the same operations on the same values; only the matmul shapes differ (one
  // query row against the cache vs the whole T x T square, the prompt as one GEMM), which may change
  // the BLAS's summation order and nothing else. Masked entries are exactly zero on both paths.
  // fp32: measured <= 1.3e-6 of the largest logit (a few ulps of O(10) intermediates); 2e-5 leaves
  // margin and still fails for any positional or masking mistake (those move logits by 1e-2 or more
  // here). bf16: measured 0 on this build (LibTorch's CPU bf16 GEMM sums each output in fp32 in an
  // order that does not depend on the number of rows); a kernel that does (oneDNN, CUDA) may flip
  // single bf16 roundings (2^-8 relative) that then propagate through two layers: 1e-2 of the
  // largest logit allows that and is still far below a real error.
  const double scale = std::max(1.0, full.abs().max().item<double>());
  const double tol = (dtype == at::kFloat ? 2e-5 : 1e-2) * scale;
  const double prefill_diff = MaxAbsDiff(mine.narrow(0, 0, 250), full.narrow(0, 0, 250));
  const double decode_diff = MaxAbsDiff(mine.narrow(0, 250, 12), full.narrow(0, 250, 12));
  EXPECT_LE(prefill_diff, tol);
  EXPECT_LE(decode_diff, tol);
  std::cout << "[" << arch << "/" << c10::toString(dtype) << "] max |logit| " << scale << ", prefill diff "
            << prefill_diff << ", decode diff " << decode_diff << " (tol " << tol << ")\n";
}

INSTANTIATE_TEST_SUITE_P(Archs, CachedLogits,
                         ::testing::Combine(::testing::Values("llama", "qwen2", "qwen3", "mistral"),
                                            ::testing::Values(at::kFloat, at::kBFloat16)));

// ---------------------------------------------------------------------------------------------
// Sessions: prefix reuse, eos, limits

struct SmallModel {
  json config_json = [] {
    json j = testing::TinyConfigJson("qwen3");
    j["max_position_embeddings"] = 64;
    return j;
  }();
  ModelConfig config = ModelConfig::FromHfJson(config_json).value();
  TinyModel weights = TinyModel::Random(config, 41);
  std::unique_ptr<InferenceModel> model = InferenceModel::FromTensors(config, weights.layers, weights.root).value();
};

TEST(DecodeSession, ReusesTheLongestCachedPrefixAndMatchesAFreshSession) {
  SmallModel s;
  const auto a = RandomIds(16, s.config.vocab_size, 1), b = RandomIds(6, s.config.vocab_size, 2);
  DecodeSession session(*s.model);
  ASSERT_TRUE(session.SetContext(a).ok());
  EXPECT_EQ(session.last_reused(), 0);
  for (int32_t t : {5, 6, 7}) ASSERT_TRUE(session.Append(t).ok());
  std::vector<int32_t> branched(a.begin(), a.begin() + 10);
  branched.insert(branched.end(), b.begin(), b.end());
  at::Tensor reused = session.SetContext(branched).value();
  EXPECT_EQ(session.last_reused(), 10);
  EXPECT_EQ(session.tokens(), branched);
  DecodeSession fresh(*s.model);
  at::Tensor expected = fresh.SetContext(branched).value();
  // Same values, different chunking of the prompt (10 + 6 positions vs 16): BLAS summation order
  // only, as in CachedLogits (fp32).
  EXPECT_LE(MaxAbsDiff(reused, expected), 2e-5 * std::max(1.0, expected.abs().max().item<double>()));
  // The whole context already held: only its last position runs again.
  at::Tensor again = session.SetContext(branched).value();
  EXPECT_EQ(session.last_reused(), 15);
  EXPECT_LE(MaxAbsDiff(again, expected), 2e-5 * std::max(1.0, expected.abs().max().item<double>()));
  session.Reset();
  ASSERT_TRUE(session.SetContext(branched).ok());
  EXPECT_EQ(session.last_reused(), 0);
}

TEST(Generate, EosStopsGenerationAndIsNotReturned) {
  SmallModel s;
  const auto prompt = RandomIds(5, s.config.vocab_size, 3);
  DecodeSession session(*s.model);
  GenerateOptions options;
  options.max_new_tokens = 20;
  const auto free_run = Generate(session, prompt, options).value().tokens;
  ASSERT_EQ(free_run.size(), 20u);
  // The first token (from the third on) that did not occur before it becomes the eos.
  size_t k = 2;
  while (k < free_run.size() && std::find(free_run.begin(), free_run.begin() + k, free_run[k]) != free_run.begin() + k) ++k;
  ASSERT_LT(k, free_run.size()) << "no fresh token to use as eos";
  options.eos_ids = {999, free_run[k]};
  std::vector<int32_t> streamed;
  auto stopped = Generate(session, prompt, options, [&](int32_t id) { streamed.push_back(id); }).value();
  EXPECT_EQ(stopped.stop, StopReason::kEos);
  EXPECT_EQ(stopped.tokens, std::vector<int32_t>(free_run.begin(), free_run.begin() + k));
  EXPECT_EQ(streamed, stopped.tokens);
  // The same session again: the prompt comes from the cache, the answer does not change.
  EXPECT_EQ(stopped.reused_tokens, 4);
}

TEST(Generate, ContextLimitAndBadArguments) {
  SmallModel s;  // 64 positions
  DecodeSession session(*s.model);
  GenerateOptions options;
  options.max_new_tokens = 100;
  auto full = Generate(session, RandomIds(60, s.config.vocab_size, 4), options).value();
  EXPECT_EQ(full.stop, StopReason::kContextFull);
  EXPECT_EQ(full.tokens.size(), 5u);  // positions 60..63 are fed back; the 5th token needs no position
  EXPECT_EQ(session.tokens().size(), 64u);
  EXPECT_EQ(Generate(session, RandomIds(64, s.config.vocab_size, 4), options).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(Generate(session, {}, options).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(Generate(session, {1, 2, 97}, options).status().code(), StatusCode::kInvalidArgument);  // vocab 97
  options.max_new_tokens = 0;
  auto none = Generate(session, {1, 2}, options).value();
  EXPECT_TRUE(none.tokens.empty());
  options.max_new_tokens = 5;
  options.sampling.top_p = 0;
  EXPECT_EQ(Generate(session, {1, 2}, options).status().code(), StatusCode::kInvalidArgument);
}

TEST(Generate, SeededSamplingIsReproducibleAndTopKOneIsGreedy) {
  SmallModel s;
  const auto prompt = RandomIds(8, s.config.vocab_size, 5);
  DecodeSession session(*s.model);
  GenerateOptions greedy;
  greedy.max_new_tokens = 30;
  const auto greedy_tokens = Generate(session, prompt, greedy).value().tokens;
  GenerateOptions sampled = greedy;
  sampled.sampling = {.temperature = 1.5, .top_k = 0, .top_p = 1.0, .seed = 17};
  const auto a = Generate(session, prompt, sampled).value().tokens;
  DecodeSession other(*s.model);
  const auto b = Generate(other, prompt, sampled).value().tokens;
  EXPECT_EQ(a, b);
  EXPECT_NE(a, greedy_tokens);  // at T = 1.5 over 97 tokens, 30 greedy picks in a row is ~impossible
  sampled.sampling.seed = 18;
  EXPECT_NE(Generate(session, prompt, sampled).value().tokens, a);
  sampled.sampling.top_k = 1;
  EXPECT_EQ(Generate(session, prompt, sampled).value().tokens, greedy_tokens);
}

TEST(EosTokenIds, GenerationConfigThenConfigThenTokenizer) {
  char tmpl[] = "/tmp/eft_eos_XXXXXX";
  const std::string dir = ::mkdtemp(tmpl);
  EXPECT_TRUE(EosTokenIds(dir, nullptr).value().empty());
  std::ofstream(dir + "/config.json") << R"({"eos_token_id": 7})";
  EXPECT_EQ(EosTokenIds(dir, nullptr).value(), std::vector<int32_t>{7});
  std::ofstream(dir + "/config.json") << R"({"eos_token_id": [7, 9]})";
  EXPECT_EQ(EosTokenIds(dir, nullptr).value(), (std::vector<int32_t>{7, 9}));
  std::ofstream(dir + "/generation_config.json") << R"({"eos_token_id": [151645, 151643]})";
  EXPECT_EQ(EosTokenIds(dir, nullptr).value(), (std::vector<int32_t>{151645, 151643}));
  std::ofstream(dir + "/generation_config.json") << R"({"eos_token_id": "x"})";
  EXPECT_EQ(EosTokenIds(dir, nullptr).status().code(), StatusCode::kInvalidArgument);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace eft::trainer
