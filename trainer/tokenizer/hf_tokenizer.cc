// tokenizer.json: added tokens -> normalizer -> pre-tokenizer -> BPE -> post-processor, the
// pipeline of Hugging Face's tokenizers library (see tokenizer.h).
#include <algorithm>
#include <climits>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "trainer/tokenizer/added_tokens.h"
#include "trainer/tokenizer/bpe_model.h"
#include "trainer/tokenizer/decoder.h"
#include "trainer/tokenizer/normalizer.h"
#include "trainer/tokenizer/pre_tokenizer.h"
#include "trainer/tokenizer/tokenizer.h"

namespace eft::trainer {
namespace {

using nlohmann::json;
using namespace tok;

// The ids TemplateProcessing puts around a single sequence ("$A").
struct Template {
  std::vector<int32_t> before, after;
};

Status CollectTemplate(const json& spec, Template* out, bool* found) {
  if (spec.is_null()) return Status::Ok();
  const std::string type = spec.value("type", std::string());
  if (type == "ByteLevel") return Status::Ok();  // only changes offsets
  if (type == "Sequence") {
    for (const json& p : spec.value("processors", json::array())) EFT_RETURN_IF_ERROR(CollectTemplate(p, out, found));
    return Status::Ok();
  }
  if (type != "TemplateProcessing")
    return Status::InvalidArgument("tokenizer.json: unsupported post_processor " + type);
  if (*found) return Status::InvalidArgument("tokenizer.json: more than one TemplateProcessing post_processor");
  *found = true;
  const json& special = spec.value("special_tokens", json::object());
  bool seen_sequence = false;
  for (const json& piece : spec.value("single", json::array())) {
    if (piece.contains("Sequence")) {
      if (piece["Sequence"].value("id", std::string("A")) != "A")
        return Status::InvalidArgument("tokenizer.json: TemplateProcessing single template uses $B");
      seen_sequence = true;
    } else if (piece.contains("SpecialToken")) {
      std::string name = piece["SpecialToken"].value("id", std::string());
      if (!special.contains(name))
        return Status::InvalidArgument("tokenizer.json: TemplateProcessing names undefined special token " + name);
      for (const json& id : special[name].value("ids", json::array())) {
        // get<int32_t> of a float or an out-of-range number is undefined behaviour.
        if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() > INT32_MAX)
          return Status::InvalidArgument("tokenizer.json: post_processor: special token " + name + " has id " +
                                         id.dump() + ", not a token id");
        (seen_sequence ? out->after : out->before).push_back(id.get<int32_t>());
      }
    } else {
      return Status::InvalidArgument("tokenizer.json: TemplateProcessing piece " + piece.dump());
    }
  }
  return Status::Ok();
}

class HfTokenizer : public Tokenizer {
 public:
  Status Init(const json& doc) {
    kind_ = "tokenizer.json";
    EFT_RETURN_IF_ERROR(Part("normalizer", [&] { return Assign(MakeNormalizer(Field(doc, "normalizer")), &normalizer_); }));
    EFT_RETURN_IF_ERROR(
        Part("pre_tokenizer", [&] { return Assign(MakePreTokenizer(Field(doc, "pre_tokenizer")), &pre_tokenizer_); }));
    EFT_RETURN_IF_ERROR(Part("decoder", [&] { return Assign(MakeDecoder(Field(doc, "decoder")), &decoder_); }));
    bool byte_level = pre_tokenizer_ && pre_tokenizer_->byte_level();
    EFT_RETURN_IF_ERROR(Part("model", [&] { return Assign(BpeModel::FromJson(Field(doc, "model"), byte_level), &model_); }));
    bool found = false;
    EFT_RETURN_IF_ERROR(
        Part("post_processor", [&] { return CollectTemplate(Field(doc, "post_processor"), &template_, &found); }));
    EFT_RETURN_IF_ERROR(Part("added_tokens", [&] { return InitAddedTokens(Field(doc, "added_tokens")); }));
    for (const auto* ids : {&template_.before, &template_.after}) {
      for (int32_t id : *ids) {
        if (id >= vocab_size_)
          return Status::InvalidArgument("tokenizer.json: post_processor: id " + std::to_string(id) +
                                         " is not in the vocabulary (" + std::to_string(vocab_size_) + " ids)");
      }
    }
    return Status::Ok();
  }

  // Runs one part's constructor. Its own checks name what they expect; anything they miss that
  // nlohmann refuses (value() of a number as a string, deep inside) is still an error naming the
  // part, never an exception escaping to the caller.
  template <typename F>
  static Status Part(const char* name, F make) {
    try {
      return make();
    } catch (const json::exception& e) {
      return Status::InvalidArgument(std::string("tokenizer.json: ") + name + ": a field has the wrong type (" +
                                     e.what() + ")");
    } catch (const std::out_of_range& e) {  // JsonInt (common/json_int.h): a number outside its field's range
      return Status::InvalidArgument(std::string("tokenizer.json: ") + name + ": " + e.what());
    }
  }

  template <typename T>
  static Status Assign(Result<T> made, T* out) {
    if (!made.ok()) return made.status();
    *out = std::move(made).value();
    return Status::Ok();
  }

  // doc[key] by reference (no copy of a large vocabulary), null when absent.
  static const json& Field(const json& doc, const char* key) {
    static const json kNull;
    auto it = doc.find(key);
    return it == doc.end() ? kNull : *it;
  }

  Status InitAddedTokens(const json& added) {
    std::vector<AddedToken> raw, normalized;
    vocab_size_ = model_->vocab_size();
    int32_t max_added = -1;
    if (added.is_null()) return Status::Ok();
    if (!added.is_array()) return Status::InvalidArgument("tokenizer.json: added_tokens: expected a list");
    for (size_t i = 0; i < added.size(); ++i) {
      const json& a = added[i];
      if (!a.is_object() || !a.contains("content") || !a["content"].is_string())
        return Status::InvalidArgument("tokenizer.json: added_tokens[" + std::to_string(i) +
                                       "]: expected an object with a string \"content\"");
      AddedToken t;
      t.content = a.value("content", std::string());
      t.special = a.value("special", false);
      t.normalized = a.value("normalized", !t.special);
      t.single_word = a.value("single_word", false);
      t.lstrip = a.value("lstrip", false);
      t.rstrip = a.value("rstrip", false);
      if (t.content.empty())
        return Status::InvalidArgument("tokenizer.json: added_tokens[" + std::to_string(i) + "]: empty content");
      // Hugging Face ignores the ids written here: a token in the model's vocabulary keeps that
      // id, the others are numbered on from the vocabulary's size, in order.
      if (auto in_model = model_->TokenToId(t.content)) {
        t.id = *in_model;
      } else {
        const int32_t entries = model_->entry_count();
        t.id = (max_added < 0) ? entries : (max_added >= entries ? max_added + 1 : entries);
      }
      max_added = std::max(max_added, t.id);
      added_by_id_[t.id] = t;
      added_by_content_[t.content] = t.id;
      if (t.special) special_tokens_.push_back(t.content);
      vocab_size_ = std::max(vocab_size_, t.id + 1);
      (t.normalized ? normalized : raw).push_back(std::move(t));
    }
    raw_matcher_ = AddedTokenMatcher(std::move(raw));
    normalized_matcher_ = AddedTokenMatcher(std::move(normalized));
    return Status::Ok();
  }

  Encoding Encode(std::string_view text, bool add_special_tokens) const override {
    Encoding e;
    if (add_special_tokens)
      for (int32_t id : template_.before) {
        e.ids.push_back(id);
        e.offsets.push_back({0, 0});
      }
    for (const auto& piece : raw_matcher_.Split(text)) {
      if (piece.id) {
        e.ids.push_back(*piece.id);
        e.offsets.push_back({piece.begin, piece.end});
      } else {
        EncodeSection(text.substr(piece.begin, piece.end - piece.begin), piece.begin, &e);
      }
    }
    if (add_special_tokens)
      for (int32_t id : template_.after) {
        e.ids.push_back(id);
        e.offsets.push_back({text.size(), text.size()});
      }
    return e;
  }

  std::string Decode(const std::vector<int32_t>& ids, bool skip_special_tokens) const override {
    std::vector<std::string> tokens;
    tokens.reserve(ids.size());
    for (int32_t id : ids) {
      auto added = added_by_id_.find(id);
      if (added != added_by_id_.end()) {
        if (!(skip_special_tokens && added->second.special)) tokens.push_back(added->second.content);
        continue;
      }
      const std::string& t = model_->IdToToken(id);
      if (!t.empty()) tokens.push_back(t);
    }
    return DecodeTokens(decoder_.get(), std::move(tokens));
  }

  std::optional<int32_t> TokenToId(std::string_view token) const override {
    auto it = added_by_content_.find(std::string(token));
    if (it != added_by_content_.end()) return it->second;
    return model_->TokenToId(token);
  }
  std::string IdToToken(int32_t id) const override {
    auto it = added_by_id_.find(id);
    if (it != added_by_id_.end()) return it->second.content;
    return model_->IdToToken(id);
  }
  int32_t vocab_size() const override { return vocab_size_; }
  const std::vector<std::string>& special_tokens() const override { return special_tokens_; }
  void AddSpecial(const std::string& s) {
    if (std::find(special_tokens_.begin(), special_tokens_.end(), s) == special_tokens_.end())
      special_tokens_.push_back(s);
  }

 private:
  // Text between raw added tokens; `base` is its offset in the input.
  void EncodeSection(std::string_view section, size_t base, Encoding* e) const {
    NormalizedText normalized(section);
    if (normalizer_) normalizer_->Apply(&normalized);
    const std::string& n = normalized.text();
    auto to_input = [&](size_t b, size_t end) {
      auto [ob, oe] = normalized.ToOriginal(b, end);
      return std::make_pair(base + ob, base + oe);
    };
    if (normalized_matcher_.empty()) {
      EncodeWords(n, to_input, base == 0, e);
      return;
    }
    for (const auto& piece : normalized_matcher_.Split(n)) {
      if (piece.id) {
        e->ids.push_back(*piece.id);
        e->offsets.push_back(to_input(piece.begin, piece.end));
        continue;
      }
      auto sub_to_input = [&](size_t b, size_t end) { return to_input(piece.begin + b, piece.begin + end); };
      EncodeWords(std::string_view(n).substr(piece.begin, piece.end - piece.begin), sub_to_input,
                  base == 0 && to_input(piece.begin, piece.begin).first == 0, e);
    }
  }

  template <typename ToInput>
  void EncodeWords(std::string_view text, const ToInput& to_input, bool first_section, Encoding* e) const {
    NormalizedText rewritten(text);
    if (pre_tokenizer_) pre_tokenizer_->Rewrite(&rewritten, first_section);
    const std::string& r = rewritten.text();
    std::vector<ByteRange> words{{0, r.size()}};
    if (r.empty()) return;
    if (pre_tokenizer_) pre_tokenizer_->Split(r, &words);
    std::vector<int32_t> ids;
    std::vector<uint32_t> lengths;
    for (const ByteRange& w : words) {
      ids.clear();
      lengths.clear();
      model_->Tokenize(std::string_view(r).substr(w.first, w.second - w.first), &ids, &lengths);
      size_t at = w.first;
      for (size_t i = 0; i < ids.size(); ++i) {
        auto [rb, re] = rewritten.ToOriginal(at, at + lengths[i]);
        e->ids.push_back(ids[i]);
        e->offsets.push_back(to_input(rb, re));
        at += lengths[i];
      }
    }
  }

  std::unique_ptr<Normalizer> normalizer_;
  std::unique_ptr<PreTokenizer> pre_tokenizer_;
  std::unique_ptr<Decoder> decoder_;
  std::unique_ptr<BpeModel> model_;
  Template template_;
  AddedTokenMatcher raw_matcher_, normalized_matcher_;
  std::unordered_map<int32_t, AddedToken> added_by_id_;
  std::unordered_map<std::string, int32_t> added_by_content_;
  std::vector<std::string> special_tokens_;
  int32_t vocab_size_ = 0;
};

}  // namespace

Result<std::unique_ptr<Tokenizer>> TokenizerFromJson(std::string_view json_text) {
  // Real tokenizer.json files nest about 6 deep. Copying or printing a value recurses once per
  // level, so a value nested 100000 deep would overflow the stack: deeper containers are dropped
  // while parsing (no tree is built for them) and the file is refused.
  constexpr int kMaxDepth = 64;
  bool too_deep = false;
  json::parser_callback_t limit_depth = [&](int depth, json::parse_event_t event, json&) {
    if ((event == json::parse_event_t::object_start || event == json::parse_event_t::array_start) && depth > kMaxDepth) {
      too_deep = true;
      return false;
    }
    return true;
  };
  std::string parse_error;
  json doc;
  try {
    doc = json::parse(json_text, limit_depth);
  } catch (const json::parse_error& e) {
    parse_error = " at byte " + std::to_string(e.byte);
  } catch (const json::exception& e) {  // out_of_range: a number like 1e999
    parse_error = ": " + std::string(e.what());
  }
  if (!parse_error.empty()) return Status::InvalidArgument("tokenizer.json: not valid JSON (an error" + parse_error + ")");
  if (too_deep) {
    return Status::InvalidArgument("tokenizer.json: values nested more than " + std::to_string(kMaxDepth) +
                                   " levels deep");
  }
  if (!doc.is_object()) return Status::InvalidArgument("tokenizer.json: not a JSON object");
  auto t = std::make_unique<HfTokenizer>();
  // The field checks name what they expect; anything they miss that nlohmann refuses (a string
  // where a number was expected, deep in some part) is still an error, not an escaped exception.
  try {
    EFT_RETURN_IF_ERROR(t->Init(doc));
  } catch (const json::exception& e) {
    return Status::InvalidArgument(std::string("tokenizer.json: a field has the wrong type (") + e.what() + ")");
  }
  return std::unique_ptr<Tokenizer>(std::move(t));
}

void AddSpecialTokenString(Tokenizer* t, const std::string& s) {
  if (auto* hf = dynamic_cast<HfTokenizer*>(t)) hf->AddSpecial(s);
}

}  // namespace eft::trainer
