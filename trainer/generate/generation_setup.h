// What `generate` and `chat` share: loading a model directory for generation (weights, tokenizer,
// chat template, eos tokens), thread setup, exit codes and the --stats line. Internal to
// trainer/generate.
#pragma once

#include <iosfwd>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "trainer/chat_template/chat_template.h"
#include "trainer/generate/generate_command.h"
#include "trainer/generate/generator.h"
#include "trainer/generate/inference_model.h"
#include "trainer/tokenizer/tokenizer.h"

namespace eft::trainer::gen {

struct LoadedModel {
  std::unique_ptr<InferenceModel> model;
  std::unique_ptr<Tokenizer> tokenizer;         // null when the directory has none
  std::optional<ModelChatTemplate> chat_template;  // empty when the directory has none
  std::vector<int32_t> eos_ids;
};

// Threads first (--threads, else OMP_NUM_THREADS, else every core; OpenBLAS kept at one thread as
// the trainer does), then the directory. NotFound when it has no config.json/weights.
Result<LoadedModel> LoadForGeneration(const GenerateArgs& args);

int Fail(const Status& status, std::ostream& err);  // prints "eft-train: <message>", returns the code

// Whether `out` is this process's stdout and that is a terminal (ReplyView dims the thinking there).
bool IsTerminal(const std::ostream& out);

// One JSON object on a line: prompt/reused/new token counts, stop reason, prefill seconds, decode
// tokens/s, and the median ms per token over the first and last quarter of the new tokens (flat
// when each token costs one position).
void PrintStats(const GenerateResult& result, std::ostream& err);

}  // namespace eft::trainer::gen
