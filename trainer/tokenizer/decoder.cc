#include "trainer/tokenizer/decoder.h"

#include "trainer/tokenizer/byte_level.h"
#include "common/json_int.h"
#include "common/utf8.h"

namespace eft::trainer::tok {
namespace {

using nlohmann::json;

class ByteLevelDecoder : public Decoder {
 public:
  void DecodeChain(std::vector<std::string>* tokens) const override {
    std::string bytes;
    for (const std::string& t : *tokens) {
      if (auto raw = ByteLevelToBytes(t)) {
        bytes += *raw;
      } else {
        bytes += t;  // a token outside the alphabet stands for its own UTF-8
      }
    }
    tokens->assign(1, RepairUtf8(bytes));
  }
};

void ReplaceIn(std::string* s, const std::string& pattern, const std::string& content) {
  if (pattern.empty()) return;
  std::string out;
  size_t at = 0;
  for (size_t hit; (hit = s->find(pattern, at)) != std::string::npos; at = hit + pattern.size()) {
    out.append(*s, at, hit - at);
    out += content;
  }
  out.append(*s, at, std::string::npos);
  s->swap(out);
}

class ReplaceDecoder : public Decoder {
 public:
  ReplaceDecoder(std::string pattern, std::string content) : pattern_(std::move(pattern)), content_(std::move(content)) {}
  void DecodeChain(std::vector<std::string>* tokens) const override {
    for (std::string& t : *tokens) ReplaceIn(&t, pattern_, content_);
  }

 private:
  std::string pattern_, content_;
};

class MetaspaceDecoder : public Decoder {
 public:
  MetaspaceDecoder(std::string replacement, bool strip_first) : replacement_(std::move(replacement)), strip_first_(strip_first) {}
  void DecodeChain(std::vector<std::string>* tokens) const override {
    for (size_t i = 0; i < tokens->size(); ++i) {
      std::string& t = (*tokens)[i];
      ReplaceIn(&t, replacement_, " ");
      if (i == 0 && strip_first_ && !t.empty() && t[0] == ' ') t.erase(0, 1);
    }
  }

 private:
  std::string replacement_;
  bool strip_first_;
};

// "<0x41>"-style tokens: runs of them become their bytes; an invalid run becomes one U+FFFD per
// byte token.
class ByteFallbackDecoder : public Decoder {
 public:
  void DecodeChain(std::vector<std::string>* tokens) const override {
    std::vector<std::string> out;
    std::string bytes;
    size_t byte_tokens = 0;
    auto flush = [&] {
      if (byte_tokens == 0) return;
      if (IsValidUtf8(bytes)) {
        out.push_back(bytes);
      } else {
        for (size_t i = 0; i < byte_tokens; ++i) out.push_back("\xEF\xBF\xBD");
      }
      bytes.clear();
      byte_tokens = 0;
    };
    for (const std::string& t : *tokens) {
      int value = -1;
      if (t.size() == 6 && t.compare(0, 3, "<0x") == 0 && t[5] == '>') {
        auto hex = [](char c) {
          if (c >= '0' && c <= '9') return c - '0';
          if (c >= 'A' && c <= 'F') return c - 'A' + 10;
          if (c >= 'a' && c <= 'f') return c - 'a' + 10;
          return -1;
        };
        int hi = hex(t[3]), lo = hex(t[4]);
        if (hi >= 0 && lo >= 0) value = hi * 16 + lo;
      }
      if (value >= 0) {
        bytes.push_back(static_cast<char>(value));
        ++byte_tokens;
      } else {
        flush();
        out.push_back(t);
      }
    }
    flush();
    tokens->swap(out);
  }
};

class FuseDecoder : public Decoder {
 public:
  void DecodeChain(std::vector<std::string>* tokens) const override {
    std::string all;
    for (const std::string& t : *tokens) all += t;
    tokens->assign(1, all);
  }
};

class StripDecoder : public Decoder {
 public:
  StripDecoder(std::string content, size_t start, size_t stop) : content_(std::move(content)), start_(start), stop_(stop) {}
  void DecodeChain(std::vector<std::string>* tokens) const override {
    if (content_.empty()) return;
    for (std::string& t : *tokens) {
      for (size_t i = 0; i < start_ && t.compare(0, content_.size(), content_) == 0; ++i) t.erase(0, content_.size());
      for (size_t i = 0; i < stop_ && t.size() >= content_.size() &&
                         t.compare(t.size() - content_.size(), content_.size(), content_) == 0;
           ++i)
        t.erase(t.size() - content_.size());
    }
  }

 private:
  std::string content_;
  size_t start_, stop_;
};

class SequenceDecoder : public Decoder {
 public:
  explicit SequenceDecoder(std::vector<std::unique_ptr<Decoder>> steps) : steps_(std::move(steps)) {}
  void DecodeChain(std::vector<std::string>* tokens) const override {
    for (const auto& s : steps_) s->DecodeChain(tokens);
  }

 private:
  std::vector<std::unique_ptr<Decoder>> steps_;
};

Status Unsupported(const std::string& what) {
  return Status::InvalidArgument("tokenizer.json: unsupported decoder " + what);
}

}  // namespace

Result<std::unique_ptr<Decoder>> MakeDecoder(const json& spec) {
  if (spec.is_null()) return std::unique_ptr<Decoder>();
  if (!spec.is_object() || !spec.contains("type") || !spec["type"].is_string())
    return Status::InvalidArgument("tokenizer.json: decoder without a type");
  const std::string type = spec["type"];
  if (type == "ByteLevel") return std::unique_ptr<Decoder>(new ByteLevelDecoder());
  if (type == "ByteFallback") return std::unique_ptr<Decoder>(new ByteFallbackDecoder());
  if (type == "Fuse") return std::unique_ptr<Decoder>(new FuseDecoder());
  if (type == "Strip") {
    std::string content = spec.value("content", std::string(" "));
    return std::unique_ptr<Decoder>(
        new StripDecoder(content, JsonIntOr<uint32_t>(spec, "start", 0), JsonIntOr<uint32_t>(spec, "stop", 0)));
  }
  if (type == "Replace") {
    const json& pattern = spec.value("pattern", json());
    if (!pattern.is_object() || !pattern.contains("String") || !pattern["String"].is_string())
      return Unsupported("Replace with a regex pattern");
    return std::unique_ptr<Decoder>(
        new ReplaceDecoder(pattern["String"].get<std::string>(), spec.value("content", std::string())));
  }
  if (type == "Metaspace") {
    std::string scheme = spec.value("prepend_scheme", std::string());
    if (scheme.empty()) scheme = spec.value("add_prefix_space", true) ? "always" : "never";
    return std::unique_ptr<Decoder>(
        new MetaspaceDecoder(spec.value("replacement", std::string("\xE2\x96\x81")), scheme != "never"));
  }
  if (type == "Sequence") {
    std::vector<std::unique_ptr<Decoder>> steps;
    for (const json& step : spec.value("decoders", json::array())) {
      EFT_ASSIGN_OR_RETURN(auto made, MakeDecoder(step));
      if (made) steps.push_back(std::move(made));
    }
    return std::unique_ptr<Decoder>(new SequenceDecoder(std::move(steps)));
  }
  return Unsupported(type);
}

std::string DecodeTokens(const Decoder* decoder, std::vector<std::string> tokens) {
  if (!decoder) {
    std::string out;
    for (size_t i = 0; i < tokens.size(); ++i) out += (i ? " " : "") + tokens[i];
    return out;
  }
  decoder->DecodeChain(&tokens);
  std::string out;
  for (const std::string& t : tokens) out += t;
  return out;
}

}  // namespace eft::trainer::tok
