// The chat-template interpreter's bounds (trainer/chat_template/value.h, interpreter.cc): a template
// from a downloaded model is a program, and a few hostile bytes must end in a clear error within a
// bounded time and memory, never a hang or gigabytes. Each case below is one a coverage-guided
// fuzzer found or one of its siblings (docs/fuzzing.md); real templates stay far below every bound,
// which ChatTemplateLanguage/ChatTemplateModels check against jinja2.
#include <gtest/gtest.h>

#include <chrono>

#include <nlohmann/json.hpp>

#include "common/sanitizers.h"
#include "fuzz/chat_template_variables.h"
#include "trainer/chat_template/chat_template.h"

namespace eft::trainer {
namespace {

// The bounds are in work, not time: 10M steps, where a step is a statement, a list item copied or
// 64 bytes of text made. On any CPU that is well under a second; 3 s leaves room for a loaded CI
// machine, and sanitizers slow this code 2-4x (kTimeScale).
constexpr double kSecondsAllowed = 3.0 * (kUnderSanitizer ? 4 : 1);

// What fuzz/chat_template_fuzz.cc renders every template with: five messages of ~70 bytes of repr each.
nlohmann::ordered_json Conversation() { return nlohmann::ordered_json::parse(fuzz::kChatTemplateVariables); }

struct Rendered {
  Result<std::string> out = Status::Ok();
  double seconds = 0;
};

Rendered Render(const std::string& tmpl) {
  auto compiled = ChatTemplate::Compile(tmpl);
  EXPECT_TRUE(compiled.ok()) << tmpl << ": " << compiled.status().message();
  if (!compiled.ok()) return {compiled.status(), 0};
  auto start = std::chrono::steady_clock::now();
  Rendered r;
  r.out = compiled->Render(Conversation());
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return r;
}

void ExpectRefused(const std::string& tmpl, const std::string& expect) {
  Rendered r = Render(tmpl);
  ASSERT_FALSE(r.out.ok()) << tmpl << " rendered " << r.out->size() << " bytes";
  EXPECT_NE(r.out.status().message().find(expect), std::string::npos) << tmpl << ": " << r.out.status().message();
  EXPECT_LT(r.seconds, kSecondsAllowed) << tmpl;
}

TEST(ChatTemplateLimits, PrintingAHugeListIsBoundedByWorkNotByStatements) {
  // Found by fuzz/chat_template_fuzz.cc (fuzz/regressions/chat_template/list-repeated-and-printed-three-times):
  // each print was one statement converting 456k dicts to ~90 MB of text, 20 s in all under ASan.
  ExpectRefused("{{ messages*91172 }}{{ messages*91172 }}{{ messages*91172 }}", "too long");
  // One such list, printed: stopped at the text bound while converting, not after.
  ExpectRefused("{{ messages*800000 }}", "too long");
}

TEST(ChatTemplateLimits, CopyingLongStringsIsChargedByTheirBytes) {
  // A list of one 30 MB string repeated a million times would be 30 TB of copies.
  ExpectRefused("{{ (['x' * 30000000] * 1000000) | length }}", "steps");
  // A loop that copies a 30 MB string each time: a few iterations, not 100,000.
  ExpectRefused("{% set big = 'x' * 30000000 %}{% for i in range(100000) %}{% set y = big ~ '' %}{% endfor %}",
                "steps");
}

TEST(ChatTemplateLimits, FiltersStopBeforeBuildingTooMuch) {
  ExpectRefused("{{ ('a' * 1000000) | replace('a', 'b' * 1000000) }}", "too long");
  ExpectRefused("{{ ('a' * 1000000).replace('a', 'b' * 1000000) }}", "too long");
  ExpectRefused("{{ 'x' | center(1000000000000) }}", "too long");
  ExpectRefused("{{ 'x\\ny' | indent(1000000000000) }}", "too long");
  ExpectRefused("{{ [1, 2] | tojson(indent=1000000000) }}", "too long");
  ExpectRefused("{{ (['x' * 1000000] * 100) | join }}", "too long");
  ExpectRefused("{{ ('x' * 1000000).join(['y'] * 100) }}", "too long");
  ExpectRefused("{{ [1] | batch(1000000000000, 0) | list }}", "batch size");
  ExpectRefused("{{ ('x' * 20000000) | list | length }}", "cannot be iterated");
}

TEST(ChatTemplateLimits, WithinTheBoundsJinjaSemanticsHold) {
  // indent with a negative width indents by nothing, as Python's ' ' * -5 is ''.
  Rendered r = Render("{{ 'a\\nb' | indent(-5) }}");
  ASSERT_TRUE(r.out.ok()) << r.out.status().message();
  EXPECT_EQ(*r.out, "a\nb");
  // Just under the text bound renders.
  r = Render("{{ ('x' * 1000000) | length }}|{{ (messages * 1000) | length }}");
  ASSERT_TRUE(r.out.ok()) << r.out.status().message();
  EXPECT_EQ(*r.out, "1000000|5000");
}

TEST(ChatTemplateLimits, ErrorMessagesQuoteHugeValuesShortened) {
  Rendered r = Render("{{ [1, 2].index(['y' * 100000]) }}");
  ASSERT_FALSE(r.out.ok());
  EXPECT_LT(r.out.status().message().size(), 400u) << r.out.status().message().substr(0, 400);
  EXPECT_NE(r.out.status().message().find("yyy... is not in list"), std::string::npos) << r.out.status().message();
}

}  // namespace
}  // namespace eft::trainer
