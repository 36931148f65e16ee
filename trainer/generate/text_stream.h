// TextStream: turns generated token ids into text as they arrive, for printing while generating.
//
// A token need not end on a character boundary (byte-level BPE splits an emoji over several
// tokens; byte-fallback tokens are single bytes), and some decoders change a token's text by its
// neighbours (SentencePiece drops the first token's leading space). So each new id is decoded
// together with the few ids before it, and text is released only once the decoding of the window
// grows and does not end in U+FFFD (an incomplete character). The concatenation of everything
// Push and Finish return equals Decode(all ids) for the decoders Hugging Face ships (byte-level,
// byte-fallback, metaspace), which is what tests check.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "trainer/tokenizer/tokenizer.h"

namespace eft::trainer {

class TextStream {
 public:
  // `tokenizer` must outlive this object. Special tokens are left out when skip_special_tokens.
  TextStream(const Tokenizer& tokenizer, bool skip_special_tokens);

  // The text that `id` completes (often empty: a partial character, or a special token skipped).
  std::string Push(int32_t id);
  // Whatever is still held back (an incomplete character at the very end, as U+FFFD).
  std::string Finish();

 private:
  const Tokenizer& tokenizer_;
  bool skip_special_;
  std::vector<int32_t> ids_;
  size_t prefix_ = 0;  // ids_[prefix_, read_) is the context already printed
  size_t read_ = 0;    // ids_[read_, end) is not printed yet
};

}  // namespace eft::trainer
