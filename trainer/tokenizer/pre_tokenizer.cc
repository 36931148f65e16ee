#include "trainer/tokenizer/pre_tokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <utf8proc.h>

#include <algorithm>
#include <cstdio>
#include <string>

#include "trainer/tokenizer/normalizer.h"
#include "common/utf8.h"

namespace eft::trainer::tok {
namespace {

using nlohmann::json;

// GPT-2's pattern, which ByteLevel applies when use_regex is true.
constexpr const char* kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

enum class Behavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

Result<Behavior> ParseBehavior(const std::string& name) {
  if (name == "Removed") return Behavior::kRemoved;
  if (name == "Isolated") return Behavior::kIsolated;
  if (name == "MergedWithPrevious") return Behavior::kMergedWithPrevious;
  if (name == "MergedWithNext") return Behavior::kMergedWithNext;
  if (name == "Contiguous") return Behavior::kContiguous;
  return Status::InvalidArgument("tokenizer.json: unsupported Split behavior " + name);
}

struct Segment {
  ByteRange range;
  bool is_match;
};

// Hugging Face's split behaviors over a word's alternating match / non-match segments.
void ApplyBehavior(const std::vector<Segment>& segments, Behavior behavior, std::vector<ByteRange>* out) {
  std::vector<ByteRange> acc;
  switch (behavior) {
    case Behavior::kRemoved:
      for (const Segment& s : segments)
        if (!s.is_match) acc.push_back(s.range);
      break;
    case Behavior::kIsolated:
      for (const Segment& s : segments) acc.push_back(s.range);
      break;
    case Behavior::kMergedWithPrevious: {
      bool previous_match = false;
      for (const Segment& s : segments) {
        if (s.is_match && !previous_match && !acc.empty()) {
          acc.back().second = s.range.second;
        } else {
          acc.push_back(s.range);
        }
        previous_match = s.is_match;
      }
      break;
    }
    case Behavior::kMergedWithNext: {
      bool next_match = false;
      for (auto it = segments.rbegin(); it != segments.rend(); ++it) {
        if (it->is_match && !next_match && !acc.empty()) {
          acc.back().first = it->range.first;
        } else {
          acc.push_back(it->range);
        }
        next_match = it->is_match;
      }
      std::reverse(acc.begin(), acc.end());
      break;
    }
    case Behavior::kContiguous: {
      bool previous_match = false;
      for (const Segment& s : segments) {
        if (s.is_match == previous_match && !acc.empty()) {
          acc.back().second = s.range.second;
        } else {
          acc.push_back(s.range);
        }
        previous_match = s.is_match;
      }
      break;
    }
  }
  for (const ByteRange& r : acc)
    if (r.second > r.first) out->push_back(r);
}

// Matches (as found by `find`) and the text between them, covering [b, e).
template <typename Find>
std::vector<Segment> Segments(size_t b, size_t e, bool invert, Find&& find) {
  std::vector<ByteRange> matches;
  find(b, e, &matches);
  std::vector<Segment> segments;
  size_t at = b;
  for (const ByteRange& m : matches) {
    if (m.first > at) segments.push_back({{at, m.first}, invert});
    segments.push_back({m, !invert});
    at = m.second;
  }
  if (at < e) segments.push_back({{at, e}, invert});
  return segments;
}

class SplitPattern : public PreTokenizer {
 public:
  SplitPattern(std::unique_ptr<Regex> regex, std::string literal, Behavior behavior, bool invert)
      : regex_(std::move(regex)), literal_(std::move(literal)), behavior_(behavior), invert_(invert) {}

  void Split(std::string_view text, std::vector<ByteRange>* words) const override {
    std::vector<ByteRange> out;
    for (const ByteRange& w : *words) {
      auto find = [&](size_t b, size_t e, std::vector<ByteRange>* m) {
        if (regex_) {
          regex_->FindAll(text, b, e, m);
          return;
        }
        if (literal_.empty()) return;
        for (size_t at = b; at + literal_.size() <= e;) {
          size_t hit = text.substr(0, e).find(literal_, at);
          if (hit == std::string_view::npos) break;
          m->push_back({hit, hit + literal_.size()});
          at = hit + literal_.size();
        }
      };
      ApplyBehavior(Segments(w.first, w.second, invert_, find), behavior_, &out);
    }
    words->swap(out);
  }

 private:
  std::unique_ptr<Regex> regex_;
  std::string literal_;
  Behavior behavior_;
  bool invert_;
};

class ByteLevelPre : public PreTokenizer {
 public:
  ByteLevelPre(bool add_prefix_space, std::unique_ptr<Regex> regex)
      : add_prefix_space_(add_prefix_space), regex_(std::move(regex)) {}
  void Rewrite(NormalizedText* text, bool) const override {
    const std::string& s = text->text();
    if (!add_prefix_space_ || s.empty() || s[0] == ' ') return;
    size_t first = Utf8SequenceLength(s, 0);
    text->Rewrite([&](NormalizedText::Builder& out) {
      out.Emit(" ", 0, first ? first : 1);
      out.Keep(0, s.size());
    });
  }
  void Split(std::string_view text, std::vector<ByteRange>* words) const override {
    if (!regex_) return;
    std::vector<ByteRange> out;
    for (const ByteRange& w : *words) {
      auto find = [&](size_t b, size_t e, std::vector<ByteRange>* m) { regex_->FindAll(text, b, e, m); };
      ApplyBehavior(Segments(w.first, w.second, false, find), Behavior::kIsolated, &out);
    }
    words->swap(out);
  }
  bool byte_level() const override { return true; }
  bool rewrites() const override { return add_prefix_space_; }

 private:
  bool add_prefix_space_;
  std::unique_ptr<Regex> regex_;
};

bool IsNumeric(char32_t cp) {
  auto category = utf8proc_category(static_cast<utf8proc_int32_t>(cp));
  return category == UTF8PROC_CATEGORY_ND || category == UTF8PROC_CATEGORY_NL || category == UTF8PROC_CATEGORY_NO;
}

class Digits : public PreTokenizer {
 public:
  explicit Digits(bool individual) : individual_(individual) {}
  void Split(std::string_view text, std::vector<ByteRange>* words) const override {
    std::vector<ByteRange> out;
    for (const ByteRange& w : *words) {
      auto find = [&](size_t b, size_t e, std::vector<ByteRange>* m) {
        for (size_t i = b; i < e;) {
          size_t len = 0;
          char32_t cp = DecodeUtf8(text, i, &len);
          if (IsNumeric(cp)) m->push_back({i, i + len});
          i += len;
        }
      };
      ApplyBehavior(Segments(w.first, w.second, false, find),
                    individual_ ? Behavior::kIsolated : Behavior::kContiguous, &out);
    }
    words->swap(out);
  }

 private:
  bool individual_;
};

class Metaspace : public PreTokenizer {
 public:
  Metaspace(std::string replacement, std::string prepend_scheme, bool split)
      : replacement_(std::move(replacement)), scheme_(std::move(prepend_scheme)), split_(split) {}
  void Rewrite(NormalizedText* text, bool first_section) const override {
    ReplaceAll(text, " ", replacement_);
    const std::string& s = text->text();
    bool prepend = scheme_ == "always" || (scheme_ == "first" && first_section);
    if (!prepend || s.empty() || s.compare(0, replacement_.size(), replacement_) == 0) return;
    size_t first = Utf8SequenceLength(s, 0);
    text->Rewrite([&](NormalizedText::Builder& out) {
      out.Emit(replacement_, 0, first ? first : 1);
      out.Keep(0, s.size());
    });
  }
  void Split(std::string_view text, std::vector<ByteRange>* words) const override {
    if (!split_) return;
    std::vector<ByteRange> out;
    for (const ByteRange& w : *words) {
      auto find = [&](size_t b, size_t e, std::vector<ByteRange>* m) {
        for (size_t at = b;;) {
          size_t hit = text.substr(0, e).find(replacement_, at);
          if (hit == std::string_view::npos) break;
          m->push_back({hit, hit + replacement_.size()});
          at = hit + replacement_.size();
        }
      };
      ApplyBehavior(Segments(w.first, w.second, false, find), Behavior::kMergedWithNext, &out);
    }
    words->swap(out);
  }
  bool rewrites() const override { return true; }

 private:
  std::string replacement_, scheme_;
  bool split_;
};

class SequenceOf : public PreTokenizer {
 public:
  explicit SequenceOf(std::vector<std::unique_ptr<PreTokenizer>> steps) : steps_(std::move(steps)) {}
  void Rewrite(NormalizedText* text, bool first_section) const override {
    for (const auto& s : steps_) s->Rewrite(text, first_section);
  }
  void Split(std::string_view text, std::vector<ByteRange>* words) const override {
    for (const auto& s : steps_) s->Split(text, words);
  }
  bool byte_level() const override {
    for (const auto& s : steps_)
      if (s->byte_level()) return true;
    return false;
  }
  bool rewrites() const override {
    for (const auto& s : steps_)
      if (s->rewrites()) return true;
    return false;
  }

 private:
  std::vector<std::unique_ptr<PreTokenizer>> steps_;
};

Status Unsupported(const std::string& what) {
  return Status::InvalidArgument("tokenizer.json: unsupported pre_tokenizer " + what);
}

}  // namespace

Result<std::unique_ptr<Regex>> Regex::Compile(std::string_view pattern) {
  int error = 0;
  PCRE2_SIZE offset = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                   PCRE2_UTF | PCRE2_UCP, &error, &offset, nullptr);
  if (!code) {
    PCRE2_UCHAR message[256];
    pcre2_get_error_message(error, message, sizeof(message));
    return Status::InvalidArgument("tokenizer.json: regex " + std::string(pattern) + " does not compile at offset " +
                                   std::to_string(offset) + ": " + reinterpret_cast<char*>(message));
  }
  pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);  // falls back to the interpreter if JIT is unavailable
  std::unique_ptr<Regex> regex(new Regex());
  regex->code_ = code;
  pcre2_pattern_info(code, PCRE2_INFO_MAXLOOKBEHIND, &regex->max_lookbehind_);
  return regex;
}

Regex::~Regex() { pcre2_code_free(static_cast<pcre2_code*>(code_)); }

namespace {

// The matches of `code` within text[b, e), shifted by `shift` into the caller's offsets.
// `text` must be valid UTF-8 wherever the matching may read it (PCRE2_NO_UTF_CHECK).
void MatchAll(pcre2_code* code, std::string_view text, size_t b, size_t e, size_t shift, uint32_t options,
              std::vector<ByteRange>* out) {
  // Per-thread match data and a JIT stack large enough for long whitespace runs (the default
  // 32 KiB overflows on look-ahead over thousands of spaces).
  struct PerThread {
    pcre2_match_data* data = pcre2_match_data_create(16, nullptr);
    pcre2_jit_stack* stack = pcre2_jit_stack_create(64 * 1024, 64 * 1024 * 1024, nullptr);
    pcre2_match_context* context = pcre2_match_context_create(nullptr);
    PerThread() { pcre2_jit_stack_assign(context, nullptr, stack); }
    ~PerThread() {
      pcre2_match_context_free(context);
      pcre2_jit_stack_free(stack);
      pcre2_match_data_free(data);
    }
  };
  thread_local PerThread t;
  // The subject ends at e (look-ahead must not see past the piece) and starts at the text's
  // start, so offsets need no translation; matching starts at b.
  auto subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t at = b;
  while (at < e) {
    int rc = pcre2_match(code, subject, e, at, options | PCRE2_NO_UTF_CHECK, t.data, t.context);
    if (rc < 0 && rc != PCRE2_ERROR_NOMATCH) {
      // A JIT resource limit: the interpreter keeps its backtracking state on the heap.
      rc = pcre2_match(code, subject, e, at, options | PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT, t.data, nullptr);
    }
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      std::fprintf(stderr, "eft: tokenizer regex failed (PCRE2 error %d); the rest of the piece is one word\n", rc);
      break;
    }
    PCRE2_SIZE* ov = pcre2_get_ovector_pointer(t.data);
    size_t mb = ov[0], me = ov[1];
    if (me == mb) {  // an empty match: step over one character
      size_t len = Utf8SequenceLength(text, mb < e ? mb : at);
      at = mb + (len ? len : 1);
      continue;
    }
    out->push_back({mb + shift, me + shift});
    at = me;
  }
}

}  // namespace

void Regex::FindAll(std::string_view text, size_t b, size_t e, std::vector<ByteRange>* out) const {
  auto* code = static_cast<pcre2_code*>(code_);
  // PCRE2 is told not to check UTF-8 (it would check the whole text on every call), and reading an
  // invalid byte unchecked is undefined: one 0xFF byte crashed the JIT (found by
  // fuzz/tokenizer_json_fuzz.cc). What a match may read is the piece and, for look-behinds, up to
  // max_lookbehind_ characters before it. Where that holds invalid UTF-8, the match runs on a copy
  // with each invalid byte replaced by 0x1A (SUB, a control character: neither letter, digit nor
  // space): same length, so the offsets, and the tokens' bytes taken from `text`, are unchanged.
  size_t window = b - std::min(b, static_cast<size_t>(max_lookbehind_) * 4);
  while (window > 0 && (static_cast<unsigned char>(text[window]) & 0xC0) == 0x80) --window;  // a character's start
  const std::string_view region = text.substr(window, e - window);
  if (IsValidUtf8(region)) return MatchAll(code, text, b, e, 0, 0, out);
  std::string copy;
  copy.reserve(region.size());
  for (size_t i = 0; i < region.size();) {
    const size_t n = Utf8SequenceLength(region, i);
    if (n == 0) {
      copy += '\x1A';
      ++i;
    } else {
      copy.append(region, i, n);
      i += n;
    }
  }
  // The copy starts at `window`: not the text's start, for ^ and \A, unless it is.
  MatchAll(code, copy, b - window, e - window, window, window > 0 ? PCRE2_NOTBOL : 0, out);
}

Result<std::unique_ptr<PreTokenizer>> MakePreTokenizer(const json& spec) {
  if (spec.is_null()) return std::unique_ptr<PreTokenizer>();
  if (!spec.is_object() || !spec.contains("type") || !spec["type"].is_string())
    return Status::InvalidArgument("tokenizer.json: pre_tokenizer without a type");
  const std::string type = spec["type"];
  if (type == "Split") {
    const json& pattern = spec.value("pattern", json());
    EFT_ASSIGN_OR_RETURN(Behavior behavior, ParseBehavior(spec.value("behavior", std::string("Isolated"))));
    bool invert = spec.value("invert", false);
    if (pattern.is_object() && pattern.contains("Regex") && pattern["Regex"].is_string()) {
      EFT_ASSIGN_OR_RETURN(auto regex, Regex::Compile(pattern["Regex"].get<std::string>()));
      return std::unique_ptr<PreTokenizer>(new SplitPattern(std::move(regex), "", behavior, invert));
    }
    if (pattern.is_object() && pattern.contains("String") && pattern["String"].is_string())
      return std::unique_ptr<PreTokenizer>(
          new SplitPattern(nullptr, pattern["String"].get<std::string>(), behavior, invert));
    return Unsupported("Split without a Regex or String pattern");
  }
  if (type == "ByteLevel") {
    std::unique_ptr<Regex> regex;
    if (spec.value("use_regex", true)) {
      EFT_ASSIGN_OR_RETURN(regex, Regex::Compile(kGpt2Pattern));
    }
    return std::unique_ptr<PreTokenizer>(new ByteLevelPre(spec.value("add_prefix_space", true), std::move(regex)));
  }
  if (type == "Digits") return std::unique_ptr<PreTokenizer>(new Digits(spec.value("individual_digits", false)));
  if (type == "Metaspace") {
    std::string scheme = spec.value("prepend_scheme", std::string());
    if (scheme.empty()) scheme = spec.value("add_prefix_space", true) ? "always" : "never";
    if (scheme != "always" && scheme != "first" && scheme != "never")
      return Unsupported("Metaspace prepend_scheme " + scheme);
    return std::unique_ptr<PreTokenizer>(
        new Metaspace(spec.value("replacement", std::string("\xE2\x96\x81")), scheme, spec.value("split", true)));
  }
  if (type == "Sequence") {
    std::vector<std::unique_ptr<PreTokenizer>> steps;
    bool split_seen = false, byte_level_seen = false;
    for (const json& step : spec.value("pretokenizers", json::array())) {
      EFT_ASSIGN_OR_RETURN(auto made, MakePreTokenizer(step));
      if (!made) continue;
      const std::string step_type = step.value("type", std::string());
      if (made->rewrites() && split_seen)
        return Unsupported("Sequence with a text-rewriting step (" + step_type +
                           " with a prefix) after another step (Hugging Face would prefix every word)");
      if (byte_level_seen)
        return Unsupported("Sequence with a step (" + step_type +
                           ") after ByteLevel (it would see the byte-level alphabet, not the text)");
      split_seen = true;
      byte_level_seen = made->byte_level();
      steps.push_back(std::move(made));
    }
    return std::unique_ptr<PreTokenizer>(new SequenceOf(std::move(steps)));
  }
  return Unsupported(type);
}

}  // namespace eft::trainer::tok
