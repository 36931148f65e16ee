#include "trainer/data/token_dataset.h"

#include <gtest/gtest.h>

#include <memory>

#include <filesystem>
#include <fstream>

namespace eft::trainer {
namespace {

namespace fs = std::filesystem;

class TokenDatasetTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (fs::temp_directory_path() / "eft_data_XXXXXX").string();
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  std::string Write(const std::string& content) {
    const std::string path = (dir_ / ("data" + std::to_string(files_++) + ".jsonl")).string();
    std::ofstream(path, std::ios::binary) << content;
    return path;
  }
  // Loads `content` and expects an error naming path:line and containing `fragment`.
  void ExpectError(const std::string& content, int line, const std::string& fragment, DatasetOptions options = {}) {
    const std::string path = Write(content);
    auto r = TokenDataset::LoadPretokenized(path, options);
    ASSERT_FALSE(r.ok()) << content;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find(path + ":" + std::to_string(line) + ": "), std::string::npos)
        << r.status().message();
    EXPECT_NE(r.status().message().find(fragment), std::string::npos) << r.status().message();
  }

  fs::path dir_;
  int files_ = 0;
};

TEST_F(TokenDatasetTest, LoadsExamplesLabelsAndStats) {
  const std::string path = Write(
      "{\"input_ids\": [5, 6, 7], \"labels\": [-100, 6, 7]}\n"
      "\n"
      "   \n"
      "{\"id\": \"ex-2\", \"input_ids\": [1, 2], \"source\": {\"x\": 1}}\r\n"
      "{\"input_ids\": [9]}");  // no trailing newline
  auto r = TokenDataset::LoadPretokenized(path, {});
  ASSERT_TRUE(r.ok()) << r.status();
  const TokenDataset& ds = *r;
  ASSERT_EQ(ds.size(), 3);
  EXPECT_EQ(ds[0].input_ids, (std::vector<int64_t>{5, 6, 7}));
  EXPECT_EQ(ds[0].labels, (std::vector<int64_t>{-100, 6, 7}));
  EXPECT_EQ(ds[1].input_ids, (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(ds[1].labels, ds[1].input_ids);  // default: train on every token
  EXPECT_EQ(ds[2].input_ids, (std::vector<int64_t>{9}));
  EXPECT_EQ(ds.stats().examples, 3);
  EXPECT_EQ(ds.stats().tokens, 6);
  // Targets after shifting: example 0 -> 6, 7; example 1 -> 2; example 2 -> none.
  EXPECT_EQ(ds.stats().trained_tokens, 3);
  EXPECT_EQ(ds.stats().truncated, 0);
  EXPECT_EQ(ds.stats().dropped, 0);
}

TEST_F(TokenDatasetTest, MalformedLinesAreNamedByFileAndLine) {
  const std::string ok = "{\"input_ids\": [1, 2, 3]}\n";
  ExpectError(ok + "{\"input_ids\": [1, 2\n", 2, "not valid JSON");
  ExpectError(ok + "\n" + "[1, 2, 3]\n", 3, "expected a JSON object");
  ExpectError(ok + "{\"tokens\": [1, 2]}\n", 2, "input_ids: missing");
  ExpectError("{\"input_ids\": \"hello\"}\n", 1, "input_ids: must be an array");
  ExpectError(ok + ok + "{\"input_ids\": []}\n", 3, "input_ids: is empty");
  ExpectError("{\"input_ids\": [4, 3, 2, -5]}\n", 1, "input_ids[3] = -5: token ids must be >= 0");
  ExpectError("{\"input_ids\": [4, 2.5]}\n", 1, "input_ids[1] = 2.5: token ids must be integers");
  ExpectError("{\"input_ids\": [4, null]}\n", 1, "input_ids[1] = null: token ids must be integers");
  ExpectError("{\"input_ids\": [4, 18446744073709551615]}\n", 1, "too large");
  ExpectError(ok + "{\"input_ids\": [1, 2, 3], \"labels\": [1, 2]}\n", 2,
              "labels: has 2 entries but input_ids has 3");
  ExpectError("{\"input_ids\": [1, 2], \"labels\": 7}\n", 1, "labels: must be an array");
  ExpectError("{\"input_ids\": [1, 2], \"labels\": [-100, -1]}\n", 1, "labels[1] = -1");
  DatasetOptions vocab;
  vocab.vocab_size = 100;
  ExpectError(ok + "{\"input_ids\": [1, 100]}\n", 2, "input_ids[1] = 100: token ids must be < the model's vocab_size (100)",
              vocab);
  ExpectError(ok + "{\"input_ids\": [1, 2], \"labels\": [1, 250]}\n", 2, "labels[1] = 250", vocab);
}

TEST_F(TokenDatasetTest, IdsAtTheVocabEdgeAreAccepted) {
  DatasetOptions vocab;
  vocab.vocab_size = 100;
  auto r = TokenDataset::LoadPretokenized(Write("{\"input_ids\": [0, 99], \"labels\": [-100, 99]}\n"), vocab);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->size(), 1);
}

TEST_F(TokenDatasetTest, LongExamplesAreTruncated) {
  DatasetOptions options;
  options.max_seq_len = 3;
  const std::string path = Write(
      "{\"input_ids\": [1, 2, 3, 4, 5], \"labels\": [-100, -100, 3, 4, 5]}\n"
      "{\"input_ids\": [1, 2, 3]}\n"
      "{\"input_ids\": [7, 8, 9, 10]}\n");
  auto r = TokenDataset::LoadPretokenized(path, options);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->size(), 3);
  EXPECT_EQ((*r)[0].input_ids, (std::vector<int64_t>{1, 2, 3}));
  EXPECT_EQ((*r)[0].labels, (std::vector<int64_t>{-100, -100, 3}));
  EXPECT_EQ((*r)[2].input_ids, (std::vector<int64_t>{7, 8, 9}));
  EXPECT_EQ(r->stats().truncated, 2);
  EXPECT_EQ(r->stats().dropped, 0);
  EXPECT_EQ(r->stats().tokens, 9);
  EXPECT_EQ(r->stats().trained_tokens, 1 + 2 + 2);
}

TEST_F(TokenDatasetTest, LongExamplesAreDroppedWhenNotTruncating) {
  DatasetOptions options;
  options.max_seq_len = 3;
  options.truncate = false;
  auto r = TokenDataset::LoadPretokenized(Write("{\"input_ids\": [1, 2, 3, 4]}\n{\"input_ids\": [5, 6, 7]}\n"), options);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->size(), 1);
  EXPECT_EQ((*r)[0].input_ids, (std::vector<int64_t>{5, 6, 7}));
  EXPECT_EQ(r->stats().dropped, 1);
  EXPECT_EQ(r->stats().truncated, 0);
  EXPECT_EQ(r->stats().examples, 1);
}

TEST_F(TokenDatasetTest, MissingFileAndBadOptions) {
  auto missing = TokenDataset::LoadPretokenized((dir_ / "nope.jsonl").string(), {});
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("nope.jsonl"), std::string::npos);
  DatasetOptions bad;
  bad.max_seq_len = 0;
  EXPECT_FALSE(TokenDataset::LoadPretokenized(Write("{\"input_ids\": [1]}\n"), bad).ok());
}

TEST_F(TokenDatasetTest, EmptyFileGivesEmptyDataset) {
  auto r = TokenDataset::LoadPretokenized(Write("\n\n"), {});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->size(), 0);
}

TEST(TokenDatasetFromExamplesTest, ComputesStats) {
  TokenDataset ds = TokenDataset::FromExamples({{{1, 2, 3}, {1, -100, 3}}, {{4}, {4}}});
  EXPECT_EQ(ds.size(), 2);
  EXPECT_EQ(ds.stats().examples, 2);
  EXPECT_EQ(ds.stats().tokens, 4);
  EXPECT_EQ(ds.stats().trained_tokens, 1);
}

}  // namespace
}  // namespace eft::trainer

namespace eft::trainer {
namespace {

// A token cache's dataset reads straight from the mapping and keeps it alive exactly as long as
// it needs it; packed rows keep their documents' lengths.
TEST(TokenDatasetStorage, FlatViewsKeepTheirOwnerAliveAndRowsKeepDocuments) {
  auto buffer = std::make_shared<std::vector<int32_t>>(std::vector<int32_t>{1, 2, 3, 4, 5, -100, 2, 3, -100, 5});
  std::weak_ptr<std::vector<int32_t>> watch = buffer;
  {
    const int32_t* ids = buffer->data();
    TokenDataset ds = TokenDataset::FromFlat(buffer, ids, ids + 5, {0, 3, 5});
    buffer.reset();
    ASSERT_FALSE(watch.expired());
    ASSERT_EQ(ds.size(), 2);
    EXPECT_EQ(ds[0].input_ids, (std::vector<int64_t>{1, 2, 3}));
    EXPECT_EQ(ds[0].labels, (std::vector<int64_t>{-100, 2, 3}));
    EXPECT_EQ(ds[1].labels, (std::vector<int64_t>{-100, 5}));
    EXPECT_EQ(ds[0].input_ids.data(), ids);  // a view, not a copy
    EXPECT_EQ(ds.stats().tokens, 5);
    EXPECT_EQ(ds.stats().trained_tokens, 3);  // labels[1..] of each example
    TokenDataset moved = std::move(ds);
    EXPECT_EQ(moved[1].input_ids, (std::vector<int64_t>{4, 5}));
  }
  EXPECT_TRUE(watch.expired());

  TokenDataset::Builder b;
  std::vector<int32_t> a{7, 8}, c{9};
  b.Append({a.data(), a.size()}, {a.data(), a.size()});
  b.Append({c.data(), c.size()}, {c.data(), c.size()});
  b.EndRow({2, 1});
  b.Append({c.data(), c.size()}, {c.data(), c.size()});
  b.EndRow();
  TokenDataset rows = b.Finish();
  ASSERT_EQ(rows.size(), 2);
  EXPECT_EQ(rows[0].input_ids, (std::vector<int64_t>{7, 8, 9}));
  EXPECT_EQ(rows[0].document_lengths, (std::vector<int64_t>{2, 1}));
  EXPECT_TRUE(rows[1].document_lengths.empty());
  TokenDataset copy = rows;  // owned storage survives a copy
  rows = TokenDataset();
  EXPECT_EQ(copy[0].labels, (std::vector<int64_t>{7, 8, 9}));
}

}  // namespace
}  // namespace eft::trainer
