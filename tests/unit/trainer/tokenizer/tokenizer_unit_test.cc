// Unit tests of the tokenizer's parts and its failure modes (the comparison with Hugging Face is
// hf_comparison_test.cc).
#include <gtest/gtest.h>

#include <sstream>

#include <nlohmann/json.hpp>

#include "tests/unit/trainer/tokenizer/test_files.h"
#include "trainer/tokenizer/added_tokens.h"
#include "trainer/tokenizer/byte_level.h"
#include "trainer/tokenizer/tokenize_command.h"
#include "trainer/tokenizer/tokenizer.h"
#include "common/utf8.h"

namespace eft::trainer {
namespace {

using nlohmann::json;
using namespace eft::testing;

// A byte-level BPE over the alphabet "a b c Ġ" with merges a+b, ab+c, Ġ+abc.
json TinyTokenizer() {
  json vocab = json::object();
  int id = 0;
  for (int b = 0; b < 256; ++b) vocab[tok::BytesToByteLevel(std::string(1, static_cast<char>(b)))] = id++;
  vocab["ab"] = id++;
  vocab["abc"] = id++;
  vocab["\xC4\xA0" "abc"] = id++;  // "Ġabc"
  return json{
      {"version", "1.0"},
      {"added_tokens", json::array({{{"id", 259}, {"content", "<|end|>"}, {"special", true}, {"normalized", false}}})},
      {"normalizer", nullptr},
      {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}}},
      {"post_processor", nullptr},
      {"decoder", {{"type", "ByteLevel"}}},
      {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", json::array({"a b", "ab c", "\xC4\xA0 abc"})}}}};
}

TEST(Utf8, RepairReplacesEachMaximalInvalidSubpartOnce) {
  EXPECT_EQ(RepairUtf8("ok"), "ok");
  EXPECT_EQ(RepairUtf8("a\xFF" "b"), "a\xEF\xBF\xBD" "b");
  EXPECT_EQ(RepairUtf8("\xE2\x82"), "\xEF\xBF\xBD");          // truncated 3-byte sequence: one
  EXPECT_EQ(RepairUtf8("\xED\xA0\x80"), "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");  // surrogate: three
  EXPECT_EQ(RepairUtf8("\xF0\x9F\x98\x80"), "\xF0\x9F\x98\x80");
}

TEST(ByteLevel, EveryByteRoundTrips) {
  for (int b = 0; b < 256; ++b) {
    std::string raw(1, static_cast<char>(b));
    EXPECT_EQ(tok::ByteLevelToBytes(tok::BytesToByteLevel(raw)), raw);
  }
  EXPECT_EQ(tok::BytesToByteLevel(" "), "\xC4\xA0");  // Ġ
  EXPECT_FALSE(tok::ByteLevelToBytes("\xE4\xBD\xA0").has_value());  // 你 is not in the alphabet
}

TEST(Tokenizer, MergesByRankAndKeepsOffsets) {
  auto t = TokenizerFromJson(TinyTokenizer().dump());
  ASSERT_TRUE(t.ok()) << t.status().message();
  auto e = (*t)->Encode("abc abcab<|end|>", false);
  // "abc" | " abc" | "ab" | <|end|>
  EXPECT_EQ(e.ids, (std::vector<int32_t>{257, 258, 256, 259}));
  EXPECT_EQ(e.offsets, (std::vector<std::pair<size_t, size_t>>{{0, 3}, {3, 7}, {7, 9}, {9, 16}}));
  EXPECT_EQ((*t)->Decode(e.ids, false), "abc abcab<|end|>");
  EXPECT_EQ((*t)->Decode(e.ids, true), "abc abcab");
  EXPECT_EQ((*t)->TokenToId("<|end|>"), 259);
  EXPECT_EQ((*t)->IdToToken(257), "abc");
  EXPECT_EQ((*t)->vocab_size(), 260);
}

TEST(Tokenizer, LongWordsMergeLikeShortOnes) {
  auto t = TokenizerFromJson(TinyTokenizer().dump());
  ASSERT_TRUE(t.ok());
  std::string word;
  for (int i = 0; i < 200; ++i) word += "abc";  // long enough for the heap path
  auto ids = (*t)->EncodeIds(word);
  ASSERT_EQ(ids.size(), 200u);
  for (int32_t id : ids) EXPECT_EQ(id, 257);
}

TEST(Tokenizer, UnsupportedPartsAreNamed) {
  struct Case {
    const char* field;
    const char* value;
    const char* expect;
  } cases[] = {
      {"normalizer", R"({"type": "BertNormalizer"})", "unsupported normalizer BertNormalizer"},
      {"pre_tokenizer", R"({"type": "Whitespace"})", "unsupported pre_tokenizer Whitespace"},
      {"decoder", R"({"type": "WordPiece"})", "unsupported decoder WordPiece"},
      {"post_processor", R"({"type": "BertProcessing"})", "unsupported post_processor BertProcessing"},
      {"model", R"({"type": "Unigram", "vocab": []})", "unsupported model type Unigram"},
      {"pre_tokenizer", R"({"type": "Split", "pattern": {"Regex": "(unclosed"}, "behavior": "Isolated"})", "does not compile"},
      {"pre_tokenizer", R"({"type": "Sequence", "pretokenizers": [{"type": "ByteLevel"}, {"type": "Digits"}]})",
       "after ByteLevel"},
      {"pre_tokenizer", R"({"type": "Sequence", "pretokenizers": [{"type": "Digits"}, {"type": "ByteLevel", "add_prefix_space": true}]})",
       "prefix every word"},
  };
  for (const Case& c : cases) {
    json t = TinyTokenizer();
    t[c.field] = json::parse(c.value);
    auto made = TokenizerFromJson(t.dump());
    ASSERT_FALSE(made.ok()) << c.value;
    EXPECT_NE(made.status().message().find(c.expect), std::string::npos) << made.status().message();
  }
}

TEST(Tokenizer, MalformedModelsAreErrorsNotCrashes) {
  EXPECT_FALSE(TokenizerFromJson("{not json").ok());
  EXPECT_FALSE(TokenizerFromJson("[]").ok());
  json t = TinyTokenizer();
  t["model"]["merges"].push_back("a zz");
  auto made = TokenizerFromJson(t.dump());
  ASSERT_FALSE(made.ok());
  EXPECT_NE(made.status().message().find("not in the vocab"), std::string::npos);
  t = TinyTokenizer();
  t["model"]["merges"].push_back("abc");
  EXPECT_FALSE(TokenizerFromJson(t.dump()).ok());
  t = TinyTokenizer();
  t["model"]["dropout"] = 0.1;
  EXPECT_FALSE(TokenizerFromJson(t.dump()).ok());
  t = TinyTokenizer();
  t["model"].erase("vocab");
  EXPECT_FALSE(TokenizerFromJson(t.dump()).ok());
}

// Numbers are read in their field's range or refused: nlohmann's value("id", -1) cast a float such
// as 1e30 to int, which is undefined (UBSan in `make sanitize`, on ParserFuzz.TokenizerJson's input).
TEST(Tokenizer, NumbersOutOfTheirFieldsRangeAreRefusedOrIgnoredNeverCast) {
  json t = TinyTokenizer();
  // Hugging Face renumbers added tokens, so the file's id is not read at all.
  t["added_tokens"] = json::array({{{"id", 1e30}, {"content", "<|x|>"}, {"special", true}}});
  auto made = TokenizerFromJson(t.dump());
  ASSERT_TRUE(made.ok()) << made.status().message();
  EXPECT_TRUE((*made)->TokenToId("<|x|>").has_value());
  for (const json& start : {json(1e30), json(-1), json(2.5)}) {
    t = TinyTokenizer();
    t["decoder"] = {{"type", "Strip"}, {"content", " "}, {"start", start}, {"stop", 0}};
    made = TokenizerFromJson(t.dump());
    ASSERT_FALSE(made.ok()) << start.dump();
    EXPECT_NE(made.status().message().find("decoder"), std::string::npos) << made.status().message();
  }
  t = TinyTokenizer();
  t["decoder"] = {{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}};
  EXPECT_TRUE(TokenizerFromJson(t.dump()).ok());
}

TEST(Tokenizer, NfcNormalizationKeepsOffsetsInTheInput) {
  json t = TinyTokenizer();
  t["normalizer"] = {{"type", "NFC"}};
  auto made = TokenizerFromJson(t.dump());
  ASSERT_TRUE(made.ok());
  std::string text = "abe\xCC\x81" "c";  // "abe" + combining acute + "c": é composes
  auto e = (*made)->Encode(text, false);
  ASSERT_FALSE(e.ids.empty());
  EXPECT_EQ(e.offsets.front().first, 0u);
  EXPECT_EQ(e.offsets.back().second, text.size());
  for (auto [b, end] : e.offsets) EXPECT_LE(end, text.size());
}

// Bytes that are not UTF-8 reach the pre-tokenizer's regex unharmed: one 0xFF crashed PCRE2's JIT,
// which was told not to check UTF-8 (fuzz/corpus/tokenizer_json's seeds, replayed). Every byte is
// still encoded, and decodes back as Hugging Face's lossy decode gives it (U+FFFD for what is not UTF-8).
TEST(Tokenizer, InvalidUtf8ThroughARegexSplit) {
  json t = TinyTokenizer();
  t["pre_tokenizer"] = {
      {"type", "Sequence"},
      {"pretokenizers",
       {{{"type", "Split"},
         {"pattern", {{"Regex", "(?i:'s|'t)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s+(?!\\S)|\\s+"}}},
         {"behavior", "Isolated"}},
        {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}}}};
  auto made = TokenizerFromJson(t.dump());
  ASSERT_TRUE(made.ok()) << made.status();
  for (const std::string text : {"\xFF", "ab\xFF\xFE c", "\xC3 abc\xED\xA0\x80", "abc \xF0\x9F\x98"}) {
    auto e = (*made)->Encode(text, false);
    ASSERT_FALSE(e.ids.empty()) << text;
    EXPECT_EQ(e.offsets.back().second, text.size());
    EXPECT_EQ((*made)->Decode(e.ids, false), RepairUtf8(text));
  }
}

// A text cut short inside a UTF-8 sequence through a Strip normalizer: it decoded the lone lead byte as
// if its continuation bytes followed and read past the text (fuzz/tokenizer_json_fuzz.cc, ASan:
// fuzz/regressions/tokenizer_json/strip-normalizer-reads-past-a-cut-sequence.json). A sequence the end
// cuts short is U+FFFD, one byte; what fits decodes as before.
TEST(Tokenizer, ASequenceCutShortByTheEndIsNotReadPast) {
  size_t len = 0;
  for (std::string_view cut : {std::string_view("a\xC3", 2), std::string_view("a\xE2\x96", 3),
                               std::string_view("a\xF0\x9F\x98", 4)}) {
    EXPECT_EQ(DecodeUtf8(cut, 1, &len), U'\uFFFD') << cut.size();
    EXPECT_EQ(len, 1u);
  }
  EXPECT_EQ(DecodeUtf8("\xE2\x96\x81", 0, &len), U'\u2581');
  EXPECT_EQ(len, 3u);
  json t = TinyTokenizer();
  t["normalizer"] = {{"type", "Sequence"},
                     {"normalizers", {{{"type", "Prepend"}, {"prepend", "\xE2\x96\x81"}},
                                      {{"type", "Strip"}, {"content", " "}, {"start", 2}, {"stop", 0}}}}};
  auto made = TokenizerFromJson(t.dump());
  ASSERT_TRUE(made.ok()) << made.status();
  for (const std::string text : {"ab \xC3", "\xE2\x96", " \xF0\x9F\x98", "\xC3"}) {
    auto e = (*made)->Encode(text, false);
    ASSERT_FALSE(e.ids.empty()) << text;
    for (auto [b, end] : e.offsets) EXPECT_LE(end, text.size()) << text;
  }
}

TEST(LoadTokenizer, ReadsTheDirectoryAndItsSpecialTokens) {
  std::string dir = MakeTempDir("eft-tok-dir-");
  WriteFile(dir + "/tokenizer.json", TinyTokenizer().dump());
  WriteFile(dir + "/tokenizer_config.json", R"({"eos_token": {"content": "<|end|>"}, "bos_token": null})");
  auto t = LoadTokenizer(dir);
  ASSERT_TRUE(t.ok()) << t.status().message();
  EXPECT_EQ((*t)->eos_id(), 259);
  EXPECT_FALSE((*t)->bos_id().has_value());
  EXPECT_EQ((*t)->kind(), "tokenizer.json");
  EXPECT_EQ(TokenizerFiles(dir).size(), 2u);

  WriteFile(dir + "/tokenizer_config.json", R"({"eos_token": "<|nope|>"})");
  auto bad = LoadTokenizer(dir);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("<|nope|>"), std::string::npos);
  WriteFile(dir + "/tokenizer.json", "{\"truncated");
  EXPECT_FALSE(LoadTokenizer(dir).ok());
  std::filesystem::remove_all(dir);
  auto missing = LoadTokenizer(dir);
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("neither tokenizer.json nor tokenizer.model"), std::string::npos);
}

TEST(AddedTokens, LeftmostLongestWithStripRules) {
  tok::AddedToken a{"<a>", 1}, ab{"<a><b>", 2}, s{"<s>", 3};
  s.lstrip = true;
  s.rstrip = true;
  tok::AddedTokenMatcher m({a, ab, s});
  auto pieces = m.Split("x<a><b>y  <s>  z<a>");
  ASSERT_EQ(pieces.size(), 6u);
  EXPECT_EQ(pieces[1].id, 2);  // the longer token wins at the same start
  EXPECT_EQ(pieces[2].begin, 7u);
  EXPECT_EQ(pieces[2].end, 8u);  // "y": the spaces around <s> belong to it
  EXPECT_EQ(pieces[3].id, 3);
  EXPECT_EQ(pieces[3].begin, 8u);
  EXPECT_EQ(pieces[3].end, 15u);
  EXPECT_EQ(pieces[5].id, 1);
}

TEST(TokenizeCommand, OneLineOfIdsPerLineAndBack) {
  std::string dir = MakeTempDir("eft-tok-cmd-");
  WriteFile(dir + "/tokenizer.json", TinyTokenizer().dump());
  std::istringstream in("abc\nab<|end|>\n\n");
  std::ostringstream out, err;
  TokenizeArgs args;
  args.tokenizer_dir = dir;
  EXPECT_EQ(RunTokenizeCommand(args, in, out, err), 0) << err.str();
  EXPECT_EQ(out.str(), "257\n256 259\n\n");
  args.decode = true;
  std::istringstream ids("257\n256 259\n");
  std::ostringstream text;
  EXPECT_EQ(RunTokenizeCommand(args, ids, text, err), 0);
  EXPECT_EQ(text.str(), "abc\nab<|end|>\n");
  std::istringstream bad("12 x\n");
  std::ostringstream ignored, err2;
  EXPECT_EQ(RunTokenizeCommand(args, bad, ignored, err2), 2);
  EXPECT_NE(err2.str().find("line 1: x is not a token id"), std::string::npos);
  args.tokenizer_dir = dir + "/missing";
  EXPECT_EQ(RunTokenizeCommand(args, in, ignored, err2), 2);
  std::filesystem::remove_all(dir);
}

// Input lines reach the tokenizer's regexes, which skip PCRE2's own UTF-8 check: invalid text is
// refused first, naming the line, instead of being undefined behaviour.
TEST(TokenizeCommand, InvalidUtf8IsRefusedWithItsLine) {
  std::string dir = MakeTempDir("eft-tok-cmd-utf8-");
  WriteFile(dir + "/tokenizer.json", TinyTokenizer().dump());
  TokenizeArgs args;
  args.tokenizer_dir = dir;
  for (const std::string& bad : {std::string("ab\xff\n"), std::string("\xc3\n"), std::string("\xed\xa0\x80\n")}) {
    std::istringstream in("abc\n" + bad);
    std::ostringstream out, err;
    EXPECT_EQ(RunTokenizeCommand(args, in, out, err), 2);
    EXPECT_NE(err.str().find("stdin:2: not valid UTF-8 text"), std::string::npos) << err.str();
    EXPECT_EQ(out.str(), "257\n") << "the good line before it was still tokenized";
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace eft::trainer
