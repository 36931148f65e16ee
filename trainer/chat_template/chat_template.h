// Chat templates: the Jinja templates Hugging Face models ship in tokenizer_config.json, rendered
// exactly as transformers' apply_chat_template renders them (Jinja 2 with trim_blocks,
// lstrip_blocks, loop controls, an immutable sandbox, and HF's tojson, raise_exception and
// strftime_now). The language subset is what real chat templates use; anything else is an
// InvalidArgument naming its line and column at compile time (unknown tags, filters, tests) or at
// render time.
#pragma once

#include <iosfwd>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "common/status.h"

namespace eft::trainer {

namespace jinja {
struct Stmt;
}

class ChatTemplate {
 public:
  static Result<ChatTemplate> Compile(const std::string& source);

  // `variables`: an object (messages, tools, add_generation_prompt, bos_token, ...).
  // raise_exception(msg) in the template gives FailedPrecondition with msg.
  Result<std::string> Render(const nlohmann::ordered_json& variables) const;

 private:
  std::shared_ptr<const std::vector<std::shared_ptr<jinja::Stmt>>> body_;
};

// A model directory's chat template(s) and the special-token variables they see.
class ModelChatTemplate {
 public:
  // tokenizer_config.json's "chat_template" (a string, or a list of {name, template}), else
  // chat_template.jinja; `override_file` (data.chat_template other than "auto") replaces both.
  static Result<ModelChatTemplate> Load(const std::string& model_dir, const std::string& override_file = "");

  // As apply_chat_template(messages, tools=tools, add_generation_prompt=...) with `extra`
  // variables (e.g. enable_thinking) merged in. tools: null when none.
  Result<std::string> Render(const nlohmann::ordered_json& messages, const nlohmann::ordered_json& tools,
                             bool add_generation_prompt,
                             const nlohmann::ordered_json& extra = nlohmann::ordered_json::object()) const;

  // The template text used without tools (for cache keys and messages).
  const std::string& source() const { return default_source_; }

 private:
  std::string default_source_, tool_use_source_;
  std::string source_path_;  // the file the template came from, for error messages
  std::shared_ptr<ChatTemplate> default_, tool_use_;
  nlohmann::ordered_json special_tokens_ = nlohmann::ordered_json::object();
};

// `eft-train chat-template --tokenizer DIR --messages F.json [--tools F] [--add-generation-prompt]`:
// prints the rendered text. F.json: a list of messages, or {"messages": [...], "tools": [...]}.
// Returns the exit code (2: bad template or input).
int RunChatTemplateCommand(const std::string& model_dir, const std::string& messages_file,
                           const std::string& tools_file, bool add_generation_prompt, std::ostream& out,
                           std::ostream& err);

}  // namespace eft::trainer
