#include "trainer/tokenizer/normalized_text.h"

#include <algorithm>

namespace eft::trainer::tok {

std::pair<size_t, size_t> NormalizedText::ToOriginal(size_t b, size_t e) const {
  if (identity_) return {b, e};
  if (b >= e || b >= text_.size()) {
    size_t at = b < text_.size() ? begin_[b] : original_size_;
    return {at, at};
  }
  e = std::min(e, text_.size());
  size_t ob = begin_[b], oe = end_[e - 1];
  for (size_t i = b; i < e; ++i) {  // rewrites may reorder (canonical ordering of marks)
    ob = std::min<size_t>(ob, begin_[i]);
    oe = std::max<size_t>(oe, end_[i]);
  }
  return {ob, oe};
}

void NormalizedText::Builder::Keep(size_t b, size_t e) {
  text_.append(source_.text_, b, e - b);
  for (size_t i = b; i < e; ++i) {
    begin_.push_back(static_cast<uint32_t>(source_.OriginalBegin(i)));
    end_.push_back(static_cast<uint32_t>(source_.OriginalEnd(i)));
  }
}

void NormalizedText::Builder::Emit(std::string_view bytes, size_t from_b, size_t from_e) {
  auto [ob, oe] = source_.ToOriginal(from_b, from_e);
  text_.append(bytes);
  begin_.insert(begin_.end(), bytes.size(), static_cast<uint32_t>(ob));
  end_.insert(end_.end(), bytes.size(), static_cast<uint32_t>(oe));
}

void NormalizedText::Adopt(Builder&& builder) {
  text_ = std::move(builder.text_);
  begin_ = std::move(builder.begin_);
  end_ = std::move(builder.end_);
  identity_ = false;
}

}  // namespace eft::trainer::tok
