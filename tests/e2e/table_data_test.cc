// Parquet and Arrow data (docs/data.md, "Files and formats") checked against the libraries users'
// files come from: table_data_make.py has datasets read a JSONL file and write it as a Parquet file
// with several row groups, Parquet shards, a save_to_disk directory and an Arrow IPC file; each must
// tokenize to the very token ids and labels, in the same order, as the JSONL itself (every
// data.format). Damaged and wrong files stop with the file, the row group and the column named, or
// are counted and skipped under on_bad_line: skip.
#include <gtest/gtest.h>

#include "tests/e2e/trainer_fixture.h"
#include "tests/unit/trainer/npm_fixtures.h"
#include "trainer/data/token_cache.h"

namespace eft::testing {
namespace {

class TableData : public TrainerTest {
 protected:
  void SetUp() override {
    TrainerTest::SetUp();
    std::string modules;
    EFT_REQUIRE_NPM_MODULES(modules);
    const fs::path tok = dir_ / "qwen3-tokenizer";
    CopyQwen3Tokenizer(modules, tok);
    InitQwen3WithTokenizer(tok);
  }

  // Writes `rows` as <name>.jsonl and has datasets/pyarrow make the other files from it.
  void MakeFiles(const std::string& name, const std::vector<json>& rows) {
    {
      std::ofstream f(dir_ / (name + ".jsonl"));
      for (const auto& r : rows) f << r.dump() << "\n";
    }
    std::string out;
    ASSERT_EQ(Shell(std::string(EFT_SOURCE_DIR_DEFAULT) + "/.venv/bin/python " + EFT_SOURCE_DIR_DEFAULT +
                        "/tests/e2e/table_data_make.py " + (dir_ / (name + ".jsonl")).string() + " " +
                        (dir_ / name).string(),
                    &out),
              0)
        << out;
  }

  // `eft-train prepare` of `data` (extra --set flags in `extra`): its exit code and output, and on
  // success the dataset it cached.
  struct Prepared {
    int exit_code = -1;
    std::string output;
    std::optional<trainer::TokenDataset> dataset;
  };
  Prepared Prepare(const std::string& data, const std::string& format = "auto", const std::string& extra = "") {
    const fs::path cache = dir_ / ("cache-" + std::to_string(++prepares_));
    const std::string spec = (dir_ / "job.yaml").string();
    std::ofstream(spec) << "name: t\nmodel: " << (dir_ / "model").string() << "\ndata: {train: '" << data
                        << "', format: " << format << ", max_seq_len: 512, cache_dir: " << cache.string()
                        << "}\ntraining: {global_batch_size: 4, micro_batch_size: 1, lr: 0.001, precision: fp32}\n";
    Prepared p;
    p.exit_code = Shell(Train() + " prepare --config " + spec + " " + extra, &p.output);
    if (p.exit_code != 0) return p;
    for (const auto& e : fs::directory_iterator(cache)) {
      if (e.path().extension() != ".tokens") continue;
      nlohmann::json info;
      auto ds = trainer::ReadTokenCache(e.path().string(), e.path().stem().string(), &info);
      EXPECT_TRUE(ds.ok()) << ds.status();
      if (ds.ok()) p.dataset = std::move(*ds);
    }
    return p;
  }

  // `data` tokenizes to exactly `reference`'s examples, in order.
  void ExpectSameTokens(const std::string& data, const trainer::TokenDataset& reference, const std::string& format) {
    SCOPED_TRACE(data);
    Prepared p = Prepare(data, format);
    ASSERT_EQ(p.exit_code, 0) << p.output;
    ASSERT_TRUE(p.dataset.has_value()) << p.output;
    ASSERT_EQ(p.dataset->size(), reference.size());
    for (int64_t i = 0; i < reference.size(); ++i) {
      EXPECT_TRUE((*p.dataset)[i].input_ids == reference[i].input_ids) << "example " << i;
      EXPECT_TRUE((*p.dataset)[i].labels == reference[i].labels) << "example " << i;
    }
  }

  int prepares_ = 0;
};

std::vector<json> Conversations() {
  std::vector<json> rows;
  for (int i = 0; i < 13; ++i) {
    rows.push_back({{"messages",
                     {{{"role", "system"}, {"content", "You are a calculator."}},
                      {{"role", "user"}, {"content", "What is " + std::to_string(i) + " + 1? Ünïcödé 😀"}},
                      {{"role", "assistant"}, {"content", std::to_string(i + 1)}}}}});
  }
  // A tool call: messages whose keys differ, a tools column only this row has (datasets stores such
  // values as arrow.json text).
  rows.push_back(json::parse(
      R"({"messages": [{"role": "user", "content": "Weather?"}, {"role": "assistant", "content": "", "tool_calls": )"
      R"([{"type": "function", "function": {"name": "weather", "arguments": {"city": "Oslo"}}}]},)"
      R"( {"role": "tool", "content": "-3 C"}, {"role": "assistant", "content": "Cold: -3 C."}],)"
      R"( "tools": [{"type": "function", "function": {"name": "weather", "parameters": {}}}]})"));
  return rows;
}

TEST_F(TableData, ConversationsReadFromEveryFileKindTokenizeAsTheJsonl) {
  MakeFiles("chat", Conversations());
  Prepared jsonl = Prepare((dir_ / "chat.jsonl").string());
  ASSERT_EQ(jsonl.exit_code, 0) << jsonl.output;
  ASSERT_EQ(jsonl.dataset->size(), 14);
  const fs::path d = dir_ / "chat";
  for (const std::string data : {(d / "one.parquet").string(), (d / "shards").string(), (d / "shards/train-*.parquet").string(),
                                 (d / "saved").string(), (d / "table.arrow").string()}) {
    ExpectSameTokens(data, *jsonl.dataset, "auto");
  }
  // Training reads them the same way: two steps at W=2 from the Parquet shards with the
  // save_to_disk directory as an eval set give the JSONL's losses, bit for bit.
  auto train = [&](const std::string& name, const std::string& data, const std::string& eval) {
    const std::string spec = (dir_ / (name + ".yaml")).string();
    std::ofstream(spec) << "name: t\nmodel: " << (dir_ / "model").string() << "\ndata: {train: '" << data
                        << "', eval: [{name: held, path: '" << eval << "'}], max_seq_len: 96, cache_dir: "
                        << (dir_ / ("cache-" + name)).string()
                        << "}\ntraining: {global_batch_size: 4, micro_batch_size: 1, lr: 0.001, precision: fp32, "
                           "eval_every_steps: 1, epochs: 2}\n";
    return TrainRun(name, 2, spec, 2);
  };
  Run from_jsonl = train("jsonl", (dir_ / "chat.jsonl").string(), (dir_ / "chat.jsonl").string());
  Run from_tables = train("tables", (d / "shards").string(), (d / "saved").string());
  ASSERT_EQ(from_jsonl.exit_code, 0) << from_jsonl.output;
  ASSERT_EQ(from_tables.exit_code, 0) << from_tables.output;
  ASSERT_EQ(from_jsonl.losses.size(), 2u);
  EXPECT_EQ(from_tables.losses, from_jsonl.losses);
  std::vector<double> eval_jsonl, eval_tables;
  for (const auto& e : from_jsonl.events) if (e["event"] == "eval") eval_jsonl.push_back(e["loss"].get<double>());
  for (const auto& e : from_tables.events) if (e["event"] == "eval") eval_tables.push_back(e["loss"].get<double>());
  ASSERT_FALSE(eval_jsonl.empty()) << from_jsonl.output;
  EXPECT_EQ(eval_tables, eval_jsonl);

  Prepared shards = Prepare((d / "shards").string());
  EXPECT_NE(shards.output.find("files             3 (parquet)"), std::string::npos) << shards.output;
  EXPECT_NE(shards.output.find("rows              14"), std::string::npos) << shards.output;
  EXPECT_NE(shards.output.find("format            messages\n"), std::string::npos) << shards.output;
}

TEST_F(TableData, EveryOtherFormatReadsItsColumnsAsJsonKeys) {
  std::vector<json> pc, text, alpaca, tokens;
  for (int i = 0; i < 9; ++i) {
    const std::string n = std::to_string(i);
    pc.push_back({{"prompt", "Count to " + n + ":"}, {"completion", " " + n}});
    text.push_back({{"text", "Document " + n + " says hello."}});
    json a = {{"instruction", "Add one to " + n}, {"output", std::to_string(i + 1)}};
    if (i % 3 == 0) a["input"] = "carefully";  // missing elsewhere: a null in the table
    alpaca.push_back(a);
    json ids = json::array(), labels = json::array();
    for (int t = 0; t < 5 + i; ++t) {
      ids.push_back(100 + 7 * t + i);
      labels.push_back(t < 2 ? -100 : 100 + 7 * t + i);
    }
    tokens.push_back({{"input_ids", ids}, {"labels", labels}});
  }
  for (const auto& [name, rows, format] :
       std::vector<std::tuple<std::string, std::vector<json>, std::string>>{
           {"pc", pc, "prompt_completion"}, {"text", text, "text"}, {"alpaca", alpaca, "alpaca"},
           {"tokens", tokens, "pretokenized"}}) {
    SCOPED_TRACE(name);
    MakeFiles(name, rows);
    Prepared jsonl = Prepare((dir_ / (name + ".jsonl")).string());
    ASSERT_EQ(jsonl.exit_code, 0) << jsonl.output;
    EXPECT_NE(jsonl.output.find("format            " + format + "\n"), std::string::npos) << jsonl.output;
    ExpectSameTokens((dir_ / name / "one.parquet").string(), *jsonl.dataset, "auto");
    ExpectSameTokens((dir_ / name / "saved").string(), *jsonl.dataset, format);
  }
}

TEST_F(TableData, BadFilesNameTheFileRowGroupAndColumnOrAreSkippedAndCounted) {
  MakeFiles("chat", Conversations());
  const fs::path d = dir_ / "chat";
  auto fails = [&](const std::string& data, const std::string& expected, const std::string& format = "auto") {
    SCOPED_TRACE(data);
    Prepared p = Prepare(data, format);
    EXPECT_EQ(p.exit_code, 2) << p.output;
    EXPECT_NE(p.output.find(expected), std::string::npos) << p.output;
  };
  fails((d / "no_messages.parquet").string(),
        (d / "no_messages.parquet").string() + ": row group 0, row 0: cannot tell the format from the keys (tools)");
  fails((d / "no_messages.parquet").string(), "no_messages.parquet: row group 0, row 0: messages: missing", "messages");
  fails((d / "string_messages.parquet").string(),
        "string_messages.parquet: row group 0, row 0: messages: expected a list of messages, got string");
  fails((d / "checksummed.parquet").string(),
        (d / "checksummed.parquet").string() + ": row group 1, column messages: could not verify page integrity");
  fails((d / "truncated.parquet").string(), (d / "truncated.parquet").string() + ": not a readable Parquet file");
  fails((d / "truncated_saved").string(), "data-00001-of-00002.arrow: record batch 0: ");
  fails((d / "dict").string(), "a DatasetDict saved with save_to_disk: name one split's directory (train)");
  fails((d / "nothing-*.parquet").string(), "nothing-*.parquet: no file matches");

  // Skipped: the damaged row group's 4 rows, counted; the first reason kept.
  Prepared skipped = Prepare((d / "checksummed.parquet").string(), "auto", "--set data.on_bad_line=skip");
  ASSERT_EQ(skipped.exit_code, 0) << skipped.output;
  EXPECT_NE(skipped.output.find("rows              10\n"), std::string::npos) << skipped.output;
  EXPECT_NE(skipped.output.find("examples          10\n"), std::string::npos) << skipped.output;
  EXPECT_NE(skipped.output.find("bad rows        4 skipped, first: " + (d / "checksummed.parquet").string() +
                                ": row group 1, column messages: "),
            std::string::npos)
      << skipped.output;
  // A shard that cannot be opened at all is one bad record; the others still train.
  fs::create_directories(dir_ / "mixed");
  fs::copy_file(d / "shards/train-00000-of-00003.parquet", dir_ / "mixed/a.parquet");
  fs::copy_file(d / "truncated.parquet", dir_ / "mixed/b.parquet");
  Prepared mixed = Prepare((dir_ / "mixed").string(), "auto", "--set data.on_bad_line=skip");
  ASSERT_EQ(mixed.exit_code, 0) << mixed.output;
  EXPECT_NE(mixed.output.find("examples          4\n"), std::string::npos) << mixed.output;
  EXPECT_NE(mixed.output.find("bad rows        1 skipped, first: " + (dir_ / "mixed/b.parquet").string() +
                              ": not a readable Parquet file"),
            std::string::npos)
      << mixed.output;
}

}  // namespace
}  // namespace eft::testing
