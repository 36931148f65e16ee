// A model directory's tokenizer_config.json as the trainer reads it: the special tokens LoadTokenizer
// (trainer/tokenizer/tokenizer.h) looks up as BOS/EOS/UNK/PAD, and the chat template(s) and special
// token variables of ModelChatTemplate::Load (trainer/chat_template/chat_template.h), compiled but
// not rendered (chat_template_fuzz renders). Both read from a directory: the input is written as
// tokenizer_config.json into one directory per process, beside a fixed small tokenizer.json.
//
// A token the config names must be the tokenizer's BOS/EOS with that very text; a string
// chat_template must be the template loaded.
#include <nlohmann/json.hpp>

#include "fuzz/fuzz_target.h"
#include "trainer/chat_template/chat_template.h"
#include "trainer/tokenizer/tokenizer.h"

namespace {

// The special tokens of the models whose configs are the seeds, as added tokens of a tiny BPE.
constexpr const char kTokenizerJson[] = R"({
  "added_tokens": [
    {"id": 0, "content": "<unk>", "special": true}, {"id": 1, "content": "<s>", "special": true},
    {"id": 2, "content": "</s>", "special": true}, {"id": 3, "content": "<|endoftext|>", "special": true},
    {"id": 4, "content": "<|im_start|>", "special": true}, {"id": 5, "content": "<|im_end|>", "special": true},
    {"id": 6, "content": "<|begin_of_text|>", "special": true}, {"id": 7, "content": "<|eot_id|>", "special": true},
    {"id": 8, "content": "<|finetune_right_pad_id|>", "special": true}, {"id": 9, "content": "<pad>", "special": true},
    {"id": 10, "content": "<bos>", "special": true}, {"id": 11, "content": "<eos>", "special": true},
    {"id": 12, "content": "[INST]", "special": false}
  ],
  "normalizer": null, "pre_tokenizer": null, "post_processor": null, "decoder": null,
  "model": {"type": "BPE", "unk_token": "<unk>", "vocab": {"<unk>": 0, "<s>": 1, "</s>": 2, "<|endoftext|>": 3,
            "<|im_start|>": 4, "<|im_end|>": 5, "<|begin_of_text|>": 6, "<|eot_id|>": 7,
            "<|finetune_right_pad_id|>": 8, "<pad>": 9, "<bos>": 10, "<eos>": 11, "[INST]": 12, "a": 13, "b": 14,
            "ab": 15}, "merges": [["a", "b"]]}
})";

// "eos_token": "</s>" or {"content": "</s>", ...}, as both readers take it.
const nlohmann::json* TokenText(const nlohmann::json& config, const char* key) {
  auto it = config.find(key);
  if (it == config.end()) return nullptr;
  if (it->is_string()) return &*it;
  if (it->is_object()) {
    auto c = it->find("content");
    if (c != it->end() && c->is_string()) return &*c;
  }
  return nullptr;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > 64 * 1024) return 0;
  static eft::fuzz::TempDir model_dir("tokenizer-config");
  static const bool tokenizer_written = (model_dir.Write("tokenizer.json", kTokenizerJson), true);
  (void)tokenizer_written;
  const std::string& dir =
      model_dir.Write("tokenizer_config.json", std::string_view(reinterpret_cast<const char*>(data), size));
  const nlohmann::json config = nlohmann::json::parse(data, data + size, nullptr, /*allow_exceptions=*/false);

  auto tokenizer = eft::trainer::LoadTokenizer(dir);
  if (!tokenizer.ok()) {
    FUZZ_CHECK(!tokenizer.status().message().empty(), "a refusal without a message");
  } else {
    const eft::trainer::Tokenizer& t = **tokenizer;
    FUZZ_CHECK(config.is_object(), "a config that is no JSON object was taken");
    for (const auto& [key, id] : {std::pair{"bos_token", t.bos_id()}, std::pair{"eos_token", t.eos_id()}}) {
      const nlohmann::json* text = TokenText(config, key);
      FUZZ_CHECK(id.has_value() == (text != nullptr), std::string(key) + " named and taken differ");
      if (!id) continue;
      FUZZ_CHECK(*id >= 0 && *id < t.vocab_size(), std::string(key) + " outside the vocabulary");
      FUZZ_CHECK(t.IdToToken(*id) == text->get<std::string>(), std::string(key) + " is another token");
    }
  }

  auto chat = eft::trainer::ModelChatTemplate::Load(dir);
  if (!chat.ok()) {
    FUZZ_CHECK(!chat.status().message().empty(), "a refusal without a message");
    return 0;
  }
  FUZZ_CHECK(config.is_object(), "a config that is no JSON object was taken");
  auto tmpl = config.find("chat_template");
  FUZZ_CHECK(tmpl != config.end() && (tmpl->is_string() || tmpl->is_array()), "a template from nowhere");
  if (tmpl->is_string()) FUZZ_CHECK(chat->source() == tmpl->get<std::string>(), "another template was loaded");
  return 0;
}
