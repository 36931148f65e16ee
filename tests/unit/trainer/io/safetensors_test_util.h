// Shared helpers for the safetensors tests: hand-made files, byte-exact comparison, a temp dir.
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "tests/unit/common/read_file_test_util.h"
#include "trainer/io/safetensors.h"

namespace eft::trainer::safetensors_testing {

namespace fs = std::filesystem;
using Tensors = std::vector<std::pair<std::string, at::Tensor>>;

inline std::string ReadFile(const std::string& path) { return file_testing::ReadFileOrEmpty(path); }

inline void WriteFile(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// A file laid out by hand: `header_len` overrides the true length to fake corrupt prefixes.
inline std::string RawFile(const std::string& header, const std::string& data, int64_t header_len = -1) {
  uint64_t n = header_len >= 0 ? static_cast<uint64_t>(header_len) : header.size();
  std::string out(8, '\0');
  std::memcpy(out.data(), &n, 8);
  return out + header + data;
}

// Bit-level equality: NaN payloads, -0 and dtype must all survive.
inline bool SameBytes(const at::Tensor& a, const at::Tensor& b) {
  if (a.scalar_type() != b.scalar_type() || a.sizes() != b.sizes()) return false;
  if (a.numel() == 0) return true;
  at::Tensor ca = a.contiguous(), cb = b.contiguous();
  return std::memcmp(ca.data_ptr(), cb.data_ptr(), ca.numel() * ca.element_size()) == 0;
}

inline std::pair<int, std::string> RunCommand(const std::string& cmd) {
  std::string out;
  FILE* p = ::popen((cmd + " 2>&1").c_str(), "r");
  if (p == nullptr) return {-1, "popen failed"};
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), p)) > 0) out.append(buf, n);
  int rc = ::pclose(p);
  return {WIFEXITED(rc) ? WEXITSTATUS(rc) : -1, out};
}

class SafetensorsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (fs::temp_directory_path() / "eft_safetensors_XXXXXX").string();
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string Path(const std::string& name) const { return (fs::path(dir_) / name).string(); }

  // Opens a hand-made file and expects a DataLoss error mentioning the file and `needle`.
  void ExpectCorrupt(const std::string& bytes, const std::string& needle) {
    const std::string path = Path("bad.safetensors");
    WriteFile(path, bytes);
    auto f = SafetensorsFile::Open(path);
    ASSERT_FALSE(f.ok()) << "accepted a file that should fail with: " << needle;
    EXPECT_EQ(f.status().code(), StatusCode::kDataLoss) << f.status();
    EXPECT_NE(f.status().message().find(path), std::string::npos) << f.status();
    EXPECT_NE(f.status().message().find(needle), std::string::npos) << "want '" << needle << "' in " << f.status();
  }

  std::string dir_;
};

// One tensor of every dtype the format and LibTorch share, with values that catch byte-order,
// truncation and NaN-canonicalisation bugs.
inline Tensors EveryDtype() {
  at::manual_seed(7);
  Tensors t;
  t.emplace_back("f32", at::randn({3, 5}));
  t.emplace_back("f64", at::randn({4}, at::kDouble));
  t.emplace_back("f16", at::randn({2, 3}).to(at::kHalf));
  // Every 16-bit pattern, NaNs, infinities, -0 and subnormals included.
  t.emplace_back("bf16_bits", at::arange(-32768, 32768, at::kInt).to(at::kShort).view(at::kBFloat16));
  t.emplace_back("bf16", at::randn({7, 3}).to(at::kBFloat16));
  t.emplace_back("i64", at::tensor({INT64_MIN, int64_t{-1}, int64_t{0}, INT64_MAX}, at::kLong));
  t.emplace_back("i32", at::tensor({INT32_MIN, -5, 0, INT32_MAX}, at::kInt));
  t.emplace_back("i16", at::tensor({-32768, -1, 0, 32767}, at::kShort));
  t.emplace_back("i8", at::tensor({-128, -1, 0, 127}, at::kChar));
  t.emplace_back("u8", at::tensor({0, 1, 128, 255}, at::kByte));
  t.emplace_back("bool", at::tensor({1, 0, 0, 1, 1}, at::kByte).to(at::kBool));
  return t;
}


}  // namespace eft::trainer::safetensors_testing
