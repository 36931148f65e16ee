#include "trainer/chat_template/builtins.h"

#include <algorithm>
#include <cmath>
#include <ctime>
#include <set>

#include <utf8proc.h>

namespace eft::trainer::jinja {
namespace {

Status Err(const std::string& m) { return Status::InvalidArgument(m); }

// ---- strings as Python sees them: sequences of code points ----

std::vector<std::string> Chars(const std::string& s) {
  std::vector<std::string> out;
  for (size_t i = 0; i < s.size();) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    size_t len = c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
    len = std::min(len, s.size() - i);
    out.push_back(s.substr(i, len));
    i += len;
  }
  return out;
}

char32_t CodePoint(const std::string& ch) {
  utf8proc_int32_t cp = 0;
  utf8proc_iterate(reinterpret_cast<const utf8proc_uint8_t*>(ch.data()), static_cast<utf8proc_ssize_t>(ch.size()), &cp);
  return static_cast<char32_t>(cp < 0 ? 0xFFFD : cp);
}

std::string Encode(char32_t cp) {
  utf8proc_uint8_t buf[4];
  utf8proc_ssize_t n = utf8proc_encode_char(static_cast<utf8proc_int32_t>(cp), buf);
  return std::string(reinterpret_cast<char*>(buf), static_cast<size_t>(n));
}

// Python's str.isspace().
bool IsPySpace(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

std::string Strip(const std::string& s, const Value* chars, bool left, bool right) {
  std::vector<std::string> cs = Chars(s);
  std::set<std::string> set;
  bool whitespace = !chars || chars->is_none() || chars->is_undefined();
  if (!whitespace)
    for (const auto& c : Chars(chars->str())) set.insert(c);
  auto strip_it = [&](const std::string& c) { return whitespace ? IsPySpace(CodePoint(c)) : set.count(c) > 0; };
  size_t b = 0, e = cs.size();
  if (left)
    while (b < e && strip_it(cs[b])) ++b;
  if (right)
    while (e > b && strip_it(cs[e - 1])) --e;
  std::string out;
  for (size_t i = b; i < e; ++i) out += cs[i];
  return out;
}

std::string MapCase(const std::string& s, int mode) {  // 0 lower, 1 upper
  std::string out;
  for (const auto& c : Chars(s)) {
    auto cp = static_cast<utf8proc_int32_t>(CodePoint(c));
    out += Encode(static_cast<char32_t>(mode ? utf8proc_toupper(cp) : utf8proc_tolower(cp)));
  }
  return out;
}

bool IsCased(char32_t cp) {
  auto c = static_cast<utf8proc_int32_t>(cp);
  return utf8proc_tolower(c) != c || utf8proc_toupper(c) != c || utf8proc_category(c) == UTF8PROC_CATEGORY_LT;
}

std::string Title(const std::string& s) {  // Python's str.title(): word starts after any uncased char
  std::string out;
  bool previous_cased = false;
  for (const auto& c : Chars(s)) {
    auto cp = static_cast<utf8proc_int32_t>(CodePoint(c));
    out += Encode(static_cast<char32_t>(previous_cased ? utf8proc_tolower(cp) : utf8proc_totitle(cp)));
    previous_cased = IsCased(static_cast<char32_t>(cp));
  }
  return out;
}

std::string Capitalize(const std::string& s) {
  std::vector<std::string> cs = Chars(s);
  std::string out;
  for (size_t i = 0; i < cs.size(); ++i) {
    auto cp = static_cast<utf8proc_int32_t>(CodePoint(cs[i]));
    out += Encode(static_cast<char32_t>(i == 0 ? utf8proc_totitle(cp) : utf8proc_tolower(cp)));
  }
  return out;
}

std::vector<std::string> Split(const std::string& s, const Value* sep, int64_t maxsplit) {
  std::vector<std::string> out;
  if (!sep || sep->is_none()) {
    std::vector<std::string> cs = Chars(s);
    size_t i = 0;
    while (i < cs.size()) {
      while (i < cs.size() && IsPySpace(CodePoint(cs[i]))) ++i;
      if (i >= cs.size()) break;
      if (maxsplit >= 0 && static_cast<int64_t>(out.size()) == maxsplit) {
        std::string rest;
        for (size_t k = i; k < cs.size(); ++k) rest += cs[k];
        while (!rest.empty() && IsPySpace(static_cast<unsigned char>(rest.back()))) rest.pop_back();
        out.push_back(rest);
        break;
      }
      std::string word;
      while (i < cs.size() && !IsPySpace(CodePoint(cs[i]))) word += cs[i++];
      out.push_back(word);
    }
    return out;
  }
  const std::string& d = sep->str();
  size_t at = 0;
  while (true) {
    size_t hit = d.empty() ? std::string::npos : s.find(d, at);
    if (hit == std::string::npos || (maxsplit >= 0 && static_cast<int64_t>(out.size()) == maxsplit)) {
      out.push_back(s.substr(at));
      return out;
    }
    out.push_back(s.substr(at, hit - at));
    at = hit + d.size();
  }
}

std::string ReplaceAll(const std::string& s, const std::string& from, const std::string& to, int64_t count) {
  if (from.empty()) {  // Python inserts `to` between characters
    std::string out;
    int64_t n = 0;
    for (const auto& c : Chars(s)) {
      if (count < 0 || n++ < count) out += to;
      out += c;
    }
    if (count < 0 || n < count) out += to;
    return out;
  }
  std::string out;
  size_t at = 0;
  int64_t n = 0;
  for (size_t hit; (count < 0 || n < count) && (hit = s.find(from, at)) != std::string::npos; ++n) {
    out.append(s, at, hit - at);
    out += to;
    at = hit + from.size();
  }
  out.append(s, at, std::string::npos);
  return out;
}

std::string HtmlEscape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&#34;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

int64_t IntArg(const Value* v, int64_t fallback) {
  if (!v || v->is_none() || v->is_undefined()) return fallback;
  return v->is_float() ? static_cast<int64_t>(v->number()) : v->integer();
}

Value Bound(std::string name, std::function<Result<Value>(CallArgs&)> f) {
  return Value::MakeFunction(std::move(f), std::move(name));
}

Result<Value> StringMethod(const std::string& s, const std::string& name) {
  if (name == "strip" || name == "lstrip" || name == "rstrip")
    return Bound(name, [s, name](CallArgs& a) -> Result<Value> {
      return Value::String(Strip(s, a.Get(0, "chars"), name != "rstrip", name != "lstrip"));
    });
  if (name == "split" || name == "rsplit")
    return Bound(name, [s, name](CallArgs& a) -> Result<Value> {
      int64_t maxsplit = IntArg(a.Get(1, "maxsplit"), -1);
      if (name == "rsplit" && maxsplit >= 0) return Err("str.rsplit with maxsplit is not supported");
      List out;
      for (auto& part : Split(s, a.Get(0, "sep"), maxsplit)) out.push_back(Value::String(part));
      return Value::MakeList(std::move(out));
    });
  if (name == "splitlines")
    return Bound(name, [s](CallArgs&) -> Result<Value> {
      List out;
      size_t at = 0;
      while (at < s.size()) {
        size_t nl = s.find_first_of("\r\n", at);
        if (nl == std::string::npos) {
          out.push_back(Value::String(s.substr(at)));
          break;
        }
        out.push_back(Value::String(s.substr(at, nl - at)));
        at = nl + ((s[nl] == '\r' && nl + 1 < s.size() && s[nl + 1] == '\n') ? 2 : 1);
      }
      return Value::MakeList(std::move(out));
    });
  if (name == "startswith" || name == "endswith")
    return Bound(name, [s, name](CallArgs& a) -> Result<Value> {
      const Value* p = a.Get(0, "prefix");
      if (!p) return Err(name + "() takes at least 1 argument");
      List options = p->is_list() ? p->list() : List{*p};
      for (const Value& o : options) {
        if (!o.is_string()) return Err(name + " first arg must be str or a tuple of str");
        const std::string& x = o.str();
        bool hit = name == "startswith" ? s.compare(0, x.size(), x) == 0
                                        : s.size() >= x.size() && s.compare(s.size() - x.size(), x.size(), x) == 0;
        if (hit) return Value::Bool(true);
      }
      return Value::Bool(false);
    });
  if (name == "upper" || name == "lower")
    return Bound(name, [s, name](CallArgs&) -> Result<Value> { return Value::String(MapCase(s, name == "upper")); });
  if (name == "title") return Bound(name, [s](CallArgs&) -> Result<Value> { return Value::String(Title(s)); });
  if (name == "capitalize")
    return Bound(name, [s](CallArgs&) -> Result<Value> { return Value::String(Capitalize(s)); });
  if (name == "replace")
    return Bound(name, [s](CallArgs& a) -> Result<Value> {
      const Value *from = a.Get(0, "old"), *to = a.Get(1, "new");
      if (!from || !to || !from->is_string() || !to->is_string()) return Err("replace() takes two strings");
      return Value::String(ReplaceAll(s, from->str(), to->str(), IntArg(a.Get(2, "count"), -1)));
    });
  if (name == "find" || name == "rfind" || name == "count" || name == "index")
    return Bound(name, [s, name](CallArgs& a) -> Result<Value> {
      const Value* sub = a.Get(0, "sub");
      if (!sub || !sub->is_string()) return Err(name + "() takes a string");
      const std::string& x = sub->str();
      if (name == "count") {
        if (x.empty()) return Value::Int(static_cast<int64_t>(Chars(s).size()) + 1);
        int64_t n = 0;
        for (size_t at = 0; (at = s.find(x, at)) != std::string::npos; at += x.size()) ++n;
        return Value::Int(n);
      }
      size_t hit = name == "rfind" ? s.rfind(x) : s.find(x);
      if (hit == std::string::npos) {
        if (name == "index") return Err("substring not found");
        return Value::Int(-1);
      }
      return Value::Int(static_cast<int64_t>(Chars(s.substr(0, hit)).size()));
    });
  if (name == "join")
    return Bound(name, [s](CallArgs& a) -> Result<Value> {
      const Value* items = a.Get(0, "iterable");
      if (!items) return Err("join() takes an iterable");
      EFT_ASSIGN_OR_RETURN(List list, Iterate(*items));
      std::string out;
      for (size_t i = 0; i < list.size(); ++i) {
        if (!list[i].is_string()) return Err("sequence item " + std::to_string(i) + ": expected str instance");
        out += (i ? s : "") + list[i].str();
      }
      return Value::String(out);
    });
  if (name == "isdigit" || name == "isalpha" || name == "isspace" || name == "isalnum" || name == "islower" ||
      name == "isupper")
    return Bound(name, [s, name](CallArgs&) -> Result<Value> {
      std::vector<std::string> cs = Chars(s);
      if (cs.empty()) return Value::Bool(false);
      bool cased = false;
      for (const auto& c : cs) {
        auto cp = static_cast<utf8proc_int32_t>(CodePoint(c));
        auto cat = utf8proc_category(cp);
        bool alpha = cat >= UTF8PROC_CATEGORY_LU && cat <= UTF8PROC_CATEGORY_LO;
        bool digit = cat == UTF8PROC_CATEGORY_ND;
        if (name == "isdigit" && !digit) return Value::Bool(false);
        if (name == "isalpha" && !alpha) return Value::Bool(false);
        if (name == "isalnum" && !alpha && !digit) return Value::Bool(false);
        if (name == "isspace" && !IsPySpace(static_cast<char32_t>(cp))) return Value::Bool(false);
        if (name == "islower" && utf8proc_toupper(cp) != cp) cased = true;
        if (name == "islower" && utf8proc_tolower(cp) != cp) return Value::Bool(false);
        if (name == "isupper" && utf8proc_tolower(cp) != cp) cased = true;
        if (name == "isupper" && utf8proc_toupper(cp) != cp) return Value::Bool(false);
      }
      return Value::Bool(name == "islower" || name == "isupper" ? cased : true);
    });
  return Value::Undefined("'str object' has no attribute '" + name + "'");
}

Result<Value> DictMethod(const Value& d, const std::string& name) {
  if (name == "items")
    return Bound(name, [d](CallArgs&) -> Result<Value> {
      List out;
      for (const auto& [k, v] : d.dict().items) out.push_back(Value::MakeList({Value::String(k), v}, true));
      return Value::MakeList(std::move(out));
    });
  if (name == "keys")
    return Bound(name, [d](CallArgs&) -> Result<Value> {
      List out;
      for (const auto& kv : d.dict().items) out.push_back(Value::String(kv.first));
      return Value::MakeList(std::move(out));
    });
  if (name == "values")
    return Bound(name, [d](CallArgs&) -> Result<Value> {
      List out;
      for (const auto& kv : d.dict().items) out.push_back(kv.second);
      return Value::MakeList(std::move(out));
    });
  if (name == "get")
    return Bound(name, [d](CallArgs& a) -> Result<Value> {
      const Value* key = a.Get(0, "key");
      if (!key) return Err("get expected at least 1 argument");
      if (key->is_string())
        if (const Value* v = d.dict().Find(key->str())) return *v;
      const Value* fallback = a.Get(1, "default");
      return fallback ? *fallback : Value::None();
    });
  return Value::Undefined();
}

bool IsMutatingMethod(const std::string& name) {
  static const std::set<std::string> kNames = {"append", "extend", "insert", "pop", "remove", "clear", "sort",
                                               "reverse", "update", "setdefault", "popitem", "add", "discard"};
  return kNames.count(name) > 0;
}

Result<Value> Attribute(const Value& obj, const std::string& name, bool items_first) {
  if (obj.is_undefined()) {
    std::string what = obj.str().empty() ? "value" : obj.str();
    return Err(what + " is undefined (reading its attribute '" + name + "')");
  }
  if (obj.is_dict()) {
    if (items_first || obj.is_namespace())
      if (const Value* v = obj.dict().Find(name)) return *v;
    if (!obj.is_namespace()) {
      if (IsMutatingMethod(name))
        return Bound(name, [name](CallArgs&) -> Result<Value> {
          return Err("access to attribute '" + name + "' of 'dict' object is unsafe.");
        });
      EFT_ASSIGN_OR_RETURN(Value m, DictMethod(obj, name));
      if (!m.is_undefined()) return m;
    }
    if (const Value* v = obj.dict().Find(name)) return *v;
    return Value::Undefined("'dict object' has no attribute '" + name + "'");
  }
  if (obj.is_string()) return StringMethod(obj.str(), name);
  if (obj.is_list()) {
    if (IsMutatingMethod(name))
      return Bound(name, [name, t = obj.TypeName()](CallArgs&) -> Result<Value> {
        return Err("access to attribute '" + name + "' of '" + t + "' object is unsafe.");
      });
    if (name == "count" || name == "index")
      return Bound(name, [obj, name](CallArgs& a) -> Result<Value> {
        const Value* x = a.Get(0, "value");
        if (!x) return Err(name + "() takes exactly one argument");
        int64_t n = 0;
        for (size_t i = 0; i < obj.list().size(); ++i) {
          if (!Equal(obj.list()[i], *x)) continue;
          if (name == "index") return Value::Int(static_cast<int64_t>(i));
          ++n;
        }
        if (name == "index") return Err(x->Repr() + " is not in list");
        return Value::Int(n);
      });
  }
  return Value::Undefined("'" + obj.TypeName() + " object' has no attribute '" + name + "'");
}

Result<double> Number(const Value& v, const char* what) {
  if (!v.is_number()) return Err(std::string(what) + ": expected a number, got " + v.TypeName());
  return v.number();
}

}  // namespace

Result<Value> GetAttribute(const Value& obj, const std::string& name) { return Attribute(obj, name, false); }

Result<Value> GetItem(const Value& obj, const Value& key) {
  if (obj.is_undefined()) {
    std::string what = obj.str().empty() ? "value" : obj.str();
    return Err(what + " is undefined (reading its item " + key.Repr() + ")");
  }
  if (obj.is_list()) {
    if (!key.is_int() && !key.is_bool()) return Value::Undefined("list index " + key.Repr() + " is not an integer");
    int64_t n = static_cast<int64_t>(obj.list().size()), i = key.integer();
    if (i < 0) i += n;
    if (i < 0 || i >= n) return Value::Undefined("list index " + key.Repr() + " out of range");
    return obj.list()[static_cast<size_t>(i)];
  }
  if (obj.is_string() && (key.is_int() || key.is_bool())) {
    std::vector<std::string> cs = Chars(obj.str());
    int64_t n = static_cast<int64_t>(cs.size()), i = key.integer();
    if (i < 0) i += n;
    if (i < 0 || i >= n) return Value::Undefined("string index out of range");
    return Value::String(cs[static_cast<size_t>(i)]);
  }
  if (obj.is_dict()) {
    if (key.is_string()) {
      if (const Value* v = obj.dict().Find(key.str())) return *v;
      return Attribute(obj, key.str(), true);
    }
    return Value::Undefined("'dict object' has no attribute " + key.Repr());
  }
  if (key.is_string()) return Attribute(obj, key.str(), true);
  return Value::Undefined("'" + obj.TypeName() + " object' has no item " + key.Repr());
}

Result<Value> Slice(const Value& obj, const Value& start, const Value& stop, const Value& step_v) {
  int64_t step = step_v.is_undefined() || step_v.is_none() ? 1 : step_v.integer();
  if (step == 0) return Err("slice step cannot be zero");
  std::vector<Value> items;
  std::vector<std::string> chars;
  bool is_string = obj.is_string();
  if (is_string) {
    chars = Chars(obj.str());
  } else if (obj.is_list()) {
    items = obj.list();
  } else {
    return Err("'" + obj.TypeName() + "' object is not subscriptable");
  }
  int64_t n = static_cast<int64_t>(is_string ? chars.size() : items.size());
  auto clamp = [&](const Value& v, int64_t fallback) {
    if (v.is_undefined() || v.is_none()) return fallback;
    int64_t i = v.integer();
    if (i < 0) i += n;
    if (step > 0) return std::clamp<int64_t>(i, 0, n);
    return std::clamp<int64_t>(i, -1, n - 1);
  };
  int64_t b = clamp(start, step > 0 ? 0 : n - 1), e = clamp(stop, step > 0 ? n : -1);
  List out;
  std::string s;
  for (int64_t i = b; step > 0 ? i < e : i > e; i += step) {
    if (is_string) {
      s += chars[static_cast<size_t>(i)];
    } else {
      out.push_back(items[static_cast<size_t>(i)]);
    }
  }
  if (is_string) return Value::String(s);
  return Value::MakeList(std::move(out), obj.is_tuple());
}

Result<bool> Contains(const Value& container, const Value& item) {
  if (container.is_string()) {
    if (!item.is_string()) return Err("'in <string>' requires string as left operand, not " + item.TypeName());
    return container.str().find(item.str()) != std::string::npos;
  }
  if (container.is_list()) {
    for (const Value& v : container.list())
      if (Equal(v, item)) return true;
    return false;
  }
  if (container.is_dict()) return item.is_string() && container.dict().Find(item.str()) != nullptr;
  if (container.is_undefined()) return false;
  return Err("argument of type '" + container.TypeName() + "' is not iterable");
}

Result<int64_t> Length(const Value& v) {
  if (v.is_string()) return static_cast<int64_t>(Chars(v.str()).size());
  if (v.is_list()) return static_cast<int64_t>(v.list().size());
  if (v.is_dict()) return static_cast<int64_t>(v.dict().items.size());
  if (v.is_undefined()) return 0;
  return Err("object of type '" + v.TypeName() + "' has no len()");
}

Result<List> Iterate(const Value& v) {
  if (v.is_list()) return v.list();
  if (v.is_undefined()) return List{};
  if (v.is_dict()) {
    List keys;
    for (const auto& kv : v.dict().items) keys.push_back(Value::String(kv.first));
    return keys;
  }
  if (v.is_string()) {
    List out;
    for (auto& c : Chars(v.str())) out.push_back(Value::String(c));
    return out;
  }
  return Err("'" + v.TypeName() + "' object is not iterable");
}

bool IsKnownTest(const std::string& n) {
  static const std::set<std::string> kTests = {
      "defined", "undefined", "none", "string", "number", "integer", "float", "mapping", "iterable", "sequence",
      "boolean", "true", "false", "eq", "equalto", "==", "ne", "!=", "lt", "<", "le", "<=", "gt", ">", "ge", ">=",
      "lessthan", "greaterthan", "in", "odd", "even", "divisibleby", "callable", "sameas", "lower", "upper",
      "filter", "test"};
  return kTests.count(n) > 0;
}

Result<bool> ApplyTest(const std::string& n, const Value& v, CallArgs& a) {
  const Value* arg = a.Get(0, "value");
  auto need = [&]() -> Status { return arg ? Status::Ok() : Err("test '" + n + "' needs an argument"); };
  if (n == "defined") return !v.is_undefined();
  if (n == "undefined") return v.is_undefined();
  if (n == "none") return v.is_none();
  if (n == "string") return v.is_string();
  if (n == "number") return v.is_int() || v.is_float();
  if (n == "integer") return v.is_int();
  if (n == "float") return v.is_float();
  if (n == "boolean") return v.is_bool();
  if (n == "true") return v.is_bool() && v.boolean();
  if (n == "false") return v.is_bool() && !v.boolean();
  if (n == "mapping") return v.is_dict();
  if (n == "iterable") return v.is_list() || v.is_dict() || v.is_string();
  if (n == "sequence") return v.is_list() || v.is_dict() || v.is_string();
  if (n == "callable") return v.is_function();
  if (n == "lower") return v.is_string() && MapCase(v.str(), 0) == v.str();
  if (n == "upper") return v.is_string() && MapCase(v.str(), 1) == v.str();
  if (n == "odd" || n == "even") {
    if (!v.is_int()) return Err("test '" + n + "' needs an integer");
    return (((v.integer() % 2) + 2) % 2 == 1) == (n == "odd");
  }
  EFT_RETURN_IF_ERROR(need());
  if (n == "eq" || n == "equalto" || n == "==") return Equal(v, *arg);
  if (n == "ne" || n == "!=") return !Equal(v, *arg);
  if (n == "sameas") return Equal(v, *arg) && v.type() == arg->type();
  if (n == "in") return Contains(*arg, v);
  if (n == "divisibleby") {
    if (!v.is_int() || !arg->is_int() || arg->integer() == 0) return Err("divisibleby needs non-zero integers");
    return v.integer() % arg->integer() == 0;
  }
  EFT_ASSIGN_OR_RETURN(int c, Compare(v, *arg));
  if (n == "lt" || n == "<" || n == "lessthan") return c < 0;
  if (n == "le" || n == "<=") return c <= 0;
  if (n == "gt" || n == ">" || n == "greaterthan") return c > 0;
  if (n == "ge" || n == ">=") return c >= 0;
  return Err("no test named '" + n + "'");
}

bool IsKnownFilter(const std::string& n) {
  static const std::set<std::string> kFilters = {
      "tojson", "trim", "length", "count", "upper", "lower", "title", "capitalize", "replace", "join", "first",
      "last", "default", "d", "list", "string", "int", "float", "abs", "round", "items", "dictsort", "map",
      "select", "reject", "selectattr", "rejectattr", "unique", "indent", "safe", "e", "escape", "sum", "min",
      "max", "sort", "reverse", "wordcount", "center", "batch", "attr", "bool", "striptags", "truncate"};
  return kFilters.count(n) > 0;
}

Result<Value> ApplyFilter(const std::string& n, const Value& v, CallArgs& a, const Callbacks& cb) {
  auto str_in = [&]() -> Result<std::string> {
    if (v.is_undefined()) return std::string();
    return v.ToString();
  };
  if (n == "tojson") {
    const Value* indent = a.Get(0, "indent");
    const Value* separators = a.Get(1, "separators");
    const Value* sort_keys = a.Get(2, "sort_keys");
    const Value* ensure_ascii = a.Get(99, "ensure_ascii");
    if (ensure_ascii && ensure_ascii->Truthy()) return Err("tojson(ensure_ascii=True) is not supported");
    int ind = indent && !indent->is_none() ? static_cast<int>(indent->integer()) : -1;
    std::string item_sep = ind >= 0 ? "," : ", ", key_sep = ": ";
    if (separators && separators->is_list() && separators->list().size() == 2) {
      item_sep = separators->list()[0].str();
      key_sep = separators->list()[1].str();
    }
    EFT_ASSIGN_OR_RETURN(std::string json, v.ToJson(ind, item_sep, key_sep, sort_keys && sort_keys->Truthy()));
    return Value::String(json);
  }
  if (n == "trim") {
    EFT_ASSIGN_OR_RETURN(std::string s, str_in());
    return Value::String(Strip(s, a.Get(0, "chars"), true, true));
  }
  if (n == "length" || n == "count") {
    EFT_ASSIGN_OR_RETURN(int64_t len, Length(v));
    return Value::Int(len);
  }
  if (n == "upper" || n == "lower") {
    EFT_ASSIGN_OR_RETURN(std::string s, str_in());
    return Value::String(MapCase(s, n == "upper"));
  }
  if (n == "title") {
    EFT_ASSIGN_OR_RETURN(std::string s, str_in());
    return Value::String(Title(s));
  }
  if (n == "capitalize") {
    EFT_ASSIGN_OR_RETURN(std::string s, str_in());
    return Value::String(Capitalize(s));
  }
  if (n == "replace") {
    EFT_ASSIGN_OR_RETURN(std::string s, str_in());
    const Value *from = a.Get(0, "old"), *to = a.Get(1, "new");
    if (!from || !to) return Err("replace needs two arguments");
    return Value::String(ReplaceAll(s, from->ToString(), to->ToString(), IntArg(a.Get(2, "count"), -1)));
  }
  if (n == "string") return Value::String(v.ToString());
  if (n == "safe") return v;
  if (n == "e" || n == "escape") return Value::String(HtmlEscape(v.ToString()));
  if (n == "striptags") return Err("filter 'striptags' is not supported");
  if (n == "bool") return Value::Bool(v.Truthy());
  if (n == "int") {
    if (v.is_int() || v.is_bool()) return Value::Int(v.integer());
    if (v.is_float()) return Value::Int(static_cast<int64_t>(v.number()));
    if (v.is_string()) {
      try {
        size_t used = 0;
        std::string s = Strip(v.str(), nullptr, true, true);
        int64_t i = std::stoll(s, &used, 10);
        if (used == s.size()) return Value::Int(i);
        double d = std::stod(s, &used);
        if (used == s.size()) return Value::Int(static_cast<int64_t>(d));
      } catch (...) {
      }
    }
    const Value* fallback = a.Get(0, "default");
    return fallback ? *fallback : Value::Int(0);
  }
  if (n == "float") {
    if (v.is_number()) return Value::Float(v.number());
    if (v.is_string()) {
      try {
        size_t used = 0;
        std::string s = Strip(v.str(), nullptr, true, true);
        double d = std::stod(s, &used);
        if (used == s.size()) return Value::Float(d);
      } catch (...) {
      }
    }
    const Value* fallback = a.Get(0, "default");
    return fallback ? *fallback : Value::Float(0);
  }
  if (n == "abs") {
    if (v.is_int()) return Value::Int(std::llabs(v.integer()));
    EFT_ASSIGN_OR_RETURN(double d, Number(v, "abs"));
    return Value::Float(std::fabs(d));
  }
  if (n == "round") {
    EFT_ASSIGN_OR_RETURN(double d, Number(v, "round"));
    int64_t precision = IntArg(a.Get(0, "precision"), 0);
    std::string method = a.Get(1, "method") ? a.Get(1, "method")->str() : "common";
    double scale = std::pow(10.0, static_cast<double>(precision));
    double x = d * scale;
    x = method == "floor" ? std::floor(x) : method == "ceil" ? std::ceil(x) : std::nearbyint(x);  // Python: half to even
    return Value::Float(x / scale);
  }
  if (n == "default" || n == "d") {
    const Value* fallback = a.Get(0, "default_value");
    const Value* boolean = a.Get(1, "boolean");
    bool use = v.is_undefined() || (boolean && boolean->Truthy() && !v.Truthy());
    if (use) return fallback ? *fallback : Value::String("");
    return v;
  }
  if (n == "list") {
    EFT_ASSIGN_OR_RETURN(List items, Iterate(v));
    return Value::MakeList(std::move(items));
  }
  if (n == "first" || n == "last") {
    EFT_ASSIGN_OR_RETURN(List items, Iterate(v));
    if (items.empty()) return Value::Undefined("No first item, sequence was empty.");
    return n == "first" ? items.front() : items.back();
  }
  if (n == "reverse") {
    if (v.is_string()) {
      std::vector<std::string> cs = Chars(v.str());
      std::string out;
      for (auto it = cs.rbegin(); it != cs.rend(); ++it) out += *it;
      return Value::String(out);
    }
    EFT_ASSIGN_OR_RETURN(List items, Iterate(v));
    std::reverse(items.begin(), items.end());
    return Value::MakeList(std::move(items));
  }
  if (n == "join") {
    EFT_ASSIGN_OR_RETURN(List items, Iterate(v));
    const Value* sep = a.Get(0, "d");
    const Value* attribute = a.Get(1, "attribute");
    std::string out;
    for (size_t i = 0; i < items.size(); ++i) {
      Value item = items[i];
      if (attribute) {
        EFT_ASSIGN_OR_RETURN(item, GetItem(item, *attribute));
      }
      out += (i && sep ? sep->ToString() : "") + item.ToString();
    }
    return Value::String(out);
  }
  if (n == "items") {
    if (v.is_undefined()) return Value::MakeList();
    if (!v.is_dict()) return Err("items filter: expected a mapping, got " + v.TypeName());
    CallArgs none;
    EFT_ASSIGN_OR_RETURN(Value m, DictMethod(v, "items"));
    return m.function()(none);
  }
  if (n == "dictsort") {
    if (!v.is_dict()) return Err("dictsort: expected a mapping");
    bool by_value = a.Get(1, "by") && a.Get(1, "by")->str() == "value";
    bool reverse = a.Get(2, "reverse") && a.Get(2, "reverse")->Truthy();
    List out;
    for (const auto& [k, x] : v.dict().items) out.push_back(Value::MakeList({Value::String(k), x}, true));
    Status error;
    std::stable_sort(out.begin(), out.end(), [&](const Value& p, const Value& q) {
      auto c = Compare(p.list()[by_value], q.list()[by_value]);
      if (!c.ok()) {
        error = c.status();
        return false;
      }
      return reverse ? *c > 0 : *c < 0;
    });
    EFT_RETURN_IF_ERROR(error);
    return Value::MakeList(std::move(out));
  }
  if (n == "attr") {
    const Value* name = a.Get(0, "name");
    if (!name) return Err("attr needs a name");
    return GetAttribute(v, name->str());
  }
  if (n == "map" || n == "select" || n == "reject" || n == "selectattr" || n == "rejectattr") {
    EFT_ASSIGN_OR_RETURN(List items, Iterate(v));
    List out;
    const Value* attribute = nullptr;
    for (const auto& [k, x] : a.keyword)
      if (k == "attribute") attribute = &x;
    size_t first_extra = 0;
    std::string callee;
    if (n == "selectattr" || n == "rejectattr") {
      if (a.positional.empty()) return Err(n + " needs an attribute");
      attribute = &a.positional[0];
      first_extra = 1;
    }
    if (first_extra < a.positional.size()) {
      callee = a.positional[first_extra].ToString();
      ++first_extra;
    }
    CallArgs extra;
    extra.positional.assign(a.positional.begin() + static_cast<std::ptrdiff_t>(std::min(first_extra, a.positional.size())),
                            a.positional.end());
    for (const auto& kv : a.keyword)
      if (kv.first != "attribute" && kv.first != "default") extra.keyword.push_back(kv);
    for (const Value& item : items) {
      Value subject = item;
      if (attribute) {
        std::string path = attribute->ToString();
        size_t at = 0;
        while (true) {
          size_t dot = path.find('.', at);
          std::string part = path.substr(at, dot == std::string::npos ? std::string::npos : dot - at);
          Value key = Value::String(part);
          if (!part.empty() && std::all_of(part.begin(), part.end(), ::isdigit)) key = Value::Int(std::stoll(part));
          EFT_ASSIGN_OR_RETURN(subject, GetItem(subject, key));
          if (dot == std::string::npos) break;
          at = dot + 1;
        }
        if (subject.is_undefined() && n == "map") {
          for (const auto& [k, x] : a.keyword)
            if (k == "default") subject = x;
        }
      }
      if (n == "map") {
        if (callee.empty()) {
          out.push_back(subject);
        } else {
          CallArgs args = extra;
          EFT_ASSIGN_OR_RETURN(Value mapped, cb.filter(callee, subject, args));
          out.push_back(mapped);
        }
        continue;
      }
      bool keep = subject.Truthy();
      if (!callee.empty()) {
        CallArgs args = extra;
        EFT_ASSIGN_OR_RETURN(keep, cb.test(callee, subject, args));
      }
      if (keep == (n == "select" || n == "selectattr")) out.push_back(item);
    }
    return Value::MakeList(std::move(out));
  }
  if (n == "unique") {
    EFT_ASSIGN_OR_RETURN(List items, Iterate(v));
    List out;
    for (const Value& x : items) {
      bool seen = false;
      for (const Value& y : out) seen = seen || Equal(x, y);
      if (!seen) out.push_back(x);
    }
    return Value::MakeList(std::move(out));
  }
  if (n == "sum") {
    EFT_ASSIGN_OR_RETURN(List items, Iterate(v));
    const Value* attribute = a.Get(0, "attribute");
    const Value* start = a.Get(1, "start");
    Value total = start ? *start : Value::Int(0);
    for (Value x : items) {
      if (attribute) {
        EFT_ASSIGN_OR_RETURN(x, GetItem(x, *attribute));
      }
      if (!x.is_number() || !total.is_number()) return Err("sum: unsupported operand types");
      total = (x.is_float() || total.is_float()) ? Value::Float(total.number() + x.number())
                                                 : Value::Int(total.integer() + x.integer());
    }
    return total;
  }
  if (n == "min" || n == "max" || n == "sort") {
    EFT_ASSIGN_OR_RETURN(List items, Iterate(v));
    const Value* attribute = a.Get(n == "sort" ? 2 : 1, "attribute");
    bool reverse = n == "sort" && a.Get(0, "reverse") && a.Get(0, "reverse")->Truthy();
    bool case_sensitive = a.Get(n == "sort" ? 1 : 0, "case_sensitive") && a.Get(n == "sort" ? 1 : 0, "case_sensitive")->Truthy();
    auto key = [&](const Value& x) -> Result<Value> {
      Value k = x;
      if (attribute) {
        EFT_ASSIGN_OR_RETURN(k, GetItem(x, *attribute));
      }
      if (k.is_string() && !case_sensitive) return Value::String(MapCase(k.str(), 0));
      return k;
    };
    Status error;
    std::stable_sort(items.begin(), items.end(), [&](const Value& p, const Value& q) {
      auto kp = key(p), kq = key(q);
      if (!kp.ok() || !kq.ok()) {
        error = kp.ok() ? kq.status() : kp.status();
        return false;
      }
      auto c = Compare(*kp, *kq);
      if (!c.ok()) {
        error = c.status();
        return false;
      }
      return reverse ? *c > 0 : *c < 0;
    });
    EFT_RETURN_IF_ERROR(error);
    if (n == "sort") return Value::MakeList(std::move(items));
    if (items.empty()) return Value::Undefined("No aggregated item, sequence was empty.");
    return n == "min" ? items.front() : items.back();
  }
  if (n == "indent") {
    EFT_ASSIGN_OR_RETURN(std::string s, str_in());
    const Value* width = a.Get(0, "width");
    std::string pad = width && width->is_string() ? width->str() : std::string(static_cast<size_t>(IntArg(width, 4)), ' ');
    bool first = a.Get(1, "first") && a.Get(1, "first")->Truthy();
    bool blank = a.Get(2, "blank") && a.Get(2, "blank")->Truthy();
    std::vector<std::string> lines;
    size_t at = 0;
    while (true) {
      size_t nl = s.find('\n', at);
      lines.push_back(s.substr(at, nl == std::string::npos ? std::string::npos : nl - at));
      if (nl == std::string::npos) break;
      at = nl + 1;
    }
    std::string out;
    for (size_t i = 0; i < lines.size(); ++i) {
      bool indent_it = (i > 0 || first) && (blank || !Strip(lines[i], nullptr, true, true).empty());
      out += (i ? "\n" : "") + (indent_it ? pad : "") + lines[i];
    }
    return Value::String(out);
  }
  if (n == "wordcount") {
    EFT_ASSIGN_OR_RETURN(std::string s, str_in());
    return Value::Int(static_cast<int64_t>(Split(s, nullptr, -1).size()));
  }
  if (n == "center") {
    EFT_ASSIGN_OR_RETURN(std::string s, str_in());
    int64_t width = IntArg(a.Get(0, "width"), 80), len = static_cast<int64_t>(Chars(s).size());
    if (width <= len) return Value::String(s);
    int64_t total = width - len, left = total / 2 + (total & width & 1);
    return Value::String(std::string(static_cast<size_t>(left), ' ') + s +
                         std::string(static_cast<size_t>(total - left), ' '));
  }
  if (n == "batch") {
    EFT_ASSIGN_OR_RETURN(List items, Iterate(v));
    int64_t size = IntArg(a.Get(0, "linecount"), 1);
    if (size <= 0) return Err("batch size must be positive");
    List out, current;
    for (const Value& x : items) {
      current.push_back(x);
      if (static_cast<int64_t>(current.size()) == size) {
        out.push_back(Value::MakeList(current));
        current.clear();
      }
    }
    if (!current.empty()) {
      if (const Value* fill = a.Get(1, "fill_with"))
        while (static_cast<int64_t>(current.size()) < size) current.push_back(*fill);
      out.push_back(Value::MakeList(current));
    }
    return Value::MakeList(std::move(out));
  }
  if (n == "truncate") return Err("filter 'truncate' is not supported");
  return Err("no filter named '" + n + "'");
}

}  // namespace eft::trainer::jinja
