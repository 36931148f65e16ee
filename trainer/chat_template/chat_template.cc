#include "trainer/chat_template/chat_template.h"

#include <filesystem>
#include <iostream>

#include "common/file_util.h"
#include "trainer/chat_template/interpreter.h"
#include "trainer/chat_template/parser.h"

namespace eft::trainer {
namespace {

using nlohmann::ordered_json;

}  // namespace

Result<ChatTemplate> ChatTemplate::Compile(const std::string& source) {
  auto body = jinja::Parse(source);
  if (!body.ok()) return Status::InvalidArgument("chat template: " + body.status().message());
  Status names = jinja::CheckNames(*body);
  if (!names.ok()) return Status::InvalidArgument("chat template: " + names.message());
  ChatTemplate t;
  t.body_ = std::make_shared<const jinja::Body>(std::move(*body));
  return t;
}

Result<std::string> ChatTemplate::Render(const ordered_json& variables) const {
  jinja::Value vars = jinja::Value::FromJson(variables);
  if (!vars.is_dict()) return Status::InvalidArgument("chat template variables must be an object");
  auto out = jinja::Render(*body_, vars.dict());
  if (!out.ok()) {
    if (out.status().code() == StatusCode::kFailedPrecondition) return out.status();
    return Status::InvalidArgument("chat template: " + out.status().message());
  }
  return out;
}

Result<ModelChatTemplate> ModelChatTemplate::Load(const std::string& model_dir, const std::string& override_file) {
  namespace fs = std::filesystem;
  ModelChatTemplate m;
  ordered_json config = ordered_json::object();
  const std::string config_path = (fs::path(model_dir) / "tokenizer_config.json").string();
  if (fs::exists(config_path)) {
    EFT_ASSIGN_OR_RETURN(std::string text, ReadFileToString(config_path));
    config = ordered_json::parse(text, nullptr, false);
    if (config.is_discarded() || !config.is_object())
      return Status::InvalidArgument(config_path + " is not a JSON object");
  }
  // The special tokens apply_chat_template passes: bos_token etc. as strings.
  for (const char* key : {"bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token"}) {
    if (!config.contains(key)) continue;
    const ordered_json& v = config[key];
    if (v.is_string()) m.special_tokens_[key] = v;
    if (v.is_object() && v.contains("content") && v["content"].is_string()) m.special_tokens_[key] = v["content"];
  }
  if (config.contains("additional_special_tokens") && config["additional_special_tokens"].is_array()) {
    ordered_json extra = ordered_json::array();
    for (const auto& t : config["additional_special_tokens"]) {
      if (t.is_string()) extra.push_back(t);
      if (t.is_object() && t.contains("content") && t["content"].is_string()) extra.push_back(t["content"]);
    }
    m.special_tokens_["additional_special_tokens"] = extra;
  }

  // As transformers (>= 4.43) reads a directory: template files, when there are any, replace
  // tokenizer_config.json's chat_template entirely.
  const fs::path file = fs::path(model_dir) / "chat_template.jinja";
  const fs::path tool_use_file = fs::path(model_dir) / "additional_chat_templates" / "tool_use.jinja";
  if (!override_file.empty()) {
    EFT_ASSIGN_OR_RETURN(m.default_source_, ReadFileToString(override_file));
    m.source_path_ = override_file;
  } else if (fs::exists(file) || fs::exists(tool_use_file)) {
    m.source_path_ = (fs::exists(file) ? file : tool_use_file).string();
    if (fs::exists(file)) {
      EFT_ASSIGN_OR_RETURN(m.default_source_, ReadFileToString(file.string()));
    }
    if (fs::exists(tool_use_file)) {
      EFT_ASSIGN_OR_RETURN(m.tool_use_source_, ReadFileToString(tool_use_file.string()));
    }
  } else if (config.contains("chat_template") && config["chat_template"].is_string()) {
    m.default_source_ = config["chat_template"].get<std::string>();
    m.source_path_ = config_path;
  } else if (config.contains("chat_template") && config["chat_template"].is_array()) {
    m.source_path_ = config_path;
    const ordered_json& list = config["chat_template"];
    for (size_t i = 0; i < list.size(); ++i) {
      const ordered_json& entry = list[i];
      auto name = entry.is_object() ? entry.find("name") : entry.end();
      auto text = entry.is_object() ? entry.find("template") : entry.end();
      if (name == entry.end() || !name->is_string() || text == entry.end() || !text->is_string()) {
        return Status::InvalidArgument(config_path + ": chat_template[" + std::to_string(i) +
                                       "]: expected {\"name\": string, \"template\": string}");
      }
      if (*name == "default") m.default_source_ = text->get<std::string>();
      if (*name == "tool_use") m.tool_use_source_ = text->get<std::string>();
    }
    if (m.default_source_.empty() && m.tool_use_source_.empty())
      return Status::InvalidArgument(config_path + ": chat_template list has neither 'default' nor 'tool_use'");
  } else {
    return Status::NotFound(model_dir + " has no chat template (tokenizer_config.json chat_template or "
                                        "chat_template.jinja); set data.chat_template to a Jinja file");
  }
  if (!m.default_source_.empty()) {
    auto t = ChatTemplate::Compile(m.default_source_);
    if (!t.ok()) return t.status().WithContext(m.source_path_);
    m.default_ = std::make_shared<ChatTemplate>(std::move(*t));
  }
  if (!m.tool_use_source_.empty()) {
    auto t = ChatTemplate::Compile(m.tool_use_source_);
    if (!t.ok()) return Status::InvalidArgument(m.source_path_ + ": tool_use " + t.status().message());
    m.tool_use_ = std::make_shared<ChatTemplate>(std::move(*t));
  }
  return m;
}

Result<std::string> ModelChatTemplate::Render(const ordered_json& messages, const ordered_json& tools,
                                              bool add_generation_prompt, const ordered_json& extra) const {
  const bool with_tools = !tools.is_null();
  const ChatTemplate* t = (with_tools && tool_use_) ? tool_use_.get() : default_ ? default_.get() : tool_use_.get();
  ordered_json vars = special_tokens_;
  vars["messages"] = messages;
  vars["tools"] = tools;
  vars["documents"] = nullptr;
  vars["add_generation_prompt"] = add_generation_prompt;
  for (auto it = extra.begin(); it != extra.end(); ++it) vars[it.key()] = it.value();
  auto text = t->Render(vars);
  // raise_exception's message is the data's fault and reads as the template wrote it; any other
  // failure (a runaway loop, an unsupported construct) is the template file's.
  if (!text.ok() && text.status().code() != StatusCode::kFailedPrecondition)
    return text.status().WithContext(source_path_);
  return text;
}

int RunChatTemplateCommand(const std::string& model_dir, const std::string& messages_file,
                           const std::string& tools_file, bool add_generation_prompt, std::ostream& out,
                           std::ostream& err) {
  auto fail = [&](const std::string& m) {
    err << "eft-train chat-template: " << m << "\n";
    return 2;
  };
  auto tmpl = ModelChatTemplate::Load(model_dir);
  if (!tmpl.ok()) return fail(tmpl.status().message());
  auto read_json = [&](const std::string& path, ordered_json* j) -> Status {
    EFT_ASSIGN_OR_RETURN(std::string text, ReadFileToString(path));
    *j = ordered_json::parse(text, nullptr, false);
    if (j->is_discarded()) return Status::InvalidArgument(path + " is not valid JSON");
    return Status::Ok();
  };
  ordered_json doc, messages, tools;
  if (Status s = read_json(messages_file, &doc); !s.ok()) return fail(s.message());
  if (doc.is_array()) {
    messages = doc;
  } else if (doc.is_object() && doc.contains("messages")) {
    messages = doc["messages"];
    if (doc.contains("tools")) tools = doc["tools"];
  } else {
    return fail(messages_file + ": expected a list of messages or {\"messages\": [...]}");
  }
  if (!tools_file.empty())
    if (Status s = read_json(tools_file, &tools); !s.ok()) return fail(s.message());
  auto text = tmpl->Render(messages, tools, add_generation_prompt);
  if (!text.ok()) return fail(text.status().message());
  out << *text;
  out.flush();
  return out ? 0 : 1;
}

}  // namespace eft::trainer
