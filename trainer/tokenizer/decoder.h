// tokenizer.json's "decoder": tokens back to text. Supported: ByteLevel, Metaspace, Replace
// (literal), ByteFallback, Fuse, Strip and Sequence, with Hugging Face's semantics (each step
// maps the list of token strings to a new list; the result is their concatenation). Null: the
// tokens joined with spaces, as Hugging Face does without a decoder.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"

namespace eft::trainer::tok {

class Decoder {
 public:
  virtual ~Decoder() = default;
  virtual void DecodeChain(std::vector<std::string>* tokens) const = 0;
};

Result<std::unique_ptr<Decoder>> MakeDecoder(const nlohmann::json& spec);

// The decoded text of `tokens` (tokenizer.json spellings).
std::string DecodeTokens(const Decoder* decoder, std::vector<std::string> tokens);

}  // namespace eft::trainer::tok
