// Fuzzing the parsers of the trainer's own inputs (issue 15): the safetensors file reader and the
// tokenizer.json loader get deterministic seeded mutations of valid files (fuzz_util.h) for a
// bounded time. Every input must give OK or a non-OK Status with a message: no crash, no escaped
// exception, no hang (the watchdog aborts an input that runs past its bound). A file that opens
// must also be usable: every tensor loads, every tokenizer encodes and decodes.
//
// Defaults: 20 s per parser. EFT_FUZZ_SECONDS=600 for a long run, EFT_FUZZ_SEED to vary it.
#include <unistd.h>

#include <filesystem>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tests/unit/trainer/fuzz/fuzz_util.h"
#include "trainer/io/safetensors.h"
#include "trainer/tokenizer/tokenizer.h"

namespace eft::trainer::fuzz {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

std::string ReadFile(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

class ParserFuzz : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("eft-fuzz-" + std::to_string(::getpid()) + "-" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override {
    if (!HasFailure()) fs::remove_all(dir_);
  }

  // Runs `one` on mutated inputs until the budget is spent; returns {iterations, accepted}.
  // `one` returns "" when the input was handled properly, else what went wrong.
  std::pair<int64_t, int64_t> Run(const std::vector<std::string>& seeds,
                                  const std::function<std::string(const std::string&, bool*)>& one) {
    const Budget budget = Budget::FromEnv();
    Mutator mutator(seeds, budget.seed);
    Watchdog watchdog((dir_ / "hang.input").string(), budget.per_input_seconds);
    const auto start = std::chrono::steady_clock::now();
    int64_t iterations = 0, accepted = 0;
    // The seeds themselves first: each must be accepted, or the fuzzing starts from nothing useful.
    for (const auto& seed : seeds) {
      bool ok = false;
      EXPECT_EQ(one(seed, &ok), "");
      EXPECT_TRUE(ok) << "a seed was refused: " << refusal_;
    }
    while (iterations < budget.iterations &&
           std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() < budget.seconds) {
      const std::string input = mutator.Next();
      bool ok = false;
      std::string problem;
      watchdog.Begin(&input);
      try {
        problem = one(input, &ok);
      } catch (const std::exception& e) {
        problem = std::string("exception escaped: ") + e.what();
      } catch (...) {
        problem = "unknown exception escaped";
      }
      watchdog.End();
      ++iterations;
      accepted += ok;
      if (!problem.empty()) {
        const fs::path saved = dir_ / ("failing-" + std::to_string(iterations) + ".input");
        std::ofstream(saved, std::ios::binary) << input;
        ADD_FAILURE() << problem << " (input saved to " << saved << ")";
        break;  // one saved input to replay is enough
      }
    }
    std::printf("%s: %lld iterations in %.1f s, %lld accepted, %lld refused with an error\n",
                ::testing::UnitTest::GetInstance()->current_test_info()->name(), static_cast<long long>(iterations),
                std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(),
                static_cast<long long>(accepted), static_cast<long long>(iterations - accepted));
    RecordProperty("iterations", std::to_string(iterations));
    return {iterations, accepted};
  }

  fs::path dir_;
  std::string refusal_;  // the last refusal's message, for a refused seed
};

// ---------------------------------------------------------------------------------------------
// safetensors

std::vector<std::string> SafetensorsSeeds(const fs::path& dir) {
  std::vector<std::vector<std::pair<std::string, at::Tensor>>> sets;
  sets.push_back({{"a", at::arange(6, at::kFloat).reshape({2, 3})}, {"b", at::ones({4}, at::kBFloat16)},
                  {"c", at::tensor({1, 2, 3}, at::kLong)}, {"d", at::ones({2}, at::kBool)}});
  sets.push_back({{"scalar", at::scalar_tensor(1.5, at::kFloat)}, {"empty", at::zeros({0, 4}, at::kHalf)},
                  {"i8", at::tensor({-1, 2}, at::kChar)}, {"u8", at::tensor({7}, at::kByte)}});
  sets.push_back({{"model.embed_tokens.weight", at::randn({8, 4})},
                  {"model.layers.0.self_attn.q_proj.weight", at::randn({4, 4}).to(at::kBFloat16)},
                  {"model.norm.weight", at::ones({4})}, {"f64", at::ones({2}, at::kDouble)},
                  {"i16", at::ones({3}, at::kShort)}, {"i32", at::ones({1, 1, 1}, at::kInt)}});
  std::vector<std::string> seeds;
  for (size_t i = 0; i < sets.size(); ++i) {
    const fs::path p = dir / ("seed" + std::to_string(i) + ".safetensors");
    Status s = WriteSafetensors(p.string(), sets[i], i == 0 ? std::map<std::string, std::string>{{"format", "pt"}}
                                                            : std::map<std::string, std::string>{});
    EXPECT_TRUE(s.ok()) << s;
    seeds.push_back(ReadFile(p));
  }
  return seeds;
}

TEST_F(ParserFuzz, SafetensorsFile) {
  const std::string path = (dir_ / "input.safetensors").string();
  auto [iterations, accepted] = Run(SafetensorsSeeds(dir_), [&](const std::string& bytes, bool* ok) -> std::string {
    std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
    auto f = SafetensorsFile::Open(path);
    if (!f.ok()) {
      refusal_ = f.status().message();
      if (f.status().message().find(path) == std::string::npos) return "error without the path: " + f.status().message();
      return "";
    }
    *ok = true;
    // Accepted means usable: every tensor loads and views without reading out of bounds.
    for (const auto& e : (*f)->entries()) {
      auto t = (*f)->Load(e.name, at::kFloat);
      if (!t.ok()) return "an accepted file's tensor '" + e.name + "' does not load: " + t.status().message();
      if (e.scalar_type != at::kBool) (void)(*f)->View(e).to(at::kDouble).sum().item<double>();
    }
    return "";
  });
  EXPECT_GT(iterations, 1000);
  EXPECT_GT(accepted, 0) << "no mutation was accepted: the mutations are too coarse to reach the deeper checks";
}

// ---------------------------------------------------------------------------------------------
// tokenizer.json

json ByteVocab() {
  // GPT-2's byte -> printable code point map.
  json vocab = json::object();
  int extra = 0;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
    const int cp = printable ? b : 256 + extra++;
    std::string s;
    if (cp < 0x80) {
      s += static_cast<char>(cp);
    } else {
      s += static_cast<char>(0xC0 | (cp >> 6));
      s += static_cast<char>(0x80 | (cp & 0x3F));
    }
    vocab[s] = b;
  }
  return vocab;
}

std::vector<std::string> TokenizerSeeds() {
  json byte_level = {
      {"added_tokens", {{{"id", 260}, {"content", "<|im_end|>"}, {"special", true}}}},
      {"normalizer", {{"type", "NFC"}}},
      {"pre_tokenizer",
       {{"type", "Sequence"},
        {"pretokenizers",
         {{{"type", "Split"},
           {"pattern", {{"Regex", "(?i:'s|'t)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+|\\s+"}}},
           {"behavior", "Isolated"},
           {"invert", false}},
          {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}}}}},
      {"post_processor", {{"type", "ByteLevel"}}},
      {"decoder", {{"type", "ByteLevel"}}},
      {"model", {{"type", "BPE"}, {"vocab", ByteVocab()}, {"merges", json::array()}, {"ignore_merges", true}}}};
  json& v = byte_level["model"]["vocab"];
  v["he"] = 256;
  v["ll"] = 257;
  v["hell"] = 258;
  v["\xC4\xA0w"] = 259;  // "Ġw"
  byte_level["model"]["merges"] = {"h e", "l l", "he ll", "\xC4\xA0 w"};

  json sentencepiece_style = {
      {"added_tokens",
       {{{"id", 0}, {"content", "<unk>"}, {"special", true}}, {{"id", 1}, {"content", "<s>"}, {"special", true}},
        {{"id", 2}, {"content", "</s>"}, {"special", true}}}},
      {"normalizer",
       {{"type", "Sequence"},
        {"normalizers",
         {{{"type", "Prepend"}, {"prepend", "\xE2\x96\x81"}},
          {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", "\xE2\x96\x81"}}}}}},
      {"pre_tokenizer", nullptr},
      {"post_processor",
       {{"type", "TemplateProcessing"},
        {"single", {{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}}, {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}},
        {"special_tokens", {{"<s>", {{"id", "<s>"}, {"ids", {1}}, {"tokens", {"<s>"}}}}}}}},
      {"decoder",
       {{"type", "Sequence"},
        {"decoders",
         {{{"type", "Replace"}, {"pattern", {{"String", "\xE2\x96\x81"}}}, {"content", " "}},
          {{"type", "ByteFallback"}},
          {{"type", "Fuse"}},
          {{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}}}}}},
      {"model",
       {{"type", "BPE"},
        {"unk_token", "<unk>"},
        {"fuse_unk", true},
        {"byte_fallback", true},
        {"vocab", {{"<unk>", 0}, {"<s>", 1}, {"</s>", 2}, {"<0x41>", 3}, {"<0xC3>", 4}, {"<0xA9>", 5},
                   {"\xE2\x96\x81", 6}, {"a", 7}, {"b", 8}, {"ab", 9}, {"\xE2\x96\x81" "ab", 10}}},
        {"merges", json::array({json::array({"a", "b"}), json::array({"\xE2\x96\x81", "ab"})})}}}};

  json metaspace = sentencepiece_style;
  metaspace["normalizer"] = {{"type", "Lowercase"}};
  metaspace["pre_tokenizer"] = {
      {"type", "Sequence"},
      {"pretokenizers",
       {{{"type", "Metaspace"}, {"replacement", "\xE2\x96\x81"}, {"prepend_scheme", "first"}, {"split", true}},
        {{"type", "Digits"}, {"individual_digits", true}}}}};
  metaspace["decoder"] = {{"type", "Metaspace"}, {"replacement", "\xE2\x96\x81"}, {"prepend_scheme", "always"}};
  return {byte_level.dump(), sentencepiece_style.dump(1), metaspace.dump()};
}

TEST_F(ParserFuzz, TokenizerJson) {
  const std::vector<std::string> texts = {"hello world", "Hello, World! 12345 <|im_end|>\n\n  x", "ab abab é A",
                                          "\xF0\x9F\x98\x80 ünïcödé \t tabs", ""};
  auto [iterations, accepted] = Run(TokenizerSeeds(), [&](const std::string& text, bool* ok) -> std::string {
    auto t = TokenizerFromJson(text);
    if (!t.ok()) {
      refusal_ = t.status().message();
      if (t.status().message().rfind("tokenizer.json", 0) != 0)
        return "error not naming tokenizer.json: " + t.status().message();
      return "";
    }
    *ok = true;
    // Accepted means usable: encoding and decoding stay in range and do not crash.
    const int32_t vocab = (*t)->vocab_size();
    for (const auto& s : texts) {
      for (int32_t id : (*t)->EncodeIds(s, true)) {
        if (id < 0 || id >= vocab) return "encoding gave id " + std::to_string(id) + " outside [0, " + std::to_string(vocab) + ")";
      }
    }
    std::vector<int32_t> ids;
    for (int32_t i = 0; i < std::min(vocab, 300); ++i) ids.push_back(i);
    (*t)->Decode(ids, false);
    (*t)->Decode(ids, true);
    return "";
  });
  EXPECT_GT(iterations, 500);
  EXPECT_GT(accepted, 0) << "no mutation was accepted: the mutations are too coarse to reach the deeper checks";
}

}  // namespace
}  // namespace eft::trainer::fuzz
