// The COMMITTED manifest against every way a checkpoint directory can be damaged: truncated and
// flipped bytes, a missing or malformed manifest, a manifest naming a missing file, stale .tmp
// directories; and which checkpoint a resume picks and retention keeps.
#include "trainer/checkpoint/manifest.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <random>

#include <gtest/gtest.h>

#include <map>

namespace eft::trainer {
namespace {

namespace fs = std::filesystem;

// CRC-32C (common/crc32c.h) is tested here, where it matters most.
// RFC 3720 appendix B.4 gives these CRC-32C values; "123456789" is the usual check value.
TEST(Crc32c, MatchesPublishedCheckValues) {
  EXPECT_EQ(Crc32c("123456789", 9), 0xE3069283u);
  std::string zeros(32, '\0'), ones(32, '\xff'), inc(32, 0), dec(32, 0);
  for (int i = 0; i < 32; ++i) inc[i] = static_cast<char>(i), dec[i] = static_cast<char>(31 - i);
  EXPECT_EQ(Crc32c(zeros.data(), 32), 0x8A9136AAu);
  EXPECT_EQ(Crc32c(ones.data(), 32), 0x62A8AB43u);
  EXPECT_EQ(Crc32c(inc.data(), 32), 0x46DD794Eu);
  EXPECT_EQ(Crc32c(dec.data(), 32), 0x113FDB5Cu);
  EXPECT_EQ(Crc32cPortable("123456789", 9), 0xE3069283u);
  EXPECT_EQ(Crc32c("", 0), 0u);
}

TEST(Crc32c, HardwareAndTableAgreeOnEveryAlignmentAndContinue) {
  std::mt19937 gen(7);
  std::string data(10000, 0);
  for (auto& c : data) c = static_cast<char>(gen());
  for (size_t offset : {0, 1, 3, 7}) {
    for (size_t n : {0, 1, 7, 8, 9, 63, 64, 1000, 9990}) {
      EXPECT_EQ(Crc32c(data.data() + offset, n), Crc32cPortable(data.data() + offset, n)) << offset << " " << n;
    }
  }
  // Checksumming in pieces gives the checksum of the whole.
  uint32_t c = Crc32c(data.data(), 4097);
  c = Crc32c(data.data() + 4097, data.size() - 4097, c);
  EXPECT_EQ(c, Crc32c(data.data(), data.size()));
}

// Pieces checksummed apart (a parallel full save's writers) combine into the whole file's CRC.
TEST(Crc32c, CombineEqualsTheCrcOfTheConcatenation) {
  std::mt19937 gen(11);
  std::string data(70000, 0);
  for (auto& c : data) c = static_cast<char>(gen());
  for (size_t a : {0, 1, 3, 4096, 4097, 33333}) {
    for (size_t b : {0, 1, 2, 7, 8, 255, 4095, 4096, 12345, 36000}) {
      const uint32_t whole = Crc32c(data.data(), a + b);
      EXPECT_EQ(Crc32cCombine(Crc32c(data.data(), a), Crc32c(data.data() + a, b), b), whole) << a << " " << b;
    }
  }
  // Many pieces of odd sizes, folded in file order.
  uint32_t crc = 0;
  size_t at = 0;
  for (size_t n = 1; at + n <= data.size(); at += n, n = n * 3 + 1) {
    crc = Crc32cCombine(crc, Crc32c(data.data() + at, n), n);
  }
  EXPECT_EQ(crc, Crc32c(data.data(), at));
}

class ManifestTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() /
            ("eft-manifest-" + std::to_string(::getpid()) + "-" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(root_);
    fs::create_directories(root_);
  }
  void TearDown() override { fs::remove_all(root_); }

  // A committed checkpoint at `step` with two files of `size` bytes.
  std::string Make(int64_t step, size_t size = 5000) {
    const std::string tmp = (root_ / ("step-" + std::to_string(step) + ".tmp")).string();
    const std::string final_dir = (root_ / ("step-" + std::to_string(step))).string();
    fs::create_directories(tmp);
    for (const char* name : {"rank-00000-of-00002.safetensors", "rank-00001-of-00002.safetensors"}) {
      std::ofstream f(tmp + "/" + name, std::ios::binary);
      for (size_t i = 0; i < size; ++i) f.put(static_cast<char>((i * 31 + step) & 0xff));
    }
    auto m = WriteManifest(tmp, step, "sharded", 2,
                           {"rank-00000-of-00002.safetensors", "rank-00001-of-00002.safetensors"});
    EXPECT_TRUE(m.ok()) << m.status();
    EXPECT_TRUE(CommitCheckpointDir(tmp, final_dir).ok());
    return final_dir;
  }
  static void FlipByte(const std::string& path, size_t at) {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(static_cast<std::streamoff>(at));
    char c = 0;
    f.read(&c, 1);
    c = static_cast<char>(c ^ 0x01);
    f.seekp(static_cast<std::streamoff>(at));
    f.write(&c, 1);
  }
  static void Write(const std::string& path, const std::string& text) { std::ofstream(path) << text; }

  fs::path root_;
};

TEST_F(ManifestTest, ACommittedCheckpointVerifies) {
  std::string dir = Make(5);
  EXPECT_FALSE(fs::exists(root_ / "step-5.tmp"));
  auto m = VerifyCheckpoint(dir);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->step, 5);
  EXPECT_EQ(m->kind, "sharded");
  EXPECT_EQ(m->world_size, 2);
  EXPECT_EQ(m->files.size(), 2u);
  EXPECT_EQ(m->total_bytes(), 10000);
}

// A model directory may keep files in a folder (transformers' additional_chat_templates/): the
// manifest names them by relative path, and they are checked like any other file.
TEST_F(ManifestTest, AFileInAFolderOfTheCheckpointIsSealedAndChecked) {
  const std::string tmp = (root_ / "step-3.tmp").string(), final_dir = (root_ / "step-3").string();
  fs::create_directories(tmp + "/additional_chat_templates");
  Write(tmp + "/additional_chat_templates/tool_use.jinja", "{{ messages }}");
  auto m = WriteManifest(tmp, 3, "full", 1, {"additional_chat_templates/tool_use.jinja"});
  ASSERT_TRUE(m.ok()) << m.status();
  ASSERT_TRUE(CommitCheckpointDir(tmp, final_dir).ok());
  auto verified = VerifyCheckpoint(final_dir);
  ASSERT_TRUE(verified.ok()) << verified.status();
  EXPECT_EQ(verified->files.at(0).path, "additional_chat_templates/tool_use.jinja");
  Write(final_dir + "/additional_chat_templates/tool_use.jinja", "{{ messages }}!");
  verified = VerifyCheckpoint(final_dir);
  ASSERT_FALSE(verified.ok());
  EXPECT_NE(verified.status().message().find("additional_chat_templates/tool_use.jinja"), std::string::npos)
      << verified.status();
}

TEST_F(ManifestTest, EveryKindOfDamageIsDetectedAndNamed) {
  struct Case {
    const char* what;
    std::function<void(const std::string&)> damage;
    const char* expect;
  };
  const std::string shard = "/rank-00001-of-00002.safetensors";
  std::vector<Case> cases = {
      {"truncated shard", [&](const std::string& d) { fs::resize_file(d + shard, 4000); }, "truncated"},
      {"flipped byte", [&](const std::string& d) { FlipByte(d + shard, 2500); }, "checksum mismatch"},
      {"missing manifest", [&](const std::string& d) { fs::remove(d + "/COMMITTED"); }, "no COMMITTED"},
      {"truncated manifest",
       [&](const std::string& d) { fs::resize_file(d + "/COMMITTED", fs::file_size(d + "/COMMITTED") / 2); },
       "not JSON"},
      {"missing file", [&](const std::string& d) { fs::remove(d + shard); }, "missing"},
      {"file outside the directory",
       [&](const std::string& d) {
         Write(d + "/COMMITTED",
               R"({"format":1,"step":1,"kind":"sharded","world_size":1,"files":[{"path":"../x","bytes":1,"crc32c":0}]})");
       },
       "outside the checkpoint"},
      {"file escaping through a folder",
       [&](const std::string& d) {
         Write(d + "/COMMITTED",
               R"({"format":1,"step":1,"kind":"sharded","world_size":1,"files":[{"path":"a/../../x","bytes":1,"crc32c":0}]})");
       },
       "outside the checkpoint"},
      {"absolute path",
       [&](const std::string& d) {
         Write(d + "/COMMITTED",
               R"({"format":1,"step":1,"kind":"sharded","world_size":1,"files":[{"path":"/etc/x","bytes":1,"crc32c":0}]})");
       },
       "outside the checkpoint"},
      {"empty path component",
       [&](const std::string& d) {
         Write(d + "/COMMITTED",
               R"({"format":1,"step":1,"kind":"sharded","world_size":1,"files":[{"path":"a//x","bytes":1,"crc32c":0}]})");
       },
       "outside the checkpoint"},
      {"manifest without files key",
       [&](const std::string& d) { Write(d + "/COMMITTED", R"({"format":1,"step":1,"kind":"sharded","world_size":1})"); },
       "malformed manifest"},
  };
  int64_t step = 1;
  for (const auto& c : cases) {
    std::string dir = Make(step++);
    c.damage(dir);
    auto m = VerifyCheckpoint(dir);
    ASSERT_FALSE(m.ok()) << c.what;
    EXPECT_NE(m.status().message().find(c.expect), std::string::npos) << c.what << ": " << m.status();
    EXPECT_NE(m.status().message().find(dir), std::string::npos) << c.what << " names the directory: " << m.status();
  }
}

TEST_F(ManifestTest, ResumePicksTheNewestValidAndSkipsDamagedOnes) {
  Make(10);
  Make(20);
  std::string s30 = Make(30);
  fs::resize_file(s30 + "/rank-00000-of-00002.safetensors", 10);
  // A half-written newer one and a stray directory are not checkpoints.
  fs::create_directories(root_ / "step-40.tmp");
  Write((root_ / "step-40.tmp" / "rank-00000-of-00002.safetensors").string(), "partial");
  fs::create_directories(root_ / "step-x");
  std::vector<std::string> skipped;
  EXPECT_EQ(NewestValidCheckpoint(root_.string(), &skipped), (root_ / "step-20").string());
  EXPECT_EQ(skipped, std::vector<std::string>{s30});

  auto r = ResolveResume("auto", root_.string());
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, (root_ / "step-20").string());
  r = ResolveResume("", root_.string());
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, "") << "no resume asked for: a fresh start";
  r = ResolveResume((root_ / "step-10").string(), root_.string());
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, (root_ / "step-10").string()) << "an explicit valid path is taken as it is";
  // The controller reported step-30, which was damaged since: the newest older valid one is used.
  r = ResolveResume(s30, root_.string());
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(*r, (root_ / "step-20").string());
  // Nothing to fall back to: no valid checkpoint in the directory at all.
  fs::create_directories(root_ / "other");
  r = ResolveResume((root_ / "other" / "step-5").string(), (root_ / "other").string());
  EXPECT_EQ(r.status().code(), StatusCode::kNotFound) << r.status();
  r = ResolveResume("auto", (root_ / "empty").string());
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, "") << "auto with no checkpoint yet is a fresh start";
}

// Found by the fault soak (bench/soak/run.sh, a worker frozen past the heartbeat timeout): its ranks
// trained on unseen and retention deleted the step-25 checkpoint the controller knew of, leaving
// step-30 and step-35; the new attempt, told to resume from step-25, failed for want of an *older*
// one. A newer valid checkpoint of the same run is as good a start (the same deterministic steps led
// to it) and loses fewer of them: the newest valid one in the directory is used.
TEST_F(ManifestTest, ResumeFallsBackToANewerCheckpointWhenTheOneAskedForIsGone) {
  const std::string s25 = (root_ / "step-25").string();
  fs::create_directories(s25);  // retention was deleting it: the manifest is already gone
  Write(s25 + "/rank-00000-of-00002.safetensors", "partial");
  Make(30);
  Make(35);
  std::vector<std::string> skipped;
  auto r = ResolveResume(s25, root_.string(), &skipped);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(*r, (root_ / "step-35").string());
  EXPECT_EQ(skipped.front(), s25);
  fs::remove_all(s25);  // deleted altogether
  r = ResolveResume(s25, root_.string());
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(*r, (root_ / "step-35").string());
}

TEST_F(ManifestTest, CommitReplacesAStaleCheckpointOfTheSameStep) {
  std::string dir = Make(7, 100);
  fs::resize_file(dir + "/rank-00000-of-00002.safetensors", 10);
  ASSERT_FALSE(VerifyCheckpoint(dir).ok());
  Make(7, 200);
  auto m = VerifyCheckpoint(dir);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->total_bytes(), 400);
  EXPECT_FALSE(fs::exists(dir + ".replaced"));
}

TEST_F(ManifestTest, RetentionKeepsTheNewestAndNeverTheLastGoodOne) {
  for (int s : {1, 2, 3, 4, 5}) Make(s);
  fs::create_directories(root_ / "step-3.tmp");  // a leftover of a crashed attempt
  fs::create_directories(root_ / "step-9.tmp");  // newer than every checkpoint: maybe being written
  auto deleted = ApplyRetention(root_.string(), 2);
  ASSERT_TRUE(deleted.ok()) << deleted.status();
  std::vector<std::string> left;
  for (const auto& e : fs::directory_iterator(root_)) left.push_back(e.path().filename().string());
  std::sort(left.begin(), left.end());
  EXPECT_EQ(left, (std::vector<std::string>{"step-4", "step-5", "step-9.tmp"}));

  // The newest one lost its manifest: with keep_last 1 the older complete one must survive.
  fs::remove(root_ / "step-5" / "COMMITTED");
  deleted = ApplyRetention(root_.string(), 1);
  ASSERT_TRUE(deleted.ok());
  EXPECT_TRUE(VerifyCheckpoint((root_ / "step-4").string()).ok());
  EXPECT_EQ(ApplyRetention(root_.string(), 0).status().code(), StatusCode::kInvalidArgument);
}

// checkpoint.keep_best: the lowest eval loss among checkpoints (newest of equals) survives
// keep_last; checkpoints without an eval loss, or with a damaged state file, are not candidates.
TEST_F(ManifestTest, KeepBestSparesTheLowestEvalLossFromRetention) {
  const std::map<int, std::string> states = {{1, R"({"eval_loss": 2.0})"}, {2, R"({"eval_loss": 1.25})"},
                                             {3, "{}"},                      {4, R"({"eval_loss": 1.25})"},
                                             {5, "not json"},                {6, R"({"eval_loss": 3.0})"}};
  for (const auto& [step, text] : states) Write(Make(step) + "/trainer_state.json", text);
  EXPECT_EQ(BestEvaluatedCheckpoint(root_.string()), (root_ / "step-4").string());
  fs::remove(root_ / "step-4" / "COMMITTED");  // incomplete: no longer a candidate
  const std::string best = BestEvaluatedCheckpoint(root_.string());
  EXPECT_EQ(best, (root_ / "step-2").string());
  auto deleted = ApplyRetention(root_.string(), 2, best);
  ASSERT_TRUE(deleted.ok()) << deleted.status();
  std::vector<std::string> left;
  for (const auto& e : fs::directory_iterator(root_)) left.push_back(e.path().filename().string());
  std::sort(left.begin(), left.end());
  EXPECT_EQ(left, (std::vector<std::string>{"step-2", "step-5", "step-6"}));
  EXPECT_EQ(BestEvaluatedCheckpoint((root_ / "nowhere").string()), "");
}

TEST_F(ManifestTest, WritingAManifestForAMissingFileFails) {
  fs::create_directories(root_ / "step-1.tmp");
  auto m = WriteManifest((root_ / "step-1.tmp").string(), 1, "full", 1, {"model.safetensors"});
  EXPECT_FALSE(m.ok());
  EXPECT_FALSE(fs::exists(root_ / "step-1.tmp" / "COMMITTED"));
}

}  // namespace
}  // namespace eft::trainer
