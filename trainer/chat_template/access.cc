// Attribute and item access, slicing, `in`, len() and iteration, and the Python methods templates
// call on strings, lists and dicts (see builtins.h).
#include <algorithm>
#include <set>

#include <utf8proc.h>

#include "trainer/chat_template/builtins.h"
#include "trainer/chat_template/python_str.h"

namespace eft::trainer::jinja {
namespace {

using namespace py;

Status Err(const std::string& m) { return Status::InvalidArgument(m); }

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
      std::optional<std::string> out = ReplaceAll(s, from->str(), to->str(), IntArg(a.Get(2, "count"), -1), kMaxText);
      if (!out) return TextTooLong();
      return Value::String(std::move(*out));
    });
  if (name == "find" || name == "rfind" || name == "count" || name == "index")
    return Bound(name, [s, name](CallArgs& a) -> Result<Value> {
      const Value* sub = a.Get(0, "sub");
      if (!sub || !sub->is_string()) return Err(name + "() takes a string");
      const std::string& x = sub->str();
      if (name == "count") {
        if (x.empty()) return Value::Int(static_cast<int64_t>(CountChars(s)) + 1);
        int64_t n = 0;
        for (size_t at = 0; (at = s.find(x, at)) != std::string::npos; at += x.size()) ++n;
        return Value::Int(n);
      }
      size_t hit = name == "rfind" ? s.rfind(x) : s.find(x);
      if (hit == std::string::npos) {
        if (name == "index") return Err("substring not found");
        return Value::Int(-1);
      }
      return Value::Int(static_cast<int64_t>(CountChars(s.substr(0, hit))));
    });
  if (name == "join")
    return Bound(name, [s](CallArgs& a) -> Result<Value> {
      const Value* items = a.Get(0, "iterable");
      if (!items) return Err("join() takes an iterable");
      EFT_ASSIGN_OR_RETURN(List list, Iterate(*items));
      std::string out;
      for (size_t i = 0; i < list.size(); ++i) {
        if (!list[i].is_string()) return Err("sequence item " + std::to_string(i) + ": expected str instance");
        if (out.size() + s.size() + list[i].str().size() > kMaxText) return TextTooLong();
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
  if (v.is_string()) return static_cast<int64_t>(CountChars(v.str()));
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
    // Each character becomes a Value (~100 bytes): a 32 MiB string would take gigabytes.
    if (CountChars(v.str()) > kMaxListItems)
      return Err("a string of more than " + std::to_string(kMaxListItems) + " characters cannot be iterated here");
    List out;
    for (auto& c : Chars(v.str())) out.push_back(Value::String(c));
    return out;
  }
  return Err("'" + v.TypeName() + "' object is not iterable");
}

}  // namespace eft::trainer::jinja
