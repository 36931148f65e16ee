// `eft-train generate` and `eft-train chat`: text generation from a Hugging Face model directory on
// one process (docs/generate.md).
//
//   eft-train generate --model DIR (--prompt TEXT | --messages F.json | --prompt-ids "1 2 3")
//                      [--max-new-tokens N] [--temperature T] [--top-p P] [--top-k K] [--seed S]
//                      [--format text|raw|ids] [--dtype bf16|fp32] [--threads N] [--stats]
//   eft-train chat --model DIR [--system TEXT] [--format text|raw] [same decoding options]
//
// `text` shows a reply as a chat UI does (reply_view.h: the think block dropped when empty, set
// apart when not); `raw` is the exact decoded text.
//
// main.cc constructs one GenerateCommands on its CLI::App before parsing and, when selected(),
// returns Run(...). Exit codes as the rest of eft-train: 0, 2 for bad input (missing model, bad
// flags, no chat template where one is needed), 1 anything else.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <string>

#include <CLI/CLI.hpp>

#include "trainer/generate/sampler.h"

namespace eft::trainer {

struct GenerateArgs {
  std::string model;
  std::string adapter;  // a PEFT LoRA adapter for `model` (docs/lora.md); "" for none
  std::string prompt, messages_file, prompt_ids;  // generate: exactly one
  std::string system;                             // chat: an optional system message
  std::string format = "text";                    // text | raw | ids (chat: text | raw)
  std::string dtype = "fp32";                     // fp32 | bf16
  int64_t max_new_tokens = 256;
  SamplingOptions sampling;
  int threads = 0;     // 0: OMP_NUM_THREADS, else every core
  bool stats = false;  // a JSON line of counts and timings on stderr (per turn in chat)
};

// Exit code. `out` gets the generated text (or ids), streamed; `err` errors and --stats.
int RunGenerate(const GenerateArgs& args, std::ostream& out, std::ostream& err);
// Reads one user message per line of `in` until EOF; "/reset" starts a new conversation.
int RunChat(const GenerateArgs& args, std::istream& in, std::ostream& out, std::ostream& err);

class GenerateCommands {
 public:
  explicit GenerateCommands(CLI::App& app);  // adds `generate` and `chat`
  GenerateCommands(const GenerateCommands&) = delete;  // CLI11 holds pointers into the args
  GenerateCommands& operator=(const GenerateCommands&) = delete;

  bool selected() const { return generate_->parsed() || chat_->parsed(); }
  int Run(std::istream& in, std::ostream& out, std::ostream& err) const;

 private:
  GenerateArgs generate_args_, chat_args_;
  CLI::App* generate_ = nullptr;
  CLI::App* chat_ = nullptr;
};

}  // namespace eft::trainer
