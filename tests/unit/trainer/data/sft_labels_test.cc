// SFT formats and labels with a byte-level fake tokenizer and chat templates written in C++ (the
// real tokenizers and Jinja templates are tested against Hugging Face elsewhere): which format a
// line is, the errors for bad lines, and exactly which text each loss_on trains.
#include "trainer/data/sft_labels.h"

#include <gtest/gtest.h>

#include "tests/unit/trainer/data/fake_text.h"

namespace eft::trainer {
namespace {

using ojson = nlohmann::ordered_json;

// Like Qwen3: the reasoning of replies before the last user message is dropped.
Result<std::string> DropsOldReasoning(const ojson& messages, const ojson&, bool add_generation_prompt) {
  size_t last_user = 0;
  for (size_t i = 0; i < messages.size(); ++i) {
    if (messages[i]["role"] == "user") last_user = i;
  }
  std::string out;
  for (size_t i = 0; i < messages.size(); ++i) {
    const auto& m = messages[i];
    std::string content = m["content"].get<std::string>();
    if (m["role"] == "assistant" && m.contains("reasoning") && i > last_user) {
      content = "<think>" + m["reasoning"].get<std::string>() + "</think>" + content;
    }
    out += "<|im_start|>" + m["role"].get<std::string>() + "\n" + content + "<|im_end|>\n";
  }
  if (add_generation_prompt) out += "<|im_start|>assistant\n";
  return out;
}

ojson Conversation() {
  return ojson::parse(R"({"messages": [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "Hi"},
    {"role": "assistant", "content": "Hello!"},
    {"role": "user", "content": "2+2?"},
    {"role": "assistant", "content": "4"}]})");
}

Example Tokenize(const ojson& line, const ByteEncoder& enc, const RenderChat& render, LabelOptions options = {}) {
  auto format = DetectFormat(line);
  EXPECT_TRUE(format.ok()) << format.status();
  auto record = ToSftRecord(line, *format, 0);
  EXPECT_TRUE(record.ok()) << record.status();
  auto ex = TokenizeSftRecord(*record, enc, render, options);
  EXPECT_TRUE(ex.ok()) << ex.status();
  return ex.ok() ? *ex : Example{};
}

TEST(SftFormat, DetectsEachFormatFromItsKeys) {
  EXPECT_EQ(*DetectFormat(ojson::parse(R"({"messages": []})")), DataFormat::kMessages);
  EXPECT_EQ(*DetectFormat(ojson::parse(R"({"prompt": "a", "completion": "b"})")), DataFormat::kPromptCompletion);
  EXPECT_EQ(*DetectFormat(ojson::parse(R"({"instruction": "a", "output": "b"})")), DataFormat::kAlpaca);
  EXPECT_EQ(*DetectFormat(ojson::parse(R"({"input_ids": [1]})")), DataFormat::kPretokenized);
  EXPECT_EQ(*DetectFormat(ojson::parse(R"({"text": "a", "id": 3})")), DataFormat::kText);
  auto unknown = DetectFormat(ojson::parse(R"({"question": "a", "answer": "b"})"));
  EXPECT_NE(unknown.status().message().find("question, answer"), std::string::npos) << unknown.status();
  EXPECT_EQ(*ParseDataFormat("prompt_completion"), DataFormat::kPromptCompletion);
  EXPECT_FALSE(ParseDataFormat("sharegpt").ok());
}

TEST(SftFormat, BadLinesNameTheField) {
  struct Case {
    const char* json;
    DataFormat format;
    const char* error;
  };
  for (const Case& c : std::vector<Case>{
           {R"({"messages": "hi"})", DataFormat::kMessages, "messages: expected a list of messages"},
           {R"({"messages": []})", DataFormat::kMessages, "messages: is empty"},
           {R"({"messages": [{"content": "x"}]})", DataFormat::kMessages, "messages[0].role: missing"},
           {R"({"messages": [{"role": "user", "content": 5}]})", DataFormat::kMessages, "messages[0].content: expected"},
           {R"({"messages": [{"role": "user"}]})", DataFormat::kMessages, "messages[0].content: missing"},
           {R"({"prompt": "a", "completion": ["b"]})", DataFormat::kPromptCompletion, "both be strings or both"},
           {R"({"prompt": "a", "completion": ""})", DataFormat::kPromptCompletion, "completion: is empty"},
           {R"({"text": 3})", DataFormat::kText, "text: expected a string"},
           {R"({"instruction": "a"})", DataFormat::kAlpaca, "output: missing"},
           {R"({"input_ids": [1, -5]})", DataFormat::kPretokenized, "input_ids[1] = -5"},
           {R"([1, 2])", DataFormat::kText, "expected a JSON object"},
       }) {
    auto r = ToSftRecord(ojson::parse(c.json), c.format, 0);
    ASSERT_FALSE(r.ok()) << c.json;
    EXPECT_NE(r.status().message().find(c.error), std::string::npos) << c.json << " -> " << r.status();
  }
}

TEST(SftLabels, AssistantTrainsEveryReplyWithItsEndOfTurnButNotTheHeaders) {
  ByteEncoder enc({"<|im_start|>", "<|im_end|>"});
  Example ex = Tokenize(Conversation(), enc, ChatMl);
  EXPECT_EQ(enc.Trained(ex), "Hello!<|im_end|>|4<|im_end|>");
  EXPECT_EQ(ex.input_ids.size(), ex.labels.size());

  ex = Tokenize(Conversation(), enc, ChatMl, {LossOn::kAssistant, /*train_on_eos=*/false});
  EXPECT_EQ(enc.Trained(ex), "Hello!|4");
  ex = Tokenize(Conversation(), enc, ChatMl, {LossOn::kCompletion, true});
  EXPECT_EQ(enc.Trained(ex), "4<|im_end|>") << "completion: the last reply only";
  ex = Tokenize(Conversation(), enc, ChatMl, {LossOn::kAll, true});
  for (size_t t = 0; t < ex.labels.size(); ++t) ASSERT_EQ(ex.labels[t], ex.input_ids[t]);
}

TEST(SftLabels, ATemplateThatRewritesEarlierRepliesIsFollowed) {
  ByteEncoder enc({"<|im_start|>", "<|im_end|>", "<think>", "</think>"});
  ojson line = ojson::parse(R"({"messages": [
    {"role": "user", "content": "a"},
    {"role": "assistant", "content": "first", "reasoning": "r1"},
    {"role": "user", "content": "b"},
    {"role": "assistant", "content": "second", "reasoning": "r2"}]})");
  Example ex = Tokenize(line, enc, DropsOldReasoning);
  // The first reply rendered on its own carries its reasoning; in the whole conversation it does
  // not, so it is found without it. The last one keeps its reasoning, and it is trained.
  EXPECT_EQ(enc.Trained(ex), "first<|im_end|>|<think>r2</think>second<|im_end|>");
}

TEST(SftLabels, PromptCompletionAndAlpacaTrainTheCompletion) {
  ByteEncoder enc({"<|im_start|>", "<|im_end|>"}, /*eos=*/999);
  // Plain strings: the prompt gets the tokenizer's BOS, the completion is trained, then EOS.
  Example ex = Tokenize(ojson::parse(R"({"prompt": "Q: 1+1", "completion": " A: 2"})"), enc, ChatMl);
  EXPECT_EQ(ex.input_ids.front(), 1000);
  EXPECT_EQ(ex.input_ids.back(), 999);
  EXPECT_EQ(ex.labels.back(), 999);
  EXPECT_EQ(enc.Trained(ex).substr(0, 5), " A: 2");
  EXPECT_EQ(ex.labels[1], -100) << "the prompt is not trained";
  ex = Tokenize(ojson::parse(R"({"prompt": "Q", "completion": "A"})"), enc, ChatMl, {LossOn::kCompletion, false});
  EXPECT_EQ(ex.labels.back(), -100) << "train_on_eos false";
  // Message lists: the completion messages' replies only.
  ex = Tokenize(ojson::parse(R"({"prompt": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "old"},
                                            {"role": "user", "content": "b"}],
                                 "completion": [{"role": "assistant", "content": "new"}]})"),
                enc, ChatMl);
  EXPECT_EQ(enc.Trained(ex), "new<|im_end|>");
  // Alpaca: instruction and input become the user turn.
  ex = Tokenize(ojson::parse(R"({"instruction": "Sum", "input": "1 2", "output": "3", "system": "S"})"), enc, ChatMl);
  EXPECT_EQ(enc.Trained(ex), "3<|im_end|>");
  std::string text;
  for (int64_t id : ex.input_ids) text += id < 256 ? std::string(1, static_cast<char>(id)) : "#";
  EXPECT_NE(text.find("#user\nSum\n\n1 2#"), std::string::npos) << text;
  EXPECT_NE(text.find("#system\nS#"), std::string::npos) << text;
}

TEST(SftLabels, TextTrainsEverythingAndEndsWithEos) {
  ByteEncoder enc({}, 999);
  Example ex = Tokenize(ojson::parse(R"({"text": "abc"})"), enc, ChatMl);
  EXPECT_EQ(ex.input_ids, (std::vector<int64_t>{1000, 'a', 'b', 'c', 999}));
  EXPECT_EQ(ex.labels, ex.input_ids);
}

TEST(SftLabels, ATemplateThatDoesNotShowTheReplyVerbatimIsAnError) {
  ByteEncoder enc({});
  RenderChat shouting = [](const ojson& messages, const ojson& tools, bool gen) -> Result<std::string> {
    auto s = ChatMl(messages, tools, gen);
    if (!s.ok() || messages.size() < 3) return s;
    std::string up = *s;  // once a later message follows, earlier replies are rewritten
    for (char& c : up) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    return up;
  };
  auto record = ToSftRecord(ojson::parse(R"({"messages": [{"role": "user", "content": "a"},
      {"role": "assistant", "content": "b"}, {"role": "user", "content": "c"}, {"role": "assistant", "content": "d"}]})"),
                            DataFormat::kMessages, 0);
  ASSERT_TRUE(record.ok());
  auto ex = TokenizeSftRecord(*record, enc, shouting, {});
  ASSERT_FALSE(ex.ok());
  EXPECT_NE(ex.status().message().find("messages["), std::string::npos) << ex.status();
  EXPECT_NE(ex.status().message().find("loss_on: all"), std::string::npos) << ex.status();
}

}  // namespace
}  // namespace eft::trainer
