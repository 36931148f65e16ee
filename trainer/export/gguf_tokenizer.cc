#include "trainer/export/gguf_tokenizer.h"

#include <filesystem>
#include <map>

#include <nlohmann/json.hpp>

#include "common/file_util.h"
#include "trainer/export/gguf_writer.h"
#include "trainer/tokenizer/tokenizer.h"

namespace eft::trainer {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// The Split regexes of the two tokenizer families llama.cpp has a built-in pre-tokenizer for; they
// differ only in how digits group (Llama 3: runs of up to three, Qwen2: one at a time).
constexpr const char* kLlama3Regex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr const char* kQwen2Regex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

Result<json> ReadJson(const fs::path& path) {
  EFT_ASSIGN_OR_RETURN(std::string text, ReadFileToString(path.string()));
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return Status::InvalidArgument(path.string() + ": not a JSON object");
  return j;
}

std::string StringOr(const json& j, const char* key, std::string fallback = "") {
  auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : fallback;
}
bool BoolOr(const json& j, const char* key, bool fallback) {
  auto it = j.find(key);
  return it != j.end() && it->is_boolean() ? it->get<bool>() : fallback;
}

// A ByteLevel step as llama.cpp's byte-level BPE does it: no prefix space added.
bool PlainByteLevel(const json& step, bool use_regex) {
  return StringOr(step, "type") == "ByteLevel" && !BoolOr(step, "add_prefix_space", true) &&
         BoolOr(step, "use_regex", true) == use_regex;
}

// tokenizer.ggml.pre for the tokenizer.json's pre_tokenizer, or an error naming what it is.
Result<std::string> PreTokenizerName(const json& pre, const std::string& file) {
  const std::string type = StringOr(pre, "type");
  if (type == "ByteLevel" && PlainByteLevel(pre, true)) return std::string("gpt-2");
  if (type == "Sequence" && pre.contains("pretokenizers") && pre["pretokenizers"].is_array() &&
      pre["pretokenizers"].size() == 2) {
    const json& first = pre["pretokenizers"][0];
    const json& second = pre["pretokenizers"][1];
    if (StringOr(first, "type") == "Split" && StringOr(first, "behavior") == "Isolated" &&
        !BoolOr(first, "invert", false) && first.contains("pattern") && PlainByteLevel(second, false)) {
      const std::string regex = StringOr(first["pattern"], "Regex");
      if (regex == kLlama3Regex) return std::string("llama-bpe");
      if (regex == kQwen2Regex) return std::string("qwen2");
    }
    if (StringOr(first, "type") == "Digits" && BoolOr(first, "individual_digits", false) &&
        PlainByteLevel(second, true)) {
      return std::string("smollm");
    }
  }
  return Status::InvalidArgument(file + ": its pre_tokenizer (" + pre.dump().substr(0, 160) +
                                 ") is not one of the byte-level BPE pre-tokenizers built into llama.cpp that eft "
                                 "recognises (Llama 3, Qwen2, SmolLM, GPT-2); exported, it would tokenize differently");
}

// As convert_hf_to_gguf.py: added tokens that are not marked special but look like control tokens.
bool LooksSpecial(const std::string& t) {
  auto wrapped = [&](const std::string& open, const std::string& close) {
    return t.size() >= open.size() + close.size() && t.compare(0, open.size(), open) == 0 &&
           t.compare(t.size() - close.size(), close.size(), close) == 0;
  };
  return t == "<pad>" || t == "<mask>" || t == "<2mass>" || t == "[@BOS@]" || wrapped("<|", "|>") ||
         wrapped("<\xEF\xBD\x9C", "\xEF\xBD\x9C>") || wrapped("<unused", ">");
}

// A merge as gguf-py writes it: "left right"; a space inside a part (tokenizers >= 0.20 store pairs,
// which may hold spaces) becomes U+0120, as in the byte-level alphabet.
std::string MergeString(const json& m) {
  if (m.is_string()) return m.get<std::string>();
  std::string out;
  for (size_t i = 0; i < m.size(); ++i) {
    if (i > 0) out += ' ';
    for (char c : m[i].get<std::string>()) {
      if (c == ' ') {
        out += "\xC4\xA0";
      } else {
        out += c;
      }
    }
  }
  return out;
}

// tokenizer_config.json's "<typ>_token": a string or {"content": ...}.
std::string SpecialContent(const json& config, const std::string& typ) {
  auto it = config.find(typ + "_token");
  if (it == config.end()) return "";
  if (it->is_string()) return it->get<std::string>();
  if (it->is_object()) return StringOr(*it, "content");
  return "";
}

// The chat template as transformers (and eft's chat-template command) reads a directory:
// chat_template.jinja first, then tokenizer_config.json's chat_template (a string, or the "default"
// entry of a list of named templates); "" when there is none.
Result<std::string> ReadChatTemplate(const fs::path& dir, const json& config) {
  if (fs::exists(dir / "chat_template.jinja")) return ReadFileToString((dir / "chat_template.jinja").string());
  std::string out;
  if (config.contains("chat_template") && config["chat_template"].is_string()) {
    out = config["chat_template"].get<std::string>();
  } else if (config.contains("chat_template") && config["chat_template"].is_array()) {
    for (const auto& e : config["chat_template"]) {
      if (e.is_object() && StringOr(e, "name") == "default") out = StringOr(e, "template");
    }
  }
  return out;
}

// tokenizer.model as llama.cpp's converter writes it (convert_hf_to_gguf.py's SentencePiece vocabulary):
// every row an unused "[PAD<id>]" scored -10000 first, the pieces over them with their scores and kinds,
// then added_tokens.json and tokenizer_config.json's added_tokens_decoder over those (scored -1000;
// control when marked special or shaped like a control token, else user-defined with SentencePiece's
// U+2581 written as the space it stands for).
Result<GgufTokenizer> ReadSentencePiece(const fs::path& dir, int64_t vocab_rows, const json& config,
                                        const json& model_config) {
  const std::string file = (dir / "tokenizer.model").string();
  EFT_ASSIGN_OR_RETURN(SentencePieceVocab v, ReadSentencePieceVocab(file));
  if (static_cast<int64_t>(v.pieces.size()) > vocab_rows) {
    return Status::InvalidArgument(file + ": " + std::to_string(v.pieces.size()) + " pieces, more than the model's " +
                                   std::to_string(vocab_rows) + " embedding rows (config.json vocab_size)");
  }
  GgufTokenizer t;
  t.model = "llama";
  t.pre = "default";
  t.add_space_prefix = v.add_dummy_prefix;
  for (int64_t id = 0; id < vocab_rows; ++id) {
    t.tokens.push_back("[PAD" + std::to_string(id) + "]");
    t.scores.push_back(-10000.0f);
    t.token_types.push_back(static_cast<int32_t>(GgufTokenType::kUnused));
  }
  for (size_t id = 0; id < v.pieces.size(); ++id) {
    t.tokens[id] = v.pieces[id];
    t.scores[id] = v.scores[id];
    t.token_types[id] = v.kinds[id];
  }
  auto in_range = [&](int64_t id) { return id >= 0 && id < vocab_rows; };
  if (fs::exists(dir / "added_tokens.json")) {
    EFT_ASSIGN_OR_RETURN(json added, ReadJson(dir / "added_tokens.json"));
    for (const auto& [content, id] : added.items()) {
      if (!id.is_number_integer() || !in_range(id.get<int64_t>())) continue;
      t.tokens[id.get<size_t>()] = content;
      t.scores[id.get<size_t>()] = -1000.0f;
      t.token_types[id.get<size_t>()] = static_cast<int32_t>(GgufTokenType::kUserDefined);
    }
  }
  if (config.contains("added_tokens_decoder") && config["added_tokens_decoder"].is_object()) {
    for (const auto& [key, entry] : config["added_tokens_decoder"].items()) {
      char* end = nullptr;
      const long long id = std::strtoll(key.c_str(), &end, 10);
      if (key.empty() || *end != '\0' || !in_range(id) || !entry.is_object()) continue;
      std::string content = StringOr(entry, "content");
      if (content.empty()) continue;
      const bool control = BoolOr(entry, "special", false) || LooksSpecial(content);
      if (!control) {
        for (size_t at; (at = content.find("\xE2\x96\x81")) != std::string::npos;) content.replace(at, 3, " ");
      }
      t.tokens[static_cast<size_t>(id)] = content;
      t.scores[static_cast<size_t>(id)] = -1000.0f;
      t.token_types[static_cast<size_t>(id)] =
          static_cast<int32_t>(control ? GgufTokenType::kControl : GgufTokenType::kUserDefined);
    }
  }
  // Special ids: tokenizer_config.json's token strings (as eft's tokenizer reads them), else
  // config.json's *_token_id, else the model's own.
  auto special_id = [&](const std::string& typ, int32_t own) -> std::optional<uint32_t> {
    const std::string content = SpecialContent(config, typ);
    if (!content.empty()) {
      for (size_t id = 0; id < t.tokens.size(); ++id)
        if (t.tokens[id] == content) return static_cast<uint32_t>(id);
    }
    auto it = model_config.find(typ + "_token_id");
    if (it != model_config.end() && it->is_number_integer() && in_range(it->get<int64_t>())) {
      return it->get<uint32_t>();
    }
    if (in_range(own)) return static_cast<uint32_t>(own);
    return std::nullopt;
  };
  t.bos_id = special_id("bos", v.bos_id);
  t.eos_id = special_id("eos", v.eos_id);
  t.unknown_id = special_id("unk", v.unk_id);
  t.padding_id = special_id("pad", -1);
  // As Hugging Face's LlamaTokenizer: BOS added, EOS not, unless tokenizer_config.json says.
  t.add_bos = BoolOr(config, "add_bos_token", t.bos_id.has_value());
  t.add_eos = BoolOr(config, "add_eos_token", false);
  EFT_ASSIGN_OR_RETURN(t.chat_template, ReadChatTemplate(dir, config));
  return t;
}

}  // namespace

void GgufTokenizer::AddTo(GgufWriter& w) const {
  w.AddString("tokenizer.ggml.model", model);
  w.AddString("tokenizer.ggml.pre", pre);
  w.AddStringArray("tokenizer.ggml.tokens", tokens);
  if (!scores.empty()) w.AddFloat32Array("tokenizer.ggml.scores", scores);
  w.AddInt32Array("tokenizer.ggml.token_type", token_types);
  if (model == "gpt2") w.AddStringArray("tokenizer.ggml.merges", merges);
  if (bos_id) w.AddUint32("tokenizer.ggml.bos_token_id", *bos_id);
  if (eos_id) w.AddUint32("tokenizer.ggml.eos_token_id", *eos_id);
  if (unknown_id) w.AddUint32("tokenizer.ggml.unknown_token_id", *unknown_id);
  if (padding_id) w.AddUint32("tokenizer.ggml.padding_token_id", *padding_id);
  // Written even when false: without them llama.cpp falls back to per-tokenizer defaults (BOS on for
  // some), which need not be what the directory's tokenizer does.
  w.AddBool("tokenizer.ggml.add_bos_token", add_bos);
  w.AddBool("tokenizer.ggml.add_eos_token", add_eos);
  if (add_space_prefix) w.AddBool("tokenizer.ggml.add_space_prefix", *add_space_prefix);
  if (!chat_template.empty()) w.AddString("tokenizer.chat_template", chat_template);
}

Result<GgufTokenizer> ReadGgufTokenizer(const std::string& model_dir, int64_t vocab_rows) {
  const fs::path dir(model_dir);
  const fs::path tokenizer_file = dir / "tokenizer.json";
  const bool has_spm = fs::exists(dir / "tokenizer.model");
  if (!fs::exists(tokenizer_file) && !has_spm) {
    return Status::InvalidArgument(model_dir + " has neither tokenizer.json nor tokenizer.model: a GGUF file must "
                                   "carry the tokenizer");
  }
  json config = json::object(), model_config = json::object();
  if (fs::exists(dir / "tokenizer_config.json")) {
    EFT_ASSIGN_OR_RETURN(config, ReadJson(dir / "tokenizer_config.json"));
  }
  if (fs::exists(dir / "config.json")) {
    EFT_ASSIGN_OR_RETURN(model_config, ReadJson(dir / "config.json"));
  }
  json tj;
  if (fs::exists(tokenizer_file)) {
    EFT_ASSIGN_OR_RETURN(tj, ReadJson(tokenizer_file));
  }
  // A byte-level tokenizer.json is the tokenizer; otherwise (Llama 2's and Mistral's tokenizer.json is
  // SentencePiece-style BPE) the tokenizer.model beside it is, as llama.cpp's converter prefers it.
  const bool byte_level = tj.is_object() && tj.value("pre_tokenizer", json()).dump().find("\"ByteLevel\"") != std::string::npos;
  if (has_spm && !byte_level) return ReadSentencePiece(dir, vocab_rows, config, model_config);
  const std::string file = tokenizer_file.string();

  const json& model = tj.contains("model") ? tj["model"] : json::object();
  // byte_fallback is harmless here: with a ByteLevel pre-tokenizer (checked below) every byte already
  // has its token, so it never applies (transformers sets it on tokenizers it makes from GGUF files).
  if (StringOr(model, "type") != "BPE") {
    return Status::InvalidArgument(file + ": model is " + StringOr(model, "type", "missing") +
                                   "; GGUF export supports byte-level BPE (as Llama 3, Qwen2/3, SmolLM ship)");
  }
  if (tj.contains("normalizer") && !tj["normalizer"].is_null()) {
    // NFC (Qwen) changes only text that is not NFC already; llama.cpp applies none.
    const json& n = tj["normalizer"];
    const bool empty_sequence = StringOr(n, "type") == "Sequence" && n.contains("normalizers") &&
                                n["normalizers"].is_array() && n["normalizers"].empty();
    if (!empty_sequence && StringOr(n, "type") != "NFC") {
      return Status::InvalidArgument(file + ": normalizer " + StringOr(n, "type", "?") +
                                     " has no llama.cpp equivalent for byte-level BPE");
    }
  }
  GgufTokenizer t;
  EFT_ASSIGN_OR_RETURN(t.pre, PreTokenizerName(tj.value("pre_tokenizer", json::object()), file));

  // Tokens in id order: the BPE vocabulary, then the added tokens over it.
  std::map<int64_t, std::string> by_id;
  std::map<int64_t, bool> added_special;  // id -> marked special
  if (!model.contains("vocab") || !model["vocab"].is_object()) {
    return Status::InvalidArgument(file + ": model.vocab is missing");
  }
  for (const auto& [token, id] : model["vocab"].items()) {
    if (!id.is_number_integer()) return Status::InvalidArgument(file + ": vocab entry " + token + " has no integer id");
    by_id[id.get<int64_t>()] = token;
  }
  const json added = tj.value("added_tokens", json::array());
  for (const auto& a : added) {
    if (!a.contains("id") || !a["id"].is_number_integer() || !a.contains("content")) continue;
    const int64_t id = a["id"].get<int64_t>();
    by_id[id] = a["content"].get<std::string>();
    added_special[id] = a.value("special", false);
  }
  if (!by_id.empty() && (by_id.begin()->first < 0 || by_id.rbegin()->first >= vocab_rows)) {
    return Status::InvalidArgument(file + ": token id " + std::to_string(by_id.rbegin()->first) +
                                   " is outside the model's " + std::to_string(vocab_rows) +
                                   " embedding rows (config.json vocab_size)");
  }
  t.tokens.reserve(vocab_rows);
  t.token_types.reserve(vocab_rows);
  for (int64_t id = 0; id < vocab_rows; ++id) {
    auto it = by_id.find(id);
    if (it == by_id.end()) {  // rows past the tokenizer (a vocabulary padded for speed)
      t.tokens.push_back("[PAD" + std::to_string(id) + "]");
      t.token_types.push_back(static_cast<int32_t>(GgufTokenType::kUserDefined));
      continue;
    }
    t.tokens.push_back(it->second);
    auto special = added_special.find(id);
    GgufTokenType type = GgufTokenType::kNormal;
    if (special != added_special.end()) {
      type = special->second || LooksSpecial(it->second) ? GgufTokenType::kControl : GgufTokenType::kUserDefined;
    }
    t.token_types.push_back(static_cast<int32_t>(type));
  }
  if (model.contains("merges") && model["merges"].is_array()) {
    t.merges.reserve(model["merges"].size());
    for (const auto& m : model["merges"]) t.merges.push_back(MergeString(m));
  }

  // Special ids as gguf-py's SpecialVocab finds them: tokenizer_config.json's token strings looked up
  // among the added tokens, else config.json's *_token_id.
  auto id_of = [&](const std::string& content) -> std::optional<uint32_t> {
    if (content.empty()) return std::nullopt;
    for (const auto& a : added) {
      if (a.value("content", "") == content && a.contains("id")) return a["id"].get<uint32_t>();
    }
    return std::nullopt;
  };
  auto special_id = [&](const std::string& typ) -> std::optional<uint32_t> {
    if (auto id = id_of(SpecialContent(config, typ))) return id;
    auto it = model_config.find(typ + "_token_id");
    if (it != model_config.end() && it->is_number_integer() && it->get<int64_t>() >= 0 &&
        it->get<int64_t>() < vocab_rows) {
      return it->get<uint32_t>();
    }
    return std::nullopt;
  };
  t.bos_id = special_id("bos");
  t.eos_id = special_id("eos");
  t.unknown_id = special_id("unk");
  t.padding_id = special_id("pad");

  // add_bos/add_eos: what the post-processor's TemplateProcessing puts around a single sequence,
  // unless tokenizer_config.json says (add_bos_token / add_eos_token), as transformers does.
  const json post = tj.value("post_processor", json());
  std::vector<json> processors;
  if (post.is_object()) {
    if (post.contains("processors") && post["processors"].is_array()) {
      for (const auto& p : post["processors"]) processors.push_back(p);
    } else {
      processors.push_back(post);
    }
  }
  for (const auto& p : processors) {
    if (StringOr(p, "type") != "TemplateProcessing" || !p.contains("single") || !p["single"].is_array()) continue;
    const json& single = p["single"];
    auto special_at = [&](const json& piece) -> std::optional<uint32_t> {
      if (!piece.contains("SpecialToken")) return std::nullopt;
      return id_of(StringOr(piece["SpecialToken"], "id"));
    };
    if (single.size() > 1) {
      if (auto first = special_at(single.front())) {
        t.add_bos = true;
        if (!t.bos_id) t.bos_id = first;
      }
      if (auto last = special_at(single.back())) {
        t.add_eos = true;
        if (!t.eos_id) t.eos_id = last;
      }
    }
  }
  t.add_bos = BoolOr(config, "add_bos_token", t.add_bos);
  t.add_eos = BoolOr(config, "add_eos_token", t.add_eos);

  EFT_ASSIGN_OR_RETURN(t.chat_template, ReadChatTemplate(dir, config));
  return t;
}

}  // namespace eft::trainer
