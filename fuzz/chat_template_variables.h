// The render variables fuzz/chat_template_fuzz.cc gives every template: a conversation with a system
// prompt, a tool call and its result, and content given as parts. The interpreter's limit tests
// (tests/unit/trainer/chat_template/limits_test.cc) render the fuzzer's findings with the same ones.
#pragma once

namespace eft::fuzz {

inline constexpr const char kChatTemplateVariables[] = R"({
  "messages": [
    {"role": "system", "content": "You are helpful."},
    {"role": "user", "content": "What is 2+2? <b>bold</b> caf\u00e9"},
    {"role": "assistant", "content": "4", "tool_calls": [
      {"type": "function", "function": {"name": "add", "arguments": {"a": 2, "b": 2}}}]},
    {"role": "tool", "content": "{\"result\": 4}", "tool_call_id": "call_1"},
    {"role": "user", "content": [{"type": "text", "text": "and 3+3?"}, {"type": "image"}]}
  ],
  "tools": [{"type": "function", "function": {"name": "add", "description": "adds",
             "parameters": {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}}}],
  "add_generation_prompt": true, "bos_token": "<s>", "eos_token": "</s>", "enable_thinking": false,
  "date_string": "26 Jul 2024"
})";

}  // namespace eft::fuzz
