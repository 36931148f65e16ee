// tokenizer.json's "pre_tokenizer": how a piece of normalized text is cut into words before BPE.
// Supported: Split (regex or literal, every behavior, invert), ByteLevel (the GPT-2 regex with
// use_regex; add_prefix_space), Digits, Metaspace, and Sequence of them. Regexes run on PCRE2
// with UTF + UCP and the JIT, which match what Hugging Face's Oniguruma matches for the patterns
// models ship (\p{L}, \p{N}, \s, look-ahead, case-insensitive contractions).
//
// In a Sequence, rewriting steps (ByteLevel's prefix space, Metaspace) must come first and
// ByteLevel last: Hugging Face would prefix every word, or run later steps on the byte-level
// alphabet. No model we know of does either; such a tokenizer is refused rather than tokenized
// differently.
#pragma once

#include <memory>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "trainer/tokenizer/normalized_text.h"

namespace eft::trainer::tok {

using ByteRange = std::pair<size_t, size_t>;  // [begin, end)

class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  // Text changes made before splitting. `first_section`: the text starts the input (no added
  // token before it), which Metaspace's prepend_scheme "first" depends on.
  virtual void Rewrite(NormalizedText* text, bool first_section) const {
    (void)text;
    (void)first_section;
  }
  // Cuts each of `words` (ranges of `text`, in order) further; empty words are dropped.
  virtual void Split(std::string_view text, std::vector<ByteRange>* words) const = 0;
  // True when the tokens are the byte-level alphabet (ByteLevel is part of the pipeline).
  virtual bool byte_level() const { return false; }
  virtual bool rewrites() const { return false; }
};

// Null JSON: nullptr (the whole piece is one word).
Result<std::unique_ptr<PreTokenizer>> MakePreTokenizer(const nlohmann::json& spec);

// A compiled PCRE2 pattern (UTF, UCP, JIT): every non-overlapping match, left to right.
class Regex {
 public:
  static Result<std::unique_ptr<Regex>> Compile(std::string_view pattern);
  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;
  // Appends the matches within text[b, e) (offsets into text).
  void FindAll(std::string_view text, size_t b, size_t e, std::vector<ByteRange>* out) const;

 private:
  Regex() = default;
  void* code_ = nullptr;  // pcre2_code_8
  uint32_t max_lookbehind_ = 0;  // characters a match may read before its start (PCRE2_INFO_MAXLOOKBEHIND)
};

}  // namespace eft::trainer::tok
