// The streaming writers: files read back bit-exactly by the reader (and by Python's safetensors in
// safetensors_interop_test, through WriteSafetensors), the returned size and CRC-32C are those of
// the bytes on disk, writeback pacing does not change a byte, and every misuse or I/O failure is an
// error that leaves no file behind.
#include "trainer/io/safetensors_writer.h"

#include <signal.h>
#include <sys/resource.h>

#include "common/crc32c.h"
#include "tests/unit/trainer/io/safetensors_test_util.h"

namespace eft::trainer {
namespace {

using namespace safetensors_testing;

class SafetensorsWriterTest : public SafetensorsTest {};

std::vector<std::string> FilesIn(const fs::path& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

TEST_F(SafetensorsWriterTest, StreamsTensorsInDeclaredOrderAndReportsTheFilesChecksum) {
  at::manual_seed(3);
  // 7 tensors of mixed size; a 4 KiB pacing chunk, so most writes cross chunk boundaries and the
  // sync_file_range / fadvise path runs many times.
  std::vector<at::Tensor> data = {at::randn({300, 17}), at::randn({5}), at::randn({2049}), at::randn({1, 1}),
                                  at::randn({64, 64}), at::randn({0}), at::randn({3, 1000})};
  std::vector<TensorDecl> decls;
  for (size_t i = 0; i < data.size(); ++i) decls.push_back({"t" + std::to_string(i), at::kFloat, data[i].sizes().vec()});
  const std::string path = Path("streamed.safetensors");
  auto w = SafetensorsWriter::Create(path, decls, {{"k", "v"}}, 4096);
  ASSERT_TRUE(w.ok()) << w.status();
  for (const at::Tensor& t : data) {
    EXPECT_FALSE((*w)->complete());
    ASSERT_TRUE((*w)->Append(t).ok());
  }
  auto written = (*w)->Finish();
  ASSERT_TRUE(written.ok()) << written.status();

  const std::string bytes = ReadFile(path);
  EXPECT_EQ(written->path, path);
  EXPECT_EQ(written->bytes, static_cast<int64_t>(bytes.size()));
  EXPECT_EQ(written->crc32c, Crc32c(bytes.data(), bytes.size()));
  auto f = SafetensorsFile::Open(path);
  ASSERT_TRUE(f.ok()) << f.status();
  ASSERT_EQ((*f)->entries().size(), data.size());
  for (size_t i = 0; i < data.size(); ++i) {
    EXPECT_EQ((*f)->entries()[i].name, "t" + std::to_string(i)) << "data in declaration order";
    EXPECT_TRUE(SameBytes((*f)->View((*f)->entries()[i]), data[i])) << i;
  }
  EXPECT_EQ((*f)->metadata().at("k"), "v");
  EXPECT_EQ(FilesIn(fs::path(dir_)), std::vector<std::string>{"streamed.safetensors"}) << "no temporary file left";
}

// Neither the pacing nor Durability::kVolatile (no writeback pacing, no fsyncs: memory snapshots)
// changes a byte or the reported checksum.
TEST_F(SafetensorsWriterTest, PacingAndDurabilityDoNotChangeAByte) {
  at::manual_seed(4);
  at::Tensor big = at::randn({50000});
  std::vector<TensorDecl> decls = {{"big", at::kFloat, {50000}}};
  std::string files[3];
  uint32_t crcs[3] = {};
  int i = 0;
  for (auto [chunk, durability] : {std::pair{uint64_t{4096}, Durability::kDurable},
                                   std::pair{SafetensorsWriter::kChunkBytes, Durability::kDurable},
                                   std::pair{uint64_t{4096}, Durability::kVolatile}}) {
    const std::string path = Path(("f" + std::to_string(i) + ".safetensors"));
    auto w = SafetensorsWriter::Create(path, decls, {}, chunk, durability);
    ASSERT_TRUE(w.ok());
    ASSERT_TRUE((*w)->Append(big).ok());
    auto written = (*w)->Finish();
    ASSERT_TRUE(written.ok()) << written.status();
    crcs[i] = written->crc32c;
    files[i++] = ReadFile(path);
  }
  EXPECT_EQ(files[0], files[1]);
  EXPECT_EQ(files[0], files[2]);
  EXPECT_EQ(crcs[0], crcs[2]);
}

TEST_F(SafetensorsWriterTest, AppendConvertsToTheDeclaredDtypeFromAnyLayout) {
  at::Tensor t = at::randn({4, 6}).t();  // not contiguous
  const std::string path = Path("bf16.safetensors");
  auto w = SafetensorsWriter::Create(path, {{"w", at::kBFloat16, {6, 4}}});
  ASSERT_TRUE(w.ok());
  ASSERT_TRUE((*w)->Append(t).ok());
  ASSERT_TRUE((*w)->Finish().ok());
  auto f = SafetensorsFile::Open(path);
  ASSERT_TRUE(f.ok());
  EXPECT_TRUE(SameBytes((*f)->View(*(*f)->Find("w")), t.to(at::kBFloat16).contiguous()));
}

TEST_F(SafetensorsWriterTest, MisuseIsAnErrorAndLeavesNoFile) {
  const std::string path = Path("x.safetensors");
  std::vector<TensorDecl> two = {{"a", at::kFloat, {2, 3}}, {"b", at::kFloat, {4}}};
  {
    auto w = SafetensorsWriter::Create(path, two);
    ASSERT_TRUE(w.ok());
    Status wrong = (*w)->Append(at::zeros({5}));
    EXPECT_EQ(wrong.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(wrong.ToString().find("'a' declared with 6 elements, given 5"), std::string::npos) << wrong;
    ASSERT_TRUE((*w)->Append(at::zeros({6})).ok());
    auto early = (*w)->Finish();
    ASSERT_FALSE(early.ok());
    EXPECT_NE(early.status().ToString().find("starting with 'b'"), std::string::npos) << early.status();
  }  // destroyed unfinished
  EXPECT_TRUE(FilesIn(fs::path(dir_)).empty()) << "the temporary file is removed, no target appears";
  {
    auto w = SafetensorsWriter::Create(path, {{"a", at::kFloat, {1}}});
    ASSERT_TRUE((*w)->Append(at::zeros({1})).ok());
    EXPECT_FALSE((*w)->Append(at::zeros({1})).ok()) << "more than declared";
  }
  EXPECT_EQ(SafetensorsWriter::Create(path, {{"a", at::kFloat, {1}}, {"a", at::kFloat, {1}}}).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(SafetensorsWriter::Create(path, {{"__metadata__", at::kFloat, {1}}}).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(SafetensorsWriter::Create(path, {{"c", at::kComplexFloat, {1}}}).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(SafetensorsWriter::Create(path, {}, {}, 1000).status().code(), StatusCode::kInvalidArgument);
  auto missing = SafetensorsWriter::Create(Path("no/such/dir/x.safetensors"), two);
  EXPECT_EQ(missing.status().code(), StatusCode::kInternal) << missing.status();
  EXPECT_TRUE(FilesIn(fs::path(dir_)).empty());
}

// A disk that refuses writes part-way (a file size limit fails write() with EFBIG, as a full disk
// fails it with ENOSPC) is an IoError from Append or Finish, and no file, final or temporary, stays.
TEST_F(SafetensorsWriterTest, AFailingDiskIsAnErrorAndLeavesNoFile) {
  const std::string path = Path("big.safetensors");
  rlimit old{};
  ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &old), 0);
  auto previous = ::signal(SIGXFSZ, SIG_IGN);
  rlimit limit = old;
  limit.rlim_cur = 64 * 1024;
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &limit), 0);
  Status failed;
  {
    auto w = SafetensorsWriter::Create(path, {{"a", at::kFloat, {40000}}, {"b", at::kFloat, {10}}}, {}, 4096);
    ASSERT_TRUE(w.ok());
    failed = (*w)->Append(at::zeros({40000}));
    if (failed.ok()) failed = (*w)->Append(at::zeros({10}));
    if (failed.ok()) failed = (*w)->Finish().status();
    EXPECT_FALSE((*w)->Append(at::zeros({10})).ok()) << "a failed writer stays failed";
  }
  ::setrlimit(RLIMIT_FSIZE, &old);
  ::signal(SIGXFSZ, previous);
  EXPECT_EQ(failed.code(), StatusCode::kInternal) << failed;
  EXPECT_NE(failed.ToString().find("File too large"), std::string::npos) << failed;
  EXPECT_TRUE(FilesIn(fs::path(dir_)).empty());
}

TEST_F(SafetensorsWriterTest, DirectoryWriterShardsInDeclarationOrderAndIndexesThem) {
  at::manual_seed(5);
  std::vector<std::pair<std::string, at::Tensor>> tensors = {
      {"z.first", at::randn({100})}, {"a.second", at::randn({100})}, {"m.third", at::randn({300})}};
  std::vector<TensorDecl> decls;
  for (const auto& [n, t] : tensors) decls.push_back({n, at::kFloat, t.sizes().vec()});
  // 800 bytes per shard: [z.first, a.second] (800 B), then m.third (1200 B, a shard of its own).
  const std::string dir = Path("model");
  fs::create_directories(dir);
  WriteFile(dir + "/model.safetensors", "stale");  // would shadow the shards
  auto w = SafetensorsDirWriter::Create(dir, decls, 800);
  ASSERT_TRUE(w.ok()) << w.status();
  for (const auto& [n, t] : tensors) ASSERT_TRUE((*w)->Append(t).ok());
  auto written = (*w)->Finish();
  ASSERT_TRUE(written.ok()) << written.status();
  ASSERT_EQ(written->size(), 3u);
  EXPECT_EQ(fs::path((*written)[0].path).filename(), "model-00001-of-00002.safetensors");
  EXPECT_EQ(fs::path((*written)[2].path).filename(), "model.safetensors.index.json");
  for (const WrittenFile& f : *written) {
    const std::string bytes = ReadFile(f.path);
    EXPECT_EQ(f.crc32c, Crc32c(bytes.data(), bytes.size())) << f.path;
  }
  EXPECT_FALSE(fs::exists(dir + "/model.safetensors"));
  auto d = SafetensorsDir::Open(dir);
  ASSERT_TRUE(d.ok()) << d.status();
  for (const auto& [n, t] : tensors) EXPECT_TRUE(SameBytes(*(*d)->Load(n, at::kFloat), t)) << n;
  auto first = SafetensorsFile::Open(dir + "/model-00001-of-00002.safetensors");
  ASSERT_TRUE(first.ok());
  EXPECT_EQ((*first)->entries()[0].name, "z.first");
  EXPECT_EQ((*first)->metadata().at("format"), "pt");
}

}  // namespace
}  // namespace eft::trainer
