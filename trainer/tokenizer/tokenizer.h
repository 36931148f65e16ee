// A model's tokenizer, giving exactly the ids Hugging Face's own tokenizer gives.
//
// LoadTokenizer(dir) reads the model directory: tokenizer.json (byte-level BPE as Llama 3, Qwen2/3,
// GPT-2 and Mistral-Nemo ship it, or SentencePiece-style BPE with byte fallback), else
// tokenizer.model (SentencePiece, as Llama 2 and Mistral v0.1 ship it) through libsentencepiece;
// tokenizer_config.json names the BOS/EOS tokens. Anything unsupported is InvalidArgument naming
// it (eft-train exits 2), never a silently different tokenization.
//
// Encode never adds special tokens unless asked; special-token strings in the text ("<|im_end|>")
// are always recognised, as Hugging Face does by default. Encode/Decode are safe to call from
// several threads.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/status.h"

namespace eft::trainer {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  struct Encoding {
    std::vector<int32_t> ids;
    // For each id, the [begin, end) bytes of the input it stands for (empty for tokens the
    // post-processor adds).
    std::vector<std::pair<size_t, size_t>> offsets;
  };
  virtual Encoding Encode(std::string_view text, bool add_special_tokens) const = 0;
  std::vector<int32_t> EncodeIds(std::string_view text, bool add_special_tokens = false) const {
    return Encode(text, add_special_tokens).ids;
  }
  virtual std::string Decode(const std::vector<int32_t>& ids, bool skip_special_tokens) const = 0;

  virtual std::optional<int32_t> TokenToId(std::string_view token) const = 0;
  virtual std::string IdToToken(int32_t id) const = 0;
  // One past the largest id (added tokens included).
  virtual int32_t vocab_size() const = 0;
  // The special tokens' strings (added tokens marked special, BOS/EOS/UNK).
  virtual const std::vector<std::string>& special_tokens() const = 0;

  std::optional<int32_t> bos_id() const { return bos_id_; }
  std::optional<int32_t> eos_id() const { return eos_id_; }
  const std::string& kind() const { return kind_; }  // "tokenizer.json" or "sentencepiece"

 protected:
  std::optional<int32_t> bos_id_, eos_id_;
  std::string kind_;

  friend Result<std::unique_ptr<Tokenizer>> LoadTokenizer(const std::string& dir);
};

// tokenizer.json (preferred) or tokenizer.model in `dir`, with tokenizer_config.json if present.
Result<std::unique_ptr<Tokenizer>> LoadTokenizer(const std::string& dir);

// A tokenizer.json document (its text).
Result<std::unique_ptr<Tokenizer>> TokenizerFromJson(std::string_view json_text);

// A SentencePiece model file; `added` are extra tokens matched before SentencePiece runs (the
// special tokens of tokenizer_config.json), as Hugging Face's slow tokenizers do.
Result<std::unique_ptr<Tokenizer>> SentencePieceTokenizer(const std::string& model_file,
                                                          const std::vector<std::pair<std::string, int32_t>>& added);

// A tokenizer.model's pieces as GGUF's SentencePiece ("llama") tokenizer carries them
// (trainer/export/gguf_tokenizer.h): each piece's score and kind, numbered as llama.cpp's token
// types (1 normal, 2 unknown, 3 control, 5 unused, 6 byte), and whether SentencePiece puts a space
// before the text (normalizer_spec.add_dummy_prefix).
struct SentencePieceVocab {
  std::vector<std::string> pieces;
  std::vector<float> scores;
  std::vector<int32_t> kinds;
  int32_t bos_id = -1, eos_id = -1, unk_id = -1;  // -1: none
  bool add_dummy_prefix = true;
};
Result<SentencePieceVocab> ReadSentencePieceVocab(const std::string& model_file);

// The files a tokenizer loaded from `dir` depends on (for cache keys).
std::vector<std::string> TokenizerFiles(const std::string& dir);

}  // namespace eft::trainer
