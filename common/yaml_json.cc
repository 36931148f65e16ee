#include "common/yaml_json.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <regex>
#include <sstream>

#include <yaml-cpp/yaml.h>

namespace eft {
namespace {

using nlohmann::json;

// YAML 1.2 core schema scalar resolution for plain (unquoted) scalars.
json ResolvePlainScalar(const std::string& s) {
  static const std::regex kNull("^(~|null|Null|NULL|)$");
  static const std::regex kTrue("^(true|True|TRUE)$");
  static const std::regex kFalse("^(false|False|FALSE)$");
  static const std::regex kInt("^[-+]?[0-9]+$");
  static const std::regex kHex("^0x[0-9a-fA-F]+$");
  static const std::regex kFloat("^[-+]?(\\.[0-9]+|[0-9]+(\\.[0-9]*)?)([eE][-+]?[0-9]+)?$");
  static const std::regex kInf("^[-+]?\\.(inf|Inf|INF)$");
  static const std::regex kNan("^\\.(nan|NaN|NAN)$");
  if (std::regex_match(s, kNull)) return nullptr;
  if (std::regex_match(s, kTrue)) return true;
  if (std::regex_match(s, kFalse)) return false;
  if (std::regex_match(s, kInt)) {
    errno = 0;
    long long v = std::strtoll(s.c_str(), nullptr, 10);
    if (errno == 0) return v;
    return std::strtod(s.c_str(), nullptr);  // out of int64 range: keep it as a number
  }
  if (std::regex_match(s, kHex)) return static_cast<long long>(std::strtoll(s.c_str(), nullptr, 16));
  if (std::regex_match(s, kFloat)) return std::strtod(s.c_str(), nullptr);
  if (std::regex_match(s, kInf)) return s[0] == '-' ? -INFINITY : INFINITY;
  if (std::regex_match(s, kNan)) return NAN;
  return s;
}

Result<json> Convert(const YAML::Node& node) {
  switch (node.Type()) {
    case YAML::NodeType::Undefined:
    case YAML::NodeType::Null:
      return json(nullptr);
    case YAML::NodeType::Scalar:
      // yaml-cpp tags plain scalars "?" and quoted ones "!".
      if (node.Tag() == "!" || node.Tag() == "tag:yaml.org,2002:str") return json(node.Scalar());
      return ResolvePlainScalar(node.Scalar());
    case YAML::NodeType::Sequence: {
      json out = json::array();
      for (const auto& item : node) {
        EFT_ASSIGN_OR_RETURN(json v, Convert(item));
        out.push_back(std::move(v));
      }
      return out;
    }
    case YAML::NodeType::Map: {
      json out = json::object();
      for (const auto& kv : node) {
        if (!kv.first.IsScalar()) {
          return Status::InvalidArgument("line " + std::to_string(kv.first.Mark().line + 1) +
                                         ": mapping keys must be strings");
        }
        const std::string& key = kv.first.Scalar();
        if (out.contains(key)) {
          return Status::InvalidArgument("line " + std::to_string(kv.first.Mark().line + 1) +
                                         ": duplicate key '" + key + "'");
        }
        EFT_ASSIGN_OR_RETURN(json v, Convert(kv.second));
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
        out << YAML::Key << it.key() << YAML::Value;
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
    case json::value_t::number_float:
      out << v.get<double>();
      break;
    default:
      out << v.dump();
  }
}

}  // namespace

Result<json> YamlToJson(const std::string& text) {
  try {
    YAML::Node root = YAML::Load(text);
    return Convert(root);
  } catch (const YAML::Exception& e) {
    return Status::InvalidArgument("YAML line " + std::to_string(e.mark.line + 1) + " column " +
                                   std::to_string(e.mark.column + 1) + ": " + e.msg);
  }
}

Result<json> LoadYamlOrJsonFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::NotFound("cannot open " + path + ": " + std::strerror(errno));
  std::stringstream buf;
  buf << in.rdbuf();
  auto parsed = YamlToJson(buf.str());
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
