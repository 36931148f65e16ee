// Test doubles for the SFT pipeline: a byte-level tokenizer and a ChatML renderer in C++.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "trainer/data/sft_labels.h"

namespace eft::trainer {

using ojson = nlohmann::ordered_json;

// One token per byte (id = byte), except special-token strings, which are one token each
// (id 256 + index), like added tokens in a real tokenizer.
class ByteEncoder : public TextEncoder {
 public:
  explicit ByteEncoder(std::vector<std::string> specials, std::optional<int32_t> eos = std::nullopt)
      : specials_(std::move(specials)), eos_(eos) {}
  std::vector<int32_t> EncodeWithOffsets(std::string_view text, bool add_special_tokens,
                                         std::vector<std::pair<size_t, size_t>>* offsets) const override {
    std::vector<int32_t> ids;
    offsets->clear();
    if (add_special_tokens) {
      ids.push_back(1000);  // BOS
      offsets->emplace_back(0, 0);
    }
    for (size_t i = 0; i < text.size();) {
      bool matched = false;
      for (size_t k = 0; k < specials_.size(); ++k) {
        if (text.substr(i, specials_[k].size()) == specials_[k]) {
          ids.push_back(256 + static_cast<int32_t>(k));
          offsets->emplace_back(i, i + specials_[k].size());
          i += specials_[k].size();
          matched = true;
          break;
        }
      }
      if (matched) continue;
      ids.push_back(static_cast<unsigned char>(text[i]));
      offsets->emplace_back(i, i + 1);
      ++i;
    }
    return ids;
  }
  std::optional<int32_t> eos_id() const override { return eos_; }
  const std::vector<std::string>& special_tokens() const override { return specials_; }

  // The trained text of an example: the bytes and special tokens whose labels are not -100.
  std::string Trained(const Example& ex) const {
    std::string out;
    for (size_t t = 0; t < ex.labels.size(); ++t) {
      if (ex.labels[t] == -100) {
        if (!out.empty() && out.back() != '|') out += '|';
        continue;
      }
      const int64_t id = ex.labels[t];
      const size_t special = static_cast<size_t>(id - 256);
      out += id < 256                    ? std::string(1, static_cast<char>(id))
             : special < specials_.size() ? specials_[special]
             : id == eos_                 ? "<eos>"
                                          : "<bos>";
    }
    while (!out.empty() && out.back() == '|') out.pop_back();
    return out;
  }

 private:
  std::vector<std::string> specials_;
  std::optional<int32_t> eos_;
};

// ChatML as Qwen2.5 writes it.
inline Result<std::string> ChatMl(const ojson& messages, const ojson&, bool add_generation_prompt) {
  std::string out;
  for (const auto& m : messages) {
    out += "<|im_start|>" + m["role"].get<std::string>() + "\n" + m["content"].get<std::string>() + "<|im_end|>\n";
  }
  if (add_generation_prompt) out += "<|im_start|>assistant\n";
  return out;
}

}  // namespace eft::trainer
