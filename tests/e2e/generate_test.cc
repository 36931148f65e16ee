// `eft-train generate` and `eft-train chat` as users run them: models written by `eft-train
// init-model`, greedy ids against the independent Python reference (no cache, full recompute),
// eos from generation_config.json, a real Qwen3 tokenizer and chat template (npm) for --messages,
// --prompt and the chat loop through a pipe, and the error paths (exit 2).
#include <gtest/gtest.h>

#include <unistd.h>

#include "tests/e2e/trainer_fixture.h"
#include "tests/unit/trainer/npm_fixtures.h"
#include "tests/util/torch_python.h"
#include "trainer/tokenizer/tokenizer.h"

namespace eft::testing {
namespace {

std::string SourceDir() {
  const char* env = std::getenv("EFT_SOURCE_DIR");
  return env && *env ? env : EFT_SOURCE_DIR_DEFAULT;
}

struct Output {
  int code = -1;
  std::string out, err;
};

// Runs `args` after eft-train with stdout and stderr apart.
Output Gen(const std::string& args, const std::string& stdin_text = "") {
  static int n = 0;
  const std::string base = fs::temp_directory_path() / ("eft-gen-e2e-" + std::to_string(::getpid()) + "-" + std::to_string(n++));
  std::string cmd = Train() + " " + args + " >" + base + ".out 2>" + base + ".err";
  if (!stdin_text.empty()) {
    std::ofstream(base + ".in") << stdin_text;
    cmd += " <" + base + ".in";
  }
  Output o;
  o.code = Shell("(" + cmd + ")");  // Shell appends 2>&1, which must not reach inside
  auto slurp = [](const std::string& path) {
    std::ifstream in(path);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  o.out = slurp(base + ".out");
  o.err = slurp(base + ".err");
  for (const char* ext : {".out", ".err", ".in"}) fs::remove(base + ext);
  return o;
}

std::vector<int32_t> Ids(const std::string& line) {
  std::vector<int32_t> ids;
  std::istringstream in(line);
  for (int32_t id; in >> id;) ids.push_back(id);
  return ids;
}

std::string Join(const std::vector<int32_t>& ids, const char* sep) {
  std::string s;
  for (int32_t id : ids) s += (s.empty() ? "" : sep) + std::to_string(id);
  return s;
}

// The --stats lines of stderr.
std::vector<json> Stats(const std::string& err) {
  std::vector<json> out;
  std::istringstream in(err);
  for (std::string line; std::getline(in, line);)
    if (!line.empty() && line[0] == '{') out.push_back(json::parse(line));
  return out;
}

std::string StripNewline(std::string s) {
  EXPECT_FALSE(s.empty());
  if (!s.empty() && s.back() == '\n') s.pop_back();
  return s;
}

class Generate : public TrainerTest {
 protected:
  std::string InitModel(const std::string& name, const std::string& args) {
    const std::string dir = (dir_ / name).string();
    std::string out;
    EXPECT_EQ(Shell(Train() + " init-model " + args + " --seed 3 --out " + dir, &out), 0) << out;
    return dir;
  }
};

TEST_F(Generate, GreedyIdsEqualThePythonReference) {
  const char* archs[][2] = {
      {"llama", "--arch llama --hidden 64 --layers 2 --heads 4 --kv-heads 2 --intermediate 96 --vocab-size 128"},
      {"qwen3", "--arch qwen3 --hidden 64 --layers 2 --heads 4 --kv-heads 1 --head-dim 32 --intermediate 96 "
                "--vocab-size 128 --tie-embeddings"}};
  const bool have_python = Shell(eft::testing::TorchPython() + " -c 'import torch, numpy'") == 0;
  if (!have_python) std::cerr << "\n*** SKIPPING the Python reference comparison: no python3 with torch ***\n\n";
  const std::vector<int32_t> prompt = {5, 17, 99, 3, 64, 64, 12, 0, 127};
  for (const auto& [arch, args] : archs) {
    const std::string model = InitModel(arch, std::string(args) + " --dtype float32");
    Output o = Gen("generate --model " + model + " --prompt-ids '" + Join(prompt, " ") +
                   "' --format ids --max-new-tokens 24 --stats");
    ASSERT_EQ(o.code, 0) << o.err;
    const std::vector<int32_t> ids = Ids(o.out);
    ASSERT_EQ(ids.size(), 24u) << o.out;
    EXPECT_EQ(std::count(o.out.begin(), o.out.end(), '\n'), 1) << "ids on one line";
    ASSERT_EQ(Stats(o.err).size(), 1u) << o.err;
    EXPECT_EQ(Stats(o.err)[0]["stop"], "max_new_tokens");
    if (have_python) {
      std::string ref;
      ASSERT_EQ(Shell("OMP_NUM_THREADS=1 " + eft::testing::TorchPython() + " " + SourceDir() +
                          "/tests/reference/generate_reference.py " + model + " --prompt " + Join(prompt, ",") +
                          " --max-new-tokens 24 2>&1",
                      &ref),
                0)
          << ref;
      EXPECT_EQ(ids, json::parse(ref)["tokens"].get<std::vector<int32_t>>()) << arch << ": " << ref;
    }
    // bf16 computes too (its greedy path may differ from fp32's on these near-uniform logits).
    Output bf16 = Gen("generate --model " + model + " --prompt-ids '1 2 3' --format ids --max-new-tokens 5 --dtype bf16");
    ASSERT_EQ(bf16.code, 0) << bf16.err;
    EXPECT_EQ(Ids(bf16.out).size(), 5u);
  }
}

TEST_F(Generate, EosFromGenerationConfigStops) {
  const std::string model =
      InitModel("m", "--arch llama --hidden 64 --layers 2 --heads 4 --intermediate 96 --vocab-size 128 --dtype float32");
  const std::string base = "generate --model " + model + " --prompt-ids '9 8 7' --format ids --max-new-tokens 16 --stats";
  Output free = Gen(base);
  ASSERT_EQ(free.code, 0) << free.err;
  const std::vector<int32_t> ids = Ids(free.out);
  ASSERT_EQ(ids.size(), 16u);
  size_t k = 1;
  while (k < ids.size() && std::find(ids.begin(), ids.begin() + k, ids[k]) != ids.begin() + k) ++k;
  ASSERT_LT(k, ids.size());
  std::ofstream(model + "/generation_config.json") << json{{"eos_token_id", {127, ids[k]}}}.dump();
  Output stopped = Gen(base);
  ASSERT_EQ(stopped.code, 0) << stopped.err;
  EXPECT_EQ(Ids(stopped.out), std::vector<int32_t>(ids.begin(), ids.begin() + k));
  EXPECT_EQ(Stats(stopped.err).at(0)["stop"], "eos");
}

TEST_F(Generate, BadInputExitsTwoWithAClearMessage) {
  const std::string model =
      InitModel("m", "--arch qwen2 --hidden 32 --layers 1 --heads 2 --intermediate 64 --vocab-size 64 --dtype float32");
  const std::string m = " --model " + model;
  const std::pair<std::string, std::string> cases[] = {
      {"generate --model " + (dir_ / "missing").string() + " --prompt-ids 1", "no such directory"},
      {"generate" + m + " --prompt-ids 1 --bogus-flag", "--bogus-flag"},
      {"generate" + m, "exactly one of --prompt, --messages and --prompt-ids"},
      {"generate" + m + " --prompt-ids 1 --prompt hi", "exactly one of"},
      {"generate" + m + " --prompt-ids '1 x' --format ids", "'x' is not a token id"},
      {"generate" + m + " --prompt-ids 1 --format json", "--format"},
      {"generate" + m + " --prompt-ids '1 64' --format ids", "outside the vocabulary"},
      {"generate" + m + " --prompt-ids 1 --top-p 0 --temperature 1 --format ids", "--top-p"},
      {"generate" + m + " --prompt-ids 1 --dtype fp16", "--dtype"},
      {"generate" + m + " --prompt-ids 1", "no tokenizer to print text with: use --format ids"},
      {"generate" + m + " --prompt hi --format ids", "no tokenizer"},
      {"chat" + m, "no tokenizer"},
  };
  for (const auto& [args, message] : cases) {
    Output o = Gen(args);
    EXPECT_EQ(o.code, 2) << args << "\n" << o.err;
    EXPECT_NE(o.err.find(message), std::string::npos) << args << "\nstderr: " << o.err;
  }
}

class GenerateChat : public Generate {
 protected:
  void SetUp() override {
    Generate::SetUp();
    std::string modules;
    EFT_REQUIRE_NPM_MODULES(modules);
    const fs::path tok = dir_ / "qwen3-tokenizer";
    CopyQwen3Tokenizer(modules, tok);
    model_ = InitModel("model", "--arch qwen3 --hidden 32 --layers 1 --heads 2 --kv-heads 1 --intermediate 64 "
                                "--vocab-size 151680 --tie-embeddings --dtype float32 --tokenizer " + tok.string());
    auto t = eft::trainer::LoadTokenizer(model_);
    ASSERT_TRUE(t.ok()) << t.status();
    tokenizer_ = std::move(t).value();
  }
  std::string WriteMessages(const json& messages) {
    const std::string path = (dir_ / ("messages" + std::to_string(files_++) + ".json")).string();
    std::ofstream(path) << messages.dump();
    return path;
  }
  std::string model_;
  std::unique_ptr<eft::trainer::Tokenizer> tokenizer_;
  int files_ = 0;
};

TEST_F(GenerateChat, MessagesPromptAndStreamedText) {
  const json hi = json::array({{{"role", "user"}, {"content", "Hi"}}});
  const std::string opts = " --max-new-tokens 12 --temperature 0.9 --top-k 50 --seed 4 --stats";
  Output ids = Gen("generate --model " + model_ + " --messages " + WriteMessages(hi) + " --format ids" + opts);
  ASSERT_EQ(ids.code, 0) << ids.err;
  Output text = Gen("generate --model " + model_ + " --messages " + WriteMessages(hi) + opts);
  ASSERT_EQ(text.code, 0) << text.err;
  // --format raw streams exactly the decoding of the ids (special tokens left out), then a newline;
  // the default text format is the same for a reply without a think block (reply_view_test covers
  // the blocks).
  const std::string decoded = tokenizer_->Decode(Ids(ids.out), /*skip_special_tokens=*/true);
  Output raw_text = Gen("generate --model " + model_ + " --messages " + WriteMessages(hi) + " --format raw" + opts);
  ASSERT_EQ(raw_text.code, 0) << raw_text.err;
  EXPECT_EQ(raw_text.out, decoded + "\n");
  ASSERT_EQ(decoded.find("<think>"), std::string::npos) << "this seed's reply has no think block";
  EXPECT_EQ(text.out, decoded + "\n");
  // The prompt is the template's rendering with the generation prompt, tokenized.
  const auto expected_prompt = tokenizer_->EncodeIds("<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_EQ(Stats(ids.err).at(0)["prompt_tokens"], expected_prompt.size());
  // --prompt is one user message when there is a template...
  Output prompt = Gen("generate --model " + model_ + " --prompt Hi --format ids" + opts);
  ASSERT_EQ(prompt.code, 0) << prompt.err;
  EXPECT_EQ(prompt.out, ids.out);
  Output same = Gen("generate --model " + model_ + " --prompt-ids '" + Join(expected_prompt, " ") + "' --format ids" + opts);
  EXPECT_EQ(same.out, ids.out);

  // ... and raw text without one (a copy of the model whose tokenizer_config has no template).
  const fs::path raw = dir_ / "raw";
  fs::create_directories(raw);
  for (const char* f : {"config.json", "model.safetensors", "tokenizer.json"}) fs::copy_file(fs::path(model_) / f, raw / f);
  json config = json::parse(std::ifstream(fs::path(model_) / "tokenizer_config.json"));
  config.erase("chat_template");
  std::ofstream(raw / "tokenizer_config.json") << config.dump();
  Output plain = Gen("generate --model " + raw.string() + " --prompt 'Hello world' --format ids" + opts);
  ASSERT_EQ(plain.code, 0) << plain.err;
  EXPECT_EQ(Stats(plain.err).at(0)["prompt_tokens"], 2);  // 9707 1879, HF's ids
  EXPECT_EQ(plain.out, Gen("generate --model " + raw.string() + " --prompt-ids '9707 1879' --format ids" + opts).out);
  Output no_template = Gen("generate --model " + raw.string() + " --messages " + WriteMessages(hi));
  EXPECT_EQ(no_template.code, 2);
  EXPECT_NE(no_template.err.find("no chat template"), std::string::npos) << no_template.err;
  Output chat = Gen("chat --model " + raw.string(), "Hi\n");
  EXPECT_EQ(chat.code, 2);
  EXPECT_NE(chat.err.find("no chat template"), std::string::npos) << chat.err;
}

TEST_F(GenerateChat, ChatThroughAPipeKeepsTheConversationAndReusesTheCache) {
  // Sampling (seeded: each turn draws from a generator seeded alike, in chat and in generate): the
  // greedy replies of this near-uniform random model are runs of newlines, too easy to match.
  const std::string opts = " --max-new-tokens 10 --temperature 1 --seed 5";
  Output chat = Gen("chat --model " + model_ + opts + " --stats", "Hi\nHow are you?\n/reset\nHi\n");
  ASSERT_EQ(chat.code, 0) << chat.err;
  // Each reply is what `generate` answers to the whole conversation so far.
  const std::string r1 = StripNewline(Gen("generate --model " + model_ + " --prompt Hi" + opts).out);
  const json history = json::array({{{"role", "user"}, {"content", "Hi"}},
                                    {{"role", "assistant"}, {"content", r1}},
                                    {{"role", "user"}, {"content", "How are you?"}}});
  const std::string r2 = StripNewline(Gen("generate --model " + model_ + " --messages " + WriteMessages(history) + opts).out);
  EXPECT_EQ(chat.out, r1 + "\n" + r2 + "\n" + r1 + "\n");
  const std::vector<json> turns = Stats(chat.err);
  ASSERT_EQ(turns.size(), 3u) << chat.err;
  EXPECT_EQ(turns[0]["reused_tokens"], 0);
  // Turn 2 runs only what follows turn 1 in the cache: at least turn 1's prompt (the last of its
  // tokens may merge with the reply's first when re-tokenized).
  EXPECT_GE(turns[1]["reused_tokens"].get<int>(), turns[0]["prompt_tokens"].get<int>() - 1) << chat.err;
  EXPECT_EQ(turns[2]["reused_tokens"], 0) << "/reset starts from an empty cache";
  EXPECT_EQ(turns[2]["prompt_tokens"], turns[0]["prompt_tokens"]);
}

}  // namespace
}  // namespace eft::testing
