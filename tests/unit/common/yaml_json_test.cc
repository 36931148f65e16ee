#include "common/yaml_json.h"

#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace eft {
namespace {

using nlohmann::json;

// gmock's HasSubstr would need libgmock, which the test targets do not link.
#define EXPECT_CONTAINS(haystack, needle)                                                      \
  do {                                                                                         \
    const std::string h_ = (haystack), n_ = (needle);                                          \
    EXPECT_NE(h_.find(n_), std::string::npos) << "  actual: " << h_ << "\n  wanted: " << n_; \
  } while (0)

json MustParse(const std::string& text) {
  auto r = YamlToJson(text);
  EXPECT_TRUE(r.ok()) << r.status() << "\n" << text;
  return r.ok() ? *r : json();
}

// The value YAML gives `v: <scalar>`.
json Scalar(const std::string& scalar) { return MustParse("v: " + scalar + "\n")["v"]; }

std::string ErrorOf(const std::string& text) {
  auto r = YamlToJson(text);
  EXPECT_FALSE(r.ok()) << "parsed: " << (r.ok() ? r->dump() : "") << "\n" << text;
  if (r.ok()) return "";
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  return r.status().message();
}

// Every escape of a double-quoted scalar (YAML 1.2, 5.7) is its code point in UTF-8, in values and
// keys: yaml-cpp 0.7 gives \N and \_ as single bytes, which would make the text invalid UTF-8.
TEST(YamlToJsonTest, DoubleQuotedEscapesAreTheirCodePoints) {
  EXPECT_EQ(Scalar(R"("\N|\_|\L|\P|\x99|\u00e9|\U0001F600|\e|\t|\\N")"),
            "\xC2\x85|\xC2\xA0|\xE2\x80\xA8|\xE2\x80\xA9|\xC2\x99|\xC3\xA9|\xF0\x9F\x98\x80|\x1B|\t|\\N");
  const json doc = MustParse("\"k\\N\": \"\\_x\"\n");
  EXPECT_EQ(doc, json({{"k\xC2\x85", "\xC2\xA0x"}}));
  // A document that is not UTF-8 is not "repaired": its bytes stay as they were.
  EXPECT_EQ(Scalar("\"\x85\""), "\x85");
}

TEST(YamlToJsonTest, CoreSchemaNull) {
  for (const char* s : {"~", "null", "Null", "NULL", ""}) {
    SCOPED_TRACE(s);
    EXPECT_TRUE(Scalar(s).is_null());
  }
}

TEST(YamlToJsonTest, CoreSchemaBooleans) {
  for (const char* s : {"true", "True", "TRUE"}) EXPECT_EQ(Scalar(s), json(true)) << s;
  for (const char* s : {"false", "False", "FALSE"}) EXPECT_EQ(Scalar(s), json(false)) << s;
  // YAML 1.1's yes/no/on/off are plain strings under the 1.2 core schema.
  for (const char* s : {"yes", "no", "on", "off", "y", "n", "tRUE"}) EXPECT_EQ(Scalar(s), json(s)) << s;
}

TEST(YamlToJsonTest, CoreSchemaIntegers) {
  struct Case {
    const char* text;
    int64_t value;
  };
  for (const Case& c : {Case{"0", 0}, Case{"42", 42}, Case{"-7", -7}, Case{"+3", 3}, Case{"007", 7},
                        Case{"0x1F", 31}, Case{"0xff", 255}, Case{"0o17", 15},
                        Case{"9223372036854775807", INT64_MAX}, Case{"-9223372036854775808", INT64_MIN}}) {
    SCOPED_TRACE(c.text);
    json v = Scalar(c.text);
    ASSERT_TRUE(v.is_number_integer()) << v.dump();
    EXPECT_FALSE(v.is_number_float());
    EXPECT_EQ(v.get<int64_t>(), c.value);
  }
}

TEST(YamlToJsonTest, IntegersBeyondInt64) {
  json u = Scalar("18446744073709551615");
  ASSERT_TRUE(u.is_number_unsigned()) << u.dump();
  EXPECT_EQ(u.get<uint64_t>(), UINT64_MAX);
  json h = Scalar("0xFFFFFFFFFFFFFFFF");  // used to be clamped to INT64_MAX
  ASSERT_TRUE(h.is_number_unsigned()) << h.dump();
  EXPECT_EQ(h.get<uint64_t>(), UINT64_MAX);
  json big = Scalar("100000000000000000000");
  ASSERT_TRUE(big.is_number_float());
  EXPECT_DOUBLE_EQ(big.get<double>(), 1e20);
  json big_hex = Scalar("0x1" + std::string(18, '0'));
  ASSERT_TRUE(big_hex.is_number_float());
  EXPECT_DOUBLE_EQ(big_hex.get<double>(), std::ldexp(1.0, 72));
  json neg = Scalar("-9223372036854775809");
  ASSERT_TRUE(neg.is_number_float());
  EXPECT_LT(neg.get<double>(), -9.2e18);
}

TEST(YamlToJsonTest, CoreSchemaFloats) {
  struct Case {
    const char* text;
    double value;
  };
  for (const Case& c : {Case{"1.5", 1.5}, Case{"-2.5e3", -2500}, Case{".5", 0.5}, Case{"1e-5", 1e-5},
                        Case{"1.0e-5", 1e-5}, Case{"1.", 1.0}, Case{"+0.25", 0.25}, Case{"3E2", 300}}) {
    SCOPED_TRACE(c.text);
    json v = Scalar(c.text);
    ASSERT_TRUE(v.is_number_float()) << v.dump();
    EXPECT_DOUBLE_EQ(v.get<double>(), c.value);
  }
  for (const char* s : {".inf", ".Inf", ".INF", "+.inf"}) {
    json v = Scalar(s);
    ASSERT_TRUE(v.is_number_float()) << s;
    EXPECT_TRUE(std::isinf(v.get<double>()) && v.get<double>() > 0) << s;
  }
  EXPECT_TRUE(std::isinf(Scalar("-.inf").get<double>()) && Scalar("-.inf").get<double>() < 0);
  for (const char* s : {".nan", ".NaN", ".NAN"}) EXPECT_TRUE(std::isnan(Scalar(s).get<double>())) << s;
}

TEST(YamlToJsonTest, EverythingElseIsAString) {
  for (const char* s : {"abc", "0x", "0xG1", "0o8", "1_000", "1.2.3", "12abc", "1e", "inf", "nan", "-.nan", "0X1F",
                        "/shared/models/Qwen2.5-0.5B", "1.0e-5x", "- not a list", "2024-01-01"}) {
    SCOPED_TRACE(s);
    json v = MustParse(std::string("v: '") + s + "'\n")["v"];  // quoted: trivially a string
    EXPECT_EQ(v, json(s));
  }
  for (const char* s : {"abc", "0x", "0xG1", "0o8", "1_000", "1.2.3", "12abc", "1e", "inf", "nan", "0X1F",
                        "/shared/models/Qwen2.5-0.5B", "2024-01-01"}) {
    SCOPED_TRACE(s);
    EXPECT_EQ(Scalar(s), json(s));  // plain: still a string, as the core schema says
  }
}

TEST(YamlToJsonTest, QuotedScalarsStayStrings) {
  EXPECT_EQ(Scalar("\"123\""), json("123"));
  EXPECT_EQ(Scalar("'123'"), json("123"));
  EXPECT_EQ(Scalar("\"true\""), json("true"));
  EXPECT_EQ(Scalar("'null'"), json("null"));
  EXPECT_EQ(Scalar("'~'"), json("~"));
  EXPECT_EQ(Scalar("\"\""), json(""));
  EXPECT_EQ(Scalar("\".inf\""), json(".inf"));
  EXPECT_EQ(Scalar("!!str 12"), json("12"));
  EXPECT_EQ(MustParse("v: |\n  line one\n  line two\n")["v"], json("line one\nline two\n"));
  EXPECT_EQ(MustParse("v: >\n  folded\n  text\n")["v"], json("folded text\n"));
  EXPECT_EQ(MustParse("v: |\n  123\n")["v"], json("123\n"));
}

TEST(YamlToJsonTest, NestedMapsAndSequences) {
  json v = MustParse(R"(
name: qwen-sft
data: {train: /d.jsonl, max_seq_len: 4096, packing: true}
resources:
  nodes:
    min: 1
    max: 4
command:
  - python
  - train.py
  - [nested, 2]
  - {k: v}
empty_map: {}
empty_list: []
nothing:
)");
  json expected = {
      {"name", "qwen-sft"},
      {"data", {{"train", "/d.jsonl"}, {"max_seq_len", 4096}, {"packing", true}}},
      {"resources", {{"nodes", {{"min", 1}, {"max", 4}}}}},
      {"command", {"python", "train.py", {"nested", 2}, {{"k", "v"}}}},
      {"empty_map", json::object()},
      {"empty_list", json::array()},
      {"nothing", nullptr},
  };
  EXPECT_EQ(v, expected);
}

TEST(YamlToJsonTest, JsonIsYaml) {
  json v = MustParse(R"({"a": [1, 2.5, "x", null, true], "b": {"c": "d"}, "e": "123"})");
  EXPECT_EQ(v, json::parse(R"({"a": [1, 2.5, "x", null, true], "b": {"c": "d"}, "e": "123"})"));
}

TEST(YamlToJsonTest, EmptyDocumentIsNull) {
  EXPECT_TRUE(MustParse("").is_null());
  EXPECT_TRUE(MustParse("# only a comment\n").is_null());
  EXPECT_EQ(MustParse("42"), json(42));
  EXPECT_EQ(MustParse("- a\n- b\n"), json({"a", "b"}));
}

TEST(YamlToJsonTest, AnchorsAndAliasesExpand) {
  json v = MustParse("base: &b {lr: 1.0e-5}\ncopy: *b\n");
  EXPECT_EQ(v["copy"], v["base"]);
}

TEST(YamlToJsonTest, DuplicateKeysRejected) {
  std::string e = ErrorOf("name: a\nmodel: m\nname: b\n");
  EXPECT_CONTAINS(e, "YAML line 3 column 1");
  EXPECT_CONTAINS(e, "duplicate key 'name'");
  e = ErrorOf("outer:\n  x: 1\n  x: 2\n");
  EXPECT_CONTAINS(e, "line 3 column 3: duplicate key 'x'");
  // Same text, differently quoted, is the same key.
  EXPECT_CONTAINS(ErrorOf("a: 1\n'a': 2\n"), "duplicate key 'a'");
  // The same key in different maps is fine.
  EXPECT_EQ(MustParse("a: {x: 1}\nb: {x: 2}\n"), json({{"a", {{"x", 1}}}, {"b", {{"x", 2}}}}));
}

TEST(YamlToJsonTest, KeysMustBeStrings) {
  EXPECT_CONTAINS(ErrorOf("[1, 2]: x\n"), "YAML line 1 column 1: mapping keys must be strings");
  EXPECT_CONTAINS(ErrorOf("a:\n  ? {b: 1}\n  : x\n"), "line 2 column 5: mapping keys must be strings");
  EXPECT_CONTAINS(ErrorOf("~: x\n"), "mapping keys must be strings");
  EXPECT_CONTAINS(ErrorOf("null: x\n"), "mapping keys must be strings");
  // Other scalars are keys by their text, as JSON needs.
  EXPECT_EQ(MustParse("1: a\ntrue: b\n'~': c\n"), json({{"1", "a"}, {"true", "b"}, {"~", "c"}}));
}

TEST(YamlToJsonTest, SyntaxErrorsCarryLineAndColumn) {
  EXPECT_CONTAINS(ErrorOf("name: a\n  model: b\n"), "YAML line 2 column 8: illegal map value");
  EXPECT_CONTAINS(ErrorOf("a: 1\nb: [1, 2\nc: 3\n"), "YAML line ");
  EXPECT_CONTAINS(ErrorOf("a: [1, 2]]\n"), "YAML line 1 column");
  EXPECT_CONTAINS(ErrorOf("{\"a\": 1,,}"), "YAML line 1 column");
}

TEST(YamlToJsonTest, OneDocumentPerText) {
  EXPECT_CONTAINS(ErrorOf("a: 1\n---\nb: 2\n"), "YAML line 3 column 1: a second YAML document");
  EXPECT_EQ(MustParse("---\na: 1\n"), json({{"a", 1}}));
  EXPECT_EQ(MustParse("a: 1\n---\n"), json({{"a", 1}}));  // a trailing separator is harmless
  EXPECT_EQ(MustParse("a: 1\n...\n"), json({{"a", 1}}));
  EXPECT_EQ(MustParse("a: 1\n---\n---\n"), json({{"a", 1}}));
}

// yaml-cpp 0.7's LoadAll never returned on a ',' after a document (a JSON spec with a trailing
// comma), collecting empty documents until memory ran out (fuzz/regressions/job_spec).
TEST(YamlToJsonTest, StrayCommaAfterTheDocumentIsAnError) {
  EXPECT_CONTAINS(ErrorOf("{\"name\": \"x\"},\n"), "YAML line 1 column 14: unexpected ',' after the document");
  EXPECT_CONTAINS(ErrorOf("\"\","), "unexpected ','");
  EXPECT_CONTAINS(ErrorOf(","), "unexpected ','");
  EXPECT_CONTAINS(ErrorOf("[],x"), "unexpected ','");
}

TEST(JsonToYamlTest, RoundTripsTrickyDocument) {
  json doc = {
      {"colon", "a: b"},
      {"colon_end", "key:"},
      {"comment", "# not a comment"},
      {"hash_inside", "a #b"},
      {"leading_space", "  indented"},
      {"trailing_space", "x "},
      {"dash", "- item"},
      {"flow", "[1, 2]"},
      {"brace", "{a: 1}"},
      {"true_string", "true"},
      {"null_string", "null"},
      {"tilde", "~"},
      {"int_string", "123"},
      {"hex_string", "0x10"},
      {"float_string", "1e-5"},
      {"inf_string", ".inf"},
      {"empty", ""},
      {"unicode", "h\u00e9llo \u2713 \U0001F600"},
      {"multi_line", "line one\nline two\n"},
      {"no_final_newline", "a\nb"},
      {"tab", "a\tb"},
      {"quotes", "it's \"quoted\""},
      {"backslash", "C:\\path\\"},
      {"star", "*alias"},
      {"amp", "&anchor"},
      {"bang", "!tag"},
      {"percent", "%directive"},
      {"at", "@at"},
      {"backtick", "`cmd`"},
      {"pipe", "|"},
      {"question", "? x"},
      {"doc_start", "---"},
      {"int", 42},
      {"negative", -7},
      {"big_unsigned", UINT64_MAX},
      {"float", 1e-5},
      {"whole_float", 30.0},
      {"negative_zero", -0.0},
      {"bool", false},
      {"null", nullptr},
      {"empty_map", json::object()},
      {"empty_list", json::array()},
      {"list", {"a: b", "", "true", 1, 2.5, nullptr, {{"k", "v"}}, json::array({1, 2})}},
      {"nested", {{"deeper", {{"deepest", {"x", {{"y", "z"}}}}}}}},
      {"", "empty key"},
      {"123", "numeric key"},
      {"true", "bool key"},
      {"~", "tilde key"},
      {"key with: colon", 1},
      {"key with space", 2},
  };
  std::string yaml = JsonToYaml(doc);
  auto back = YamlToJson(yaml);
  ASSERT_TRUE(back.ok()) << back.status() << "\n" << yaml;
  EXPECT_EQ(*back, doc) << yaml;
  // Types survive, not just values: 30.0 stays a float, "123" stays a string.
  EXPECT_TRUE((*back)["whole_float"].is_number_float()) << yaml;
  EXPECT_TRUE((*back)["int_string"].is_string());
  EXPECT_TRUE((*back)["big_unsigned"].is_number_unsigned());
}

TEST(JsonToYamlTest, BlockStyleAndReadableNumbers) {
  json doc = {{"name", "qwen-sft"}, {"training", {{"lr", 1e-5}, {"epochs", 2}}}, {"command", {"python", "x.py"}}};
  std::string yaml = JsonToYaml(doc);
  EXPECT_CONTAINS(yaml, "name: qwen-sft\n");
  EXPECT_CONTAINS(yaml, "training:\n  epochs: 2\n  lr: 1e-05\n");  // not 1.0000000000000001e-05
  EXPECT_CONTAINS(yaml, "command:\n  - python\n  - x.py\n");
  EXPECT_EQ(yaml.back(), '\n');
}

TEST(JsonToYamlTest, NonFiniteFloats) {
  json doc = {{"inf", INFINITY}, {"ninf", -INFINITY}, {"nan", NAN}};
  std::string yaml = JsonToYaml(doc);
  EXPECT_CONTAINS(yaml, "inf: .inf\n");
  EXPECT_CONTAINS(yaml, "ninf: -.inf\n");
  EXPECT_CONTAINS(yaml, "nan: .nan\n");
  json back = MustParse(yaml);
  EXPECT_TRUE(std::isinf(back["inf"].get<double>()));
  EXPECT_LT(back["ninf"].get<double>(), 0);
  EXPECT_TRUE(std::isnan(back["nan"].get<double>()));
}

TEST(JsonToYamlTest, Scalars) {
  EXPECT_EQ(MustParse(JsonToYaml(json("true"))), json("true"));
  EXPECT_EQ(MustParse(JsonToYaml(json(7))), json(7));
  EXPECT_TRUE(MustParse(JsonToYaml(json(nullptr))).is_null());
  EXPECT_EQ(MustParse(JsonToYaml(json::array())), json::array());
}

class LoadFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/eft_yaml_json_test_XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    for (const std::string& f : files_) std::remove(f.c_str());
    rmdir(dir_.c_str());
  }
  std::string Write(const std::string& name, const std::string& content) {
    std::string path = dir_ + "/" + name;
    std::ofstream(path) << content;
    files_.push_back(path);
    return path;
  }
  std::string dir_;
  std::vector<std::string> files_;
};

TEST_F(LoadFileTest, ReadsYamlAndJson) {
  auto y = LoadYamlOrJsonFile(Write("spec.yaml", "name: a\nnodes: {min: 2}\n"));
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_EQ(*y, json({{"name", "a"}, {"nodes", {{"min", 2}}}}));
  auto j = LoadYamlOrJsonFile(Write("spec.json", R"({"name": "a", "nodes": {"min": 2}})"));
  ASSERT_TRUE(j.ok()) << j.status();
  EXPECT_EQ(*j, *y);
}

TEST_F(LoadFileTest, ErrorsNameTheFile) {
  std::string path = Write("bad.yaml", "a: 1\na: 2\n");
  auto r = LoadYamlOrJsonFile(path);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_CONTAINS(r.status().message(), path + ": YAML line 2 column 1: duplicate key 'a'");

  auto missing = LoadYamlOrJsonFile(dir_ + "/missing.yaml");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_CONTAINS(missing.status().message(), dir_ + "/missing.yaml");
  EXPECT_CONTAINS(missing.status().message(), "No such file");
}

}  // namespace
}  // namespace eft
