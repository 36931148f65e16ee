#include "trainer/tokenizer/normalizer.h"

#include <cstdlib>
#include <string>
#include <vector>

#include <utf8proc.h>

#include "common/utf8.h"

namespace eft::trainer::tok {
namespace {

using nlohmann::json;

bool IsAscii(std::string_view s) {
  for (unsigned char c : s)
    if (c >= 0x80) return false;
  return true;
}

std::string Utf8procMap(std::string_view s, int options) {
  utf8proc_uint8_t* out = nullptr;
  utf8proc_ssize_t n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(s.data()),
                                    static_cast<utf8proc_ssize_t>(s.size()), &out,
                                    static_cast<utf8proc_option_t>(options));
  if (n < 0) return std::string(s);  // only on invalid UTF-8, which callers never pass
  std::string result(reinterpret_cast<char*>(out), static_cast<size_t>(n));
  std::free(out);
  return result;
}

class UnicodeForm : public Normalizer {
 public:
  explicit UnicodeForm(int options) : options_(options | UTF8PROC_STABLE) {}
  void Apply(NormalizedText* text) const override {
    const std::string& s = text->text();
    if (IsAscii(s)) return;  // every form leaves ASCII alone
    std::string whole = Utf8procMap(s, options_);
    if (whole == s) return;
    // Normalize starter-led chunks one by one so each output byte knows its input chunk. When
    // the chunks do not reproduce the whole (a composition across starters), align coarsely.
    std::vector<size_t> starts;
    for (size_t i = 0; i < s.size();) {
      size_t len = 0;
      char32_t cp = DecodeUtf8(s, i, &len);
      if (i == 0 || utf8proc_get_property(static_cast<utf8proc_int32_t>(cp))->combining_class == 0)
        starts.push_back(i);
      i += len;
    }
    starts.push_back(s.size());
    std::vector<std::string> chunks;
    std::string joined;
    for (size_t k = 0; k + 1 < starts.size(); ++k) {
      std::string_view chunk(s.data() + starts[k], starts[k + 1] - starts[k]);
      chunks.push_back(IsAscii(chunk) ? std::string(chunk) : Utf8procMap(chunk, options_));
      joined += chunks.back();
    }
    text->Rewrite([&](NormalizedText::Builder& out) {
      if (joined != whole) {
        out.Emit(whole, 0, s.size());
        return;
      }
      for (size_t k = 0; k + 1 < starts.size(); ++k) {
        size_t b = starts[k], e = starts[k + 1];
        if (chunks[k].size() == e - b && s.compare(b, e - b, chunks[k]) == 0) {
          out.Keep(b, e);
        } else {
          out.Emit(chunks[k], b, e);
        }
      }
    });
  }

 private:
  int options_;
};

class Lowercase : public Normalizer {
 public:
  void Apply(NormalizedText* text) const override {
    const std::string& s = text->text();
    bool changes = false;
    for (size_t i = 0; i < s.size() && !changes;) {
      size_t len = 0;
      char32_t cp = DecodeUtf8(s, i, &len);
      changes = cp == 0x130 || static_cast<char32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(cp))) != cp;
      i += len;
    }
    if (!changes) return;
    text->Rewrite([&](NormalizedText::Builder& out) {
      for (size_t i = 0; i < s.size();) {
        size_t len = 0;
        char32_t cp = DecodeUtf8(s, i, &len);
        std::string lower;
        if (cp == 0x130) {
          lower = "i\xCC\x87";  // the one unconditional multi-character lowercase mapping
        } else {
          AppendUtf8(static_cast<char32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(cp))), &lower);
        }
        if (lower.size() == len && s.compare(i, len, lower) == 0) {
          out.Keep(i, i + len);
        } else {
          out.Emit(lower, i, i + len);
        }
        i += len;
      }
    });
  }
};

class Strip : public Normalizer {
 public:
  Strip(bool left, bool right) : left_(left), right_(right) {}
  void Apply(NormalizedText* text) const override {
    const std::string& s = text->text();
    size_t b = 0, e = s.size();
    if (left_) {
      while (b < e) {
        size_t len = 0;
        if (!IsUnicodeWhitespace(DecodeUtf8(s, b, &len))) break;
        b += len;
      }
    }
    if (right_) {
      while (e > b) {
        size_t start = e - 1;
        while (start > b && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80) --start;
        size_t len = 0;
        if (!IsUnicodeWhitespace(DecodeUtf8(s, start, &len))) break;
        e = start;
      }
    }
    if (b == 0 && e == s.size()) return;
    text->Rewrite([&](NormalizedText::Builder& out) { out.Keep(b, e); });
  }

 private:
  bool left_, right_;
};

class Prepend : public Normalizer {
 public:
  explicit Prepend(std::string prefix) : prefix_(std::move(prefix)) {}
  void Apply(NormalizedText* text) const override {
    const std::string& s = text->text();
    if (s.empty()) return;
    size_t first = Utf8SequenceLength(s, 0);
    if (first == 0) first = 1;
    text->Rewrite([&](NormalizedText::Builder& out) {
      out.Emit(prefix_, 0, first);
      out.Keep(0, s.size());
    });
  }

 private:
  std::string prefix_;
};

class Replace : public Normalizer {
 public:
  Replace(std::string pattern, std::string content) : pattern_(std::move(pattern)), content_(std::move(content)) {}
  void Apply(NormalizedText* text) const override { ReplaceAll(text, pattern_, content_); }

 private:
  std::string pattern_, content_;
};

class SequenceOf : public Normalizer {
 public:
  explicit SequenceOf(std::vector<std::unique_ptr<Normalizer>> steps) : steps_(std::move(steps)) {}
  void Apply(NormalizedText* text) const override {
    for (const auto& step : steps_) step->Apply(text);
  }

 private:
  std::vector<std::unique_ptr<Normalizer>> steps_;
};

Status Unsupported(const std::string& what) {
  return Status::InvalidArgument("tokenizer.json: unsupported normalizer " + what);
}

}  // namespace

void ReplaceAll(NormalizedText* text, std::string_view pattern, std::string_view content) {
  const std::string& s = text->text();
  if (pattern.empty() || s.find(pattern) == std::string::npos) return;
  text->Rewrite([&](NormalizedText::Builder& out) {
    size_t at = 0;
    for (size_t hit; (hit = s.find(pattern, at)) != std::string::npos; at = hit + pattern.size()) {
      out.Keep(at, hit);
      out.Emit(content, hit, hit + pattern.size());
    }
    out.Keep(at, s.size());
  });
}

Result<std::unique_ptr<Normalizer>> MakeNormalizer(const json& spec) {
  if (spec.is_null()) return std::unique_ptr<Normalizer>();
  if (!spec.is_object() || !spec.contains("type") || !spec["type"].is_string())
    return Status::InvalidArgument("tokenizer.json: normalizer without a type");
  const std::string type = spec["type"];
  if (type == "NFC") return std::unique_ptr<Normalizer>(new UnicodeForm(UTF8PROC_COMPOSE));
  if (type == "NFD") return std::unique_ptr<Normalizer>(new UnicodeForm(UTF8PROC_DECOMPOSE));
  if (type == "NFKC") return std::unique_ptr<Normalizer>(new UnicodeForm(UTF8PROC_COMPOSE | UTF8PROC_COMPAT));
  if (type == "NFKD") return std::unique_ptr<Normalizer>(new UnicodeForm(UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT));
  if (type == "Lowercase") return std::unique_ptr<Normalizer>(new Lowercase());
  if (type == "Strip")
    return std::unique_ptr<Normalizer>(new Strip(spec.value("strip_left", true), spec.value("strip_right", true)));
  if (type == "Prepend") {
    if (!spec.contains("prepend") || !spec["prepend"].is_string()) return Unsupported("Prepend without a string");
    return std::unique_ptr<Normalizer>(new Prepend(spec["prepend"].get<std::string>()));
  }
  if (type == "Replace") {
    const json& pattern = spec.value("pattern", json());
    if (!pattern.is_object() || !pattern.contains("String") || !pattern["String"].is_string())
      return Unsupported("Replace with a regex pattern (only literal String patterns are supported)");
    return std::unique_ptr<Normalizer>(
        new Replace(pattern["String"].get<std::string>(), spec.value("content", std::string())));
  }
  if (type == "Sequence") {
    std::vector<std::unique_ptr<Normalizer>> steps;
    for (const json& step : spec.value("normalizers", json::array())) {
      EFT_ASSIGN_OR_RETURN(auto made, MakeNormalizer(step));
      if (made) steps.push_back(std::move(made));
    }
    return std::unique_ptr<Normalizer>(new SequenceOf(std::move(steps)));
  }
  return Unsupported(type);
}

}  // namespace eft::trainer::tok
