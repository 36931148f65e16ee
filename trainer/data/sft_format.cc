#include "trainer/data/sft_format.h"

#include <array>
#include <utility>

namespace eft::trainer {
namespace {

using ojson = nlohmann::ordered_json;

constexpr std::array<std::pair<DataFormat, const char*>, 6> kNames = {{
    {DataFormat::kAuto, "auto"},
    {DataFormat::kMessages, "messages"},
    {DataFormat::kPromptCompletion, "prompt_completion"},
    {DataFormat::kText, "text"},
    {DataFormat::kAlpaca, "alpaca"},
    {DataFormat::kPretokenized, "pretokenized"},
}};

Status Bad(const std::string& field, const std::string& what) { return Status::InvalidArgument(field + ": " + what); }

// A message list as chat templates expect it: objects with a string role; content a string, null
// or a list of parts (left to the template); other keys (tool_calls, name, reasoning_content...)
// passed through.
Status CheckMessages(const ojson& messages, const std::string& field) {
  if (!messages.is_array()) return Bad(field, std::string("expected a list of messages, got ") + messages.type_name());
  if (messages.empty()) return Bad(field, "is empty");
  for (size_t i = 0; i < messages.size(); ++i) {
    const std::string at = field + "[" + std::to_string(i) + "]";
    const ojson& m = messages[i];
    if (!m.is_object()) return Bad(at, std::string("expected a message object, got ") + m.type_name());
    auto role = m.find("role");
    if (role == m.end()) return Bad(at + ".role", "missing");
    if (!role->is_string() || role->get<std::string>().empty()) return Bad(at + ".role", "expected a non-empty string");
    auto content = m.find("content");
    if (content != m.end() && !content->is_string() && !content->is_null() && !content->is_array()) {
      return Bad(at + ".content", std::string("expected a string, null or a list of parts, got ") + content->type_name());
    }
    if (content == m.end() && !m.contains("tool_calls")) return Bad(at + ".content", "missing");
  }
  return Status::Ok();
}

Result<std::string> StringField(const ojson& line, const char* key, bool required) {
  auto it = line.find(key);
  if (it == line.end() || it->is_null()) {
    if (required) return Bad(key, "missing");
    return std::string();
  }
  if (!it->is_string()) return Bad(key, std::string("expected a string, got ") + it->type_name());
  return it->get<std::string>();
}

bool Has(const ojson& line, const char* key) { return line.contains(key); }

}  // namespace

Result<DataFormat> ParseDataFormat(std::string_view name) {
  for (const auto& [format, n] : kNames) {
    if (name == n) return format;
  }
  return Status::InvalidArgument("data.format: '" + std::string(name) +
                                 "' is not one of auto, messages, prompt_completion, text, alpaca, pretokenized");
}

const char* DataFormatName(DataFormat format) {
  for (const auto& [f, n] : kNames) {
    if (f == format) return n;
  }
  return "?";
}

Result<DataFormat> DetectFormat(const ojson& line) {
  if (!line.is_object()) return Status::InvalidArgument(std::string("expected a JSON object, got ") + line.type_name());
  if (Has(line, "messages")) return DataFormat::kMessages;
  if (Has(line, "prompt") && Has(line, "completion")) return DataFormat::kPromptCompletion;
  if (Has(line, "instruction") && Has(line, "output")) return DataFormat::kAlpaca;
  if (Has(line, "input_ids")) return DataFormat::kPretokenized;
  if (Has(line, "text")) return DataFormat::kText;
  std::string keys;
  for (const auto& [k, v] : line.items()) keys += (keys.empty() ? "" : ", ") + k;
  return Status::InvalidArgument("cannot tell the format from the keys (" + keys +
                                 "): expected messages, prompt+completion, instruction+output, text or input_ids "
                                 "(or set data.format)");
}

Result<SftRecord> ToSftRecord(const ojson& line, DataFormat format, int64_t vocab_size) {
  if (!line.is_object()) return Status::InvalidArgument(std::string("expected a JSON object, got ") + line.type_name());
  SftRecord r;
  switch (format) {
    case DataFormat::kAuto:
      return Status::InvalidArgument("ToSftRecord: detect the format first");
    case DataFormat::kMessages: {
      auto messages = line.find("messages");
      if (messages == line.end()) return Bad("messages", "missing");
      EFT_RETURN_IF_ERROR(CheckMessages(*messages, "messages"));
      r.kind = SftRecord::Kind::kConversation;
      r.messages = *messages;
      if (auto tools = line.find("tools"); tools != line.end() && !tools->is_null()) {
        if (!tools->is_array()) return Bad("tools", std::string("expected a list, got ") + tools->type_name());
        r.tools = *tools;
      }
      return r;
    }
    case DataFormat::kPromptCompletion: {
      auto prompt = line.find("prompt"), completion = line.find("completion");
      if (prompt == line.end()) return Bad("prompt", "missing");
      if (completion == line.end()) return Bad("completion", "missing");
      if (prompt->is_string() && completion->is_string()) {
        r.kind = SftRecord::Kind::kText;
        r.prompt = prompt->get<std::string>();
        r.text = completion->get<std::string>();
        if (r.text.empty()) return Bad("completion", "is empty");
        return r;
      }
      if (prompt->is_array() && completion->is_array()) {
        EFT_RETURN_IF_ERROR(CheckMessages(*prompt, "prompt"));
        EFT_RETURN_IF_ERROR(CheckMessages(*completion, "completion"));
        r.kind = SftRecord::Kind::kConversation;
        r.messages = *prompt;
        r.first_completion_message = prompt->size();
        for (const auto& m : *completion) r.messages.push_back(m);
        if (auto tools = line.find("tools"); tools != line.end() && tools->is_array()) r.tools = *tools;
        return r;
      }
      return Bad("prompt", "prompt and completion must both be strings or both be message lists");
    }
    case DataFormat::kText: {
      EFT_ASSIGN_OR_RETURN(r.text, StringField(line, "text", true));
      if (r.text.empty()) return Bad("text", "is empty");
      r.kind = SftRecord::Kind::kText;
      r.all_trained = true;
      return r;
    }
    case DataFormat::kAlpaca: {
      EFT_ASSIGN_OR_RETURN(std::string instruction, StringField(line, "instruction", true));
      EFT_ASSIGN_OR_RETURN(std::string input, StringField(line, "input", false));
      EFT_ASSIGN_OR_RETURN(std::string output, StringField(line, "output", true));
      EFT_ASSIGN_OR_RETURN(std::string system, StringField(line, "system", false));
      if (output.empty()) return Bad("output", "is empty");
      r.kind = SftRecord::Kind::kConversation;
      r.messages = ojson::array();
      if (!system.empty()) r.messages.push_back({{"role", "system"}, {"content", system}});
      r.messages.push_back({{"role", "user"}, {"content", input.empty() ? instruction : instruction + "\n\n" + input}});
      r.messages.push_back({{"role", "assistant"}, {"content", output}});
      r.first_completion_message = r.messages.size() - 1;
      return r;
    }
    case DataFormat::kPretokenized: {
      r.kind = SftRecord::Kind::kTokens;
      // ParsePretokenizedObject takes the unordered json type; key order does not matter there.
      EFT_RETURN_IF_ERROR(ParsePretokenizedObject(nlohmann::json::parse(line.dump()), "", vocab_size, &r.tokens));
      return r;
    }
  }
  return Status::Internal("unknown data format");
}

}  // namespace eft::trainer
