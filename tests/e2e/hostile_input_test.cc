// Hostile inputs to eft-train's own files (issue 15): a tiny model directory made by
// `eft-train init-model` with a small byte-level BPE tokenizer and a ChatML template, then one input
// corrupted at a time and the real command run on it. Every case must end with exit 2 (bad input,
// common/rank_protocol.h), stderr naming the file and the problem, no signal and no core, within a
// time bound (a hang is killed and fails the test) and, for the huge inputs, a memory bound.
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <thread>

#include "common/sanitizers.h"
#include "tests/e2e/trainer_fixture.h"

namespace eft::testing {
namespace {

constexpr int kVocab = 260;  // 256 byte tokens, 2 merges, <|im_start|>, <|im_end|>

// GPT-2's byte -> printable code point map (what byte-level tokenizer.json vocabularies spell).
std::string ByteToken(int b) {
  int cp = b;
  const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
  if (!printable) {
    int n = 0;
    for (int i = 0; i < b; ++i) n += !((i >= 33 && i <= 126) || (i >= 161 && i <= 172) || (i >= 174 && i <= 255));
    cp = 256 + n;
  }
  std::string s;
  if (cp < 0x80) {
    s += static_cast<char>(cp);
  } else {
    s += static_cast<char>(0xC0 | (cp >> 6));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  }
  return s;
}

json TinyTokenizerJson() {
  json vocab = json::object();
  for (int b = 0; b < 256; ++b) vocab[ByteToken(b)] = b;
  vocab["he"] = 256;
  vocab["ll"] = 257;
  return {{"version", "1.0"},
          {"added_tokens",
           {{{"id", 258}, {"content", "<|im_start|>"}, {"special", true}},
            {{"id", 259}, {"content", "<|im_end|>"}, {"special", true}}}},
          {"normalizer", nullptr},
          {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}}},
          {"post_processor", nullptr},
          {"decoder", {{"type", "ByteLevel"}}},
          {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", {"h e", "l l"}}}}};
}

constexpr const char* kChatML =
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}";

struct Outcome {
  int exit_code = -1;  // -1 when killed by a signal
  int signal = 0;
  bool timed_out = false;
  double seconds = 0;
  long max_rss_mb = 0;
  std::string output;  // stdout + stderr
};

// The bounds below are the release build's. Under `make sanitize` eft-train runs several times slower
// and carries ASan's shadow memory and quarantine (256 MB) besides its own: the bounds stretch by
// these, still far below what the hostile inputs would cost unbounded (hangs, tens of GB).
constexpr int kTimeScale = kUnderSanitizer ? 4 : 1;
constexpr long kRssSlackMb = kUnderSanitizer ? 1024 : 0;

std::string Describe(const Outcome& o) {
  return "exit " + std::to_string(o.exit_code) + ", signal " + std::to_string(o.signal) +
         (o.timed_out ? ", TIMED OUT" : "") + ", " + std::to_string(o.seconds) + " s, " +
         std::to_string(o.max_rss_mb) + " MB RSS, output:\n" + o.output;
}

// Runs `cmd` under /bin/sh in its own process group with cores off; kills the group after
// `limit_s`. wait4 gives the peak RSS of the process the shell execs into.
Outcome RunBounded(const std::string& cmd, const fs::path& log, int limit_s) {
  Outcome o;
  const auto start = std::chrono::steady_clock::now();
  pid_t pid = ::fork();
  if (pid == 0) {
    ::setpgid(0, 0);
    struct rlimit no_core = {0, 0};
    ::setrlimit(RLIMIT_CORE, &no_core);
    const std::string full = "exec " + cmd + " >" + log.string() + " 2>&1";
    ::execl("/bin/sh", "sh", "-c", full.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  int status = 0;
  struct rusage usage {};
  while (true) {
    pid_t r = ::wait4(pid, &status, WNOHANG, &usage);
    if (r == pid) break;
    if (std::chrono::steady_clock::now() - start > std::chrono::seconds(limit_s * kTimeScale)) {
      o.timed_out = true;
      ::kill(-pid, SIGKILL);
      ::wait4(pid, &status, 0, &usage);
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  o.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  o.max_rss_mb = usage.ru_maxrss / 1024;
  if (WIFEXITED(status)) o.exit_code = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) o.signal = WTERMSIG(status);
  std::ifstream in(log, std::ios::binary);
  o.output.assign(std::istreambuf_iterator<char>(in), {});
  return o;
}

class HostileInput : public TrainerTest {
 protected:
  void SetUp() override {
    TrainerTest::SetUp();
    const fs::path tok = dir_ / "tok";
    fs::create_directories(tok);
    std::ofstream(tok / "tokenizer.json") << TinyTokenizerJson().dump();
    std::ofstream(tok / "tokenizer_config.json")
        << json{{"eos_token", "<|im_end|>"}, {"chat_template", kChatML}}.dump();
    std::string out;
    ASSERT_EQ(Shell(Train() + " init-model --arch llama --hidden 32 --layers 1 --heads 2 --kv-heads 1 "
                              "--intermediate 48 --vocab-size " + std::to_string(kVocab) +
                        " --dtype float32 --seed 1 --tokenizer " + tok.string() + " --out " + model().string(),
                    &out),
              0)
        << out;
    std::ofstream(dir_ / "lines.txt") << "hello world\n";
    std::ofstream(dir_ / "messages.json") << R"([{"role": "user", "content": "hello"}])";
    std::ofstream data(dir_ / "data.jsonl");
    for (int i = 0; i < 4; ++i) data << json{{"text", "hello " + std::to_string(i)}}.dump() << "\n";
  }

  fs::path model() const { return dir_ / "model"; }
  fs::path in_model(const std::string& name) const { return model() / name; }

  std::string Spec(const std::string& on_bad_line = "error") {
    const std::string path = (dir_ / "job.yaml").string();
    std::ofstream(path) << "name: hostile\nmodel: " << model().string() << "\ndata: {train: "
                        << (dir_ / "data.jsonl").string() << ", max_seq_len: 64, on_bad_line: " << on_bad_line
                        << ", cache_dir: " << (dir_ / "cache").string() << "}\n"
                        << "training: {global_batch_size: 2, micro_batch_size: 1, lr: 0.001, precision: fp32, "
                           "epochs: 1, max_steps: 1}\n";
    return path;
  }

  // `eft-train <args>`; a run must end within `limit_s`.
  Outcome Run(const std::string& args, int limit_s = 30) {
    return RunBounded(Train() + " " + args, dir_ / ("run" + std::to_string(runs_++) + ".log"), limit_s);
  }
  Outcome TrainRun(const std::string& on_bad_line = "error") { return Run("train --threads 1 --config " + Spec(on_bad_line)); }
  Outcome PrepareRun(const std::string& on_bad_line = "error") { return Run("prepare --config " + Spec(on_bad_line)); }
  Outcome TokenizeRun() { return Run("tokenize --tokenizer " + model().string() + " --file " + (dir_ / "lines.txt").string()); }
  Outcome ChatTemplateRun() {
    return Run("chat-template --tokenizer " + model().string() + " --messages " + (dir_ / "messages.json").string());
  }

  // The refusal every case expects: exit 2, no signal, in time, stderr naming `file` and `problem`.
  // A predicate, so each case's assertion stands in its own body: EXPECT_TRUE(Refused(...)).
  ::testing::AssertionResult Refused(const Outcome& o, const std::string& file, const std::string& problem) {
    std::string wrong;
    if (o.timed_out) wrong += "timed out; ";
    if (o.signal != 0) wrong += "killed by signal " + std::to_string(o.signal) + "; ";
    if (o.exit_code != 2) wrong += "exit code " + std::to_string(o.exit_code) + ", not 2; ";
    if (o.output.find(file) == std::string::npos) wrong += "the message does not name " + file + "; ";
    if (o.output.find(problem) == std::string::npos) wrong += "the message does not say '" + problem + "'; ";
    if (o.output.find("terminate called") != std::string::npos) wrong += "std::terminate was called; ";
    if (wrong.empty()) return ::testing::AssertionSuccess();
    return ::testing::AssertionFailure() << wrong << "\n" << Describe(o);
  }

  void WriteFile(const fs::path& p, const std::string& bytes) { std::ofstream(p, std::ios::binary) << bytes; }
  std::string ReadFile(const fs::path& p) {
    std::ifstream in(p, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  }

  void EditJson(const fs::path& p, const std::function<void(json&)>& edit) {
    json j = json::parse(ReadFile(p));
    edit(j);
    WriteFile(p, j.dump());
  }

  // model.safetensors with its JSON header edited and the data section kept.
  void EditSafetensorsHeader(const std::function<void(json&)>& edit) {
    const fs::path p = in_model("model.safetensors");
    std::string bytes = ReadFile(p);
    uint64_t n = 0;
    std::memcpy(&n, bytes.data(), 8);
    json header = json::parse(bytes.substr(8, n));
    edit(header);
    std::string text = header.dump();
    text.append((8 - text.size() % 8) % 8, ' ');
    uint64_t len = text.size();
    WriteFile(p, std::string(reinterpret_cast<const char*>(&len), 8) + text + bytes.substr(8 + n));
  }
  uint64_t DataSize() {
    std::string bytes = ReadFile(in_model("model.safetensors"));
    uint64_t n = 0;
    std::memcpy(&n, bytes.data(), 8);
    return bytes.size() - 8 - n;
  }

  int runs_ = 0;
};

// The unmodified directory works through every entry point, so each failure below is the
// corruption's doing.
TEST_F(HostileInput, BaselineRuns) {
  Outcome o = TokenizeRun();
  EXPECT_EQ(o.exit_code, 0) << Describe(o);
  EXPECT_EQ(o.output, "256 257 111 32 119 111 114 108 100\n");
  o = ChatTemplateRun();
  EXPECT_EQ(o.exit_code, 0) << Describe(o);
  o = PrepareRun();
  EXPECT_EQ(o.exit_code, 0) << Describe(o);
  o = TrainRun();
  EXPECT_EQ(o.exit_code, 0) << Describe(o);
}

// ---------------------------------------------------------------------------------------------
// tokenizer.json

TEST_F(HostileInput, TokenizerJsonTruncated) {
  const std::string text = ReadFile(in_model("tokenizer.json"));
  WriteFile(in_model("tokenizer.json"), text.substr(0, text.size() / 2));
  EXPECT_TRUE(Refused(TokenizeRun(), "model/tokenizer.json", "not valid JSON"));
  EXPECT_TRUE(Refused(TrainRun(), "model/tokenizer.json", "not valid JSON"));
}

TEST_F(HostileInput, TokenizerJsonNotJson) {
  constexpr char kPng[] = "\x89PNG\r\n\x1a\n\0\0\0garbage";  // NULs inside: its size, not strlen
  WriteFile(in_model("tokenizer.json"), std::string(kPng, sizeof(kPng) - 1));
  EXPECT_TRUE(Refused(TokenizeRun(), "model/tokenizer.json", "not valid JSON"));
}

TEST_F(HostileInput, TokenizerVocabIsAList) {
  EditJson(in_model("tokenizer.json"), [](json& j) { j["model"]["vocab"] = json::array({"a", "b"}); });
  EXPECT_TRUE(Refused(TokenizeRun(), "model/tokenizer.json", "model.vocab: expected a mapping of token -> id"));
}

TEST_F(HostileInput, TokenizerMergesGarbage) {
  EditJson(in_model("tokenizer.json"), [](json& j) { j["model"]["merges"] = json::array({42, {{"x", 1}}}); });
  EXPECT_TRUE(Refused(TokenizeRun(), "model/tokenizer.json", "model.merges[0]"));
}

TEST_F(HostileInput, TokenizerWrongTypesDeepInside) {
  // Types nlohmann would throw on (value() of a number as a string, an added token that is a
  // number): each is a message, never an escaped exception.
  EditJson(in_model("tokenizer.json"), [](json& j) { j["added_tokens"][0]["content"] = 5; });
  EXPECT_TRUE(Refused(TokenizeRun(), "model/tokenizer.json", "added_tokens[0]"));
  EditJson(in_model("tokenizer.json"), [](json& j) {
    j["added_tokens"][0]["content"] = "<|im_start|>";
    j["decoder"] = {{"type", "Strip"}, {"content", 7}};
  });
  EXPECT_TRUE(Refused(TokenizeRun(), "model/tokenizer.json", "decoder"));
}

TEST_F(HostileInput, TokenizerIdOutOfRange) {
  // An id far past the vocabulary would size the id -> token table by it.
  EditJson(in_model("tokenizer.json"), [](json& j) { j["model"]["vocab"]["he"] = 2000000000; });
  EXPECT_TRUE(Refused(TokenizeRun(), "model/tokenizer.json", "model.vocab: id 2000000000"));
}

TEST_F(HostileInput, TokenizerRegexDoesNotCompile) {
  EditJson(in_model("tokenizer.json"), [](json& j) {
    j["pre_tokenizer"] = {{"type", "Split"}, {"pattern", {{"Regex", "(unclosed[a-"}}}, {"behavior", "Isolated"}};
  });
  EXPECT_TRUE(Refused(TokenizeRun(), "model/tokenizer.json", "does not compile"));
}

TEST_F(HostileInput, TokenizerDeeplyNested) {
  // Copying or printing a value nested 100000 deep recurses once per level.
  std::string deep = std::string(100000, '[') + std::string(100000, ']');
  std::string text = ReadFile(in_model("tokenizer.json"));
  text.insert(1, "\"normalizer_extra\": " + deep + ", \"normalizer\": " + deep + ",");
  WriteFile(in_model("tokenizer.json"), text);
  EXPECT_TRUE(Refused(TokenizeRun(), "model/tokenizer.json", "nested"));
}

// ---------------------------------------------------------------------------------------------
// Chat templates (tokenizer_config.json)

void SetTemplate(const fs::path& config, const std::string& source) {
  json j = json::parse(std::ifstream(config));
  j["chat_template"] = source;
  std::ofstream(config) << j.dump();
}

TEST_F(HostileInput, TemplateUnsupportedTags) {
  SetTemplate(in_model("tokenizer_config.json"), "{% include 'other.jinja' %}");
  EXPECT_TRUE(Refused(ChatTemplateRun(), "model/tokenizer_config.json", "unsupported tag 'include'"));
  SetTemplate(in_model("tokenizer_config.json"), "{% call f() %}x{% endcall %}");
  EXPECT_TRUE(Refused(ChatTemplateRun(), "model/tokenizer_config.json", "unsupported tag 'call'"));
  // At load, before any data is read.
  EXPECT_TRUE(Refused(TrainRun(), "model/tokenizer_config.json", "unsupported tag 'call'"));
}

TEST_F(HostileInput, TemplateEndlessMacroRecursion) {
  // Macros are supported; one calling itself recursed on the C++ stack until it overflowed.
  SetTemplate(in_model("tokenizer_config.json"), "{% macro f(n) %}{{ f(n) }}{% endmacro %}{{ f(1) }}");
  EXPECT_TRUE(Refused(ChatTemplateRun(), "model/tokenizer_config.json", "macro 'f' calls nested more than"));
  // In training the template runs per conversation: the line and the template file are named.
  WriteFile(dir_ / "data.jsonl", "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}, "
                                 "{\"role\": \"assistant\", \"content\": \"yo\"}]}\n");
  EXPECT_TRUE(Refused(TrainRun(), "data.jsonl:1: " + in_model("tokenizer_config.json").string(), "macro 'f'"));
}

TEST_F(HostileInput, TemplateUnclosedBlock) {
  SetTemplate(in_model("tokenizer_config.json"), "{% for m in messages %}{% if m %}{{ m.content }}{% endfor %}");
  EXPECT_TRUE(Refused(ChatTemplateRun(), "model/tokenizer_config.json", "line 1"));
  SetTemplate(in_model("tokenizer_config.json"), "{% for m in messages %}{{ m.content }}");
  EXPECT_TRUE(Refused(ChatTemplateRun(), "model/tokenizer_config.json", "line 1"));
  SetTemplate(in_model("tokenizer_config.json"), "{{ messages[0].content ");
  EXPECT_TRUE(Refused(ChatTemplateRun(), "model/tokenizer_config.json", "line 1"));
}

TEST_F(HostileInput, TemplateDeeplyNestedExpression) {
  SetTemplate(in_model("tokenizer_config.json"), "{{ " + std::string(150, '(') + "1" + std::string(150, ')') + " }}");
  EXPECT_TRUE(Refused(ChatTemplateRun(), "model/tokenizer_config.json", "nested more than 100 levels"));
  SetTemplate(in_model("tokenizer_config.json"), std::string(150 * 10, ' ').replace(0, 0, [] {
    std::string s;
    for (int i = 0; i < 150; ++i) s += "{% if 1 %}";
    return s;
  }()));
  EXPECT_TRUE(Refused(ChatTemplateRun(), "model/tokenizer_config.json", "nested more than 100 levels"));
  // A long chain builds a tree as deep as it is long: refused by length (and lexed in linear time).
  std::string chain = "{{ 1";
  for (int i = 0; i < 200000; ++i) chain += "+1";
  SetTemplate(in_model("tokenizer_config.json"), chain + " }}");
  Outcome o = ChatTemplateRun();
  EXPECT_TRUE(Refused(o, "model/tokenizer_config.json", "a tag of 400002 tokens"));
  EXPECT_LT(o.seconds, 10 * kTimeScale) << Describe(o);
}

TEST_F(HostileInput, TemplateRunsForever) {
  // Nested loops: 10^15 iterations, each within the range() limit.
  SetTemplate(in_model("tokenizer_config.json"),
              "{% for a in range(100000) %}{% for b in range(100000) %}{% for c in range(100000) %}"
              "{% endfor %}{% endfor %}{% endfor %}");
  EXPECT_TRUE(Refused(ChatTemplateRun(), "model/tokenizer_config.json", "steps"));
  // Integer power by repeated multiplication: 10^12 multiplications.
  SetTemplate(in_model("tokenizer_config.json"), "{{ 3 ** 1000000000000 }}");
  Outcome o = ChatTemplateRun();
  EXPECT_FALSE(o.timed_out) << Describe(o);
  EXPECT_EQ(o.signal, 0) << Describe(o);
}

TEST_F(HostileInput, TemplateHugeOutput) {
  SetTemplate(in_model("tokenizer_config.json"), "{{ 'x' * 1000000000000 }}");
  EXPECT_TRUE(Refused(ChatTemplateRun(), "model/tokenizer_config.json", "too long"));
  // Doubling a string 60 times: few steps, 2^60 bytes.
  SetTemplate(in_model("tokenizer_config.json"),
              "{% set ns = namespace(s='xx') %}{% for i in range(60) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}"
              "{{ ns.s }}");
  EXPECT_TRUE(Refused(ChatTemplateRun(), "model/tokenizer_config.json", "too long"));
}

TEST_F(HostileInput, TemplateIntegerOverflowTrap) {
  // INT64_MIN // -1 traps (SIGFPE) in C++.
  SetTemplate(in_model("tokenizer_config.json"), "{{ (-9223372036854775807 - 1) // -1 }}{{ (-9223372036854775807 - 1) % -1 }}");
  Outcome o = ChatTemplateRun();
  EXPECT_EQ(o.signal, 0) << Describe(o);
  EXPECT_FALSE(o.timed_out) << Describe(o);
}

TEST_F(HostileInput, TemplateListEntryMalformed) {
  EditJson(in_model("tokenizer_config.json"), [](json& j) { j["chat_template"] = json::array({1, {{"name", 2}}}); });
  EXPECT_TRUE(Refused(ChatTemplateRun(), "model/tokenizer_config.json", "chat_template"));
}

// ---------------------------------------------------------------------------------------------
// config.json: refused while parsing, before any parameter is allocated

TEST_F(HostileInput, ConfigAbsurdSizes) {
  const json original = json::parse(ReadFile(in_model("config.json")));
  const std::vector<std::tuple<std::string, json, std::string>> cases = {
      {"hidden_size", json(1000000000000LL), "field 'hidden_size'"},
      {"hidden_size", json(1e12), "field 'hidden_size'"},
      {"intermediate_size", json(4611686018427387904LL), "field 'intermediate_size'"},
      {"vocab_size", json(1LL << 40), "field 'vocab_size'"},
      {"num_hidden_layers", json(-1), "field 'num_hidden_layers' must be > 0"},
      {"vocab_size", json(0), "field 'vocab_size' must be > 0"},
      {"num_key_value_heads", json(3), "field 'num_key_value_heads'"},
      {"max_position_embeddings", json(1e15), "field 'max_position_embeddings'"},
      {"head_dim", json(1LL << 40), "field 'head_dim'"},
  };
  for (const auto& [field, value, problem] : cases) {
    json j = original;
    j[field] = value;
    WriteFile(in_model("config.json"), j.dump());
    Outcome o = TrainRun();
    EXPECT_TRUE(Refused(o, "model/config.json", problem));
    EXPECT_LT(o.max_rss_mb, 2048 + kRssSlackMb) << field << " = " << value.dump();
  }
  // head_dim not given and not dividing: hidden_size 33 over 2 heads.
  json j = original;
  j.erase("head_dim");
  j["hidden_size"] = 33;
  WriteFile(in_model("config.json"), j.dump());
  EXPECT_TRUE(Refused(TrainRun(), "model/config.json", "must be divisible by num_attention_heads"));
  // Plausible fields whose product is not: 24 layers of 2^20 x 2^20 matrices.
  j = original;
  j["hidden_size"] = 1 << 20;
  j["intermediate_size"] = 1 << 20;
  j["num_attention_heads"] = 1 << 10;
  j["num_key_value_heads"] = 1 << 10;
  j["head_dim"] = 1 << 10;
  j["num_hidden_layers"] = 1000;
  WriteFile(in_model("config.json"), j.dump());
  EXPECT_TRUE(Refused(TrainRun(), "model/config.json", "parameters"));
  WriteFile(in_model("config.json"), "{\"model_type\": \"llama\", ");
  EXPECT_TRUE(Refused(TrainRun(), "model/config.json", "not valid JSON"));
}

// ---------------------------------------------------------------------------------------------
// model.safetensors

TEST_F(HostileInput, SafetensorsHeaderLengthBeyondFile) {
  std::string bytes = ReadFile(in_model("model.safetensors"));
  const uint64_t huge = bytes.size() + 1000;
  std::memcpy(bytes.data(), &huge, 8);
  WriteFile(in_model("model.safetensors"), bytes);
  EXPECT_TRUE(Refused(TrainRun(), "model/model.safetensors", "header"));
  const uint64_t absurd = ~uint64_t{0};
  std::memcpy(bytes.data(), &absurd, 8);
  WriteFile(in_model("model.safetensors"), bytes);
  EXPECT_TRUE(Refused(TrainRun(), "model/model.safetensors", "header"));
  WriteFile(in_model("model.safetensors"), bytes.substr(0, 5));
  EXPECT_TRUE(Refused(TrainRun(), "model/model.safetensors", "too short"));
}

TEST_F(HostileInput, SafetensorsHeaderNotJson) {
  std::string bytes = ReadFile(in_model("model.safetensors"));
  bytes[8] = '[';
  bytes[9] = '!';
  WriteFile(in_model("model.safetensors"), bytes);
  EXPECT_TRUE(Refused(TrainRun(), "model/model.safetensors", "header is not valid JSON"));
}

TEST_F(HostileInput, SafetensorsOverlappingOffsets) {
  // Shifted 4 bytes back into the tensor before it (what would be a gap after it comes later).
  EditSafetensorsHeader([](json& h) {
    auto off = h["model.norm.weight"]["data_offsets"];
    h["model.norm.weight"]["data_offsets"] = {off[0].get<uint64_t>() - 4, off[1].get<uint64_t>() - 4};
  });
  EXPECT_TRUE(Refused(TrainRun(), "model/model.safetensors", "overlap"));
}

TEST_F(HostileInput, SafetensorsOffsetsPastTheEnd) {
  const uint64_t size = DataSize();
  EditSafetensorsHeader([&](json& h) {
    h["model.norm.weight"]["data_offsets"] = {size + 1000, size + 1128};
    h["model.norm.weight"]["shape"] = {32};
  });
  EXPECT_TRUE(Refused(TrainRun(), "model/model.safetensors", "exceed the data section"));
  EditSafetensorsHeader([&](json& h) { h["model.norm.weight"]["data_offsets"] = {~uint64_t{0} - 64, ~uint64_t{0}}; });
  EXPECT_TRUE(Refused(TrainRun(), "model/model.safetensors", "exceed the data section"));
}

TEST_F(HostileInput, SafetensorsUnknownDtype) {
  EditSafetensorsHeader([](json& h) { h["model.norm.weight"]["dtype"] = "Q7"; });
  EXPECT_TRUE(Refused(TrainRun(), "model/model.safetensors", "unknown dtype 'Q7'"));
}

TEST_F(HostileInput, SafetensorsShapeDoesNotMatchBytes) {
  EditSafetensorsHeader([](json& h) { h["model.norm.weight"]["shape"] = {33}; });
  EXPECT_TRUE(Refused(TrainRun(), "model/model.safetensors", "but data_offsets"));
  EditSafetensorsHeader([](json& h) { h["model.norm.weight"]["shape"] = {1LL << 40, 1LL << 40}; });
  EXPECT_TRUE(Refused(TrainRun(), "model/model.safetensors", "too large"));
}

TEST_F(HostileInput, SafetensorsMissingTensor) {
  auto dir = trainer::SafetensorsDir::Open(model().string());
  ASSERT_TRUE(dir.ok()) << dir.status();
  std::vector<std::pair<std::string, at::Tensor>> kept;
  for (const auto& n : (*dir)->names()) {
    if (n != "model.norm.weight") kept.emplace_back(n, *(*dir)->Load(n, at::kFloat));
  }
  dir->reset();
  ASSERT_TRUE(trainer::WriteSafetensors(in_model("model.safetensors").string(), kept, {{"format", "pt"}}).ok());
  EXPECT_TRUE(Refused(TrainRun(), "model", "no tensor 'model.norm.weight'"));
}

// A config.json with plausible sizes that are not the weights' (a 2-layer 64-wide model described
// as 48 layers of 4096, ~10B parameters): refused from the file headers before any of it is
// allocated, not after reserving tens of GB.
TEST_F(HostileInput, ConfigPlausibleButNotTheWeights) {
  json j = json::parse(ReadFile(in_model("config.json")));
  j["hidden_size"] = 4096;
  j["num_hidden_layers"] = 48;
  j["intermediate_size"] = 11008;
  j["head_dim"] = 1024;
  WriteFile(in_model("config.json"), j.dump());
  Outcome o = TrainRun();
  EXPECT_TRUE(Refused(o, "model", "in the safetensors files, but config.json gives"));
  EXPECT_LT(o.max_rss_mb, 1024 + kRssSlackMb) << Describe(o);
}

TEST_F(HostileInput, SafetensorsTensorShapeNotTheConfigs) {
  EditSafetensorsHeader([](json& h) { h["model.norm.weight"]["shape"] = {2, 16}; });
  EXPECT_TRUE(Refused(TrainRun(), "model", "model.norm.weight: shape"));
}

// ---------------------------------------------------------------------------------------------
// JSONL training data

TEST_F(HostileInput, JsonlHundredMegabyteLine) {
  {
    std::ofstream f(dir_ / "data.jsonl", std::ios::binary);
    f << json{{"text", "hello"}}.dump() << "\n";
    f << "{\"text\": \"";
    const std::string chunk(1 << 20, 'a');
    for (int i = 0; i < 100; ++i) f << chunk;
    f << "\"}\n";
    f << json{{"text", "world"}}.dump() << "\n";
  }
  Outcome o = PrepareRun("error");
  EXPECT_TRUE(Refused(o, "data.jsonl:2", "longer than"));
  EXPECT_LT(o.seconds, 20 * kTimeScale) << Describe(o);
  EXPECT_LT(o.max_rss_mb, 1024 + kRssSlackMb) << Describe(o);
  o = PrepareRun("skip");
  EXPECT_EQ(o.exit_code, 0) << Describe(o);
  EXPECT_NE(o.output.find("1 skipped, first: " + (dir_ / "data.jsonl").string() + ":2: line is longer than"),
            std::string::npos)
      << Describe(o);
  EXPECT_NE(o.output.find("examples          2"), std::string::npos) << Describe(o);
  EXPECT_LT(o.max_rss_mb, 1024 + kRssSlackMb) << Describe(o);
}

TEST_F(HostileInput, JsonlInvalidUtf8) {
  WriteFile(dir_ / "data.jsonl", "{\"text\": \"ok\"}\n{\"text\": \"caf\xC3\x28 \xFF\"}\n");
  EXPECT_TRUE(Refused(PrepareRun(), "data.jsonl:2", "invalid UTF-8"));
}

TEST_F(HostileInput, JsonlLineIsAnArray) {
  WriteFile(dir_ / "data.jsonl", "{\"text\": \"ok\"}\n[1, 2, 3]\n");
  EXPECT_TRUE(Refused(PrepareRun(), "data.jsonl:2", "expected a JSON object, got array"));
  WriteFile(dir_ / "data.jsonl", "[{\"text\": \"ok\"}]\n");
  EXPECT_TRUE(Refused(PrepareRun(), "data.jsonl:1", "expected a JSON object, got array"));
}

TEST_F(HostileInput, JsonlDeeplyNested) {
  // A message's extra field nested 100000 deep: copying it into the template's variables recurses
  // once per level.
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  WriteFile(dir_ / "data.jsonl", "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\", \"x\": " + deep +
                                     "}, {\"role\": \"assistant\", \"content\": \"yo\"}]}\n");
  EXPECT_TRUE(Refused(PrepareRun(), "data.jsonl:1", "nested"));
  WriteFile(dir_ / "data.jsonl", "{\"input_ids\": " + deep + "}\n");
  EXPECT_TRUE(Refused(PrepareRun(), "data.jsonl:1", "nested"));
}

}  // namespace
}  // namespace eft::testing
