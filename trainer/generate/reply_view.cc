#include "trainer/generate/reply_view.h"

#include <algorithm>
#include <cstring>
#include <string_view>

namespace eft::trainer {
namespace {

constexpr char kDim[] = "\x1b[2m";
constexpr char kReset[] = "\x1b[0m";

bool IsSpace(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }

size_t SkipSpace(const std::string& s) {
  size_t i = 0;
  while (i < s.size() && IsSpace(s[i])) ++i;
  return i;
}

// The length of the longest suffix of `s` that is a proper prefix of `tag`: text that may still
// become the tag once the next chunk arrives.
size_t PartialTag(std::string_view s, std::string_view tag) {
  for (size_t n = std::min(s.size(), tag.size() - 1); n > 0; --n) {
    if (s.substr(s.size() - n) == tag.substr(0, n)) return n;
  }
  return 0;
}

}  // namespace

std::string ReplyView::Thinking(const std::string& text) {
  if (think_shown_) return text;
  const size_t start = SkipSpace(text);
  if (start == text.size()) return "";
  think_shown_ = true;
  return std::string(dim_ ? kDim : "") + "thinking: " + text.substr(start);
}

std::string ReplyView::EndThinking() {
  if (!think_shown_) return "";
  return std::string(dim_ ? kReset : "") + "\n\n";
}

std::string ReplyView::Push(const std::string& text) {
  held_ += text;
  std::string out;
  for (;;) {
    switch (phase_) {
      case Phase::kStart: {
        const size_t start = SkipSpace(held_);
        const std::string_view rest = std::string_view(held_).substr(start);
        const std::string_view open = kOpen;
        if (rest.substr(0, open.size()) == open) {
          held_.erase(0, start + open.size());
          phase_ = Phase::kThinking;
          continue;
        }
        if (rest.size() < open.size() && open.substr(0, rest.size()) == rest) return out;  // maybe still "<think>"
        phase_ = Phase::kAnswer;
        continue;
      }
      case Phase::kThinking: {
        const size_t close = held_.find(kClose);
        if (close != std::string::npos) {
          std::string inside = held_.substr(0, close);
          while (!inside.empty() && IsSpace(inside.back())) inside.pop_back();
          out += Thinking(inside);
          out += EndThinking();  // after Thinking(), which decides whether anything was shown
          held_.erase(0, close + std::strlen(kClose));
          phase_ = Phase::kAnswerStart;
          continue;
        }
        // Trailing whitespace waits: it is dropped if the block ends next.
        size_t keep = held_.size() - PartialTag(held_, kClose);
        while (keep > 0 && IsSpace(held_[keep - 1])) --keep;
        if (keep > 0 && (think_shown_ || SkipSpace(held_) < keep)) {
          out += Thinking(held_.substr(0, keep));
          held_.erase(0, keep);
        }
        return out;
      }
      case Phase::kAnswerStart: {
        const size_t start = SkipSpace(held_);
        held_.erase(0, start);
        if (held_.empty()) return out;
        phase_ = Phase::kAnswer;
        continue;
      }
      case Phase::kAnswer:
        out += held_;
        held_.clear();
        return out;
    }
  }
}

std::string ReplyView::Finish() {
  std::string out;
  switch (phase_) {
    case Phase::kStart:
    case Phase::kAnswer: out = held_; break;
    case Phase::kThinking: {
      // The reply ended (max tokens) while still thinking: show what there is, and close the style.
      std::string inside = held_;
      while (!inside.empty() && IsSpace(inside.back())) inside.pop_back();
      out = Thinking(inside);
      if (think_shown_ && dim_) out += kReset;
      break;
    }
    case Phase::kAnswerStart: break;
  }
  held_.clear();
  return out;
}

}  // namespace eft::trainer
