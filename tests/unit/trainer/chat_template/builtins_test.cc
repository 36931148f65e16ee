// The filter and test tables (trainer/chat_template/builtins.h) are the one list of what templates
// may use: every name in them compiles in a template and reaches its handler when rendered, and a
// name outside them is refused at compile time (`| x`, `is x`) and at render time (map('x'),
// select('x')). No jinja2 comparison here: chat_template_test does that for behaviour.
#include <gtest/gtest.h>

#include <regex>
#include <string>

#include <nlohmann/json.hpp>

#include "trainer/chat_template/builtins.h"
#include "trainer/chat_template/chat_template.h"

namespace eft::trainer {
namespace {

using nlohmann::ordered_json;

// Renders `source` with x = [1, 2]; the error message, or "" when it renders.
std::string RenderError(const std::string& source) {
  auto compiled = ChatTemplate::Compile(source);
  if (!compiled.ok()) return "compile: " + compiled.status().message();
  auto rendered = compiled->Render({{"x", ordered_json::array({1, 2})}});
  return rendered.ok() ? "" : rendered.status().message();
}

bool IsIdentifier(std::string_view name) {
  return std::regex_match(name.begin(), name.end(), std::regex("[A-Za-z_][A-Za-z0-9_]*"));
}

TEST(ChatTemplateBuiltins, TablesHoldTheNamesTemplatesUse) {
  ASSERT_FALSE(jinja::Filters().empty());
  ASSERT_FALSE(jinja::Tests().empty());
  for (const char* name : {"tojson", "trim", "length", "default", "map", "selectattr", "items", "join"})
    EXPECT_TRUE(jinja::IsKnownFilter(name)) << name;
  for (const char* name : {"defined", "none", "string", "mapping", "eq", "=="})
    EXPECT_TRUE(jinja::IsKnownTest(name)) << name;
}

TEST(ChatTemplateBuiltins, EveryFilterInTheTableCompilesAndIsDispatched) {
  for (const jinja::FilterEntry& filter : jinja::Filters()) {
    std::string name(filter.name);
    EXPECT_TRUE(jinja::IsKnownFilter(name)) << name;
    // Some filters fail on a list of ints (trim, round...); what matters is that they are reached.
    std::string direct = RenderError("{{ x | " + name + " }}");
    EXPECT_EQ(direct.find("compile: "), std::string::npos) << name << ": " << direct;
    EXPECT_EQ(direct.find("no filter named"), std::string::npos) << name << ": " << direct;
    std::string by_name = RenderError("{{ x | map('" + name + "') | list }}");
    EXPECT_EQ(by_name.find("no filter named"), std::string::npos) << name << ": " << by_name;
  }
}

TEST(ChatTemplateBuiltins, EveryTestInTheTableCompilesAndIsDispatched) {
  for (const jinja::TestEntry& test : jinja::Tests()) {
    std::string name(test.name);
    EXPECT_TRUE(jinja::IsKnownTest(name)) << name;
    if (IsIdentifier(name)) {  // `x is ==` is not Jinja syntax; `select('==', 1)` is
      std::string direct = RenderError("{{ x is " + name + " }}");
      EXPECT_EQ(direct.find("compile: "), std::string::npos) << name << ": " << direct;
      EXPECT_EQ(direct.find("no test named"), std::string::npos) << name << ": " << direct;
    }
    std::string by_name = RenderError("{{ x | select('" + name + "', 1) | list }}");
    EXPECT_EQ(by_name.find("no test named"), std::string::npos) << name << ": " << by_name;
  }
}

TEST(ChatTemplateBuiltins, UnknownNamesAreRefusedWhereTheyAreUsed) {
  EXPECT_FALSE(jinja::IsKnownFilter("nosuchfilter"));
  EXPECT_FALSE(jinja::IsKnownTest("nosuchtest"));
  EXPECT_EQ(RenderError("{{ x | nosuchfilter }}"),
            "compile: chat template: line 1, column 6: unsupported filter 'nosuchfilter'");
  EXPECT_EQ(RenderError("{{ x is nosuchtest }}"),
            "compile: chat template: line 1, column 6: unsupported test 'nosuchtest'");
  EXPECT_EQ(RenderError("{{ x | map('nosuchfilter') | list }}"),
            "chat template: line 1: no filter named 'nosuchfilter'");
  EXPECT_EQ(RenderError("{{ x | select('nosuchtest') | list }}"), "chat template: line 1: no test named 'nosuchtest'");
}

// Names Jinja has and eft does not implement compile (so a template that never reaches them
// works) and fail naming themselves when rendered.
TEST(ChatTemplateBuiltins, KnownButUnsupportedNamesFailAtRender) {
  EXPECT_EQ(RenderError("{{ x | striptags }}"), "chat template: line 1: filter 'striptags' is not supported");
  EXPECT_EQ(RenderError("{{ x | truncate }}"), "chat template: line 1: filter 'truncate' is not supported");
  EXPECT_EQ(RenderError("{{ x is filter }}"), "chat template: line 1: test 'filter' is not supported");
  EXPECT_EQ(RenderError("{% if false %}{{ x | striptags }}{% endif %}ok"), "");
}

// Numbers at and past int64's ends (fuzz/regressions/chat_template: an exception escaped Compile,
// and signed overflow and float-to-int casts were undefined). Python's integers have no bound;
// ours wrap at 64 bits, as IntPow always did.
std::string Rendered(const std::string& source) {
  auto compiled = ChatTemplate::Compile(source);
  if (!compiled.ok()) return "compile: " + compiled.status().message();
  auto rendered = compiled->Render({{"x", ordered_json::array({1, 2})}});
  return rendered.ok() ? *rendered : "render: " + rendered.status().message();
}

TEST(ChatTemplateNumbers, BeyondInt64) {
  EXPECT_EQ(Rendered("{{ 99999999999999999999 }}"),
            "compile: chat template: line 1, column 4: integer literal 99999999999999999999 does not fit in 64 bits");
  EXPECT_EQ(Rendered("{{ x.99999999999999999999 }}"),
            "compile: chat template: line 1, column 6: index 99999999999999999999 does not fit in 64 bits");
  EXPECT_EQ(Rendered("{{ 1e999 }} {{ 1e-999 }}"), "inf 0.0");
  EXPECT_EQ(Rendered("{{ 9223372036854775807 + 1 }}"), "-9223372036854775808");
  EXPECT_EQ(Rendered("{{ 99999999999999 * 99999999 }}"), std::to_string(static_cast<int64_t>(99999999999999ULL * 99999999ULL)));
  EXPECT_EQ(Rendered("{{ -(-9223372036854775807 - 1) }}"), "-9223372036854775808");
  EXPECT_EQ(Rendered("{{ (-9223372036854775807 - 1) | abs }}"), "-9223372036854775808");
  EXPECT_EQ(Rendered("{{ [9223372036854775807, 1] | sum }}"), "-9223372036854775808");
  // int() of what no int64 holds: the default, as for text that is no number.
  EXPECT_EQ(Rendered("{{ 1e300 | int }} {{ '1e300' | int(7) }} {{ (1e308 * 10) | int }} {{ 2.9 | int }}"), "0 7 0 2");
}

// Repeating nothing a billion times is nothing, at once (it looped: fuzz/regressions/chat_template).
TEST(ChatTemplateNumbers, EmptyRepetitionIsImmediate) {
  EXPECT_EQ(Rendered("{{ ([] * 999999999) | length }}|{{ '' * 999999999 }}|{{ (x * 0 * 999999999) | length }}"), "0||0");
}

}  // namespace
}  // namespace eft::trainer
