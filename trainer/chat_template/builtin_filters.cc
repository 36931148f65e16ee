// Jinja's filters: one function per filter (or per family of aliases), and kFilters, the table of
// every name a template may use after `|` (builtins.h).
#include <algorithm>
#include <array>
#include <cmath>

#include "trainer/chat_template/builtin_table.h"
#include "trainer/chat_template/builtins.h"
#include "trainer/chat_template/python_str.h"

namespace eft::trainer::jinja {
namespace {

using namespace py;

Status Err(const std::string& m) { return Status::InvalidArgument(m); }

Result<double> Number(const Value& v, const char* what) {
  if (!v.is_number()) return Err(std::string(what) + ": expected a number, got " + v.TypeName());
  return v.number();
}

// The input of a string filter: undefined renders as the empty string, as in Jinja.
Result<std::string> TextOf(const Value& v) {
  if (v.is_undefined()) return std::string();
  return v.ToString();
}

// A filter's result held to kMaxText before it is returned (the interpreter checks every value it
// gets too, but a filter must not build gigabytes first).
Result<Value> Text(std::string s) {
  if (s.size() > kMaxText) return TextTooLong();
  return Value::String(std::move(s));
}

Result<Value> Tojson(const std::string& n, const Value& v, CallArgs& a, const Callbacks& cb) {
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

Result<Value> Trim(const std::string& n, const Value& v, CallArgs& a, const Callbacks& cb) {
  EFT_ASSIGN_OR_RETURN(std::string s, TextOf(v));
  return Value::String(Strip(s, a.Get(0, "chars"), true, true));
}

Result<Value> LengthOf(const std::string& n, const Value& v, CallArgs& a, const Callbacks& cb) {
  EFT_ASSIGN_OR_RETURN(int64_t len, Length(v));
  return Value::Int(len);
}

Result<Value> UpperLower(const std::string& n, const Value& v, CallArgs& a, const Callbacks& cb) {
  EFT_ASSIGN_OR_RETURN(std::string s, TextOf(v));
  return Value::String(MapCase(s, n == "upper"));
}

Result<Value> TitleCase(const std::string& n, const Value& v, CallArgs& a, const Callbacks& cb) {
  EFT_ASSIGN_OR_RETURN(std::string s, TextOf(v));
  return Value::String(Title(s));
}

Result<Value> CapitalizeFirst(const std::string& n, const Value& v, CallArgs& a, const Callbacks& cb) {
  EFT_ASSIGN_OR_RETURN(std::string s, TextOf(v));
  return Value::String(Capitalize(s));
}

Result<Value> Replace(const std::string& n, const Value& v, CallArgs& a, const Callbacks& cb) {
  EFT_ASSIGN_OR_RETURN(std::string s, TextOf(v));
  const Value *from = a.Get(0, "old"), *to = a.Get(1, "new");
  if (!from || !to) return Err("replace needs two arguments");
  EFT_ASSIGN_OR_RETURN(std::string old_text, from->ToString());
  EFT_ASSIGN_OR_RETURN(std::string new_text, to->ToString());
  std::optional<std::string> out = ReplaceAll(s, old_text, new_text, IntArg(a.Get(2, "count"), -1), kMaxText);
  if (!out) return TextTooLong();
  return Value::String(std::move(*out));
}

Result<Value> AsString(const std::string& n, const Value& v, CallArgs& a, const Callbacks& cb) {
  EFT_ASSIGN_OR_RETURN(std::string s, v.ToString());
  return Value::String(std::move(s));
}

Result<Value> Safe(const std::string& n, const Value& v, CallArgs& a, const Callbacks& cb) { return v; }

Result<Value> Escape(const std::string& n, const Value& v, CallArgs& a, const Callbacks& cb) {
  EFT_ASSIGN_OR_RETURN(std::string s, v.ToString());
  return Text(HtmlEscape(s));
}

// Known to Jinja but not implemented: the name compiles, so the error names the filter at render.
Result<Value> Unsupported(const std::string& n, const Value& v, CallArgs& a, const Callbacks& cb) {
  return Err("filter '" + n + "' is not supported");
}

Result<Value> ToBool(const std::string& n, const Value& v, CallArgs& a, const Callbacks& cb) {
  return Value::Bool(v.Truthy());
}

// A float as an int64 the way int() truncates it; false for NaN, the infinities and values beyond
// int64 (the cast would be undefined: found by fuzz/chat_template_fuzz.cc).
bool Truncate(double d, int64_t* out) {
  if (!(d >= -9223372036854775808.0 && d < 9223372036854775808.0)) return false;
  *out = static_cast<int64_t>(d);
  return true;
}

Result<Value> ToInt(const std::string& n, const Value& v, CallArgs& a, const Callbacks& cb) {
  if (v.is_int() || v.is_bool()) return Value::Int(v.integer());
  int64_t truncated = 0;
  if (v.is_float() && Truncate(v.number(), &truncated)) return Value::Int(truncated);
  if (v.is_string()) {
    try {
      size_t used = 0;
      std::string s = Strip(v.str(), nullptr, true, true);
      int64_t i = std::stoll(s, &used, 10);
      if (used == s.size()) return Value::Int(i);
      double d = std::stod(s, &used);
      if (used == s.size() && Truncate(d, &truncated)) return Value::Int(truncated);
    } catch (...) {
    }
  }
  const Value* fallback = a.Get(0, "default");
  return fallback ? *fallback : Value::Int(0);
}

Result<Value> ToFloat(const std::string& n, const Value& v, CallArgs& a, const Callbacks& cb) {
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

Result<Value> Abs(const std::string& n, const Value& v, CallArgs& a, const Callbacks& cb) {
  if (v.is_int()) {  // wrapping at 64 bits as the operators do: llabs(INT64_MIN) is undefined
    const uint64_t i = static_cast<uint64_t>(v.integer());
    return Value::Int(static_cast<int64_t>(v.integer() < 0 ? 0 - i : i));
  }
  EFT_ASSIGN_OR_RETURN(double d, Number(v, "abs"));
  return Value::Float(std::fabs(d));
}

Result<Value> Round(const std::string& n, const Value& v, CallArgs& a, const Callbacks& cb) {
  EFT_ASSIGN_OR_RETURN(double d, Number(v, "round"));
  int64_t precision = IntArg(a.Get(0, "precision"), 0);
  std::string method = a.Get(1, "method") ? a.Get(1, "method")->str() : "common";
  double scale = std::pow(10.0, static_cast<double>(precision));
  double x = d * scale;
  x = method == "floor" ? std::floor(x) : method == "ceil" ? std::ceil(x) : std::nearbyint(x);  // Python: half to even
  return Value::Float(x / scale);
}

Result<Value> Default(const std::string& n, const Value& v, CallArgs& a, const Callbacks& cb) {
  const Value* fallback = a.Get(0, "default_value");
  const Value* boolean = a.Get(1, "boolean");
  bool use = v.is_undefined() || (boolean && boolean->Truthy() && !v.Truthy());
  if (use) return fallback ? *fallback : Value::String("");
  return v;
}

Result<Value> ToList(const std::string& n, const Value& v, CallArgs& a, const Callbacks& cb) {
  EFT_ASSIGN_OR_RETURN(List items, Iterate(v));
  return Value::MakeList(std::move(items));
}

Result<Value> FirstLast(const std::string& n, const Value& v, CallArgs& a, const Callbacks& cb) {
  EFT_ASSIGN_OR_RETURN(List items, Iterate(v));
  if (items.empty()) return Value::Undefined("No first item, sequence was empty.");
  return n == "first" ? items.front() : items.back();
}

Result<Value> Reverse(const std::string& n, const Value& v, CallArgs& a, const Callbacks& cb) {
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

Result<Value> Join(const std::string& n, const Value& v, CallArgs& a, const Callbacks& cb) {
  EFT_ASSIGN_OR_RETURN(List items, Iterate(v));
  const Value* sep = a.Get(0, "d");
  const Value* attribute = a.Get(1, "attribute");
  std::string separator;
  if (sep) {
    EFT_ASSIGN_OR_RETURN(separator, sep->ToString());
  }
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) {
    Value item = items[i];
    if (attribute) {
      EFT_ASSIGN_OR_RETURN(item, GetItem(item, *attribute));
    }
    EFT_ASSIGN_OR_RETURN(std::string text, item.ToString());
    if (out.size() + separator.size() + text.size() > kMaxText) return TextTooLong();
    if (i) out += separator;
    out += text;
  }
  return Value::String(std::move(out));
}

Result<Value> Items(const std::string& n, const Value& v, CallArgs& a, const Callbacks& cb) {
  if (v.is_undefined()) return Value::MakeList();
  if (!v.is_dict()) return Err("items filter: expected a mapping, got " + v.TypeName());
  CallArgs none;
  EFT_ASSIGN_OR_RETURN(Value m, GetAttribute(v, "items"));
  return m.function()(none);
}

Result<Value> Dictsort(const std::string& n, const Value& v, CallArgs& a, const Callbacks& cb) {
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

Result<Value> Attr(const std::string& n, const Value& v, CallArgs& a, const Callbacks& cb) {
  const Value* name = a.Get(0, "name");
  if (!name) return Err("attr needs a name");
  return GetAttribute(v, name->str());
}

// map, select, reject, selectattr, rejectattr: each item (or its dotted `attribute`) goes through
// the filter or test named by the first remaining positional argument, through `cb`.
Result<Value> MapOrSelect(const std::string& n, const Value& v, CallArgs& a, const Callbacks& cb) {
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
    EFT_ASSIGN_OR_RETURN(callee, a.positional[first_extra].ToString());
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
      EFT_ASSIGN_OR_RETURN(std::string path, attribute->ToString());
      size_t at = 0;
      while (true) {
        size_t dot = path.find('.', at);
        std::string part = path.substr(at, dot == std::string::npos ? std::string::npos : dot - at);
        Value key = Value::String(part);
        // Digits are an index; more of them than int64 holds are no index of anything (std::stoll
        // would throw), so they stay the string key.
        if (!part.empty() && part.size() <= 18 && std::all_of(part.begin(), part.end(), ::isdigit))
          key = Value::Int(std::stoll(part));
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

Result<Value> Unique(const std::string& n, const Value& v, CallArgs& a, const Callbacks& cb) {
  EFT_ASSIGN_OR_RETURN(List items, Iterate(v));
  List out;
  for (const Value& x : items) {
    bool seen = false;
    for (const Value& y : out) seen = seen || Equal(x, y);
    if (!seen) out.push_back(x);
  }
  return Value::MakeList(std::move(out));
}

Result<Value> Sum(const std::string& n, const Value& v, CallArgs& a, const Callbacks& cb) {
  EFT_ASSIGN_OR_RETURN(List items, Iterate(v));
  const Value* attribute = a.Get(0, "attribute");
  const Value* start = a.Get(1, "start");
  Value total = start ? *start : Value::Int(0);
  for (Value x : items) {
    if (attribute) {
      EFT_ASSIGN_OR_RETURN(x, GetItem(x, *attribute));
    }
    if (!x.is_number() || !total.is_number()) return Err("sum: unsupported operand types");
    const uint64_t wrapped = static_cast<uint64_t>(total.integer()) + static_cast<uint64_t>(x.integer());  // as '+'
    total = (x.is_float() || total.is_float()) ? Value::Float(total.number() + x.number())
                                               : Value::Int(static_cast<int64_t>(wrapped));
  }
  return total;
}

// min, max and sort share the ordering: by `attribute` if given, strings case-insensitively unless
// `case_sensitive`.
Result<Value> MinMaxSort(const std::string& n, const Value& v, CallArgs& a, const Callbacks& cb) {
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

Result<Value> Indent(const std::string& n, const Value& v, CallArgs& a, const Callbacks& cb) {
  EFT_ASSIGN_OR_RETURN(std::string s, TextOf(v));
  const Value* width = a.Get(0, "width");
  // A negative width is no indentation, as Python's ' ' * -1 is ''.
  const int64_t spaces = std::max<int64_t>(0, IntArg(width, 4));
  if (!(width && width->is_string()) && static_cast<uint64_t>(spaces) > kMaxText) return TextTooLong();
  std::string pad = width && width->is_string() ? width->str() : std::string(static_cast<size_t>(spaces), ' ');
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
    if (out.size() + 1 + (indent_it ? pad.size() : 0) + lines[i].size() > kMaxText) return TextTooLong();
    out += (i ? "\n" : "") + (indent_it ? pad : "") + lines[i];
  }
  return Value::String(std::move(out));
}

Result<Value> Wordcount(const std::string& n, const Value& v, CallArgs& a, const Callbacks& cb) {
  EFT_ASSIGN_OR_RETURN(std::string s, TextOf(v));
  return Value::Int(static_cast<int64_t>(Split(s, nullptr, -1).size()));
}

Result<Value> Center(const std::string& n, const Value& v, CallArgs& a, const Callbacks& cb) {
  EFT_ASSIGN_OR_RETURN(std::string s, TextOf(v));
  int64_t width = IntArg(a.Get(0, "width"), 80), len = static_cast<int64_t>(CountChars(s));
  if (width <= len) return Value::String(s);
  if (static_cast<uint64_t>(width) - static_cast<uint64_t>(len) > kMaxText - s.size()) return TextTooLong();
  int64_t total = width - len, left = total / 2 + (total & width & 1);
  return Value::String(std::string(static_cast<size_t>(left), ' ') + s +
                       std::string(static_cast<size_t>(total - left), ' '));
}

Result<Value> Batch(const std::string& n, const Value& v, CallArgs& a, const Callbacks& cb) {
  EFT_ASSIGN_OR_RETURN(List items, Iterate(v));
  int64_t size = IntArg(a.Get(0, "linecount"), 1);
  if (size <= 0) return Err("batch size must be positive");
  // fill_with pads the last batch up to `size`: a size beyond any list is refused, not filled.
  if (a.Get(1, "fill_with") && static_cast<uint64_t>(size) > kMaxListItems)
    return Err("batch size with fill_with is more than " + std::to_string(kMaxListItems) + " items");
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

// Sorted by name (checked below, at compile time): FindByName looks names up by binary search.
constexpr std::array kFilters = {
    FilterEntry{"abs", Abs},
    FilterEntry{"attr", Attr},
    FilterEntry{"batch", Batch},
    FilterEntry{"bool", ToBool},
    FilterEntry{"capitalize", CapitalizeFirst},
    FilterEntry{"center", Center},
    FilterEntry{"count", LengthOf},
    FilterEntry{"d", Default},
    FilterEntry{"default", Default},
    FilterEntry{"dictsort", Dictsort},
    FilterEntry{"e", Escape},
    FilterEntry{"escape", Escape},
    FilterEntry{"first", FirstLast},
    FilterEntry{"float", ToFloat},
    FilterEntry{"indent", Indent},
    FilterEntry{"int", ToInt},
    FilterEntry{"items", Items},
    FilterEntry{"join", Join},
    FilterEntry{"last", FirstLast},
    FilterEntry{"length", LengthOf},
    FilterEntry{"list", ToList},
    FilterEntry{"lower", UpperLower},
    FilterEntry{"map", MapOrSelect},
    FilterEntry{"max", MinMaxSort},
    FilterEntry{"min", MinMaxSort},
    FilterEntry{"reject", MapOrSelect},
    FilterEntry{"rejectattr", MapOrSelect},
    FilterEntry{"replace", Replace},
    FilterEntry{"reverse", Reverse},
    FilterEntry{"round", Round},
    FilterEntry{"safe", Safe},
    FilterEntry{"select", MapOrSelect},
    FilterEntry{"selectattr", MapOrSelect},
    FilterEntry{"sort", MinMaxSort},
    FilterEntry{"string", AsString},
    FilterEntry{"striptags", Unsupported},
    FilterEntry{"sum", Sum},
    FilterEntry{"title", TitleCase},
    FilterEntry{"tojson", Tojson},
    FilterEntry{"trim", Trim},
    FilterEntry{"truncate", Unsupported},
    FilterEntry{"unique", Unique},
    FilterEntry{"upper", UpperLower},
    FilterEntry{"wordcount", Wordcount},
};
static_assert(StrictlySortedByName(kFilters), "kFilters must be sorted by name, each name once");

}  // namespace

std::span<const FilterEntry> Filters() { return kFilters; }

bool IsKnownFilter(const std::string& name) { return FindByName(Filters(), name) != nullptr; }

Result<Value> ApplyFilter(const std::string& name, const Value& input, CallArgs& args, const Callbacks& callbacks) {
  const FilterEntry* filter = FindByName(Filters(), name);
  if (!filter) return Err("no filter named '" + name + "'");
  return filter->apply(name, input, args, callbacks);
}

}  // namespace eft::trainer::jinja
