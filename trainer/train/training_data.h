// The training set of a run: data.train tokenized with the model's tokenizer and chat template,
// labelled by data.loss_on, cut at max_seq_len, through the token cache (data/token_cache.h), so
// only one process per filesystem tokenizes and a restart tokenizes nothing.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "trainer/data/sft_dataset.h"
#include "trainer/data/token_dataset.h"
#include "trainer/train/train_config.h"

namespace eft::trainer {

// The text side of the model: how to tokenize and render, and what that depends on (for the key).
struct TextPipeline {
  const TextEncoder* encoder = nullptr;  // null: only pre-tokenized data can be read
  RenderChat render;                     // empty: conversations cannot be read
  std::vector<std::string> key_files;    // tokenizer files whose bytes the tokens depend on
  std::string template_source;           // the chat template's text
};

// The model directory's tokenizer and chat template (data.chat_template: auto, or a Jinja file),
// owned, with the TextPipeline view of them.
class LoadedText {
 public:
  LoadedText() = default;
  LoadedText(LoadedText&&) = default;
  LoadedText& operator=(LoadedText&&) = default;
  ~LoadedText();
  TextPipeline pipeline() const;

 private:
  friend Result<LoadedText> LoadTextPipeline(const TrainConfig& config);
  std::unique_ptr<TextEncoder> encoder_;
  RenderChat render_;
  std::vector<std::string> key_files_;
  std::string template_source_;
};
Result<LoadedText> LoadTextPipeline(const TrainConfig& config);

struct PreparedData {
  TokenDataset documents;      // before packing
  SftBuildStats stats;
  bool from_cache = false;     // read back rather than built by this process
  std::string cache_file;
};

// Where the token cache lives: data.cache_dir, else <checkpoint.dir>/data-cache, else
// $HOME/.cache/eft/data.
std::string TokenCacheDir(const TrainConfig& config);

SftDataOptions SftOptionsFrom(const TrainConfig& config, int64_t vocab_size);

// `field` names the spec field the file came from in errors.
Result<PreparedData> PrepareTrainingData(const TrainConfig& config, int64_t vocab_size, const TextPipeline& text,
                                         const BuildProgress& progress = {}, const char* field = "spec.data.train");

// One set of data.eval, read exactly as data.train is (format, template, labels, max_seq_len, the
// token cache), so the eval loss measures what training optimizes.
Result<PreparedData> PrepareEvalData(const TrainConfig& config, const v1::EvalSet& set, int64_t vocab_size,
                                     const TextPipeline& text);

}  // namespace eft::trainer
