#include "common/yaml_json.h"

#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <regex>
#include <sstream>
#include <vector>

#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/yaml.h>

#include "common/file_util.h"
#include "common/utf8.h"

namespace eft {
namespace {

using nlohmann::json;

// "YAML line 3 column 7" (1-based), or "YAML" when yaml-cpp has no position.
std::string Where(const YAML::Mark& mark) {
  if (mark.is_null()) return "YAML";
  return "YAML line " + std::to_string(mark.line + 1) + " column " + std::to_string(mark.column + 1);
}

// An integer in int64 if it fits, else uint64, else a double: nlohmann holds the first two
// exactly, and a value beyond both is at least still a number of the right magnitude.
json IntegerValue(const std::string& s, int base) {
  const char* digits = s.c_str() + (base == 10 ? 0 : 2);  // past "0x" / "0o"
  errno = 0;
  long long v = std::strtoll(digits, nullptr, base);
  if (errno == 0) return v;
  if (s[0] != '-') {  // strtoull would wrap a negative number around without complaint
    errno = 0;
    unsigned long long u = std::strtoull(digits, nullptr, base);
    if (errno == 0) return u;
  }
  if (base == 10) return std::strtod(s.c_str(), nullptr);
  double d = 0;
  for (const char* p = digits; *p != '\0'; ++p) {
    int c = std::tolower(static_cast<unsigned char>(*p));
    d = d * base + (c <= '9' ? c - '0' : c - 'a' + 10);
  }
  return d;
}

// YAML 1.2 core schema scalar resolution for plain (unquoted) scalars.
json ResolvePlainScalar(const std::string& s) {
  static const std::regex kNull("^(~|null|Null|NULL|)$");
  static const std::regex kTrue("^(true|True|TRUE)$");
  static const std::regex kFalse("^(false|False|FALSE)$");
  static const std::regex kInt("^[-+]?[0-9]+$");
  static const std::regex kHex("^0x[0-9a-fA-F]+$");
  static const std::regex kOct("^0o[0-7]+$");
  static const std::regex kFloat("^[-+]?(\\.[0-9]+|[0-9]+(\\.[0-9]*)?)([eE][-+]?[0-9]+)?$");
  static const std::regex kInf("^[-+]?\\.(inf|Inf|INF)$");
  static const std::regex kNan("^\\.(nan|NaN|NAN)$");
  if (std::regex_match(s, kNull)) return nullptr;
  if (std::regex_match(s, kTrue)) return true;
  if (std::regex_match(s, kFalse)) return false;
  if (std::regex_match(s, kInt)) return IntegerValue(s, 10);
  if (std::regex_match(s, kHex)) return IntegerValue(s, 16);
  if (std::regex_match(s, kOct)) return IntegerValue(s, 8);
  if (std::regex_match(s, kFloat)) return std::strtod(s.c_str(), nullptr);
  if (std::regex_match(s, kInf)) return s[0] == '-' ? -INFINITY : INFINITY;
  if (std::regex_match(s, kNan)) return NAN;
  return s;
}

// yaml-cpp 0.7 decodes the escapes \N (U+0085) and \_ (U+00A0) of double-quoted scalars as the single
// bytes 0x85 and 0xA0, not as UTF-8. From a document that is valid UTF-8 such a byte can come from
// nothing else, so it is re-encoded; a document that is not valid UTF-8 is left as it is (its text
// is refused where it is read).
std::string ScalarText(const YAML::Node& node, bool utf8_source) {
  const std::string& text = node.Scalar();
  if (!utf8_source || IsValidUtf8(text)) return text;
  std::string out;
  out.reserve(text.size() + 8);
  for (size_t i = 0; i < text.size();) {
    const size_t n = Utf8SequenceLength(text, i);
    const auto byte = static_cast<unsigned char>(text[i]);
    if (n == 0 && (byte == 0x85 || byte == 0xA0)) {
      AppendUtf8(byte, &out);
      ++i;
    } else {
      const size_t take = n == 0 ? 1 : n;
      out.append(text, i, take);
      i += take;
    }
  }
  return out;
}

Result<json> Convert(const YAML::Node& node, bool utf8_source) {
  switch (node.Type()) {
    case YAML::NodeType::Undefined:
    case YAML::NodeType::Null:
      return json(nullptr);
    case YAML::NodeType::Scalar:
      // yaml-cpp tags plain scalars "?" and quoted ones "!".
      if (node.Tag() == "!" || node.Tag() == "tag:yaml.org,2002:str") return json(ScalarText(node, utf8_source));
      return ResolvePlainScalar(node.Scalar());
    case YAML::NodeType::Sequence: {
      json out = json::array();
      for (const auto& item : node) {
        EFT_ASSIGN_OR_RETURN(json v, Convert(item, utf8_source));
        out.push_back(std::move(v));
      }
      return out;
    }
    case YAML::NodeType::Map: {
      json out = json::object();
      for (const auto& kv : node) {
        // Scalar keys are taken as their text (`1:` is the key "1"); JSON has nothing else.
        if (!kv.first.IsScalar()) {
          return Status::InvalidArgument(Where(kv.first.Mark()) +
                                         ": mapping keys must be strings (a null, list or mapping is not a "
                                         "key; quote it if you meant the text)");
        }
        const std::string key = ScalarText(kv.first, utf8_source);
        if (out.contains(key)) {
          return Status::InvalidArgument(Where(kv.first.Mark()) + ": duplicate key '" + key + "'");
        }
        EFT_ASSIGN_OR_RETURN(json v, Convert(kv.second, utf8_source));
        out[key] = std::move(v);
      }
      return out;
    }
  }
  return Status::Internal("unknown YAML node type");
}

void Emit(YAML::Emitter& out, const json& v) {
  switch (v.type()) {
    case json::value_t::object:
      out << YAML::BeginMap;
      for (auto it = v.begin(); it != v.end(); ++it) {
        // A key that reads back as null ("~", "null") would no longer be a key: quote such keys.
        out << YAML::Key;
        if (ResolvePlainScalar(it.key()).is_string()) out << it.key();
        else out << YAML::DoubleQuoted << it.key();
        out << YAML::Value;
        Emit(out, it.value());
      }
      out << YAML::EndMap;
      break;
    case json::value_t::array:
      out << YAML::BeginSeq;
      for (const auto& item : v) Emit(out, item);
      out << YAML::EndSeq;
      break;
    case json::value_t::string: {
      const std::string& s = v.get_ref<const std::string&>();
      // Quote strings that would otherwise read back as another type.
      json resolved = ResolvePlainScalar(s);
      if (!resolved.is_string()) out << YAML::DoubleQuoted << s;
      else out << s;
      break;
    }
    case json::value_t::null:
      out << YAML::Null;
      break;
    case json::value_t::boolean:
      out << v.get<bool>();
      break;
    case json::value_t::number_integer:
      out << v.get<long long>();
      break;
    case json::value_t::number_unsigned:
      out << v.get<unsigned long long>();
      break;
    case json::value_t::number_float: {
      // yaml-cpp prints 17 digits (1e-5 as 1.0000000000000001e-05) and 1.0 as "1", which reads
      // back as an integer. nlohmann's shortest round-trip text keeps value and type.
      double d = v.get<double>();
      if (std::isnan(d)) out << ".nan";
      else if (std::isinf(d)) out << (d < 0 ? "-.inf" : ".inf");
      else out << v.dump();
      break;
    }
    default:
      out << v.dump();
  }
}

// A document's parse events reduced to what YamlToJson asks of the documents after the first: is
// it only a null (a trailing "---"), and where does it start.
class DocumentProbe : public YAML::EventHandler {
 public:
  bool only_null() const { return nodes_ == 1 && null_; }
  const YAML::Mark& start() const { return start_; }

  void OnDocumentStart(const YAML::Mark&) override {}
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark& mark, YAML::anchor_t) override { Node(mark, true); }
  void OnAlias(const YAML::Mark& mark, YAML::anchor_t) override { Node(mark, false); }
  void OnScalar(const YAML::Mark& mark, const std::string&, YAML::anchor_t, const std::string&) override {
    Node(mark, false);
  }
  void OnSequenceStart(const YAML::Mark& mark, const std::string&, YAML::anchor_t, YAML::EmitterStyle::value) override {
    Node(mark, false);
  }
  void OnSequenceEnd() override {}
  void OnMapStart(const YAML::Mark& mark, const std::string&, YAML::anchor_t, YAML::EmitterStyle::value) override {
    Node(mark, false);
  }
  void OnMapEnd() override {}

 private:
  void Node(const YAML::Mark& mark, bool null) {
    if (nodes_++ == 0) start_ = mark;
    null_ = null;
  }
  int nodes_ = 0;
  bool null_ = false;
  YAML::Mark start_ = YAML::Mark::null_mark();
};

}  // namespace

Result<json> YamlToJson(const std::string& text) {
  try {
    // Not YAML::LoadAll: yaml-cpp 0.7 never gets past a ',' outside a flow collection ("{...},",
    // a JSON spec with a trailing comma), and LoadAll collects the same empty document forever
    // until memory runs out (found by fuzz/job_spec_fuzz.cc). The first document is loaded; the
    // rest only walked, each of which must move on.
    const YAML::Node first = YAML::Load(text);
    std::istringstream in(text);
    YAML::Parser parser(in);
    YAML::Mark previous = YAML::Mark::null_mark();
    for (int i = 0;; ++i) {
      DocumentProbe doc;
      if (!parser.HandleNextDocument(doc)) break;
      if (i == 0) continue;
      // A second document would otherwise be dropped without a word; a trailing "---" is harmless.
      if (!doc.only_null()) {
        return Status::InvalidArgument(Where(doc.start()) +
                                       ": a second YAML document ('---'); put one document per file");
      }
      if (!previous.is_null() && doc.start().pos == previous.pos) {
        const size_t pos = static_cast<size_t>(doc.start().pos);
        const std::string what = pos < text.size() ? std::string("'") + text[pos] + "'" : "text";
        return Status::InvalidArgument(Where(doc.start()) + ": unexpected " + what + " after the document");
      }
      previous = doc.start();
    }
    return Convert(first, IsValidUtf8(text));
  } catch (const YAML::Exception& e) {
    return Status::InvalidArgument(Where(e.mark) + ": " + e.msg);
  }
}

Result<json> LoadYamlOrJsonFile(const std::string& path) {
  EFT_ASSIGN_OR_RETURN(std::string text, ReadFileToString(path));
  auto parsed = YamlToJson(text);
  if (!parsed.ok()) return parsed.status().WithContext(path);
  return parsed;
}

std::string JsonToYaml(const json& value) {
  YAML::Emitter out;
  out.SetIndent(2);
  Emit(out, value);
  return std::string(out.c_str()) + "\n";
}

}  // namespace eft
