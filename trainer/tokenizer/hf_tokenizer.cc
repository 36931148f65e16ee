// tokenizer.json: added tokens -> normalizer -> pre-tokenizer -> BPE -> post-processor, the
// pipeline of Hugging Face's tokenizers library (see tokenizer.h).
#include <algorithm>
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
      for (const json& id : special[name].value("ids", json::array()))
        (seen_sequence ? out->after : out->before).push_back(id.get<int32_t>());
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
    EFT_ASSIGN_OR_RETURN(normalizer_, MakeNormalizer(doc.value("normalizer", json())));
    EFT_ASSIGN_OR_RETURN(pre_tokenizer_, MakePreTokenizer(doc.value("pre_tokenizer", json())));
    EFT_ASSIGN_OR_RETURN(decoder_, MakeDecoder(doc.value("decoder", json())));
    bool byte_level = pre_tokenizer_ && pre_tokenizer_->byte_level();
    EFT_ASSIGN_OR_RETURN(model_, BpeModel::FromJson(doc.value("model", json()), byte_level));
    bool found = false;
    EFT_RETURN_IF_ERROR(CollectTemplate(doc.value("post_processor", json()), &template_, &found));

    std::vector<AddedToken> raw, normalized;
    vocab_size_ = model_->vocab_size();
    int32_t max_added = -1;
    for (const json& a : doc.value("added_tokens", json::array())) {
      AddedToken t;
      t.content = a.value("content", std::string());
      t.id = a.value("id", -1);
      t.special = a.value("special", false);
      t.normalized = a.value("normalized", !t.special);
      t.single_word = a.value("single_word", false);
      t.lstrip = a.value("lstrip", false);
      t.rstrip = a.value("rstrip", false);
      if (t.content.empty()) return Status::InvalidArgument("tokenizer.json: added token without content: " + a.dump());
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
  json doc = json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded() || !doc.is_object()) return Status::InvalidArgument("tokenizer.json is not a JSON object");
  auto t = std::make_unique<HfTokenizer>();
  EFT_RETURN_IF_ERROR(t->Init(doc));
  return std::unique_ptr<Tokenizer>(std::move(t));
}

void AddSpecialTokenString(Tokenizer* t, const std::string& s) {
  if (auto* hf = dynamic_cast<HfTokenizer*>(t)) hf->AddSpecial(s);
}

}  // namespace eft::trainer
