// Building the SFT training set from files (formats per file, bad lines, truncation) and its
// token cache (round trip, damage, one builder among many, a builder killed mid-build).
#include "trainer/data/sft_dataset.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>

#include <gtest/gtest.h>

#include "common/crc32c.h"
#include "tests/unit/trainer/data/fake_text.h"
#include "trainer/data/token_cache.h"

namespace eft::trainer {
namespace {

namespace fs = std::filesystem;

class SftDatasetTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("eft-sft-" + std::to_string(::getpid()) + "-" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string Write(const std::string& name, const std::string& text) {
    std::string path = (dir_ / name).string();
    std::ofstream(path) << text;
    return path;
  }
  Result<TokenDataset> Build(const std::vector<std::string>& files, SftDataOptions options, SftBuildStats* stats) {
    return BuildSftDataset(files, enc_, ChatMl, options, stats);
  }

  fs::path dir_;
  ByteEncoder enc_{{"<|im_start|>", "<|im_end|>"}, 999};
};

const char* kChat = R"({"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]})";
const char* kAlpaca = R"({"instruction": "add", "input": "1 2", "output": "3"})";

TEST_F(SftDatasetTest, EachFileGetsItsOwnFormat) {
  std::string chat = Write("chat.jsonl", std::string(kChat) + "\n\n" + kChat + "\n");
  std::string alpaca = Write("alpaca.jsonl", std::string(kAlpaca) + "\n");
  std::string text = Write("text.jsonl", R"({"text": "plain"})" "\n");
  SftBuildStats stats;
  auto ds = Build({chat, alpaca, text}, {}, &stats);
  ASSERT_TRUE(ds.ok()) << ds.status();
  EXPECT_EQ(ds->size(), 4);
  EXPECT_EQ(stats.lines, 4) << "the blank line is not a line of data";
  EXPECT_EQ(stats.formats[chat], "messages");
  EXPECT_EQ(stats.formats[alpaca], "alpaca");
  EXPECT_EQ(stats.formats[text], "text");
  EXPECT_EQ(stats.tokens, ds->stats().tokens);
  EXPECT_GT(stats.trained_tokens, 0);
}

TEST_F(SftDatasetTest, ABadLineIsAnErrorWithFileAndLineOrSkippedAndCounted) {
  std::string f = Write("d.jsonl", std::string(kChat) + "\n" + kChat + "\n{not json\n" +
                                       R"({"messages": [{"role": "user"}]})" "\n" + kChat + "\n");
  SftBuildStats stats;
  auto ds = Build({f}, {}, &stats);
  ASSERT_FALSE(ds.ok());
  EXPECT_EQ(ds.status().message(), f + ":3: not valid JSON");
  SftDataOptions skip;
  skip.skip_bad_lines = true;
  ds = Build({f}, skip, &stats);
  ASSERT_TRUE(ds.ok()) << ds.status();
  EXPECT_EQ(ds->size(), 3);
  EXPECT_EQ(stats.skipped_bad, 2);
  EXPECT_EQ(stats.first_bad, f + ":3: not valid JSON");
  // A format given in the spec is held to: a chat line in a file declared as text is bad.
  SftDataOptions as_text;
  as_text.format = DataFormat::kText;
  ds = Build({f}, as_text, &stats);
  ASSERT_FALSE(ds.ok());
  EXPECT_EQ(ds.status().message(), f + ":1: text: missing");
}

TEST_F(SftDatasetTest, LongExamplesAreCutOrDroppedAndUntrainedOnesSkipped) {
  std::string long_chat = R"({"messages": [{"role": "user", "content": "short"}, {"role": "assistant", "content": ")" +
                          std::string(200, 'x') + R"("}]})";
  // With loss_on completion and a prompt/completion pair cut before the completion, nothing is left to train.
  std::string cut_prompt = R"({"prompt": ")" + std::string(100, 'p') + R"(", "completion": "c"})";
  std::string f = Write("d.jsonl", long_chat + "\n" + kChat + "\n");
  std::string g = Write("e.jsonl", cut_prompt + "\n");
  SftDataOptions options;
  options.max_seq_len = 64;
  SftBuildStats stats;
  auto ds = Build({f, g}, options, &stats);
  ASSERT_TRUE(ds.ok()) << ds.status();
  EXPECT_EQ(stats.truncated, 2);
  EXPECT_EQ(stats.no_trained, 1) << "the prompt filled all 64 tokens";
  EXPECT_EQ(ds->size(), 2);
  EXPECT_EQ((*ds)[0].input_ids.size(), 64u);
  options.truncate = false;
  ds = Build({f, g}, options, &stats);
  ASSERT_TRUE(ds.ok());
  EXPECT_EQ(stats.dropped_long, 2);
  EXPECT_EQ(ds->size(), 1);
}

TokenDataset Sample() {
  return TokenDataset::FromExamples({{{1, 2, 3}, {-100, 2, 3}, {}}, {{7}, {7}, {}}, {{4, 5, 6, 7}, {4, -100, 6, 7}, {}}});
}

void ExpectSame(const TokenDataset& a, const TokenDataset& b) {
  ASSERT_EQ(a.size(), b.size());
  for (int64_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].input_ids, b[i].input_ids);
    EXPECT_EQ(a[i].labels, b[i].labels);
  }
}

TEST_F(SftDatasetTest, TheCacheRoundTripsAndRefusesDamage) {
  const std::string path = (dir_ / "k.tokens").string();
  ASSERT_TRUE(WriteTokenCache(path, "k", Sample(), {{"examples", 3}}).ok());
  nlohmann::json info;
  auto back = ReadTokenCache(path, "k", &info);
  ASSERT_TRUE(back.ok()) << back.status();
  ExpectSame(*back, Sample());
  EXPECT_EQ(info["examples"], 3);
  EXPECT_EQ(ReadTokenCache(path, "other", nullptr).status().code(), StatusCode::kDataLoss);
  {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(fs::file_size(path) - 10));
    f.put('\x7f');
  }
  EXPECT_NE(ReadTokenCache(path, "k", nullptr).status().message().find("checksum mismatch"), std::string::npos);
  fs::resize_file(path, 20);
  EXPECT_EQ(ReadTokenCache(path, "k", nullptr).status().code(), StatusCode::kDataLoss);
  EXPECT_EQ(ReadTokenCache((dir_ / "none").string(), "k", nullptr).status().code(), StatusCode::kNotFound);
}

// A header size that passes the checksum (a crafted file: the CRC is recomputed) but reaches past the
// room between the prefix and the CRC is refused; the check was against the whole file's size, so
// the header's parse could read past the mapping (found reading the code for `make sanitize`).
TEST_F(SftDatasetTest, AHeaderSizeBeyondItsRoomIsRefusedEvenWithAMatchingChecksum) {
  const std::string path = (dir_ / "k.tokens").string();
  ASSERT_TRUE(WriteTokenCache(path, "k", Sample(), {}).ok());
  std::string bytes;
  {
    std::ifstream in(path, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
  }
  for (uint64_t header_size : {uint64_t{bytes.size()}, uint64_t{bytes.size() - 19}}) {
    std::memcpy(bytes.data() + 8, &header_size, 8);
    const uint32_t crc = Crc32c(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size() - 4);
    std::memcpy(bytes.data() + bytes.size() - 4, &crc, 4);
    std::ofstream(path, std::ios::binary | std::ios::trunc).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    auto back = ReadTokenCache(path, "k", nullptr);
    ASSERT_FALSE(back.ok()) << header_size;
    EXPECT_NE(back.status().message().find("bad header size"), std::string::npos) << back.status().message();
  }
}

TEST_F(SftDatasetTest, CacheKeysChangeWithAnyInput) {
  std::string a = Write("a.jsonl", "1"), b = Write("b.jsonl", "2");
  CacheKey k1, k2, k3, k4;
  ASSERT_TRUE(k1.AddFile(a).ok());
  k1.AddText("opts");
  ASSERT_TRUE(k2.AddFile(a).ok());
  k2.AddText("opts");
  ASSERT_TRUE(k3.AddFile(b).ok());
  k3.AddText("opts");
  ASSERT_TRUE(k4.AddFile(a).ok());
  k4.AddText("opts2");
  EXPECT_EQ(k1.Hex(), k2.Hex());
  EXPECT_NE(k1.Hex(), k3.Hex());
  EXPECT_NE(k1.Hex(), k4.Hex());
  EXPECT_EQ(k1.Hex().size(), 16u);
  CacheKey missing;
  EXPECT_EQ(missing.AddFile((dir_ / "nope").string()).code(), StatusCode::kNotFound);
}

TEST_F(SftDatasetTest, OneOfManyBuildsTheOthersWaitAndARestartReuses) {
  std::atomic<int> builds{0};
  BuildTokens build = [&](nlohmann::json* info) -> Result<TokenDataset> {
    ++builds;
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    *info = {{"built", true}};
    return Sample();
  };
  const std::string cache = (dir_ / "cache").string();
  std::vector<std::thread> ranks;
  std::atomic<int> ok{0}, built_here{0};
  for (int r = 0; r < 4; ++r) {
    ranks.emplace_back([&] {
      bool here = false;
      nlohmann::json info;
      auto ds = LoadOrBuildTokenCache(cache, "key1", build, &info, &here, {std::chrono::seconds(60), std::chrono::milliseconds(20)});
      if (ds.ok() && ds->size() == 3 && info["built"] == true) ++ok;
      built_here += here;
    });
  }
  for (auto& t : ranks) t.join();
  EXPECT_EQ(builds, 1);
  EXPECT_EQ(built_here, 1);
  EXPECT_EQ(ok, 4);
  // A restart finds the file.
  bool here = true;
  auto again = LoadOrBuildTokenCache(cache, "key1", build, nullptr, &here);
  ASSERT_TRUE(again.ok());
  EXPECT_FALSE(here);
  EXPECT_EQ(builds, 1);
  // A damaged file is rebuilt.
  fs::resize_file(cache + "/key1.tokens", 30);
  again = LoadOrBuildTokenCache(cache, "key1", build, nullptr, &here);
  ASSERT_TRUE(again.ok());
  EXPECT_TRUE(here);
  EXPECT_EQ(builds, 2);
}

TEST_F(SftDatasetTest, ABuilderKilledMidBuildIsTakenOver) {
  const std::string cache = (dir_ / "cache").string();
  pid_t child = ::fork();
  if (child == 0) {
    BuildTokens forever = [](nlohmann::json*) -> Result<TokenDataset> {
      ::pause();
      return Sample();
    };
    (void)LoadOrBuildTokenCache(cache, "key2", forever, nullptr);
    ::_exit(0);
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!fs::exists(cache + "/key2.lock") && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_TRUE(fs::exists(cache + "/key2.lock"));
  ::kill(child, SIGKILL);
  ::waitpid(child, nullptr, 0);
  bool here = false;
  const auto t0 = std::chrono::steady_clock::now();
  auto ds = LoadOrBuildTokenCache(cache, "key2", [](nlohmann::json*) -> Result<TokenDataset> { return Sample(); },
                                  nullptr, &here, {std::chrono::seconds(2), std::chrono::milliseconds(50)});
  ASSERT_TRUE(ds.ok()) << ds.status();
  EXPECT_TRUE(here);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(8));
}

// A streamed build (LoadOrStreamTokenCache: documents spilled to disk as they are made, the cache
// file written from the spills) gives the same file as the in-memory one, and leaves no spill file.
StreamTokens StreamSample(int* builds) {
  return [builds](TokenSink* sink, nlohmann::json* info) -> Status {
    ++*builds;
    const TokenDataset sample = Sample();
    for (int64_t i = 0; i < sample.size(); ++i) sink->Add(sample[i].input_ids, sample[i].labels);
    *info = {{"examples", sample.size()}};
    return Status::Ok();
  };
}

TEST_F(SftDatasetTest, AStreamedBuildWritesTheSameCacheAndLeavesNoSpills) {
  const std::string cache = (dir_ / "cache").string();
  int builds = 0;
  bool here = false;
  nlohmann::json info;
  auto ds = LoadOrStreamTokenCache(cache, "s1", StreamSample(&builds), &info, &here);
  ASSERT_TRUE(ds.ok()) << ds.status();
  EXPECT_TRUE(here);
  ExpectSame(*ds, Sample());
  EXPECT_EQ(info["examples"], 3);
  auto read = ReadTokenCache(cache + "/s1.tokens", "s1", nullptr);
  ASSERT_TRUE(read.ok()) << read.status();
  ExpectSame(*read, Sample());
  std::vector<std::string> left;
  for (const auto& e : fs::directory_iterator(cache)) left.push_back(e.path().filename().string());
  EXPECT_EQ(left, std::vector<std::string>{"s1.tokens"});
  ds = LoadOrStreamTokenCache(cache, "s1", StreamSample(&builds), nullptr, &here);
  ASSERT_TRUE(ds.ok());
  EXPECT_FALSE(here);
  EXPECT_EQ(builds, 1);
}

// A disk that refuses the spill (here /dev/full behind the spill file's name): the build runs again
// into memory and training goes on without a cache file; nothing is left behind.
TEST_F(SftDatasetTest, AStreamedBuildOnAFullDiskFallsBackToMemory) {
  const std::string cache = (dir_ / "cache").string();
  fs::create_directories(cache);
  fs::create_symlink("/dev/full", cache + "/s2.tokens.ids." + std::to_string(::getpid()));
  int builds = 0;
  auto ds = LoadOrStreamTokenCache(cache, "s2", StreamSample(&builds), nullptr);
  ASSERT_TRUE(ds.ok()) << ds.status();
  ExpectSame(*ds, Sample());
  EXPECT_EQ(builds, 2) << "streamed, then again into memory";
  EXPECT_TRUE(fs::is_empty(cache)) << "no cache file, spill or lock left";
  auto failed = LoadOrStreamTokenCache(cache, "s3", [](TokenSink*, nlohmann::json*) -> Status {
    return Status::InvalidArgument("data.parquet: row group 0, row 3: messages: missing");
  }, nullptr);
  EXPECT_EQ(failed.status().message(), "data.parquet: row group 0, row 3: messages: missing");
  EXPECT_TRUE(fs::is_empty(cache));
}

TEST_F(SftDatasetTest, AFailedBuildIsReportedAndLeavesNoLock) {
  const std::string cache = (dir_ / "cache").string();
  auto ds = LoadOrBuildTokenCache(cache, "key3", [](nlohmann::json*) -> Result<TokenDataset> {
    return Status::InvalidArgument("data.jsonl:3: not valid JSON");
  }, nullptr);
  EXPECT_EQ(ds.status().message(), "data.jsonl:3: not valid JSON");
  EXPECT_FALSE(fs::exists(cache + "/key3.lock"));
  EXPECT_FALSE(fs::exists(cache + "/key3.tokens"));
}

}  // namespace
}  // namespace eft::trainer
