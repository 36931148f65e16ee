// tokenizer.model through libsentencepiece: a model trained here by SentencePiece's own trainer;
// our tokenizer must give SentencePiece's ids for plain text, cut special tokens out first (as
// Hugging Face's slow tokenizers do), keep offsets in the input, and decode back.
#include <gtest/gtest.h>

#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>

#include "tests/unit/trainer/tokenizer/test_files.h"
#include "trainer/tokenizer/tokenizer.h"

namespace eft::trainer {
namespace {

using namespace eft::testing;

class SentencePiece : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::string(MakeTempDir("eft-sp-"));
    std::string text;
    const char* lines[] = {"The quick brown fox jumps over the lazy dog.", "Fine-tuning language models is fun.",
                           "Привет, как дела?", "数据并行训练", "tokens, tokens and more tokens 12345"};
    for (int i = 0; i < 400; ++i) text += std::string(lines[i % 5]) + " " + std::to_string(i) + "\n";
    WriteFile(*dir_ + "/train.txt", text);
    auto st = sentencepiece::SentencePieceTrainer::Train("--input=" + *dir_ + "/train.txt --model_prefix=" + *dir_ +
                                                         "/tokenizer --vocab_size=400 --model_type=bpe "
                                                         "--byte_fallback=true --character_coverage=1.0 --minloglevel=2");
    train_error_ = new std::string(st.ok() ? "" : st.error_message());
  }
  void SetUp() override { ASSERT_EQ(*train_error_, "") << "SentencePiece training failed"; }
  static void TearDownTestSuite() {
    std::filesystem::remove_all(*dir_);
    delete dir_;
    delete train_error_;
  }
  static std::string* dir_;
  static std::string* train_error_;
};
std::string* SentencePiece::dir_ = nullptr;
std::string* SentencePiece::train_error_ = nullptr;

TEST_F(SentencePiece, PlainTextGivesSentencePiecesIds) {
  sentencepiece::SentencePieceProcessor sp;
  ASSERT_TRUE(sp.Load(*dir_ + "/tokenizer.model").ok());
  auto t = LoadTokenizer(*dir_);
  ASSERT_TRUE(t.ok()) << t.status().message();
  EXPECT_EQ((*t)->kind(), "sentencepiece");
  for (std::string text : {"The lazy fox", "Привет 😀 мир", "  spaces  and\ttabs", "数据 12345"}) {
    std::vector<int> expected;
    ASSERT_TRUE(sp.Encode(text, &expected).ok());
    auto e = (*t)->Encode(text, false);
    EXPECT_EQ(std::vector<int>(e.ids.begin(), e.ids.end()), expected) << text;
    EXPECT_EQ((*t)->Decode(e.ids, false), sp.DecodeIds(expected));
    for (auto [b, end] : e.offsets) EXPECT_LE(end, text.size());
  }
  auto with_bos = (*t)->Encode("fox", true);
  EXPECT_EQ(with_bos.ids.front(), sp.bos_id());
}

TEST_F(SentencePiece, SpecialTokensInTheTextAreNotSplit) {
  auto t = LoadTokenizer(*dir_);
  ASSERT_TRUE(t.ok());
  int32_t eos = *(*t)->eos_id();
  auto e = (*t)->Encode("hello</s>world", false);
  auto hello = (*t)->EncodeIds("hello"), world = (*t)->EncodeIds("world");
  std::vector<int32_t> expected = hello;
  expected.push_back(eos);
  expected.insert(expected.end(), world.begin(), world.end());
  EXPECT_EQ(e.ids, expected);
  EXPECT_EQ((*t)->Decode(e.ids, true), "hello world");
  EXPECT_NE(std::find((*t)->special_tokens().begin(), (*t)->special_tokens().end(), "</s>"),
            (*t)->special_tokens().end());
}

// eft-train itself loads LibTorch, whose protobuf collides with the one inside libsentencepiece;
// the module (spm_shim.h) must keep them apart: `eft-train tokenize` on a tokenizer.model gives
// the same ids as this process.
TEST_F(SentencePiece, EftTrainTokenizesWithLibTorchLoaded) {
  const char* build = std::getenv("EFT_BUILD_DIR");
  ASSERT_NE(build, nullptr);
  auto t = LoadTokenizer(*dir_);
  ASSERT_TRUE(t.ok());
  WriteFile(*dir_ + "/in.txt", "The lazy fox</s>\nПривет 12345\n");
  std::string out = *dir_ + "/out.txt";
  ASSERT_EQ(RunCommand(std::string(build) + "/trainer/eft-train tokenize --tokenizer " + *dir_ + " --file " + *dir_ +
                       "/in.txt > " + out),
            0);
  std::string expected;
  for (const char* line : {"The lazy fox</s>", "Привет 12345"}) {
    auto ids = (*t)->EncodeIds(line);
    for (size_t i = 0; i < ids.size(); ++i) expected += (i ? " " : "") + std::to_string(ids[i]);
    expected += "\n";
  }
  EXPECT_EQ(ReadFile(out), expected);
}

TEST_F(SentencePiece, ACorruptModelIsAnError) {
  std::string dir = MakeTempDir("eft-sp-bad-");
  WriteFile(dir + "/tokenizer.model", "not a protobuf at all");
  auto t = LoadTokenizer(dir);
  EXPECT_FALSE(t.ok());
  std::filesystem::remove_all(dir);
}

// libsentencepiece throws (from its trie builder) for a model with an empty piece, where it reports
// most bad models with a Status; the exception crossed the module's C interface and ended the program
// (std::terminate). Found by fuzz/sentencepiece_model_fuzz.cc; the input is its regression file.
TEST_F(SentencePiece, AModelLibSentencePieceThrowsOnIsAnErrorNotACrash) {
  const std::string model = ReadFile(SourceDir() + "/fuzz/regressions/sentencepiece_model/empty-piece-darts-throws");
  ASSERT_FALSE(model.empty());
  std::string dir = MakeTempDir("eft-sp-throws-");
  WriteFile(dir + "/tokenizer.model", model);
  auto t = LoadTokenizer(dir);
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("not a SentencePiece model libsentencepiece can load"), std::string::npos)
      << t.status().message();
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace eft::trainer
