#include "trainer/generate/text_stream.h"

namespace eft::trainer {
namespace {

constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD

bool EndsWithReplacement(const std::string& s) {
  return s.size() >= kReplacement.size() && s.compare(s.size() - kReplacement.size(), kReplacement.size(), kReplacement) == 0;
}

}  // namespace

TextStream::TextStream(const Tokenizer& tokenizer, bool skip_special_tokens)
    : tokenizer_(tokenizer), skip_special_(skip_special_tokens) {}

std::string TextStream::Push(int32_t id) {
  ids_.push_back(id);
  auto window = [&](size_t from, size_t to) {
    return tokenizer_.Decode(std::vector<int32_t>(ids_.begin() + static_cast<long>(from), ids_.begin() + static_cast<long>(to)),
                             skip_special_);
  };
  const std::string printed = window(prefix_, read_);
  const std::string now = window(prefix_, ids_.size());
  // Release only text that extends what was printed and ends on a whole character. The window
  // keeps one token of printed context so that decoders that treat the first token specially
  // (SentencePiece's leading space) decode the new tokens as they would mid-text.
  if (now.size() <= printed.size() || EndsWithReplacement(now)) return "";
  prefix_ = read_;
  read_ = ids_.size();
  return now.substr(printed.size());
}

std::string TextStream::Finish() {
  const std::string printed =
      tokenizer_.Decode(std::vector<int32_t>(ids_.begin() + static_cast<long>(prefix_), ids_.begin() + static_cast<long>(read_)), skip_special_);
  const std::string all =
      tokenizer_.Decode(std::vector<int32_t>(ids_.begin() + static_cast<long>(prefix_), ids_.end()), skip_special_);
  prefix_ = read_ = ids_.size();
  if (all.size() <= printed.size()) return "";
  return all.substr(printed.size());
}

}  // namespace eft::trainer
