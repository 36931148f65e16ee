// A piece of input text as the tokenizer's normalizer and pre-tokenizer rewrite it, remembering
// for every byte the [begin, end) bytes of the input it came from, so each token can say which
// input bytes it covers (what assistant-only labels are computed from). Untouched text costs no
// alignment table at all.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace eft::trainer::tok {

class NormalizedText {
 public:
  explicit NormalizedText(std::string_view original) : text_(original) {}

  const std::string& text() const { return text_; }

  // Input bytes covered by normalized bytes [b, e); an empty range maps to an empty range.
  std::pair<size_t, size_t> ToOriginal(size_t b, size_t e) const;

  // Rewrites the text: `emit` is called with a Builder and appends the new text from ranges of
  // the current one (Keep) and from new bytes standing for a range of it (Emit).
  class Builder {
   public:
    void Keep(size_t b, size_t e);
    void Emit(std::string_view bytes, size_t from_b, size_t from_e);

   private:
    friend class NormalizedText;
    explicit Builder(const NormalizedText& source) : source_(source) {}
    const NormalizedText& source_;
    std::string text_;
    std::vector<uint32_t> begin_, end_;
  };
  template <typename Fn>
  void Rewrite(Fn&& emit) {
    Builder builder(*this);
    emit(builder);
    Adopt(std::move(builder));
  }

 private:
  void Adopt(Builder&& builder);
  size_t OriginalBegin(size_t i) const { return identity_ ? i : begin_[i]; }
  size_t OriginalEnd(size_t i) const { return identity_ ? i + 1 : end_[i]; }

  std::string text_;
  bool identity_ = true;
  size_t original_size_ = text_.size();
  std::vector<uint32_t> begin_, end_;  // per byte of text_, when !identity_
};

}  // namespace eft::trainer::tok
