// A model directory's tokenizer.model (a SentencePiece ModelProto) as LoadTokenizer reads it: through
// eft's module around libsentencepiece (trainer/tokenizer/spm_shim.h), then SpTokenizer's own tables
// (the special tokens cut out before encoding, the BOS/EOS/UNK pieces as added tokens). The input is
// written as tokenizer.model into one directory per process; a model that loads encodes and decodes a
// fixed mixed text.
//
// libsentencepiece is Debian's, not instrumented: coverage guides the fuzzer through eft's code only,
// and a fault inside the library shows as a crash (SEGV) rather than a sanitizer report. What is
// checked: a refusal has a message; a model taken gives ids inside its vocabulary, offsets inside the
// text, tokens for every id it gives, its special tokens' ids as their pieces, and GGUF export's view
// of it (a score and a kind per piece, add_dummy_prefix read from the serialized proto).
#include "fuzz/fuzz_target.h"
#include "trainer/tokenizer/tokenizer.h"

namespace {

// Latin, Cyrillic, CJK, digits, an emoji (byte fallback), control pieces' texts and stray bytes.
constexpr const char kText[] =
    "<s>[INST] The quick brown fox, 12345 tokens? [/INST] Привет, как дела? 数据并行训练 🙂</s>\t\n  <unk><pad>x";

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > 64 * 1024) return 0;
  static eft::fuzz::TempDir model_dir("sentencepiece");
  const std::string& dir = model_dir.Write("tokenizer.model", std::string_view(reinterpret_cast<const char*>(data), size));

  auto loaded = eft::trainer::LoadTokenizer(dir);
  if (!loaded.ok()) {
    FUZZ_CHECK(!loaded.status().message().empty(), "a refusal without a message");
    return 0;
  }
  const eft::trainer::Tokenizer& t = **loaded;
  FUZZ_CHECK(t.vocab_size() > 0, "a model taken with an empty vocabulary");
  const std::string_view text(kText);
  for (bool add_special : {false, true}) {
    const auto e = t.Encode(text, add_special);
    FUZZ_CHECK(e.ids.size() == e.offsets.size(), "ids and offsets differ in number");
    for (size_t i = 0; i < e.ids.size(); ++i) {
      FUZZ_CHECK(e.ids[i] >= 0 && e.ids[i] < t.vocab_size(),
                 "id " + std::to_string(e.ids[i]) + " outside the vocabulary of " + std::to_string(t.vocab_size()));
      FUZZ_CHECK(e.offsets[i].first <= e.offsets[i].second && e.offsets[i].second <= text.size(),
                 "offsets [" + std::to_string(e.offsets[i].first) + ", " + std::to_string(e.offsets[i].second) +
                     ") outside the text");
      (void)t.IdToToken(e.ids[i]);
    }
    (void)t.Decode(e.ids, /*skip_special_tokens=*/true);
    (void)t.Decode(e.ids, /*skip_special_tokens=*/false);
  }
  // What GGUF export reads of it (trainer/export/gguf_tokenizer.h): one score and kind per piece.
  auto vocab = eft::trainer::ReadSentencePieceVocab(dir + "/tokenizer.model");
  FUZZ_CHECK(vocab.ok(), "a model LoadTokenizer took that ReadSentencePieceVocab refused");
  FUZZ_CHECK(vocab->pieces.size() == vocab->scores.size() && vocab->pieces.size() == vocab->kinds.size(),
             "pieces, scores and kinds differ in number");
  for (int32_t kind : vocab->kinds) FUZZ_CHECK(kind >= 1 && kind <= 6, "a piece kind llama.cpp does not have");
  // Ids the model never gives (out of range, negative) must decode to something, not fault.
  (void)t.Decode({-1, 0, t.vocab_size() - 1, t.vocab_size(), 1 << 30}, false);
  for (const auto& id : {t.bos_id(), t.eos_id()}) {
    if (!id) continue;
    FUZZ_CHECK(*id >= 0 && *id < t.vocab_size(), "a special token outside the vocabulary");
    const std::string piece = t.IdToToken(*id);
    if (!piece.empty()) {
      const auto back = t.TokenToId(piece);
      FUZZ_CHECK(back.has_value(), "special token '" + piece + "' has no id");
    }
  }
  return 0;
}
