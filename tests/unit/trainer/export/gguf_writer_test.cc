// The GGUF container and the conversions of trainer/export/ in C++ alone (gguf-py reads real exports back in
// tests/reference/gguf_export_test.py): the header bytes and alignment, atomic writes, q8_0's bound, and the
// Q/K row permutation.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstring>
#include <filesystem>

#include <ATen/ATen.h>

#include "common/file_util.h"
#include "trainer/export/gguf_export.h"
#include "trainer/export/gguf_writer.h"

namespace eft::trainer {
namespace {

namespace fs = std::filesystem;

// One directory for the whole run, removed at exit.
fs::path TempDir() {
  struct Dir {
    fs::path path = fs::temp_directory_path() / ("gguf_writer_test." + std::to_string(::getpid()));
    Dir() { fs::create_directories(path); }
    ~Dir() {
      std::error_code ec;
      fs::remove_all(path, ec);
    }
  };
  static const Dir dir;
  return dir.path;
}

template <typename T>
T At(const std::string& bytes, size_t offset) {
  T v;
  std::memcpy(&v, bytes.data() + offset, sizeof(T));
  return v;
}

TEST(GgufWriterTest, HeaderMetadataAndAlignedData) {
  const fs::path path = TempDir() / "a.gguf";
  GgufWriter w;
  w.AddString("general.architecture", "llama");
  w.AddUint32("llama.block_count", 2);
  ASSERT_TRUE(w.DeclareTensor("a", GgmlType::kF32, {3}).ok());       // 12 bytes, then padding to 32
  ASSERT_TRUE(w.DeclareTensor("b", GgmlType::kF16, {2, 5}).ok());    // written as ne = [5, 2]
  auto size = w.Write(path.string(), [](size_t i) -> Result<std::string> {
    return std::string(i == 0 ? 12 : 20, static_cast<char>('x' + i));
  });
  ASSERT_TRUE(size.ok()) << size.status();
  auto bytes = ReadFileToString(path.string());
  ASSERT_TRUE(bytes.ok());
  EXPECT_EQ(bytes->size(), *size);
  EXPECT_EQ(bytes->substr(0, 4), "GGUF");
  EXPECT_EQ(At<uint32_t>(*bytes, 4), 3u);
  EXPECT_EQ(At<uint64_t>(*bytes, 8), 2u);   // tensors
  EXPECT_EQ(At<uint64_t>(*bytes, 16), 2u);  // metadata
  EXPECT_EQ(At<uint64_t>(*bytes, 24), std::strlen("general.architecture"));
  // The data section starts aligned; tensor b starts at offset 32 within it.
  const size_t data = bytes->size() - 32 - 32;
  EXPECT_EQ(data % 32, 0u);
  EXPECT_EQ((*bytes)[data], 'x');
  EXPECT_EQ((*bytes)[data + 12], '\0');
  EXPECT_EQ((*bytes)[data + 32], 'y');
  const size_t b_info = bytes->find(std::string("\x01\0\0\0\0\0\0\0b", 9));
  ASSERT_NE(b_info, std::string::npos);
  EXPECT_EQ(At<uint32_t>(*bytes, b_info + 9), 2u);          // dimensions
  EXPECT_EQ(At<uint64_t>(*bytes, b_info + 13), 5u);         // innermost first
  EXPECT_EQ(At<uint64_t>(*bytes, b_info + 21), 2u);
  EXPECT_EQ(At<uint32_t>(*bytes, b_info + 29), 1u);         // f16
  EXPECT_EQ(At<uint64_t>(*bytes, b_info + 33), 32u);        // offset
}

TEST(GgufWriterTest, AFailedWriteLeavesTheOldFileAndNoTemporary) {
  const fs::path dir = TempDir() / "fail";
  fs::remove_all(dir);
  fs::create_directories(dir);
  const fs::path path = dir / "m.gguf";
  ASSERT_TRUE(WriteStringToFile(path.string(), "old").ok());
  GgufWriter w;
  ASSERT_TRUE(w.DeclareTensor("a", GgmlType::kF32, {4}).ok());
  auto wrong_size = w.Write(path.string(), [](size_t) -> Result<std::string> { return std::string(3, 'x'); });
  EXPECT_EQ(wrong_size.status().code(), StatusCode::kInvalidArgument);
  auto failing = w.Write(path.string(), [](size_t) -> Result<std::string> { return Status::DataLoss("bad input"); });
  EXPECT_EQ(failing.status().code(), StatusCode::kDataLoss);
  EXPECT_EQ(*ReadFileToString(path.string()), "old");
  EXPECT_EQ(std::distance(fs::directory_iterator(dir), fs::directory_iterator()), 1);
  auto unwritable = w.Write((dir / "no-such-dir" / "m.gguf").string(),
                            [](size_t) -> Result<std::string> { return std::string(16, 'x'); });
  EXPECT_FALSE(unwritable.ok());
  EXPECT_NE(unwritable.status().message().find("no-such-dir"), std::string::npos);
}

TEST(GgufWriterTest, RefusesBadDeclarations) {
  GgufWriter w;
  EXPECT_FALSE(w.DeclareTensor("q", GgmlType::kQ8_0, {4, 48}).ok());  // rows not a multiple of 32
  EXPECT_TRUE(w.DeclareTensor("q", GgmlType::kQ8_0, {4, 64}).ok());
  EXPECT_FALSE(w.DeclareTensor("q", GgmlType::kF32, {4}).ok());       // twice
  EXPECT_FALSE(w.DeclareTensor("z", GgmlType::kF32, {0}).ok());
  w.AddUint32("k", 1);
  w.AddUint32("k", 2);
  EXPECT_EQ(w.Write((TempDir() / "dup.gguf").string(), [](size_t) -> Result<std::string> { return std::string(); })
                .status()
                .code(),
            StatusCode::kInvalidArgument);
}

TEST(QuantizeQ8_0Test, EveryElementWithinHalfItsBlocksScale) {
  at::manual_seed(0);
  at::Tensor x = at::randn({64, 96}) * 0.05;
  x[0].zero_();                           // a zero block: scale 0, all q 0
  x[1].fill_(1e-9);                       // amax/127 underflows fp16: the smallest fp16 instead
  x[2].copy_(at::linspace(-3, 3, 96));   // a spread of values across each block
  auto bytes = QuantizeQ8_0(x, "x");
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  const int64_t blocks = x.numel() / 32;
  ASSERT_EQ(static_cast<int64_t>(bytes->size()), blocks * 34);
  const at::Tensor raw = at::from_blob(bytes->data(), {blocks, 34}, at::kByte).clone();
  const at::Tensor d = raw.slice(1, 0, 2).contiguous().view(at::kHalf).to(at::kFloat);  // [blocks, 1]
  const at::Tensor q = raw.slice(1, 2, 34).contiguous().view(at::kChar).to(at::kFloat);
  const at::Tensor xb = x.reshape({blocks, 32});
  const at::Tensor err = (xb - q * d).abs();
  EXPECT_TRUE(err.le(d / 2 * (1 + 1e-6)).all().item<bool>()) << "max excess " << (err - d / 2).max().item<float>();
  const at::Tensor want_d = (std::get<0>(xb.abs().max(1)) / 127).to(at::kHalf).to(at::kFloat);
  // Rows of 96 are 3 blocks: blocks 3..5 are x[1]'s, whose scale is the smallest fp16 instead.
  const at::Tensor got_d = d.squeeze(1);
  EXPECT_TRUE(got_d.slice(0, 0, 3).equal(want_d.slice(0, 0, 3)));
  EXPECT_TRUE(got_d.slice(0, 6).equal(want_d.slice(0, 6)));
  EXPECT_EQ(got_d[0].item<float>(), 0.0f);
  EXPECT_EQ(got_d[3].item<float>(), 5.9604644775390625e-08f);
  EXPECT_TRUE(q.abs().le(127).all().item<bool>());
}

TEST(QuantizeQ8_0Test, RefusesValuesBeyondFp16Scales) {
  at::Tensor x = at::zeros({32});
  x[5] = 1e7;  // amax / 127 > 65504
  EXPECT_EQ(QuantizeQ8_0(x, "big").status().code(), StatusCode::kInvalidArgument);
}

TEST(PermuteForGgmlRopeTest, InterleavesTheHalvesOfEachHead) {
  // 2 heads of 4 rows: HF's rows (h, half, i) -> ggml's (h, i, half).
  const at::Tensor w = at::arange(8, at::kFloat).unsqueeze(1).repeat({1, 3});
  const at::Tensor p = PermuteForGgmlRope(w, 2);
  const std::vector<float> want = {0, 2, 1, 3, 4, 6, 5, 7};
  for (int64_t r = 0; r < 8; ++r) EXPECT_EQ(p[r][0].item<float>(), want[r]) << r;
  const at::Tensor bias = at::arange(8, at::kFloat);
  EXPECT_TRUE(PermuteForGgmlRope(bias, 2).equal(p.select(1, 0)));
}

TEST(ParseGgufFileTypeTest, NamesTheChoices) {
  EXPECT_TRUE(ParseGgufFileType("q8_0").ok());
  auto bad = ParseGgufFileType("q4_k");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("f32, f16, bf16 or q8_0"), std::string::npos);
}

}  // namespace
}  // namespace eft::trainer
