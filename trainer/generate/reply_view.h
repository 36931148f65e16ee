// ReplyView: an assistant's streamed text as a chat UI shows it. Reasoning models (Qwen3, DeepSeek-R1)
// open their reply with a think block, `<think>...</think>`, which their chat templates also put
// into prompts (empty, when thinking is off) and fine-tuned models therefore learn to write. A chat
// UI does not print the tags: an empty block is dropped with the blank lines after it, a non-empty
// one is set apart ("thinking: ...", dimmed on a terminal) and the answer follows after a blank
// line. Everything else passes through unchanged, as it streams: text is held back only while it
// may still be the start of `<think>` or `</think>`, or is trailing whitespace inside the block.
// `--format raw` (generate_command.h) bypasses this and prints the exact text.
#pragma once

#include <string>

namespace eft::trainer {

class ReplyView {
 public:
  // `dim`: wrap the thinking in ANSI dim/reset (stdout is a terminal).
  explicit ReplyView(bool dim = false) : dim_(dim) {}

  // The display text that this chunk of the reply completes.
  std::string Push(const std::string& text);
  // What is still held back; an unterminated think block is shown and closed.
  std::string Finish();

  static constexpr char kOpen[] = "<think>";
  static constexpr char kClose[] = "</think>";

 private:
  enum class Phase { kStart, kThinking, kAnswerStart, kAnswer };
  std::string Thinking(const std::string& text);  // shown thinking text, with the label before the first
  std::string EndThinking();

  const bool dim_;
  Phase phase_ = Phase::kStart;
  bool think_shown_ = false;  // the label and some thinking were written
  std::string held_;
};

}  // namespace eft::trainer
