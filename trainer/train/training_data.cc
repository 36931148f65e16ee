#include "trainer/train/training_data.h"

#include <cstdlib>
#include <filesystem>

#include "common/logging.h"
#include "trainer/data/data_files.h"
#include "trainer/data/token_cache.h"
#include "trainer/chat_template/chat_template.h"
#include "trainer/tokenizer/tokenizer.h"

namespace eft::trainer {
namespace {

// Bump when tokenization or labelling changes, so old caches are not reused.
constexpr const char* kPipelineVersion = "eft-sft-1";

// Stands in when the model has no tokenizer: only pre-tokenized lines get through.
class NoEncoder final : public TextEncoder {
 public:
  std::vector<int32_t> EncodeWithOffsets(std::string_view, bool, std::vector<std::pair<size_t, size_t>>*) const override {
    return {};
  }
  std::optional<int32_t> eos_id() const override { return std::nullopt; }
  const std::vector<std::string>& special_tokens() const override { return none_; }
  bool can_encode() const override { return false; }

 private:
  std::vector<std::string> none_;
};

// The model's tokenizer as the labelling code sees it.
class TokenizerEncoder final : public TextEncoder {
 public:
  explicit TokenizerEncoder(std::unique_ptr<Tokenizer> tokenizer) : tokenizer_(std::move(tokenizer)) {}
  std::vector<int32_t> EncodeWithOffsets(std::string_view text, bool add_special_tokens,
                                         std::vector<std::pair<size_t, size_t>>* offsets) const override {
    Tokenizer::Encoding e = tokenizer_->Encode(text, add_special_tokens);
    if (offsets) *offsets = std::move(e.offsets);
    return std::move(e.ids);
  }
  std::optional<int32_t> eos_id() const override { return tokenizer_->eos_id(); }
  const std::vector<std::string>& special_tokens() const override { return tokenizer_->special_tokens(); }

 private:
  std::unique_ptr<Tokenizer> tokenizer_;
};

}  // namespace

LoadedText::~LoadedText() = default;

TextPipeline LoadedText::pipeline() const {
  TextPipeline p;
  p.encoder = encoder_.get();
  p.render = render_;
  p.key_files = key_files_;
  p.template_source = template_source_;
  return p;
}

Result<LoadedText> LoadTextPipeline(const TrainConfig& c) {
  const std::string& model = c.spec.model();
  const v1::DataSpec& data = c.spec.data();
  LoadedText text;
  if (TokenizerFiles(model).empty()) {
    // A model directory without a tokenizer (e.g. made by init-model without --tokenizer) can
    // still train on pre-tokenized data; text fails later with a message saying why.
    return text;
  }
  // What the data needs decides which failures stop the run: pre-tokenized data needs neither the
  // tokenizer nor the template, plain text no template.
  const bool tokens_only = data.format() == "pretokenized";
  const bool no_conversations = tokens_only || data.format() == "text";
  auto tokenizer = LoadTokenizer(model);
  if (!tokenizer.ok()) {
    if (!tokens_only) return Status::InvalidArgument("model tokenizer: " + tokenizer.status().message());
    EFT_LOG(WARNING) << "model tokenizer not usable (" << tokenizer.status().message()
                     << "); the data is pre-tokenized, so training goes on without it";
    return text;
  }
  text.encoder_ = std::make_unique<TokenizerEncoder>(std::move(*tokenizer));
  text.key_files_ = TokenizerFiles(model);
  // The chat template: data.chat_template "auto" takes the model's own. A model without one can
  // still train on text and pre-tokenized data; conversations then fail naming the reason.
  const std::string override_file = data.chat_template() == "auto" ? "" : data.chat_template();
  auto chat = ModelChatTemplate::Load(model, override_file);
  if (chat.ok()) {
    auto shared = std::make_shared<ModelChatTemplate>(std::move(*chat));
    text.template_source_ = shared->source();
    text.render_ = [shared](const nlohmann::ordered_json& messages, const nlohmann::ordered_json& tools,
                            bool add_generation_prompt) -> Result<std::string> {
      auto rendered = shared->Render(messages, tools, add_generation_prompt);
      if (!rendered.ok() && rendered.status().code() == StatusCode::kFailedPrecondition)
        return Status::InvalidArgument("the chat template refused the conversation: " + rendered.status().message());
      return rendered;
    };
  } else if (!no_conversations && (chat.status().code() != StatusCode::kNotFound || !override_file.empty())) {
    return chat.status();
  } else if (chat.status().code() != StatusCode::kNotFound) {
    EFT_LOG(WARNING) << "chat template not usable (" << chat.status().message() << "); data.format "
                     << data.format() << " does not need it";
  }
  return text;
}

std::string TokenCacheDir(const TrainConfig& c) {
  // Decided here rather than by NormalizeJobSpec: checkpoint.dir is the controller's to fill in
  // after normalizing, and HOME is the rank's.
  if (!c.spec.data().cache_dir().empty()) return c.spec.data().cache_dir();
  if (!c.spec.checkpoint().dir().empty()) return c.spec.checkpoint().dir() + "/data-cache";
  const char* home = std::getenv("HOME");
  return std::string(home && *home ? home : "/tmp") + "/.cache/eft/data";
}

SftDataOptions SftOptionsFrom(const TrainConfig& c, int64_t vocab_size) {
  const v1::DataSpec& data = c.spec.data();
  SftDataOptions o;
  auto format = ParseDataFormat(data.format());
  o.format = format.ok() ? *format : DataFormat::kAuto;
  auto loss_on = ParseLossOn(data.loss_on());
  o.labels.loss_on = loss_on.ok() ? *loss_on : LossOn::kAssistant;
  o.labels.train_on_eos = data.train_on_eos();
  o.max_seq_len = data.max_seq_len();
  o.truncate = data.truncation() != "drop";
  o.skip_bad_lines = data.on_bad_line() == "skip";
  o.vocab_size = vocab_size;
  return o;
}

namespace {

// `path` (data.train or an eval set's file) read with the spec's data options; `field` names it in
// errors.
Result<PreparedData> PrepareData(const TrainConfig& c, const std::string& path, int64_t vocab_size,
                                 const TextPipeline& text, const BuildProgress& progress, const std::string& field) {
  EFT_RETURN_IF_ERROR(ParseDataFormat(c.spec.data().format()).status());
  EFT_RETURN_IF_ERROR(ParseLossOn(c.spec.data().loss_on()).status());
  const SftDataOptions options = SftOptionsFrom(c, vocab_size);
  // A directory or glob: its files in order, each by name and content (data_files.h).
  auto files = ResolveDataFiles(path);
  if (!files.ok()) return files.status().WithContext(field);
  CacheKey key;
  key.AddText(kPipelineVersion);
  for (const auto& f : *files) {
    if (files->size() > 1) key.AddText(std::filesystem::path(f).filename().string());
    EFT_RETURN_IF_ERROR(key.AddFile(f).WithContext(field));
  }
  for (const auto& f : text.key_files) EFT_RETURN_IF_ERROR(key.AddFile(f));
  key.AddText(text.template_source);
  key.AddText(options.ToJson().dump());

  static const NoEncoder kNoEncoder;
  const TextEncoder& encoder = text.encoder ? *text.encoder : kNoEncoder;
  PreparedData out;
  const std::string dir = TokenCacheDir(c);
  bool built_here = false;
  nlohmann::json info;
  auto dataset = LoadOrStreamTokenCache(
      dir, key.Hex(),
      [&](TokenSink* sink, nlohmann::json* built_info) -> Status {
        SftBuildStats stats;
        EFT_RETURN_IF_ERROR(StreamSftDataset(*files, encoder, text.render, options, &stats, sink, progress));
        *built_info = stats.ToJson();
        return Status::Ok();
      },
      &info, &built_here);
  if (!dataset.ok()) return dataset.status();
  if (built_here) {
    EFT_LOG(INFO) << "tokenized " << path << " into the token cache " << dir << "/" << key.Hex() << ".tokens";
  }
  out.documents = std::move(*dataset);
  out.from_cache = !built_here;
  out.cache_file = dir + "/" + key.Hex() + ".tokens";
  // The statistics come back from the cache too, so every rank can report them.
  out.stats.lines = info.value("lines", int64_t{0});
  out.stats.examples = info.value("examples", int64_t{0});
  out.stats.skipped_bad = info.value("skipped_bad_lines", int64_t{0});
  out.stats.first_bad = info.value("first_bad_line", std::string());
  out.stats.no_trained = info.value("no_trained_tokens", int64_t{0});
  out.stats.truncated = info.value("truncated", int64_t{0});
  out.stats.dropped_long = info.value("dropped_too_long", int64_t{0});
  out.stats.tokens = info.value("tokens", int64_t{0});
  out.stats.trained_tokens = info.value("trained_tokens", int64_t{0});
  if (info.contains("formats")) out.stats.formats = info["formats"].get<std::map<std::string, std::string>>();
  if (info.contains("kinds")) out.stats.kinds = info["kinds"].get<std::map<std::string, std::string>>();
  return out;
}

}  // namespace

Result<PreparedData> PrepareTrainingData(const TrainConfig& config, int64_t vocab_size, const TextPipeline& text,
                                         const BuildProgress& progress, const char* field) {
  return PrepareData(config, config.spec.data().train(), vocab_size, text, progress, field);
}

Result<PreparedData> PrepareEvalData(const TrainConfig& config, const v1::EvalSet& set, int64_t vocab_size,
                                     const TextPipeline& text) {
  return PrepareData(config, set.path(), vocab_size, text, {}, "spec.data.eval " + set.name());
}

}  // namespace eft::trainer
