// Chat templates (trainer/chat_template/chat_template.h): the Jinja that tokenizer_config.json
// ships, lexed, parsed and run on a fixed conversation. The interpreter's limits (steps, text and
// list sizes, call depth) must stop a template that loops forever or builds a huge string with an
// error; libFuzzer's -timeout and -rss_limit_mb catch one that does not.
#include "fuzz/chat_template_variables.h"
#include "fuzz/fuzz_target.h"
#include "trainer/chat_template/chat_template.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > 16 * 1024) return 0;  // real templates are a few KB
  auto t = eft::trainer::ChatTemplate::Compile(eft::fuzz::AsString(data, size));
  if (!t.ok()) {
    FUZZ_CHECK(!t.status().message().empty(), "a refusal without a message");
    return 0;
  }
  static const nlohmann::ordered_json kVariables = nlohmann::ordered_json::parse(eft::fuzz::kChatTemplateVariables);
  auto out = t->Render(kVariables);
  if (!out.ok()) FUZZ_CHECK(!out.status().message().empty(), "a render error without a message");
  return 0;
}
