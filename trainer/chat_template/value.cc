#include "trainer/chat_template/value.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace eft::trainer::jinja {

const Value* Dict::Find(const std::string& key) const {
  for (const auto& [k, v] : items)
    if (k == key) return &v;
  return nullptr;
}

void Dict::Set(const std::string& key, Value value) {
  for (auto& [k, v] : items) {
    if (k == key) {
      v = std::move(value);
      return;
    }
  }
  items.emplace_back(key, std::move(value));
}

const Value* CallArgs::Get(size_t index, const std::string& name) const {
  for (const auto& [k, v] : keyword)
    if (k == name) return &v;
  if (index < positional.size()) return &positional[index];
  return nullptr;
}

Value Value::FromJson(const nlohmann::ordered_json& j) {
  switch (j.type()) {
    case nlohmann::ordered_json::value_t::null:
      return None();
    case nlohmann::ordered_json::value_t::boolean:
      return Bool(j.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer:
    case nlohmann::ordered_json::value_t::number_unsigned:
      return Int(j.get<int64_t>());
    case nlohmann::ordered_json::value_t::number_float:
      return Float(j.get<double>());
    case nlohmann::ordered_json::value_t::string:
      return String(j.get<std::string>());
    case nlohmann::ordered_json::value_t::array: {
      List items;
      items.reserve(j.size());
      for (const auto& e : j) items.push_back(FromJson(e));
      return MakeList(std::move(items));
    }
    case nlohmann::ordered_json::value_t::object: {
      Dict d;
      d.items.reserve(j.size());
      for (auto it = j.begin(); it != j.end(); ++it) d.items.emplace_back(it.key(), FromJson(it.value()));
      return MakeDict(std::move(d));
    }
    default:
      return None();
  }
}

bool Value::Truthy() const {
  switch (type_) {
    case Type::kUndefined:
    case Type::kNone:
      return false;
    case Type::kBool:
    case Type::kInt:
      return int_ != 0;
    case Type::kFloat:
      return float_ != 0;
    case Type::kString:
      return !str_.empty();
    case Type::kList:
      return !list_->empty();
    case Type::kDict:
      return is_namespace() || !dict_->items.empty();
    case Type::kFunction:
      return true;
  }
  return false;
}

std::string FloatRepr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  char buf[64];
  int precision = 1;
  for (; precision <= 17; ++precision) {
    std::snprintf(buf, sizeof(buf), "%.*e", precision - 1, d);
    if (std::strtod(buf, nullptr) == d) break;
  }
  // buf is d.ddde±XX with the shortest digits; lay it out as Python's repr does.
  std::string s(buf);
  size_t e = s.find('e');
  std::string mantissa = s.substr(0, e);
  int exponent = std::atoi(s.c_str() + e + 1);
  bool negative = mantissa[0] == '-';
  if (negative) mantissa.erase(0, 1);
  std::string digits;
  for (char c : mantissa)
    if (c != '.') digits += c;
  while (digits.size() > 1 && digits.back() == '0') digits.pop_back();
  std::string out;
  if (exponent >= -4 && exponent < 16) {
    if (exponent < 0) {
      out = "0." + std::string(static_cast<size_t>(-exponent - 1), '0') + digits;
    } else if (static_cast<size_t>(exponent) + 1 >= digits.size()) {
      out = digits + std::string(static_cast<size_t>(exponent) + 1 - digits.size(), '0') + ".0";
    } else {
      out = digits.substr(0, static_cast<size_t>(exponent) + 1) + "." + digits.substr(static_cast<size_t>(exponent) + 1);
    }
  } else {
    out = digits.substr(0, 1);
    if (digits.size() > 1) out += "." + digits.substr(1);
    char exp[16];
    std::snprintf(exp, sizeof(exp), "e%c%02d", exponent < 0 ? '-' : '+', std::abs(exponent));
    out += exp;
  }
  return negative ? "-" + out : out;
}

namespace {

void AppendStringRepr(const std::string& s, std::string* out) {
  bool has_single = s.find('\'') != std::string::npos, has_double = s.find('"') != std::string::npos;
  char quote = (has_single && !has_double) ? '"' : '\'';
  *out += quote;
  for (unsigned char c : s) {
    switch (c) {
      case '\\': *out += "\\\\"; break;
      case '\n': *out += "\\n"; break;
      case '\r': *out += "\\r"; break;
      case '\t': *out += "\\t"; break;
      default:
        if (c == static_cast<unsigned char>(quote)) {
          *out += '\\';
          *out += static_cast<char>(c);
        } else if (c < 0x20 || c == 0x7f) {
          char buf[8];
          std::snprintf(buf, sizeof(buf), "\\x%02x", c);
          *out += buf;
        } else {
          *out += static_cast<char>(c);  // UTF-8 passes through (printable in Python's repr)
        }
    }
  }
  *out += quote;
}

void JsonString(const std::string& s, std::string* out) {
  *out += '"';
  for (unsigned char c : s) {
    switch (c) {
      case '"': *out += "\\\""; break;
      case '\\': *out += "\\\\"; break;
      case '\n': *out += "\\n"; break;
      case '\r': *out += "\\r"; break;
      case '\t': *out += "\\t"; break;
      case '\b': *out += "\\b"; break;
      case '\f': *out += "\\f"; break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof(buf), "\\u%04x", c);
          *out += buf;
        } else {
          *out += static_cast<char>(c);
        }
    }
  }
  *out += '"';
}

Status JsonDump(const Value& v, int indent, int depth, const std::string& item_sep, const std::string& key_sep,
                bool sort_keys, std::string* out) {
  // tojson(indent=10**9) must not try: the indentation is checked before it is added.
  auto newline = [&](int d) {
    if (indent < 0) return true;
    const uint64_t pad = static_cast<uint64_t>(indent) * static_cast<uint64_t>(d);
    if (out->size() + 1 + pad > kMaxText) return false;
    *out += '\n';
    out->append(static_cast<size_t>(pad), ' ');
    return true;
  };
  if (out->size() > kMaxText) return TextTooLong();
  switch (v.type()) {
    case Value::Type::kNone:
      *out += "null";
      return Status::Ok();
    case Value::Type::kBool:
      *out += v.boolean() ? "true" : "false";
      return Status::Ok();
    case Value::Type::kInt:
      *out += std::to_string(v.integer());
      return Status::Ok();
    case Value::Type::kFloat: {
      double d = v.number();
      *out += std::isnan(d) ? "NaN" : std::isinf(d) ? (d > 0 ? "Infinity" : "-Infinity") : FloatRepr(d);
      return Status::Ok();
    }
    case Value::Type::kString:
      JsonString(v.str(), out);
      return Status::Ok();
    case Value::Type::kList: {
      if (v.list().empty()) {
        *out += "[]";
        return Status::Ok();
      }
      *out += '[';
      for (size_t i = 0; i < v.list().size(); ++i) {
        if (i) *out += item_sep;
        if (!newline(depth + 1)) return TextTooLong();
        EFT_RETURN_IF_ERROR(JsonDump(v.list()[i], indent, depth + 1, item_sep, key_sep, sort_keys, out));
      }
      if (!newline(depth)) return TextTooLong();
      *out += ']';
      return Status::Ok();
    }
    case Value::Type::kDict: {
      if (v.dict().items.empty()) {
        *out += "{}";
        return Status::Ok();
      }
      std::vector<const std::pair<std::string, Value>*> items;
      for (const auto& kv : v.dict().items) items.push_back(&kv);
      if (sort_keys)
        std::stable_sort(items.begin(), items.end(), [](auto* a, auto* b) { return a->first < b->first; });
      *out += '{';
      for (size_t i = 0; i < items.size(); ++i) {
        if (i) *out += item_sep;
        if (!newline(depth + 1)) return TextTooLong();
        JsonString(items[i]->first, out);
        *out += key_sep;
        EFT_RETURN_IF_ERROR(JsonDump(items[i]->second, indent, depth + 1, item_sep, key_sep, sort_keys, out));
      }
      if (!newline(depth)) return TextTooLong();
      *out += '}';
      return Status::Ok();
    }
    default:
      return Status::InvalidArgument("Object of type " + v.TypeName() + " is not JSON serializable");
  }
}

}  // namespace

std::string Value::TypeName() const {
  switch (type_) {
    case Type::kUndefined: return "Undefined";
    case Type::kNone: return "NoneType";
    case Type::kBool: return "bool";
    case Type::kInt: return "int";
    case Type::kFloat: return "float";
    case Type::kString: return "str";
    case Type::kList: return tuple_ ? "tuple" : "list";
    case Type::kDict: return namespace_ ? "Namespace" : "dict";
    case Type::kFunction: return "function";
  }
  return "object";
}

namespace {

// Appends repr(v); false as soon as *out passes `limit` (then *out is cut anywhere past it), so a
// huge list costs no more than `limit` bytes of work.
bool AppendRepr(const Value& v, size_t limit, std::string* out) {
  switch (v.type()) {
    case Value::Type::kUndefined: break;
    case Value::Type::kNone: *out += "None"; break;
    case Value::Type::kBool: *out += v.boolean() ? "True" : "False"; break;
    case Value::Type::kInt: *out += std::to_string(v.integer()); break;
    case Value::Type::kFloat: *out += FloatRepr(v.number()); break;
    case Value::Type::kString: AppendStringRepr(v.str(), out); break;
    case Value::Type::kList: {
      const List& items = v.list();
      *out += v.is_tuple() ? '(' : '[';
      for (size_t i = 0; i < items.size(); ++i) {
        if (i) *out += ", ";
        if (!AppendRepr(items[i], limit, out)) return false;
      }
      if (v.is_tuple() && items.size() == 1) *out += ",";
      *out += v.is_tuple() ? ')' : ']';
      break;
    }
    case Value::Type::kDict: {
      if (v.is_namespace()) {
        *out += "<Namespace>";
        break;
      }
      *out += "{";
      bool first = true;
      for (const auto& [key, item] : v.dict().items) {
        if (!first) *out += ", ";
        first = false;
        AppendStringRepr(key, out);
        *out += ": ";
        if (!AppendRepr(item, limit, out)) return false;
      }
      *out += "}";
      break;
    }
    case Value::Type::kFunction: *out += "<function " + v.function_name() + ">"; break;
  }
  return out->size() <= limit;
}

}  // namespace

Status TextTooLong() { return Status::InvalidArgument("text is too long (more than " + std::to_string(kMaxText >> 20) + " MiB)"); }

Result<std::string> Value::ToString() const {
  if (type_ == Type::kUndefined) return std::string();
  if (type_ == Type::kString) {
    if (str_.size() > kMaxText) return TextTooLong();
    return str_;
  }
  std::string out;
  if (!AppendRepr(*this, kMaxText, &out)) return TextTooLong();
  return out;
}

std::string Value::Repr(size_t max_bytes) const {
  std::string out;
  if (!AppendRepr(*this, max_bytes, &out) || out.size() > max_bytes) {
    // Cut at a UTF-8 character boundary: the message stays valid text.
    size_t cut = std::min(out.size(), max_bytes);
    while (cut > 0 && (static_cast<unsigned char>(out[cut]) & 0xC0) == 0x80) --cut;
    out.resize(cut);
    out += "...";
  }
  return out;
}

Result<std::string> Value::ToJson(int indent, const std::string& item_sep, const std::string& key_sep,
                                  bool sort_keys) const {
  std::string out;
  EFT_RETURN_IF_ERROR(JsonDump(*this, indent, 0, item_sep, key_sep, sort_keys, &out));
  return out;
}

bool Equal(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.number() == b.number();
    return a.integer() == b.integer();
  }
  if (a.type() != b.type()) return false;
  switch (a.type()) {
    case Value::Type::kUndefined:
    case Value::Type::kNone:
      return true;
    case Value::Type::kString:
      return a.str() == b.str();
    case Value::Type::kList: {
      if (a.list().size() != b.list().size()) return false;
      for (size_t i = 0; i < a.list().size(); ++i)
        if (!Equal(a.list()[i], b.list()[i])) return false;
      return true;
    }
    case Value::Type::kDict: {
      if (&a.dict() == &b.dict()) return true;
      if (a.dict().items.size() != b.dict().items.size()) return false;
      for (const auto& [k, v] : a.dict().items) {
        const Value* other = b.dict().Find(k);
        if (!other || !Equal(v, *other)) return false;
      }
      return true;
    }
    case Value::Type::kFunction:
      return &a.function() == &b.function();
    default:
      return false;
  }
}

Result<int> Compare(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.number() < b.number() ? -1 : a.number() > b.number() ? 1 : 0;
    return a.integer() < b.integer() ? -1 : a.integer() > b.integer() ? 1 : 0;
  }
  if (a.is_string() && b.is_string()) return a.str() < b.str() ? -1 : a.str() > b.str() ? 1 : 0;
  if (a.is_list() && b.is_list()) {
    for (size_t i = 0; i < a.list().size() && i < b.list().size(); ++i) {
      EFT_ASSIGN_OR_RETURN(int c, Compare(a.list()[i], b.list()[i]));
      if (c != 0) return c;
    }
    return a.list().size() < b.list().size() ? -1 : a.list().size() > b.list().size() ? 1 : 0;
  }
  return Status::InvalidArgument("'<' not supported between instances of '" + a.TypeName() + "' and '" +
                                 b.TypeName() + "'");
}

}  // namespace eft::trainer::jinja
