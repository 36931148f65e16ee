// The tokenizer part of a GGUF file (tokenizer.ggml.*, tokenizer.chat_template), read from a Hugging Face
// model directory's tokenizer.json, tokenizer_config.json, config.json and chat_template.jinja the way
// llama.cpp's convert_hf_to_gguf.py and gguf-py's SpecialVocab read them, so llama.cpp tokenizes as the
// directory's tokenizer does.
//
// Supported: byte-level BPE (tokenizer.ggml.model "gpt2"), the kind Llama 3, Qwen2/3, SmolLM and GPT-2
// ship. llama.cpp does not run the tokenizer.json's pre-tokenizer: it picks one of its own built-in
// ones by the name in tokenizer.ggml.pre. convert_hf_to_gguf.py chooses that name by hashing the ids
// of a test text; eft instead recognises the pre-tokenizer's structure (the Split regex and the
// ByteLevel/Digits steps), which names the same built-in for the tokenizers it knows and refuses any
// other instead of exporting a file that would tokenize differently:
//   Split(Llama 3 regex, \p{N}{1,3}) + ByteLevel             -> "llama-bpe"
//   Split(Qwen2 regex, \p{N}) + ByteLevel                   -> "qwen2"
//   Digits(individual) + ByteLevel(GPT-2 regex)              -> "smollm"
//   ByteLevel(GPT-2 regex) alone                             -> "gpt-2"
//
// SentencePiece (tokenizer.ggml.model "llama", pre "default"), as Llama 2 and Mistral v0.1 ship it:
// read from tokenizer.model through libsentencepiece as llama.cpp's converter reads it (each piece with
// its score and kind, tokenizer_config.json's added tokens over them, rows past the tokenizer as unused
// "[PAD<id>]"), chosen when the directory has a tokenizer.model and no byte-level tokenizer.json (Hugging
// Face's tokenizer.json of such a model is the same tokenizer without the scores llama.cpp needs).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"

namespace eft::trainer {

class GgufWriter;

// llama.cpp's token types (llama.h: enum llama_token_type).
enum class GgufTokenType : int32_t { kNormal = 1, kUnknown = 2, kControl = 3, kUserDefined = 4, kUnused = 5, kByte = 6 };

struct GgufTokenizer {
  std::string model = "gpt2";
  std::string pre;                   // tokenizer.ggml.pre
  std::vector<std::string> tokens;   // id order; ids the tokenizer lacks up to the model's rows: "[PAD<id>]"
  std::vector<int32_t> token_types;  // GgufTokenType per token
  std::vector<float> scores;         // SentencePiece only: each piece's score, which llama.cpp merges by
  std::vector<std::string> merges;   // byte-level BPE only: "left right", a space inside a part as U+0120 (as gguf-py)
  std::optional<bool> add_space_prefix;  // SentencePiece only: add_dummy_prefix
  std::optional<uint32_t> bos_id, eos_id, unknown_id, padding_id;
  bool add_bos = false, add_eos = false;
  std::string chat_template;         // "" when the directory has none

  void AddTo(GgufWriter& writer) const;
};

// `vocab_rows`: the model's embedding rows (config.json vocab_size), the length llama.cpp needs.
// Errors (InvalidArgument, naming the file and the reason): neither tokenizer.json nor tokenizer.model,
// a tokenizer.json that is not byte-level BPE (without a tokenizer.model beside it), an unrecognised
// pre-tokenizer, a tokenizer.model libsentencepiece cannot load, more tokens than `vocab_rows`.
Result<GgufTokenizer> ReadGgufTokenizer(const std::string& model_dir, int64_t vocab_rows);

}  // namespace eft::trainer
