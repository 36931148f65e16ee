// The JSONL formats of SFT data, one JSON object per line, and what each line becomes:
//
//   messages           {"messages": [{"role": ..., "content": ...}, ...], "tools": [...]?}
//                      -> a conversation, rendered with the model's chat template
//   prompt_completion  {"prompt": "...", "completion": "..."}            -> plain text
//                      {"prompt": [messages], "completion": [messages]}  -> a conversation
//   text               {"text": "..."}                                   -> plain text, all trained
//   alpaca             {"instruction": ..., "input": ...?, "output": ..., "system": ...?}
//                      -> a conversation: [system], user (instruction, blank line, input), assistant
//   pretokenized       {"input_ids": [...], "labels": [...]?}            -> tokens as they are
//
// `auto` decides per file from its first line's keys. Errors name the field path
// ("messages[2].role: expected a string") so the caller can prefix file:line.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "trainer/data/token_dataset.h"

namespace eft::trainer {

enum class DataFormat { kAuto, kMessages, kPromptCompletion, kText, kAlpaca, kPretokenized };

// "auto", "messages", "prompt_completion", "text", "alpaca", "pretokenized".
Result<DataFormat> ParseDataFormat(std::string_view name);
const char* DataFormatName(DataFormat format);

// The format whose keys `line` carries; InvalidArgument listing the keys when none matches.
Result<DataFormat> DetectFormat(const nlohmann::ordered_json& line);

struct SftRecord {
  enum class Kind { kConversation, kText, kTokens };
  Kind kind = Kind::kText;
  // kConversation: the messages (and tools, null when absent). Messages before
  // first_completion_message are the prompt of a prompt/completion pair (0 otherwise).
  nlohmann::ordered_json messages;
  nlohmann::ordered_json tools;
  size_t first_completion_message = 0;
  // kText: `prompt` is never trained unless loss_on is all; `text` is the completion or the text.
  std::string prompt;
  std::string text;
  bool all_trained = false;  // the text format: no prompt at all
  // kTokens
  Example tokens;
};

// One line of `format` (not kAuto) as a record. `vocab_size` > 0 checks pretokenized ids.
Result<SftRecord> ToSftRecord(const nlohmann::ordered_json& line, DataFormat format, int64_t vocab_size);

}  // namespace eft::trainer
