// safetensors against an independent implementation of the format (Python, written from the spec
// alone), and corruption fuzzing.
#include <cstdio>
#include <random>

#include <gtest/gtest.h>

#include "tests/unit/trainer/io/safetensors_test_util.h"
#include "tests/util/torch_python.h"
#include "trainer/io/safetensors.h"

namespace eft::trainer {
namespace {

using namespace safetensors_testing;  // NOLINT: test helpers

// The script writes and checks files by hand (struct, json, raw tensor bytes): Debian has no
// `safetensors` package, and an implementation sharing no code with ours is the better witness.

constexpr const char* kPythonScript = R"PY(
import json, struct, sys
import torch

def expected():
    return {
        "f32": torch.arange(12, dtype=torch.float32).reshape(3, 4) * 0.5 - 1.25,
        "f64": torch.tensor([3.141592653589793, -1e300, 5e-324], dtype=torch.float64),
        "f16": (torch.arange(6, dtype=torch.float32) * 0.3 - 1).to(torch.float16).reshape(3, 2),
        "bf16": (torch.arange(6, dtype=torch.float32) * 0.75 - 2).to(torch.bfloat16).reshape(2, 3),
        "i64": torch.tensor([-(2 ** 62), 0, 2 ** 62 + 7], dtype=torch.int64),
        "i32": torch.tensor([-(2 ** 31), 1, 2 ** 31 - 1], dtype=torch.int32),
        "i16": torch.tensor([-32768, 2, 32767], dtype=torch.int16),
        "i8": torch.tensor([-128, 0, 127], dtype=torch.int8),
        "u8": torch.tensor([0, 7, 255], dtype=torch.uint8),
        "bool": torch.tensor([True, False, True]),
        "scalar": torch.tensor(2.5, dtype=torch.float32),
        "empty": torch.zeros(0, 3, dtype=torch.float32),
    }

NAMES = {torch.float32: "F32", torch.float64: "F64", torch.float16: "F16", torch.bfloat16: "BF16",
         torch.int64: "I64", torch.int32: "I32", torch.int16: "I16", torch.int8: "I8", torch.uint8: "U8",
         torch.bool: "BOOL"}
DTYPES = {v: k for k, v in NAMES.items()}
META = {"format": "pt", "origin": "python"}

def raw(t):
    t = t.contiguous()
    if t.dtype == torch.bfloat16:  # numpy has no bfloat16: move the bits as int16
        t = t.view(torch.int16)
    return t.numpy().tobytes()

def write(path, pad):
    header, data = {"__metadata__": META}, b""
    for name, t in expected().items():  # insertion order, unlike Hugging Face's sort
        b = raw(t)
        header[name] = {"dtype": NAMES[t.dtype], "shape": list(t.shape),
                        "data_offsets": [len(data), len(data) + len(b)]}
        data += b
    h = json.dumps(header).encode()
    if pad:
        h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + data)

def check(path):
    b = open(path, "rb").read()
    (n,) = struct.unpack("<Q", b[:8])
    assert n % 8 == 0, "header length %d not a multiple of 8" % n
    header = json.loads(b[8:8 + n].decode("utf-8"))
    data = b[8 + n:]
    meta = header.pop("__metadata__")
    assert meta == META, meta
    want = expected()
    assert sorted(header) == sorted(want), sorted(header)
    end = 0
    for name, info in sorted(header.items(), key=lambda kv: kv[1]["data_offsets"]):
        s, e = info["data_offsets"]
        assert s == end, "gap or overlap before %s" % name
        end = e
        dt = DTYPES[info["dtype"]]
        if e > s:
            t = torch.frombuffer(bytearray(data[s:e]), dtype=dt)
        else:
            t = torch.empty(0, dtype=dt)
        t = t.reshape(info["shape"])
        w = want[name]
        assert t.dtype == w.dtype and t.shape == w.shape, (name, t.dtype, t.shape)
        assert torch.equal(t, w), (name, t, w)
    assert end == len(data), "trailing bytes"
    print("python verified", len(header), "tensors")

if sys.argv[1] == "write":
    write(sys.argv[2], sys.argv[3] == "pad")
else:
    check(sys.argv[2])
)PY";

// The same tensors as the script's expected(), built independently in C++.
Tensors InteropTensors() {
  return {
      {"f32", at::arange(12, at::kFloat).reshape({3, 4}) * 0.5 - 1.25},
      {"f64", at::tensor({3.141592653589793, -1e300, 5e-324}, at::kDouble)},
      {"f16", (at::arange(6, at::kFloat) * 0.3 - 1).to(at::kHalf).reshape({3, 2})},
      {"bf16", (at::arange(6, at::kFloat) * 0.75 - 2).to(at::kBFloat16).reshape({2, 3})},
      {"i64", at::tensor({-(int64_t{1} << 62), int64_t{0}, (int64_t{1} << 62) + 7}, at::kLong)},
      {"i32", at::tensor({INT32_MIN, 1, INT32_MAX}, at::kInt)},
      {"i16", at::tensor({-32768, 2, 32767}, at::kShort)},
      {"i8", at::tensor({-128, 0, 127}, at::kChar)},
      {"u8", at::tensor({0, 7, 255}, at::kByte)},
      {"bool", at::tensor({1, 0, 1}, at::kByte).to(at::kBool)},
      {"scalar", at::scalar_tensor(2.5, at::kFloat)},
      {"empty", at::zeros({0, 3}, at::kFloat)},
  };
}

class SafetensorsPythonTest : public SafetensorsTest {
 protected:
  void SetUp() override {
    SafetensorsTest::SetUp();
    if (RunCommand(eft::testing::TorchPython() + " -c 'import torch'").first != 0) {
      GTEST_SKIP() << "\n*** SKIPPED: " << eft::testing::TorchPython() << " with torch is not available; the safetensors files are NOT "
                      "checked against an independent implementation ***\n";
    }
    script_ = Path("st.py");
    WriteFile(script_, kPythonScript);
  }
  std::string script_;
};

TEST_F(SafetensorsPythonTest, ReadsFilesPythonWrote) {
  for (const char* pad : {"pad", "nopad"}) {  // unpadded: data section not aligned, still readable
    const std::string path = Path(std::string("py_") + pad + ".safetensors");
    auto [rc, out] = RunCommand(eft::testing::TorchPython() + " " + script_ + " write " + path + " " + pad);
    ASSERT_EQ(rc, 0) << out;
    auto f = SafetensorsFile::Open(path);
    ASSERT_TRUE(f.ok()) << f.status();
    EXPECT_EQ((*f)->metadata(), (std::map<std::string, std::string>{{"format", "pt"}, {"origin", "python"}}));
    Tensors want = InteropTensors();
    ASSERT_EQ((*f)->entries().size(), want.size());
    EXPECT_EQ((*f)->entries()[0].name, "f32");  // entries() is in file (data) order
    for (const auto& [name, t] : want) {
      auto l = (*f)->Load(name, t.scalar_type());
      ASSERT_TRUE(l.ok()) << l.status();
      EXPECT_TRUE(SameBytes(*l, t)) << pad << " " << name << ": " << *l << " vs " << t;
    }
  }
}

TEST_F(SafetensorsPythonTest, PythonReadsFilesWeWrote) {
  const std::string path = Path("ours.safetensors");
  ASSERT_TRUE(WriteSafetensors(path, InteropTensors(), {{"format", "pt"}, {"origin", "python"}}).ok());
  auto [rc, out] = RunCommand(eft::testing::TorchPython() + " " + script_ + " check " + path);
  EXPECT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("python verified 12 tensors"), std::string::npos) << out;
}

// ---------------------------------------------------------------------------------------------------
// Corruption fuzzing: every mutated file is either read or rejected, never a crash or a wild read
// (run this binary under -fsanitize=address to check the latter).

TEST_F(SafetensorsTest, MutatedFilesNeverCrash) {
  Tensors in = EveryDtype();
  in.emplace_back("scalar", at::scalar_tensor(1.5, at::kFloat));
  in.emplace_back("empty", at::zeros({0, 4}, at::kHalf));
  const std::string good_path = Path("good.safetensors");
  ASSERT_TRUE(WriteSafetensors(good_path, in, {{"format", "pt"}}).ok());
  const std::string good = ReadFile(good_path);
  uint64_t header_len = 0;
  std::memcpy(&header_len, good.data(), 8);
  const char kJsonish[] = "{}[]\":,-0123456789e. \x00\xff" "FIUB";

  std::mt19937_64 rng(20261121);
  auto pick = [&](uint64_t n) { return n == 0 ? 0 : rng() % n; };
  int opened = 0, rejected = 0;
  const std::string path = Path("fuzz.safetensors");
  for (int iter = 0; iter < 600; ++iter) {
    std::string b = good;
    switch (iter % 6) {
      case 0:  // flip bits in the header
        for (int k = 0, n = 1 + pick(4); k < n; ++k) b[8 + pick(header_len)] ^= static_cast<char>(1 << pick(8));
        break;
      case 1:  // JSON-significant characters in the header
        for (int k = 0, n = 1 + pick(3); k < n; ++k) b[8 + pick(header_len)] = kJsonish[pick(sizeof(kJsonish) - 1)];
        break;
      case 2:  // truncation anywhere
        b.resize(pick(b.size()));
        break;
      case 3: {  // a lying header length
        uint64_t n = iter % 12 == 3 ? rng() : header_len + pick(64) - 32;
        std::memcpy(b.data(), &n, 8);
        break;
      }
      case 4:  // bytes appended or flipped anywhere (data included)
        if (iter % 12 == 4) {
          b.append(1 + pick(16), 'x');
        } else {
          b[pick(b.size())] ^= static_cast<char>(1 + pick(255));
        }
        break;
      case 5: {  // digits rewritten: shapes and offsets that disagree
        for (int k = 0; k < 3; ++k) {
          size_t at = 8 + pick(header_len);
          if (b[at] >= '0' && b[at] <= '9') b[at] = static_cast<char>('0' + pick(10));
        }
        break;
      }
    }
    WriteFile(path, b);
    auto f = SafetensorsFile::Open(path);
    if (!f.ok()) {
      ++rejected;
      EXPECT_FALSE(f.status().message().empty());
      continue;
    }
    ++opened;
    // Whatever was accepted must be safe to read in full, through both paths.
    for (const auto& e : (*f)->entries()) {
      at::Tensor v = (*f)->View(e).clone();
      auto l = (*f)->Load(e.name, at::kFloat);
      ASSERT_TRUE(l.ok()) << l.status();
      EXPECT_EQ(l->numel(), v.numel());
    }
  }
  std::printf("fuzz: %d variants opened, %d rejected\n", opened, rejected);
  EXPECT_GT(opened, 50);
  EXPECT_GT(rejected, 200);
}

}  // namespace
}  // namespace eft::trainer
