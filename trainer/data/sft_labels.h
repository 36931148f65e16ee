// From an SFT record to token ids and labels, exactly as the model's chat template renders it.
//
// Conversations are rendered once, whole, and tokenized once (no special tokens added: templates
// write their own, as Hugging Face's apply_chat_template does). Which characters are trained comes
// from the template itself: for each assistant message i, the text the template adds for it is
//   render(messages[..i+1]) minus its prefix render(messages[..i], add_generation_prompt=true),
// i.e. the reply and its end-of-turn marker, without the role header. That text is located in
// the whole rendering (at the same offset when the template only appends, else by search from
// the previous reply, for templates that rewrite earlier turns, e.g. Qwen3 dropping old
// reasoning). Trailing whitespace is not trained. A token is trained when its bytes overlap a
// trained span. Works for any template that renders a reply's content verbatim; one that does
// not is an error naming the message, with `loss_on: all` as the way out.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "trainer/data/sft_format.h"
#include "trainer/data/token_dataset.h"

namespace eft::trainer {

enum class LossOn {
  kAssistant,   // every assistant reply (messages), the completion (prompt/completion), all of `text`
  kCompletion,  // only the completion, or a conversation's last assistant reply
  kAll,         // every token
};
Result<LossOn> ParseLossOn(std::string_view name);  // "assistant" | "completion" | "all"

// What labelling needs from a tokenizer.
class TextEncoder {
 public:
  virtual ~TextEncoder() = default;
  // Ids of `text`, and for each the [begin, end) bytes of `text` it came from. With
  // add_special_tokens the tokenizer's own BOS/EOS rules apply (plain text only).
  virtual std::vector<int32_t> EncodeWithOffsets(std::string_view text, bool add_special_tokens,
                                                 std::vector<std::pair<size_t, size_t>>* offsets) const = 0;
  virtual std::optional<int32_t> eos_id() const = 0;
  // Special-token strings (e.g. "<|im_end|>"): with train_on_eos false, one ending a reply is not trained.
  virtual const std::vector<std::string>& special_tokens() const = 0;
  // False for the stand-in used when a model directory has no tokenizer: only pre-tokenized data.
  virtual bool can_encode() const { return true; }
};

// Renders messages (and tools, null when none) with the chat template.
using RenderChat =
    std::function<Result<std::string>(const nlohmann::ordered_json& messages, const nlohmann::ordered_json& tools,
                                      bool add_generation_prompt)>;

struct LabelOptions {
  LossOn loss_on = LossOn::kAssistant;
  bool train_on_eos = true;  // the end-of-turn / EOS token after a trained reply is trained
};

// The [begin, end) bytes of `rendered` (the whole conversation) that are trained.
Result<std::vector<std::pair<size_t, size_t>>> TrainedSpans(const SftRecord& record, const std::string& rendered,
                                                            const RenderChat& render, const TextEncoder& encoder,
                                                            const LabelOptions& options);

// The record as ids and labels (not shifted; -100 = not trained). Conversations need `render`.
Result<Example> TokenizeSftRecord(const SftRecord& record, const TextEncoder& encoder, const RenderChat& render,
                                  const LabelOptions& options);

}  // namespace eft::trainer
