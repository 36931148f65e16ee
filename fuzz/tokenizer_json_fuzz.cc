// tokenizer.json (trainer/tokenizer/tokenizer.h): the BPE model, its normalizers, pre-tokenizers
// (PCRE2 regexes included), added tokens, decoder and post-processor. A tokenizer that loads must
// encode any text (the fixed ones below and the input's own first bytes) into ids inside its
// vocabulary with offsets inside the text, and decode them again.
#include <vector>

#include "fuzz/fuzz_target.h"
#include "trainer/tokenizer/tokenizer.h"

namespace {

void Exercise(const eft::trainer::Tokenizer& t, std::string_view text) {
  for (bool special : {false, true}) {
    const auto enc = t.Encode(text, special);
    FUZZ_CHECK(enc.ids.size() == enc.offsets.size(), "ids and offsets differ in number");
    for (size_t i = 0; i < enc.ids.size(); ++i) {
      FUZZ_CHECK(enc.ids[i] >= 0 && enc.ids[i] < t.vocab_size(), "an id outside the vocabulary: " + std::to_string(enc.ids[i]));
      FUZZ_CHECK(enc.offsets[i].first <= enc.offsets[i].second && enc.offsets[i].second <= text.size(),
                 "an offset outside the text");
    }
    t.Decode(enc.ids, /*skip_special_tokens=*/false);
    t.Decode(enc.ids, /*skip_special_tokens=*/true);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto t = eft::trainer::TokenizerFromJson(text);
  if (!t.ok()) {
    FUZZ_CHECK(!t.status().message().empty(), "a refusal without a message");
    return 0;
  }
  static const char* const kTexts[] = {
      "Hello, world! It's 2024: 3.14 apples.",
      "  leading spaces\tand\ttabs\r\nnew lines\n\n",
      "<|im_start|>user\nhi<|im_end|><s></s>[INST]",
      "caf\xC3\xA9 na\xC3\xAFve \xE4\xB8\xAD\xE6\x96\x87 \xF0\x9F\x98\x80 \xE2\x96\x81x",
      "\xFF\xFE invalid \xC3 utf-8 \xED\xA0\x80",
      "",
  };
  for (const char* s : kTexts) Exercise(**t, s);
  Exercise(**t, text.substr(0, 64));
  std::vector<int32_t> ids;
  for (int32_t id = -1; id <= (*t)->vocab_size() && id < 300; ++id) {
    const std::string token = (*t)->IdToToken(id);
    if (!token.empty()) (*t)->TokenToId(token);
    if (id >= 0 && id < (*t)->vocab_size()) ids.push_back(id);
  }
  (*t)->Decode(ids, false);
  (*t)->Decode(ids, true);
  return 0;
}
