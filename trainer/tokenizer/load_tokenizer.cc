// LoadTokenizer: which file of a model directory is the tokenizer, and the BOS/EOS names of its
// tokenizer_config.json.
#include <filesystem>

#include <nlohmann/json.hpp>

#include "common/file_util.h"
#include "trainer/tokenizer/tokenizer.h"

namespace eft::trainer {

void AddSpecialTokenString(Tokenizer* t, const std::string& s);  // hf_tokenizer.cc

namespace {

using nlohmann::json;
namespace fs = std::filesystem;

// "eos_token": "</s>" or {"content": "</s>", ...}.
std::optional<std::string> TokenName(const json& config, const char* key) {
  if (!config.contains(key)) return std::nullopt;
  const json& v = config[key];
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("content") && v["content"].is_string()) return v["content"].get<std::string>();
  return std::nullopt;
}

}  // namespace

std::vector<std::string> TokenizerFiles(const std::string& dir) {
  std::vector<std::string> files;
  for (const char* name : {"tokenizer.json", "tokenizer.model", "tokenizer_config.json"}) {
    fs::path p = fs::path(dir) / name;
    if (fs::exists(p)) files.push_back(p.string());
  }
  return files;
}

Result<std::unique_ptr<Tokenizer>> LoadTokenizer(const std::string& dir) {
  json config = json::object();
  fs::path config_path = fs::path(dir) / "tokenizer_config.json";
  if (fs::exists(config_path)) {
    EFT_ASSIGN_OR_RETURN(std::string text, ReadFileToString(config_path.string()));
    config = json::parse(text, nullptr, false);
    if (config.is_discarded() || !config.is_object())
      return Status::InvalidArgument(config_path.string() + " is not a JSON object");
  }
  std::unique_ptr<Tokenizer> t;
  fs::path json_path = fs::path(dir) / "tokenizer.json", model_path = fs::path(dir) / "tokenizer.model";
  if (fs::exists(json_path)) {
    EFT_ASSIGN_OR_RETURN(std::string text, ReadFileToString(json_path.string()));
    auto made = TokenizerFromJson(text);
    if (!made.ok()) return Status::InvalidArgument(json_path.string() + ": " + made.status().message());
    t = std::move(*made);
  } else if (fs::exists(model_path)) {
    std::vector<std::pair<std::string, int32_t>> added;
    if (config.contains("added_tokens_decoder") && config["added_tokens_decoder"].is_object()) {
      for (auto it = config["added_tokens_decoder"].begin(); it != config["added_tokens_decoder"].end(); ++it) {
        if (!it.value().is_object() || !it.value().contains("content") || !it.value()["content"].is_string()) continue;
        // std::stoi would throw on a key that is not a number.
        char* end = nullptr;
        const long id = std::strtol(it.key().c_str(), &end, 10);
        if (it.key().empty() || *end != '\0' || id < 0 || id > INT32_MAX)
          return Status::InvalidArgument(config_path.string() + ": added_tokens_decoder key '" + it.key() +
                                         "' is not a token id");
        added.emplace_back(it.value()["content"].get<std::string>(), static_cast<int32_t>(id));
      }
    }
    EFT_ASSIGN_OR_RETURN(t, SentencePieceTokenizer(model_path.string(), added));
  } else {
    return Status::NotFound(dir + " has neither tokenizer.json nor tokenizer.model");
  }
  // tokenizer_config.json names BOS/EOS; they count as special even if tokenizer.json does not
  // mark them.
  for (const char* key : {"bos_token", "eos_token", "unk_token", "pad_token"}) {
    auto name = TokenName(config, key);
    if (!name) continue;
    auto id = t->TokenToId(*name);
    if (!id) return Status::InvalidArgument(config_path.string() + ": " + key + " " + *name + " is not in the vocabulary");
    AddSpecialTokenString(t.get(), *name);
    if (std::string(key) == "bos_token") t->bos_id_ = id;
    if (std::string(key) == "eos_token") t->eos_id_ = id;
  }
  return t;
}

}  // namespace eft::trainer
