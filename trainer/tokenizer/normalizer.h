// tokenizer.json's "normalizer": NFC, NFD, NFKC, NFKD, Lowercase, Strip, Prepend, Replace (a
// literal pattern) and Sequence of them, applied with byte alignment kept (NormalizedText).
// Anything else is refused with the name of what is unsupported, so a model whose tokenizer we
// cannot reproduce exactly fails at load time rather than training on different ids.
#pragma once

#include <memory>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "trainer/tokenizer/normalized_text.h"

namespace eft::trainer::tok {

class Normalizer {
 public:
  virtual ~Normalizer() = default;
  virtual void Apply(NormalizedText* text) const = 0;
};

// Null JSON: no normalizer (returns nullptr).
Result<std::unique_ptr<Normalizer>> MakeNormalizer(const nlohmann::json& spec);

// Shared with the pre-tokenizers that rewrite text (Metaspace): every occurrence of `pattern`
// replaced by `content`.
void ReplaceAll(NormalizedText* text, std::string_view pattern, std::string_view content);

}  // namespace eft::trainer::tok
