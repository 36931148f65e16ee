// What a data path names (data_files.h): files, globs, a directory of Parquet shards, a
// save_to_disk directory in state.json's order, and what is refused with a reason.
#include "trainer/data/data_files.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

namespace eft::trainer {
namespace {

namespace fs = std::filesystem;

class DataFilesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("eft-data-files-" + std::to_string(::getpid()) + "-" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string Write(const std::string& name, const std::string& bytes) {
    fs::create_directories((dir_ / name).parent_path());
    std::ofstream(dir_ / name, std::ios::binary) << bytes;
    return (dir_ / name).string();
  }
  fs::path dir_;
};

TEST_F(DataFilesTest, AFileIsItselfAndItsKindComesFromItsFirstBytes) {
  const std::string jsonl = Write("a.parquet", "{\"text\": \"not parquet, whatever the name\"}\n");
  EXPECT_EQ(*ResolveDataFiles(jsonl), std::vector<std::string>{jsonl});
  EXPECT_EQ(*DetectDataFileKind(jsonl), DataFileKind::kJsonl);
  EXPECT_EQ(*DetectDataFileKind(Write("p", std::string("PAR1\0\0", 6))), DataFileKind::kParquet);
  EXPECT_EQ(*DetectDataFileKind(Write("f", "ARROW1\0\0")), DataFileKind::kArrowFile);
  EXPECT_EQ(*DetectDataFileKind(Write("s", "\xff\xff\xff\xff\x10\0\0\0")), DataFileKind::kArrowStream);
  EXPECT_EQ(*DetectDataFileKind(Write("empty", "")), DataFileKind::kJsonl);
  EXPECT_EQ(DetectDataFileKind((dir_ / "missing").string()).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(ResolveDataFiles((dir_ / "missing").string()).status().code(), StatusCode::kNotFound);
}

TEST_F(DataFilesTest, AGlobAndADirectoryOfShardsReadInNameOrder) {
  const std::string b = Write("data/train-00001-of-00002.parquet", "PAR1");
  const std::string a = Write("data/train-00000-of-00002.parquet", "PAR1");
  Write("data/README.md", "not data");
  Write("data/test-00000-of-00001.parquet", "PAR1");
  auto globbed = ResolveDataFiles((dir_ / "data/train-*.parquet").string());
  ASSERT_TRUE(globbed.ok()) << globbed.status();
  EXPECT_EQ(*globbed, (std::vector<std::string>{a, b}));
  auto dir = ResolveDataFiles((dir_ / "data").string());
  ASSERT_TRUE(dir.ok()) << dir.status();
  EXPECT_EQ(dir->size(), 3u);  // every .parquet of the directory, the README left out
  EXPECT_EQ((*dir)[0], (dir_ / "data/test-00000-of-00001.parquet").string());
  auto none = ResolveDataFiles((dir_ / "data/valid-*.parquet").string());
  EXPECT_EQ(none.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(none.status().message(), (dir_ / "data/valid-*.parquet").string() + ": no file matches");
}

TEST_F(DataFilesTest, ASavedDatasetReadsItsShardsInStateJsonOrder) {
  const std::string second = Write("saved/data-00001-of-00002.arrow", "\xff\xff\xff\xff");
  const std::string first = Write("saved/data-00000-of-00002.arrow", "\xff\xff\xff\xff");
  Write("saved/state.json", R"({"_data_files": [{"filename": "data-00001-of-00002.arrow"},
                                                {"filename": "data-00000-of-00002.arrow"}], "_fingerprint": "x"})");
  auto files = ResolveDataFiles((dir_ / "saved").string());
  ASSERT_TRUE(files.ok()) << files.status();
  EXPECT_EQ(*files, (std::vector<std::string>{second, first}));  // the state's order, not the names'

  Write("escape/state.json", R"({"_data_files": [{"filename": "../saved/data-00000-of-00002.arrow"}]})");
  EXPECT_EQ(ResolveDataFiles((dir_ / "escape").string()).status().code(), StatusCode::kInvalidArgument);
  Write("gone/state.json", R"({"_data_files": [{"filename": "data-00000-of-00001.arrow"}]})");
  EXPECT_EQ(ResolveDataFiles((dir_ / "gone").string()).status().code(), StatusCode::kNotFound);
  Write("broken/state.json", "{not json");
  EXPECT_EQ(ResolveDataFiles((dir_ / "broken").string()).status().code(), StatusCode::kInvalidArgument);
}

TEST_F(DataFilesTest, ADirectoryWithNothingToReadSaysWhatItHolds) {
  Write("dict/dataset_dict.json", R"({"splits": ["train", "test"]})");
  Write("dict/train/state.json", "{}");
  Write("dict/test/state.json", "{}");
  auto dict = ResolveDataFiles((dir_ / "dict").string());
  EXPECT_EQ(dict.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(dict.status().message(), (dir_ / "dict").string() +
                                          ": a DatasetDict saved with save_to_disk: name one split's directory (test, "
                                          "train)");
  Write("other/notes.txt", "x");
  auto other = ResolveDataFiles((dir_ / "other").string());
  EXPECT_EQ(other.status().message(), (dir_ / "other").string() +
                                          ": a directory with neither *.parquet files nor a save_to_disk state.json "
                                          "(it holds: notes.txt)");
}

}  // namespace
}  // namespace eft::trainer
