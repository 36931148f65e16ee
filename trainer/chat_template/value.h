// Values of the chat-template language: Python's types as Jinja sees them (None, bool, int,
// float, str, list, tuple, dict, callables), plus Jinja's Undefined. Lists and dicts are shared
// by reference, as in Python (a namespace() is a dict whose attributes can be assigned).
// Printing follows Python's str()/repr(), so a template prints what Jinja would.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"

namespace eft::trainer::jinja {

class Value;
using List = std::vector<Value>;

// Bounds on what one render may build. A chat template renders one conversation (kilobytes; a
// 128k-token context is about half a MiB of text), so these are far above any real template, and
// they keep a few hostile bytes (`{{ messages * 100000 }}`, `'x' | center(10**12)`) from taking
// seconds or gigabytes: every conversion, concatenation and filter checks them as it builds.
inline constexpr size_t kMaxText = 32ull << 20;   // any string, the rendered output included
inline constexpr size_t kMaxListItems = 1 << 22;  // a list built by `*`, `+`, a filter, or a string's characters

// "text is too long (more than 32 MiB)"
Status TextTooLong();

// A dict keeping insertion order, as Python's does. Keys are strings (all that chat data holds).
struct Dict {
  std::vector<std::pair<std::string, Value>> items;
  const Value* Find(const std::string& key) const;
  void Set(const std::string& key, Value value);
};

struct CallArgs;
using Function = std::function<Result<Value>(CallArgs& args)>;

class Value {
 public:
  enum class Type { kUndefined, kNone, kBool, kInt, kFloat, kString, kList, kDict, kFunction };

  Value() = default;  // Undefined
  static Value Undefined(std::string what = "") {
    Value v;
    v.str_ = std::move(what);
    return v;
  }
  static Value None() { return Value(Type::kNone); }
  static Value Bool(bool b) {
    Value v(Type::kBool);
    v.int_ = b;
    return v;
  }
  static Value Int(int64_t i) {
    Value v(Type::kInt);
    v.int_ = i;
    return v;
  }
  static Value Float(double f) {
    Value v(Type::kFloat);
    v.float_ = f;
    return v;
  }
  static Value String(std::string s) {
    Value v(Type::kString);
    v.str_ = std::move(s);
    return v;
  }
  static Value MakeList(List items = {}, bool tuple = false) {
    Value v(Type::kList);
    v.list_ = std::make_shared<List>(std::move(items));
    v.tuple_ = tuple;
    return v;
  }
  static Value MakeDict(Dict d = {}, bool is_namespace = false) {
    Value v(Type::kDict);
    v.dict_ = std::make_shared<Dict>(std::move(d));
    v.namespace_ = is_namespace;
    return v;
  }
  static Value MakeFunction(Function f, std::string name) {
    Value v(Type::kFunction);
    v.fn_ = std::make_shared<Function>(std::move(f));
    v.str_ = std::move(name);
    return v;
  }
  static Value FromJson(const nlohmann::ordered_json& j);

  Type type() const { return type_; }
  bool is_undefined() const { return type_ == Type::kUndefined; }
  bool is_none() const { return type_ == Type::kNone; }
  bool is_bool() const { return type_ == Type::kBool; }
  bool is_int() const { return type_ == Type::kInt; }
  bool is_float() const { return type_ == Type::kFloat; }
  bool is_number() const { return type_ == Type::kInt || type_ == Type::kFloat || type_ == Type::kBool; }
  bool is_string() const { return type_ == Type::kString; }
  bool is_list() const { return type_ == Type::kList; }
  bool is_tuple() const { return type_ == Type::kList && tuple_; }
  bool is_dict() const { return type_ == Type::kDict; }
  bool is_namespace() const { return type_ == Type::kDict && namespace_; }
  bool is_function() const { return type_ == Type::kFunction; }

  bool boolean() const { return int_ != 0; }
  int64_t integer() const { return int_; }
  double number() const { return type_ == Type::kFloat ? float_ : static_cast<double>(int_); }
  const std::string& str() const { return str_; }   // string; for Undefined, what was missing
  List& list() const { return *list_; }
  Dict& dict() const { return *dict_; }
  const Function& function() const { return *fn_; }
  const std::string& function_name() const { return str_; }

  bool Truthy() const;
  // Python's str(): what {{ value }} prints (Undefined prints nothing). TextTooLong() rather than
  // more than kMaxText, found while converting (a list of millions of dicts stops at 32 MiB).
  Result<std::string> ToString() const;
  // Python's repr() for error messages: cut after about `max_bytes`, ending "...".
  std::string Repr(size_t max_bytes = 200) const;
  // Python's json.dumps(value, ensure_ascii=False, indent, separators, sort_keys); TextTooLong()
  // beyond kMaxText.
  Result<std::string> ToJson(int indent, const std::string& item_sep, const std::string& key_sep, bool sort_keys) const;
  // Python's type name, for error messages ("str", "int", "dict"...).
  std::string TypeName() const;

 private:
  explicit Value(Type t) : type_(t) {}
  Type type_ = Type::kUndefined;
  int64_t int_ = 0;
  double float_ = 0;
  std::string str_;
  std::shared_ptr<List> list_;
  std::shared_ptr<Dict> dict_;
  std::shared_ptr<Function> fn_;
  bool tuple_ = false;
  bool namespace_ = false;
};

struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;
  // The keyword `name`, else positional[index], else nullptr.
  const Value* Get(size_t index, const std::string& name) const;
};

// Python equality and ordering (numbers across int/float/bool; strings; lists element-wise).
bool Equal(const Value& a, const Value& b);
// <0, 0, >0; error for types Python cannot order.
Result<int> Compare(const Value& a, const Value& b);

// Python's repr of a float (shortest round trip: 0.1, 1.0, 1e-05, inf).
std::string FloatRepr(double d);

}  // namespace eft::trainer::jinja
