// Unit tests for trainer/io/safetensors: round trips, layout, malformed files, model directories.
// Interoperability with an independent implementation and fuzzing: safetensors_interop_test.cc.
#include "trainer/io/safetensors.h"

#include <cstring>
#include <filesystem>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tests/unit/trainer/io/safetensors_test_util.h"

namespace eft::trainer {
namespace {

using namespace safetensors_testing;  // NOLINT: test helpers
using json = nlohmann::json;

TEST_F(SafetensorsTest, RoundTripEveryDtypeBitExact) {
  Tensors in = EveryDtype();
  const std::string path = Path("all.safetensors");
  ASSERT_TRUE(WriteSafetensors(path, in).ok());
  auto f = SafetensorsFile::Open(path);
  ASSERT_TRUE(f.ok()) << f.status();
  ASSERT_EQ((*f)->entries().size(), in.size());
  const std::map<std::string, std::string> want_dtype = {
      {"f32", "F32"}, {"f64", "F64"}, {"f16", "F16"}, {"bf16_bits", "BF16"}, {"bf16", "BF16"}, {"i64", "I64"},
      {"i32", "I32"}, {"i16", "I16"}, {"i8", "I8"},   {"u8", "U8"},        {"bool", "BOOL"}};
  for (const auto& [name, t] : in) {
    const SafetensorsEntry* e = (*f)->Find(name);
    ASSERT_NE(e, nullptr) << name;
    EXPECT_EQ(e->dtype, want_dtype.at(name));
    EXPECT_EQ(e->scalar_type, t.scalar_type());
    EXPECT_EQ(e->shape, t.sizes().vec());
    at::Tensor v = (*f)->View(*e);
    EXPECT_TRUE(SameBytes(v, t)) << name;
    EXPECT_EQ(reinterpret_cast<uintptr_t>(v.data_ptr()) % v.element_size(), 0u) << name << " misaligned";
    auto loaded = (*f)->Load(name, t.scalar_type());
    ASSERT_TRUE(loaded.ok()) << loaded.status();
    EXPECT_TRUE(SameBytes(*loaded, t)) << name;
  }
  EXPECT_TRUE((*f)->metadata().empty());
  EXPECT_EQ((*f)->Find("nope"), nullptr);
  EXPECT_EQ((*f)->Load("nope", at::kFloat).status().code(), StatusCode::kNotFound);

  // Layout as Hugging Face writes it: padded header, widest dtypes first then by name, no
  // __metadata__ when there is none.
  const std::string bytes = ReadFile(path);
  uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  EXPECT_EQ(n % 8, 0u);
  EXPECT_EQ(bytes.find("__metadata__"), std::string::npos);
  std::vector<std::string> order;
  for (const auto& e : (*f)->entries()) order.push_back(e.name);
  EXPECT_EQ(order, (std::vector<std::string>{"i64", "f64", "f32", "i32", "bf16", "bf16_bits", "f16", "i16", "i8",
                                             "u8", "bool"}));
  EXPECT_FALSE(fs::exists(path + ".tmp." + std::to_string(::getpid())));
}

TEST_F(SafetensorsTest, EmptyAndScalarTensors) {
  Tensors in = {{"empty", at::zeros({0}, at::kFloat)},
                {"empty3d", at::zeros({3, 0, 2}, at::kBFloat16)},
                {"scalar", at::scalar_tensor(2.5, at::kFloat)},
                {"scalar_i64", at::scalar_tensor(-9, at::kLong)},
                {"after", at::arange(4, at::kFloat)}};
  const std::string path = Path("edge.safetensors");
  ASSERT_TRUE(WriteSafetensors(path, in).ok());
  auto f = SafetensorsFile::Open(path);
  ASSERT_TRUE(f.ok()) << f.status();
  for (const auto& [name, t] : in) {
    const SafetensorsEntry* e = (*f)->Find(name);
    ASSERT_NE(e, nullptr);
    EXPECT_EQ(e->shape, t.sizes().vec()) << name;
    EXPECT_EQ(e->end - e->begin, static_cast<uint64_t>(t.numel() * t.element_size()));
    EXPECT_TRUE(SameBytes((*f)->View(*e), t)) << name;
    auto l = (*f)->Load(name, at::kDouble);
    ASSERT_TRUE(l.ok());
    EXPECT_EQ(l->dim(), t.dim());
    EXPECT_TRUE(at::equal(*l, t.to(at::kDouble))) << name;
  }
  EXPECT_EQ((*f)->Find("scalar")->shape.size(), 0u);
  // A file with no tensors at all is valid too.
  ASSERT_TRUE(WriteSafetensors(Path("none.safetensors"), {}).ok());
  auto none = SafetensorsFile::Open(Path("none.safetensors"));
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_TRUE((*none)->entries().empty());
}

TEST_F(SafetensorsTest, MetadataRoundTrip) {
  const std::map<std::string, std::string> meta = {{"format", "pt"}, {"step", "1200"}, {"note", "ünïcode \"q\""}};
  ASSERT_TRUE(WriteSafetensors(Path("m.safetensors"), {{"w", at::ones({2})}}, meta).ok());
  auto f = SafetensorsFile::Open(Path("m.safetensors"));
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ((*f)->metadata(), meta);
}

TEST_F(SafetensorsTest, LoadConvertsDtype) {
  at::manual_seed(3);
  at::Tensor bf = at::randn({64, 17}).to(at::kBFloat16);
  at::Tensor f32 = at::randn({33});
  at::Tensor b = at::tensor({1, 0, 1}, at::kByte).to(at::kBool);
  at::Tensor i = at::tensor({-3, 1000000}, at::kLong);
  ASSERT_TRUE(WriteSafetensors(Path("c.safetensors"), {{"bf", bf}, {"f32", f32}, {"b", b}, {"i", i}}).ok());
  auto f = SafetensorsFile::Open(Path("c.safetensors"));
  ASSERT_TRUE(f.ok());
  auto bf_as_f32 = (*f)->Load("bf", at::kFloat);
  ASSERT_TRUE(bf_as_f32.ok());
  EXPECT_EQ(bf_as_f32->scalar_type(), at::kFloat);
  EXPECT_TRUE(SameBytes(*bf_as_f32, bf.to(at::kFloat)));
  EXPECT_TRUE(SameBytes(*(*f)->Load("f32", at::kBFloat16), f32.to(at::kBFloat16)));
  EXPECT_TRUE(SameBytes(*(*f)->Load("b", at::kFloat), b.to(at::kFloat)));
  EXPECT_TRUE(SameBytes(*(*f)->Load("i", at::kDouble), i.to(at::kDouble)));
  // Load is a private copy: it survives the file and does not alias the mapping.
  at::Tensor kept = *(*f)->Load("f32", at::kFloat);
  EXPECT_NE(kept.data_ptr(), (*f)->View(*(*f)->Find("f32")).data_ptr());
  f->reset();
  EXPECT_TRUE(at::equal(kept, f32));
}

TEST_F(SafetensorsTest, BoolBytesOtherThanOneLoadAsTrue) {
  // Another writer may store any non-zero byte for true; Load must not hand out invalid bools.
  const std::string header = R"({"b":{"dtype":"BOOL","shape":[3],"data_offsets":[0,3]}})";
  WriteFile(Path("b.safetensors"), RawFile(header, std::string("\x00\x02\xff", 3)));
  auto f = SafetensorsFile::Open(Path("b.safetensors"));
  ASSERT_TRUE(f.ok()) << f.status();
  auto t = (*f)->Load("b", at::kBool);
  ASSERT_TRUE(t.ok());
  EXPECT_TRUE(at::equal(t->to(at::kByte), at::tensor({0, 1, 1}, at::kByte)));
}

TEST_F(SafetensorsTest, ViewSharesTheMapping) {
  at::Tensor a = at::arange(100, at::kFloat), b = at::arange(50, at::kLong);
  const std::string path = Path("v.safetensors");
  ASSERT_TRUE(WriteSafetensors(path, {{"a", a}, {"b", b}}).ok());
  auto f = SafetensorsFile::Open(path);
  ASSERT_TRUE(f.ok());
  const SafetensorsEntry& ea = *(*f)->Find("a");
  const SafetensorsEntry& eb = *(*f)->Find("b");
  at::Tensor va = (*f)->View(ea), vb = (*f)->View(eb);
  EXPECT_EQ(va.data_ptr(), (*f)->View(ea).data_ptr());  // no copy: same bytes every time
  EXPECT_EQ(static_cast<char*>(va.data_ptr()) - static_cast<char*>(vb.data_ptr()),
            static_cast<ptrdiff_t>(ea.begin) - static_cast<ptrdiff_t>(eb.begin));
  // The pointer lies inside a mapping of this very file.
  const std::string canonical = fs::canonical(path).string();
  std::ifstream maps("/proc/self/maps");
  std::string line;
  bool inside = false;
  const uintptr_t p = reinterpret_cast<uintptr_t>(va.data_ptr());
  while (std::getline(maps, line)) {
    if (line.size() < canonical.size() || line.compare(line.size() - canonical.size(), canonical.size(), canonical)) {
      continue;
    }
    uintptr_t lo = 0, hi = 0;
    std::sscanf(line.c_str(), "%lx-%lx", &lo, &hi);
    EXPECT_EQ(line.substr(line.find(' ') + 1, 2), "r-") << "mapping must be read-only: " << line;
    inside |= p >= lo && p + 400 <= hi;
  }
  EXPECT_TRUE(inside) << "View() data is not inside the mapping of " << canonical;
  EXPECT_TRUE(at::equal(va, a));
}

TEST_F(SafetensorsTest, WriterCopiesNonContiguousAndReplacesAtomically) {
  at::Tensor base = at::arange(12, at::kFloat).reshape({3, 4});
  const std::string path = Path("nc.safetensors");
  WriteFile(path, "old contents");
  ASSERT_TRUE(WriteSafetensors(path, {{"t", base.t()}, {"s", base.slice(1, 1, 3)}}).ok());
  auto f = SafetensorsFile::Open(path);
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_TRUE(at::equal(*(*f)->Load("t", at::kFloat), base.t().contiguous()));
  EXPECT_TRUE(at::equal(*(*f)->Load("s", at::kFloat), base.slice(1, 1, 3).contiguous()));
  EXPECT_EQ(std::distance(fs::directory_iterator(dir_), fs::directory_iterator()), 1);
}

TEST_F(SafetensorsTest, WriterRejectsWhatTheFormatCannotHold) {
  const std::string path = Path("w.safetensors");
  Status s = WriteSafetensors(path, {{"c", at::zeros({2}, at::kComplexFloat)}});
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("'c'"), std::string::npos) << s;
  s = WriteSafetensors(path, {{"x", at::zeros({1})}, {"x", at::zeros({1})}});
  EXPECT_NE(s.message().find("twice"), std::string::npos) << s;
  s = WriteSafetensors(path, {{"__metadata__", at::zeros({1})}});
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  s = WriteSafetensors(path, {{"u", at::Tensor()}});
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(fs::is_empty(dir_)) << "a failed write left files behind";
}

TEST_F(SafetensorsTest, MalformedFilesGiveClearErrors) {
  const std::string ok_entry = R"("a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]})";
  const std::string d8(8, '\0');
  ExpectCorrupt(std::string("\x05\x00\x00", 3), "too short");
  ExpectCorrupt(RawFile("{}", "", 1000), "header length 1000 exceeds the file");
  ExpectCorrupt(RawFile("{not json", ""), "not valid JSON");
  ExpectCorrupt(RawFile("", ""), "not valid JSON");
  ExpectCorrupt(RawFile("[1, 2]", ""), "not a JSON object");
  // nlohmann would treat a NUL as the end of input and ignore whatever follows it.
  ExpectCorrupt(RawFile(std::string("{}\0\0garbage", 11), ""), "NUL byte");
  // Deep nesting must not overflow the stack while parsing, reporting or freeing.
  const std::string deep = std::string(200000, '[') + std::string(200000, ']');
  ExpectCorrupt(RawFile(R"({"a":{"dtype":"F32","shape":)" + deep + R"(,"data_offsets":[0,0]}})", ""), "a nested array");
  ExpectCorrupt(RawFile(R"({"a":)" + deep + "}", ""), "tensor 'a' is not a JSON object: a nested array");
  ExpectCorrupt(RawFile(R"({"a":{"dtype":"Q4","shape":[2],"data_offsets":[0,8]}})", d8), "unknown dtype 'Q4'");
  ExpectCorrupt(RawFile(R"({"a":{"dtype":"U16","shape":[4],"data_offsets":[0,8]}})", d8), "cannot hold");
  ExpectCorrupt(RawFile(R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", d8),
                "tensor 'a' has shape [3] and dtype F32 (12 bytes) but data_offsets [0, 8] span 8 bytes");
  ExpectCorrupt(RawFile(R"({"a":{"dtype":"F32","shape":[25],"data_offsets":[0,100]}})", std::string(96, '\0')),
                "tensor 'a' data_offsets [0, 100] exceed the data section (96 bytes)");
  ExpectCorrupt(RawFile(R"({"a":{"dtype":"F32","shape":[0],"data_offsets":[8,0]}})", d8), "begin > end");
  ExpectCorrupt(RawFile(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0]}})", d8), "data_offsets must be");
  ExpectCorrupt(RawFile(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,-8]}})", d8), "data_offsets must be");
  ExpectCorrupt(RawFile(R"({"a":{"dtype":"F32","shape":[2]}})", d8), "data_offsets must be");
  ExpectCorrupt(RawFile(R"({"a":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", d8), "non-negative");
  ExpectCorrupt(RawFile(R"({"a":{"dtype":"F32","shape":[2.0],"data_offsets":[0,8]}})", d8), "non-negative");
  ExpectCorrupt(RawFile(R"({"a":{"dtype":"F32","shape":"2","data_offsets":[0,8]}})", d8), "non-negative");
  ExpectCorrupt(RawFile(R"({"a":{"dtype":"F32","data_offsets":[0,8]}})", d8), "no \"shape\"");
  ExpectCorrupt(RawFile(R"({"a":{"shape":[2],"data_offsets":[0,8]}})", d8), "dtype");
  ExpectCorrupt(RawFile(R"({"a":[1]})", d8), "tensor 'a' is not a JSON object");
  ExpectCorrupt(RawFile(R"({"a":{"dtype":"U8","shape":[4294967296,4294967296,4294967296],"data_offsets":[0,0]}})", ""),
                "too large");
  ExpectCorrupt(RawFile("{" + ok_entry + R"(,"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                        std::string(12, '\0')),
                "tensors 'a' [0, 8] and 'b' [4, 12] overlap");
  ExpectCorrupt(RawFile("{" + ok_entry + R"(,"b":{"dtype":"F32","shape":[2],"data_offsets":[12,20]}})",
                        std::string(20, '\0')),
                "bytes [8, 12) before tensor 'b' belong to no tensor");
  ExpectCorrupt(RawFile("{" + ok_entry + "}", std::string(12, '\0')),
                "data section is 12 bytes but the tensors cover 8");
  ExpectCorrupt(RawFile("{" + ok_entry + "," + ok_entry + "}", d8), "header names 'a' twice");
  ExpectCorrupt(RawFile("{" + ok_entry + R"(,"__metadata__":{"k":1}})", d8),
                "__metadata__ value for 'k' is not a string");
  ExpectCorrupt(RawFile("{" + ok_entry + R"(,"__metadata__":[]})", d8), "__metadata__ is not a JSON object");

  // The 100 MB header cap, checked on a sparse file so it costs no disk.
  const std::string big = Path("big.safetensors");
  WriteFile(big, RawFile("", "", (100ll << 20) + 1));
  fs::resize_file(big, (100ull << 20) + 64);
  auto f = SafetensorsFile::Open(big);
  ASSERT_FALSE(f.ok());
  EXPECT_NE(f.status().message().find("100 MB limit"), std::string::npos) << f.status();

  auto missing = SafetensorsFile::Open(Path("missing.safetensors"));
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound) << missing.status();
  EXPECT_FALSE(SafetensorsFile::Open(dir_).ok());

  // Padding with spaces after the JSON, as Hugging Face writes it, is fine.
  WriteFile(Path("pad.safetensors"), RawFile("{" + ok_entry + "}     ", d8));
  EXPECT_TRUE(SafetensorsFile::Open(Path("pad.safetensors")).ok());
}

Tensors Numbered(int n, int64_t elems) {
  Tensors t;
  for (int i = 0; i < n; ++i) {
    char name[32];
    std::snprintf(name, sizeof(name), "layers.%d.weight", i);
    t.emplace_back(name, at::arange(elems, at::kFloat) + i * 1000);
  }
  return t;
}

TEST_F(SafetensorsTest, ShardedDirectoryRoundTrip) {
  Tensors in = Numbered(7, 250);                              // 1000 bytes each
  in.emplace_back("big", at::arange(1000, at::kFloat));       // 4000 bytes: a shard of its own
  in.emplace_back("bias", at::arange(10).to(at::kBFloat16));  // 20 bytes
  const std::string out = Path("model");
  ASSERT_TRUE(WriteSafetensorsDir(out, in, 2500, {{"step", "3"}}).ok());

  // Greedy in input order: [0,1] [2,3] [4,5] [6] [big] [bias] (bias would push big's shard past 2500).
  std::vector<std::string> files;
  for (const auto& e : fs::directory_iterator(out)) files.push_back(e.path().filename().string());
  std::sort(files.begin(), files.end());
  EXPECT_EQ(files, (std::vector<std::string>{"model-00001-of-00006.safetensors", "model-00002-of-00006.safetensors",
                                             "model-00003-of-00006.safetensors", "model-00004-of-00006.safetensors",
                                             "model-00005-of-00006.safetensors", "model-00006-of-00006.safetensors",
                                             "model.safetensors.index.json"}));
  json index = json::parse(ReadFile(out + "/model.safetensors.index.json"));
  EXPECT_EQ(index["metadata"]["total_size"].get<uint64_t>(), 7 * 1000u + 4000u + 20u);
  const json& wm = index["weight_map"];
  ASSERT_EQ(wm.size(), in.size());
  EXPECT_EQ(wm["layers.0.weight"], "model-00001-of-00006.safetensors");
  EXPECT_EQ(wm["layers.1.weight"], "model-00001-of-00006.safetensors");
  EXPECT_EQ(wm["layers.6.weight"], "model-00004-of-00006.safetensors");
  EXPECT_EQ(wm["big"], "model-00005-of-00006.safetensors");
  EXPECT_EQ(wm["bias"], "model-00006-of-00006.safetensors");
  // weight_map keys are written sorted.
  const std::string text = ReadFile(out + "/model.safetensors.index.json");
  EXPECT_LT(text.find("\"big\""), text.find("\"layers.0.weight\""));

  auto d = SafetensorsDir::Open(out);
  ASSERT_TRUE(d.ok()) << d.status();
  std::vector<std::string> want;
  for (const auto& [n, t] : in) want.push_back(n);
  std::sort(want.begin(), want.end());
  EXPECT_EQ((*d)->names(), want);
  for (const auto& [n, t] : in) {
    auto l = (*d)->Load(n, t.scalar_type());
    ASSERT_TRUE(l.ok()) << l.status();
    EXPECT_TRUE(SameBytes(*l, t)) << n;
    ASSERT_NE((*d)->Find(n), nullptr);
  }
  EXPECT_EQ((*d)->Find("nope"), nullptr);
  EXPECT_EQ((*d)->Load("nope", at::kFloat).status().code(), StatusCode::kNotFound);
  auto shard = SafetensorsFile::Open(out + "/model-00002-of-00006.safetensors");
  ASSERT_TRUE(shard.ok());
  EXPECT_EQ((*shard)->metadata().at("format"), "pt");  // transformers insists on it
  EXPECT_EQ((*shard)->metadata().at("step"), "3");
}

TEST_F(SafetensorsTest, SingleShardAndStaleFiles) {
  const std::string out = Path("model");
  ASSERT_TRUE(WriteSafetensorsDir(out, Numbered(4, 250), 1000).ok());
  EXPECT_TRUE(fs::exists(out + "/model-00004-of-00004.safetensors"));
  // Rewriting as one file removes the index and the old shards: neither may shadow the new file.
  ASSERT_TRUE(WriteSafetensorsDir(out, Numbered(3, 250), 5ull << 30).ok());
  std::vector<std::string> files;
  for (const auto& e : fs::directory_iterator(out)) files.push_back(e.path().filename().string());
  EXPECT_EQ(files, (std::vector<std::string>{"model.safetensors"}));
  auto d = SafetensorsDir::Open(out);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ((*d)->names().size(), 3u);
  // And back to shards: the single file goes (transformers would read it before the index).
  ASSERT_TRUE(WriteSafetensorsDir(out, Numbered(2, 250), 1000).ok());
  EXPECT_FALSE(fs::exists(out + "/model.safetensors"));
  EXPECT_TRUE(fs::exists(out + "/model-00002-of-00002.safetensors"));
  EXPECT_FALSE(fs::exists(out + "/model-00001-of-00004.safetensors"));
  // Empty model: one file, no tensors.
  ASSERT_TRUE(WriteSafetensorsDir(Path("empty"), {}, 100).ok());
  EXPECT_TRUE(fs::exists(Path("empty/model.safetensors")));
  EXPECT_NE(WriteSafetensorsDir(Path("dup"), {{"a", at::ones({1})}, {"a", at::ones({1})}}, 1).code(), StatusCode::kOk);
}

TEST_F(SafetensorsTest, DirectoryErrors) {
  auto none = SafetensorsDir::Open(dir_);
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.status().message(), "no model.safetensors or model.safetensors.index.json in " + dir_);

  const std::string out = Path("m");
  ASSERT_TRUE(WriteSafetensorsDir(out, Numbered(4, 250), 2000).ok());
  const std::string index_path = out + "/model.safetensors.index.json";
  const json good = json::parse(ReadFile(index_path));
  auto expect_error = [&](const json& index, const std::string& needle) {
    WriteFile(index_path, index.dump());
    auto d = SafetensorsDir::Open(out);
    ASSERT_FALSE(d.ok()) << "want: " << needle;
    EXPECT_NE(d.status().message().find(needle), std::string::npos) << "want '" << needle << "' in " << d.status();
  };
  json j = good;
  j["weight_map"]["layers.0.weight"] = "model-00009-of-00009.safetensors";
  expect_error(j, "model-00009-of-00009.safetensors");  // missing file
  j = good;
  j["weight_map"]["ghost"] = "model-00001-of-00002.safetensors";
  expect_error(j, "maps tensor 'ghost' to model-00001-of-00002.safetensors, which does not hold it");
  j = good;
  j["weight_map"].erase("layers.3.weight");
  expect_error(j, "model-00002-of-00002.safetensors holds tensor 'layers.3.weight', which");
  j = good;
  j["weight_map"]["layers.0.weight"] = "model-00002-of-00002.safetensors";
  expect_error(j, "model-00002-of-00002.safetensors, which does not hold it");
  j = good;
  j["weight_map"]["layers.0.weight"] = "../m/model-00001-of-00002.safetensors";
  expect_error(j, "not a file name in the same directory");
  j = good;
  j["weight_map"]["layers.0.weight"] = 3;
  expect_error(j, "not a string");
  expect_error(json::array(), "no \"weight_map\"");
  WriteFile(index_path, "{oops");
  EXPECT_EQ(SafetensorsDir::Open(out).status().code(), StatusCode::kDataLoss);
  // A corrupt shard is reported with the index that led to it.
  WriteFile(index_path, good.dump());
  WriteFile(out + "/model-00002-of-00002.safetensors", "tiny");
  auto d = SafetensorsDir::Open(out);
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.status().message().find("too short"), std::string::npos) << d.status();
}

}  // namespace
}  // namespace eft::trainer
