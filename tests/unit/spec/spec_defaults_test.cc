// A job spec's defaults are stated in spec.proto's comments and applied by NormalizeJobSpec alone;
// these tests hold the two to each other: every "Default: VALUE." is what NormalizeJobSpec fills in,
// and every field it fills in states its default. The few that depend on where the job runs are
// listed here with who decides them.
#include <cstdlib>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <google/protobuf/descriptor.h>
#include <google/protobuf/message.h>
#include <gtest/gtest.h>

#include "tests/unit/spec/spec_test_util.h"

namespace eft::spec {
namespace {

namespace pb = google::protobuf;
using spec_test::MustNormalize;

// Defaults that only the running job knows, spelled "Default: <...>": the field stays empty through
// NormalizeJobSpec and is decided later by the one place named here.
const std::map<std::string, std::string>& ContextualDefaults() {
  static const auto* kDecidedBy = new std::map<std::string, std::string>{
      {"checkpoint.dir", "the controller, from its data dir and the job id (after normalizing)"},
      {"data.cache_dir", "eft-train's TokenCacheDir, from checkpoint.dir or the rank's HOME"},
      {"tracking.tensorboard", "eft-train, from checkpoint.dir (the controller when it names a directory)"},
      {"tracking.mlflow_tracking_uri", "the controller's --mlflow-tracking-uri"},
      {"tracking.mlflow_experiment", "the controller's --mlflow-experiment"},
  };
  return *kDecidedBy;
}

std::string SpecProto() {
  const char* env = std::getenv("EFT_SOURCE_DIR");
  return std::string(env && *env ? env : EFT_SOURCE_DIR_DEFAULT) + "/proto/eft/v1/spec.proto";
}

// Field path ("training.lora.r") -> the text after "Default: " in its comment, up to the end of
// the sentence or an explanation ("1e-5", "`min`", "<checkpoint.dir>/data-cache").
std::map<std::string, std::string> StatedDefaults() {
  std::ifstream in(SpecProto());
  EXPECT_TRUE(in.good()) << SpecProto();

  // Where each message sits in a JobSpec, by walking the singular message fields from the root.
  std::map<std::string, std::string> prefix_of = {{"JobSpec", ""}};
  std::vector<const pb::Descriptor*> todo = {v1::JobSpec::descriptor()};
  while (!todo.empty()) {
    const pb::Descriptor* d = todo.back();
    todo.pop_back();
    for (int i = 0; i < d->field_count(); ++i) {
      const pb::FieldDescriptor* f = d->field(i);
      if (f->type() != pb::FieldDescriptor::TYPE_MESSAGE || f->is_repeated()) continue;
      prefix_of[f->message_type()->name()] = prefix_of[d->name()] + f->name() + ".";
      todo.push_back(f->message_type());
    }
  }

  const std::regex message_line(R"(^message (\w+) \{)");
  const std::regex field_line(R"(^\s*(?:optional\s+|repeated\s+)?(?:map<[^>]+>|[\w.]+)\s+(\w+)\s*=\s*\d+\s*;)");
  const std::regex comment_line(R"(^\s*// ?(.*)$)");
  const std::regex stated(R"(Default: (\S+?)[.,]?(?:\s|$))");
  std::map<std::string, std::string> defaults;
  std::string message, comment;
  for (std::string line; std::getline(in, line);) {
    std::smatch m;
    if (std::regex_search(line, m, message_line)) {
      message = m[1];
    } else if (std::regex_search(line, m, comment_line)) {
      comment += m[1].str() + " ";
      continue;
    } else if (std::regex_search(line, m, field_line) && prefix_of.count(message)) {
      if (std::smatch d; std::regex_search(comment, d, stated)) defaults[prefix_of[message] + m[1].str()] = d[1];
    }
    comment.clear();
  }
  return defaults;
}

// Resolves a field path in `spec`: the message holding the field, and the field.
std::pair<const pb::Message*, const pb::FieldDescriptor*> Find(const pb::Message& spec, const std::string& path) {
  const pb::Message* m = &spec;
  std::stringstream parts(path);
  std::string name;
  std::getline(parts, name, '.');
  for (std::string next; std::getline(parts, next, '.'); name = next) {
    m = &m->GetReflection()->GetMessage(*m, m->GetDescriptor()->FindFieldByName(name));
  }
  return {m, m->GetDescriptor()->FindFieldByName(name)};
}

// The message holding the field at `path` in `spec`, created where absent.
pb::Message* MutableHolder(pb::Message* spec, const std::string& path) {
  pb::Message* m = spec;
  std::stringstream parts(path);
  std::string name;
  std::getline(parts, name, '.');
  for (std::string next; std::getline(parts, next, '.'); name = next) {
    m = m->GetReflection()->MutableMessage(m, m->GetDescriptor()->FindFieldByName(name));
  }
  return m;
}

// A singular field's value as the comments write it ("true", "42", "1e-05" as a double compares).
std::string Text(const pb::Message& m, const pb::FieldDescriptor* f) {
  const pb::Reflection* r = m.GetReflection();
  switch (f->cpp_type()) {
    case pb::FieldDescriptor::CPPTYPE_BOOL: return r->GetBool(m, f) ? "true" : "false";
    case pb::FieldDescriptor::CPPTYPE_INT32: return std::to_string(r->GetInt32(m, f));
    case pb::FieldDescriptor::CPPTYPE_INT64: return std::to_string(r->GetInt64(m, f));
    case pb::FieldDescriptor::CPPTYPE_DOUBLE: {
      std::ostringstream out;
      out << r->GetDouble(m, f);
      return out.str();
    }
    case pb::FieldDescriptor::CPPTYPE_STRING: return r->GetString(m, f);
    default: ADD_FAILURE() << f->full_name() << ": a type this test does not compare"; return "";
  }
}

// Whether `field` of `m` holds what a comment's default says.
bool Holds(const pb::Message& m, const pb::FieldDescriptor* f, const std::string& stated) {
  const pb::Reflection* r = m.GetReflection();
  if (f->is_repeated()) {
    if (stated == "none") return r->FieldSize(m, f) == 0;
    return f->cpp_type() == pb::FieldDescriptor::CPPTYPE_STRING && r->FieldSize(m, f) == 1 &&
           r->GetRepeatedString(m, f, 0) == stated;
  }
  if (f->cpp_type() == pb::FieldDescriptor::CPPTYPE_DOUBLE) {
    return r->GetDouble(m, f) == std::strtod(stated.c_str(), nullptr);
  }
  return Text(m, f) == stated;
}

// The spec everything is checked on: no value the schema defaults, but training.lora present, so
// that its defaults are filled in too.
constexpr const char* kBare = "{name: t, model: /m, data: {train: /d.jsonl}, training: {lora: {}}}";

TEST(SpecDefaultsTest, TheCommentsAreRegularEnoughToRead) {
  const auto defaults = StatedDefaults();
  // Every "Default: " in a field's (indented) comment was read, none lost to a layout the reader
  // does not follow.
  std::ifstream in(SpecProto());
  size_t stated = 0;
  for (std::string line; std::getline(in, line);) {
    stated += line.rfind("  //", 0) == 0 && line.find("Default: ") != std::string::npos;
  }
  EXPECT_GE(stated, 40u);
  EXPECT_EQ(defaults.size(), stated);
  EXPECT_EQ(defaults.at("training.lr"), "1e-5");
  EXPECT_EQ(defaults.at("resources.nodes.max"), "`min`");
  EXPECT_EQ(defaults.at("data.eval_fraction"), "0");
  EXPECT_EQ(defaults.at("training.lora.target_modules"), "all-linear");
  EXPECT_EQ(defaults.at("checkpoint.require_resume"), "false");
  EXPECT_EQ(defaults.count("name"), 0u);
}

TEST(SpecDefaultsTest, EveryStatedDefaultIsWhatNormalizeFillsIn) {
  const v1::JobSpec normalized = MustNormalize(kBare);
  for (const auto& [path, stated] : StatedDefaults()) {
    const auto [message, field] = Find(normalized, path);
    ASSERT_NE(field, nullptr) << path;
    if (stated.front() == '<') {
      EXPECT_EQ(ContextualDefaults().count(path), 1u)
          << path << "'s default (" << stated << ") depends on where the job runs: say in ContextualDefaults() "
          << "who decides it";
      EXPECT_EQ(Text(*message, field), "") << path << " is left to " << ContextualDefaults().at(path);
    } else if (stated.front() == '`') {
      // Another field of the same message: whatever that one is, explicit or defaulted.
      const pb::FieldDescriptor* other = message->GetDescriptor()->FindFieldByName(stated.substr(1, stated.size() - 2));
      ASSERT_NE(other, nullptr) << path << ": " << stated << " names no field beside it";
      EXPECT_EQ(Text(*message, field), Text(*message, other)) << path;
      ASSERT_EQ(other->cpp_type(), pb::FieldDescriptor::CPPTYPE_INT32) << path << ": a reference this test cannot set";
      v1::JobSpec set = spec_test::MustParse(kBare);
      pb::Message* holder = MutableHolder(&set, path);
      holder->GetReflection()->SetInt32(holder, other, 3);
      ASSERT_TRUE(NormalizeJobSpec(&set).ok()) << path;
      const auto [set_message, set_field] = Find(set, path);
      EXPECT_EQ(Text(*set_message, set_field), "3") << path << " with " << other->name() << " set to 3";
    } else {
      EXPECT_TRUE(Holds(*message, field, stated))
          << "spec.proto says " << path << " defaults to " << stated << "; NormalizeJobSpec leaves "
          << (field->is_repeated() ? std::to_string(message->GetReflection()->FieldSize(*message, field)) + " values"
                                   : Text(*message, field));
    }
  }
  for (const auto& [path, who] : ContextualDefaults()) {
    EXPECT_EQ(StatedDefaults().at(path).front(), '<') << path << " is listed as decided by " << who;
  }
}

// Every leaf field's value as text, repeated ones joined ("data.format" -> "auto").
void Values(const pb::Message& m, const std::string& prefix, std::map<std::string, std::string>* out) {
  const pb::Reflection* r = m.GetReflection();
  for (int i = 0; i < m.GetDescriptor()->field_count(); ++i) {
    const pb::FieldDescriptor* f = m.GetDescriptor()->field(i);
    const std::string path = prefix + f->name();
    if (f->is_map() || (f->is_repeated() && f->cpp_type() == pb::FieldDescriptor::CPPTYPE_MESSAGE)) {
      (*out)[path] = std::to_string(r->FieldSize(m, f));
    } else if (f->is_repeated()) {
      std::string all;
      for (int j = 0; j < r->FieldSize(m, f); ++j) all += r->GetRepeatedString(m, f, j) + ",";
      (*out)[path] = all;
    } else if (f->cpp_type() == pb::FieldDescriptor::CPPTYPE_MESSAGE) {
      Values(r->GetMessage(m, f), path + ".", out);
    } else {
      // Presence too: an optional field set to its type's zero has been filled in.
      (*out)[path] = Text(m, f) + (f->has_presence() && r->HasField(m, f) ? " (set)" : "");
    }
  }
}

TEST(SpecDefaultsTest, EveryFieldNormalizeFillsInStatesItsDefault) {
  const v1::JobSpec bare = spec_test::MustParse(kBare);
  std::map<std::string, std::string> before, after;
  Values(bare, "", &before);
  Values(MustNormalize(kBare), "", &after);
  const auto stated = StatedDefaults();
  for (const auto& [path, value] : after) {
    if (before.at(path) == value) continue;
    EXPECT_EQ(stated.count(path), 1u) << "NormalizeJobSpec fills in " << path << " (" << value
                                      << ") but its comment in spec.proto states no \"Default: VALUE.\"";
  }
}

}  // namespace
}  // namespace eft::spec
