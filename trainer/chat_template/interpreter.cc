#include "trainer/chat_template/interpreter.h"

#include <cmath>
#include <ctime>
#include <unordered_map>

#include "trainer/chat_template/builtins.h"

namespace eft::trainer::jinja {
namespace {

Status Err(const std::string& m) { return Status::InvalidArgument(m); }

// Bounds on one render, beside value.h's on sizes. Jinja has no while loop, but nested loops,
// macro recursion and string doubling can still run for ages from a template only a few bytes
// long; real chat templates stay orders of magnitude below these. A step is a statement, a loop
// iteration, a list item built or kBytesPerStep bytes of text made or copied: the budget bounds
// work, so `{{ messages * 90000 }}` three times, each one statement, cannot take seconds.
constexpr int64_t kMaxSteps = 10'000'000;
constexpr int64_t kBytesPerStep = 64;
constexpr int kMaxCallDepth = 100;  // nested macro calls (Jinja's own limit is Python's)

Status TooLong() { return TextTooLong(); }

// Python's integer power with int64 wrap-around, by squaring: a huge exponent is 64 steps, not
// 10^12 multiplications. Unsigned arithmetic keeps the wrap-around defined.
int64_t IntPow(int64_t base, int64_t exp) {
  uint64_t result = 1, b = static_cast<uint64_t>(base);
  for (uint64_t e = static_cast<uint64_t>(exp); e > 0; e >>= 1) {
    if (e & 1) result *= b;
    b *= b;
  }
  return static_cast<int64_t>(result);
}

bool IsRaised(const Status& s) { return s.code() == StatusCode::kFailedPrecondition; }

Status AtLine(const Status& s, int line) {
  if (s.ok() || IsRaised(s) || s.message().rfind("line ", 0) == 0) return s;
  return Status::InvalidArgument("line " + std::to_string(line) + ": " + s.message());
}

class Interpreter {
 public:
  explicit Interpreter(const Dict& variables) {
    frames_.emplace_back();
    auto& globals = frames_.back();
    globals["range"] = Value::MakeFunction([](CallArgs& a) -> Result<Value> { return Range(a); }, "range");
    globals["namespace"] = Value::MakeFunction(
        [](CallArgs& a) -> Result<Value> {
          Dict d;
          for (const Value& p : a.positional) {
            if (!p.is_dict()) return Err("namespace() positional arguments must be mappings");
            for (const auto& [k, v] : p.dict().items) d.Set(k, v);
          }
          for (const auto& [k, v] : a.keyword) d.Set(k, v);
          return Value::MakeDict(std::move(d), true);
        },
        "namespace");
    globals["dict"] = Value::MakeFunction(
        [](CallArgs& a) -> Result<Value> {
          Dict d;
          for (const auto& [k, v] : a.keyword) d.Set(k, v);
          return Value::MakeDict(std::move(d));
        },
        "dict");
    globals["raise_exception"] = Value::MakeFunction(
        [](CallArgs& a) -> Result<Value> {
          if (a.positional.empty()) return Status::FailedPrecondition("");
          EFT_ASSIGN_OR_RETURN(std::string message, a.positional[0].ToString());
          return Status::FailedPrecondition(message);
        },
        "raise_exception");
    globals["strftime_now"] = Value::MakeFunction(
        [](CallArgs& a) -> Result<Value> {
          if (a.positional.empty() || !a.positional[0].is_string()) return Err("strftime_now needs a format string");
          std::time_t now = std::time(nullptr);
          std::tm local{};
          localtime_r(&now, &local);
          char buf[256];
          size_t n = std::strftime(buf, sizeof(buf), a.positional[0].str().c_str(), &local);
          return Value::String(std::string(buf, n));
        },
        "strftime_now");
    for (const auto& [k, v] : variables.items) globals[k] = v;
    callbacks_.filter = [this](const std::string& name, const Value& in, CallArgs& args) {
      return ApplyFilter(name, in, args, callbacks_);
    };
    callbacks_.test = [](const std::string& name, const Value& in, CallArgs& args) { return ApplyTest(name, in, args); };
  }

  Result<std::string> Run(const Body& body) {
    std::string out;
    EFT_RETURN_IF_ERROR(Exec(body, &out));
    return out;
  }

 private:
  enum class Flow { kNormal, kBreak, kContinue };

  static Result<Value> Range(CallArgs& a) {
    int64_t start = 0, stop = 0, step = 1;
    if (a.positional.size() == 1) {
      stop = a.positional[0].integer();
    } else if (a.positional.size() >= 2) {
      start = a.positional[0].integer();
      stop = a.positional[1].integer();
      if (a.positional.size() > 2) step = a.positional[2].integer();
    } else {
      return Err("range expected at least 1 argument");
    }
    if (step == 0) return Err("range() arg 3 must not be zero");
    List out;
    for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
      if (out.size() > 100000) return Err("range too big");
      out.push_back(Value::Int(i));
    }
    return Value::MakeList(std::move(out));
  }

  Value Lookup(const std::string& name) const {
    for (auto it = frames_.rbegin(); it != frames_.rend(); ++it) {
      auto v = it->find(name);
      if (v != it->end()) return v->second;
    }
    return Value::Undefined("'" + name + "'");
  }

  // Counts `n` units of work against kMaxSteps.
  Status Step(uint64_t n = 1) {
    if (n > static_cast<uint64_t>(kMaxSteps) || (steps_ += static_cast<int64_t>(n)) > kMaxSteps)
      return Err("the template ran more than " + std::to_string(kMaxSteps) + " steps (an endless loop?)");
    return Status::Ok();
  }
  Status ChargeText(uint64_t bytes) { return Step(bytes / kBytesPerStep); }

  Status Exec(const Body& body, std::string* out) {
    for (const StmtPtr& s : body) {
      EFT_RETURN_IF_ERROR(AtLine(Step(), s->line));
      EFT_RETURN_IF_ERROR(AtLine(ExecOne(*s, out), s->line));
      if (out->size() > kMaxText) return AtLine(TooLong(), s->line);
      if (flow_ != Flow::kNormal) return Status::Ok();
    }
    return Status::Ok();
  }

  Status Unpack(const std::vector<std::string>& targets, const Value& value) {
    if (targets.size() == 1) {
      frames_.back()[targets[0]] = value;
      return Status::Ok();
    }
    EFT_ASSIGN_OR_RETURN(List items, Iterate(value));
    if (items.size() != targets.size())
      return Err("cannot unpack " + std::to_string(items.size()) + " values into " + std::to_string(targets.size()));
    for (size_t i = 0; i < targets.size(); ++i) frames_.back()[targets[i]] = items[i];
    return Status::Ok();
  }

  Status ExecOne(const Stmt& s, std::string* out) {
    switch (s.kind) {
      case Stmt::Kind::kText:
        *out += s.text;
        return Status::Ok();
      case Stmt::Kind::kPrint: {
        EFT_ASSIGN_OR_RETURN(Value v, Eval(*s.expr));
        if (v.is_string()) {  // charged by Eval
          if (out->size() + v.str().size() > kMaxText) return TooLong();
          *out += v.str();
          return Status::Ok();
        }
        EFT_ASSIGN_OR_RETURN(std::string text, v.ToString());
        EFT_RETURN_IF_ERROR(ChargeText(text.size()));
        if (out->size() + text.size() > kMaxText) return TooLong();
        *out += text;
        return Status::Ok();
      }
      case Stmt::Kind::kIf:
        for (const auto& [cond, body] : s.branches) {
          EFT_ASSIGN_OR_RETURN(Value c, Eval(*cond));
          if (c.Truthy()) return Exec(body, out);
        }
        return Exec(s.else_body, out);
      case Stmt::Kind::kFor:
        return For(s, out);
      case Stmt::Kind::kSet: {
        EFT_ASSIGN_OR_RETURN(Value v, Eval(*s.expr));
        if (s.attr_target) {
          Value target = Lookup(s.attr_target->name);
          if (!target.is_namespace())
            return Err("cannot assign attribute on non-namespace object '" + s.attr_target->name + "'");
          target.dict().Set(s.targets[0], v);
          return Status::Ok();
        }
        return Unpack(s.targets, v);
      }
      case Stmt::Kind::kSetBlock: {
        std::string captured;
        EFT_RETURN_IF_ERROR(Exec(s.body, &captured));
        frames_.back()[s.targets[0]] = Value::String(captured);
        return Status::Ok();
      }
      case Stmt::Kind::kMacro: {
        const Stmt* macro = &s;
        frames_.back()[s.text] = Value::MakeFunction(
            [this, macro](CallArgs& a) -> Result<Value> { return CallMacro(*macro, a); }, s.text);
        return Status::Ok();
      }
      case Stmt::Kind::kBreak:
        flow_ = Flow::kBreak;
        return Status::Ok();
      case Stmt::Kind::kContinue:
        flow_ = Flow::kContinue;
        return Status::Ok();
      case Stmt::Kind::kGeneration:
        return Exec(s.body, out);
    }
    return Status::Ok();
  }

  Result<Value> CallMacro(const Stmt& macro, CallArgs& a) {
    // Each call recurses through Exec and Eval on the C++ stack.
    if (call_depth_ >= kMaxCallDepth)
      return Err("macro '" + macro.text + "' calls nested more than " + std::to_string(kMaxCallDepth) +
                 " deep (endless recursion?)");
    ++call_depth_;
    Result<Value> r = CallMacroBody(macro, a);
    --call_depth_;
    return r;
  }

  Result<Value> CallMacroBody(const Stmt& macro, CallArgs& a) {
    std::unordered_map<std::string, Value> frame;
    if (a.positional.size() > macro.params.size())
      return Err("macro '" + macro.text + "' takes not more than " + std::to_string(macro.params.size()) +
                 " argument(s)");
    for (size_t i = 0; i < macro.params.size(); ++i) {
      const Value* given = a.Get(i, macro.params[i]);
      if (given) {
        frame[macro.params[i]] = *given;
      } else if (macro.defaults[i]) {
        EFT_ASSIGN_OR_RETURN(Value d, Eval(*macro.defaults[i]));
        frame[macro.params[i]] = d;
      } else {
        frame[macro.params[i]] = Value::Undefined("'" + macro.params[i] + "'");
      }
    }
    // A macro sees the template's globals and its arguments, not its caller's locals.
    std::vector<std::unordered_map<std::string, Value>> saved;
    saved.swap(frames_);
    frames_.push_back(saved.front());
    frames_.push_back(std::move(frame));
    std::string out;
    Status st = Exec(macro.body, &out);
    flow_ = Flow::kNormal;
    saved.front() = frames_.front();
    frames_.swap(saved);
    EFT_RETURN_IF_ERROR(st);
    return Value::String(out);
  }

  Status For(const Stmt& s, std::string* out) {
    EFT_ASSIGN_OR_RETURN(Value iterable, Eval(*s.expr));
    EFT_ASSIGN_OR_RETURN(List items, Iterate(iterable));
    if (s.filter) {
      List kept;
      for (const Value& item : items) {
        frames_.emplace_back();
        Status st = Unpack(s.targets, item);
        Result<Value> keep = st.ok() ? Eval(*s.filter) : Result<Value>(st);
        frames_.pop_back();
        if (!keep.ok()) return keep.status();
        if (keep->Truthy()) kept.push_back(item);
      }
      items.swap(kept);
    }
    if (items.empty()) return Exec(s.else_body, out);
    const int64_t n = static_cast<int64_t>(items.size());
    for (int64_t i = 0; i < n; ++i) {
      EFT_RETURN_IF_ERROR(Step());
      frames_.emplace_back();
      Dict loop;
      loop.Set("index", Value::Int(i + 1));
      loop.Set("index0", Value::Int(i));
      loop.Set("revindex", Value::Int(n - i));
      loop.Set("revindex0", Value::Int(n - i - 1));
      loop.Set("first", Value::Bool(i == 0));
      loop.Set("last", Value::Bool(i == n - 1));
      loop.Set("length", Value::Int(n));
      loop.Set("depth", Value::Int(1));
      loop.Set("depth0", Value::Int(0));
      loop.Set("previtem", i > 0 ? items[static_cast<size_t>(i - 1)] : Value::Undefined("'previtem'"));
      loop.Set("nextitem", i + 1 < n ? items[static_cast<size_t>(i + 1)] : Value::Undefined("'nextitem'"));
      loop.Set("cycle", Value::MakeFunction(
                            [i](CallArgs& a) -> Result<Value> {
                              if (a.positional.empty()) return Err("no items for cycling given");
                              return a.positional[static_cast<size_t>(i) % a.positional.size()];
                            },
                            "cycle"));
      frames_.back()["loop"] = Value::MakeDict(std::move(loop), true);
      Status st = Unpack(s.targets, items[static_cast<size_t>(i)]);
      if (st.ok()) st = Exec(s.body, out);
      frames_.pop_back();
      EFT_RETURN_IF_ERROR(st);
      Flow flow = flow_;
      flow_ = Flow::kNormal;
      if (flow == Flow::kBreak) break;
    }
    return Status::Ok();
  }

  Result<CallArgs> Arguments(const Expr& e, size_t first) {
    CallArgs a;
    for (size_t i = first; i < e.args.size(); ++i) {
      EFT_ASSIGN_OR_RETURN(Value v, Eval(*e.args[i]));
      a.positional.push_back(v);
    }
    for (const auto& [k, x] : e.kwargs) {
      EFT_ASSIGN_OR_RETURN(Value v, Eval(*x));
      a.keyword.emplace_back(k, v);
    }
    return a;
  }

  static Status UndefinedError(const Value& v) {
    return Err((v.str().empty() ? std::string("value") : v.str()) + " is undefined");
  }

  Result<Value> Arithmetic(const std::string& op, const Value& a, const Value& b) {
    if (op == "~") {
      EFT_ASSIGN_OR_RETURN(std::string l, a.ToString());
      EFT_ASSIGN_OR_RETURN(std::string r, b.ToString());
      if (l.size() + r.size() > kMaxText) return TooLong();
      return Value::String(l + r);
    }
    if (a.is_undefined()) return UndefinedError(a);
    if (b.is_undefined()) return UndefinedError(b);
    if (op == "+") {
      if (a.is_string() && b.is_string()) {
        if (a.str().size() + b.str().size() > kMaxText) return TooLong();
        return Value::String(a.str() + b.str());
      }
      if (a.is_list() && b.is_list()) {
        if (a.list().size() + b.list().size() > kMaxListItems)
          return Err("list concatenation makes more than " + std::to_string(kMaxListItems) + " items");
        EFT_RETURN_IF_ERROR(ChargeItems(a.list(), 1));
        EFT_RETURN_IF_ERROR(ChargeItems(b.list(), 1));
        List items = a.list();
        items.insert(items.end(), b.list().begin(), b.list().end());
        return Value::MakeList(std::move(items), a.is_tuple());
      }
    }
    if (op == "*") {
      const Value* seq = a.is_string() || a.is_list() ? &a : b.is_string() || b.is_list() ? &b : nullptr;
      const Value* count = seq == &a ? &b : &a;
      if (seq && (count->is_int() || count->is_bool())) {
        // Checked before building: 'x' * 10**12 must not try.
        const uint64_t times = count->integer() > 0 ? static_cast<uint64_t>(count->integer()) : 0;
        const uint64_t unit = seq->is_string() ? seq->str().size() : seq->list().size();
        const uint64_t limit = seq->is_string() ? kMaxText : kMaxListItems;
        if (unit > 0 && times > limit / unit) {
          return seq->is_string() ? TooLong() : Err("list repetition makes more than " + std::to_string(limit) + " items");
        }
        // Nothing repeated is nothing, at once: `[] * 999999999` would otherwise loop that many
        // times appending nothing (a hang found by fuzz/chat_template_fuzz.cc).
        if (unit == 0) return seq->is_string() ? Value::String("") : Value::MakeList({});
        if (seq->is_string()) {
          std::string out;
          for (int64_t i = 0; i < count->integer(); ++i) out += seq->str();
          return Value::String(out);
        }
        EFT_RETURN_IF_ERROR(ChargeItems(seq->list(), times));
        List items;
        for (int64_t i = 0; i < count->integer(); ++i) items.insert(items.end(), seq->list().begin(), seq->list().end());
        return Value::MakeList(std::move(items));
      }
    }
    if (op == "%" && a.is_string()) return Err("printf-style '%' formatting is not supported");
    if (!a.is_number() || !b.is_number())
      return Err("unsupported operand type(s) for " + op + ": '" + a.TypeName() + "' and '" + b.TypeName() + "'");
    const bool ints = !a.is_float() && !b.is_float();
    const double x = a.number(), y = b.number();
    // Integers wrap around at 64 bits, as IntPow and INT64_MIN // -1 below (Python's have no bound);
    // in unsigned arithmetic, since signed overflow is undefined (found by fuzz/chat_template_fuzz.cc).
    const uint64_t i = static_cast<uint64_t>(a.integer()), j = static_cast<uint64_t>(b.integer());
    if (op == "+") return ints ? Value::Int(static_cast<int64_t>(i + j)) : Value::Float(x + y);
    if (op == "-") return ints ? Value::Int(static_cast<int64_t>(i - j)) : Value::Float(x - y);
    if (op == "*") return ints ? Value::Int(static_cast<int64_t>(i * j)) : Value::Float(x * y);
    if (op == "/") {
      if (y == 0) return Err("division by zero");
      return Value::Float(x / y);
    }
    if (op == "//" || op == "%") {
      if (y == 0) return Err(op == "//" ? "integer division or modulo by zero" : "modulo by zero");
      if (ints) {
        // INT64_MIN // -1 traps in C++; Python's answer (2^63) wraps to INT64_MIN here.
        if (b.integer() == -1) {
          return Value::Int(op == "//" ? static_cast<int64_t>(0 - static_cast<uint64_t>(a.integer())) : 0);
        }
        int64_t q = a.integer() / b.integer(), r = a.integer() % b.integer();
        if (r != 0 && ((r < 0) != (b.integer() < 0))) {
          --q;
          r += b.integer();
        }
        return op == "//" ? Value::Int(q) : Value::Int(r);
      }
      double q = std::floor(x / y);
      return op == "//" ? Value::Float(q) : Value::Float(x - q * y);
    }
    if (op == "**") {
      if (ints && b.integer() >= 0) return Value::Int(IntPow(a.integer(), b.integer()));
      return Value::Float(std::pow(x, y));
    }
    return Err("unknown operator " + op);
  }

  // Every string an expression yields is charged by its size (making or copying it was that much
  // work) and held to kMaxText, so no filter or operator has to remember to.
  Result<Value> Eval(const Expr& e) {
    EFT_ASSIGN_OR_RETURN(Value v, EvalUncharged(e));
    if (v.is_string()) {
      if (v.str().size() > kMaxText) return TooLong();
      EFT_RETURN_IF_ERROR(ChargeText(v.str().size()));
    }
    return v;
  }

  // Copying `items` `times` over: a step per item and the bytes of the strings among them (Values
  // copy their strings; lists and dicts are shared). Charged before the copy, so a list of long
  // strings repeated a million times is refused instead of filling memory.
  Status ChargeItems(const List& items, uint64_t times) {
    uint64_t bytes = 0;
    for (const Value& v : items)
      if (v.is_string()) bytes += v.str().size();
    const uint64_t per_copy = items.size() + bytes / kBytesPerStep;
    if (per_copy > 0 && times > static_cast<uint64_t>(kMaxSteps) / per_copy) return Step(static_cast<uint64_t>(kMaxSteps) + 1);
    return Step(per_copy * times);
  }

  Result<Value> EvalUncharged(const Expr& e) {
    switch (e.kind) {
      case Expr::Kind::kLiteral:
        return e.literal;
      case Expr::Kind::kName:
        return Lookup(e.name);
      case Expr::Kind::kList:
      case Expr::Kind::kTuple: {
        List items;
        for (const auto& x : e.args) {
          EFT_ASSIGN_OR_RETURN(Value v, Eval(*x));
          items.push_back(v);
        }
        return Value::MakeList(std::move(items), e.kind == Expr::Kind::kTuple);
      }
      case Expr::Kind::kDict: {
        Dict d;
        for (size_t i = 0; i + 1 < e.args.size(); i += 2) {
          EFT_ASSIGN_OR_RETURN(Value k, Eval(*e.args[i]));
          EFT_ASSIGN_OR_RETURN(Value v, Eval(*e.args[i + 1]));
          if (!k.is_string()) return Err("dict keys must be strings here, got " + k.TypeName());
          d.Set(k.str(), v);
        }
        return Value::MakeDict(std::move(d));
      }
      case Expr::Kind::kAttr: {
        EFT_ASSIGN_OR_RETURN(Value obj, Eval(*e.args[0]));
        return GetAttribute(obj, e.name);
      }
      case Expr::Kind::kItem: {
        EFT_ASSIGN_OR_RETURN(Value obj, Eval(*e.args[0]));
        EFT_ASSIGN_OR_RETURN(Value key, Eval(*e.args[1]));
        return GetItem(obj, key);
      }
      case Expr::Kind::kSlice: {
        EFT_ASSIGN_OR_RETURN(Value obj, Eval(*e.args[0]));
        Value parts[3];
        for (int k = 0; k < 3; ++k)
          if (e.args[static_cast<size_t>(k) + 1]) {
            EFT_ASSIGN_OR_RETURN(parts[k], Eval(*e.args[static_cast<size_t>(k) + 1]));
          }
        if (obj.is_undefined()) return UndefinedError(obj);
        return Slice(obj, parts[0], parts[1], parts[2]);
      }
      case Expr::Kind::kCall: {
        EFT_ASSIGN_OR_RETURN(Value fn, Eval(*e.args[0]));
        if (fn.is_undefined()) return UndefinedError(fn);
        if (!fn.is_function()) return Err("'" + fn.TypeName() + "' object is not callable");
        EFT_ASSIGN_OR_RETURN(CallArgs args, Arguments(e, 1));
        return fn.function()(args);
      }
      case Expr::Kind::kFilter: {
        EFT_ASSIGN_OR_RETURN(Value in, Eval(*e.args[0]));
        EFT_ASSIGN_OR_RETURN(CallArgs args, Arguments(e, 1));
        return ApplyFilter(e.name, in, args, callbacks_);
      }
      case Expr::Kind::kTest: {
        EFT_ASSIGN_OR_RETURN(Value in, Eval(*e.args[0]));
        EFT_ASSIGN_OR_RETURN(CallArgs args, Arguments(e, 1));
        EFT_ASSIGN_OR_RETURN(bool r, ApplyTest(e.name, in, args));
        return Value::Bool(r != e.negated);
      }
      case Expr::Kind::kUnary: {
        EFT_ASSIGN_OR_RETURN(Value x, Eval(*e.args[0]));
        if (e.name == "not") return Value::Bool(!x.Truthy());
        if (x.is_undefined()) return UndefinedError(x);
        if (!x.is_number()) return Err("bad operand type for unary " + e.name + ": '" + x.TypeName() + "'");
        if (e.name == "+") return x.is_float() ? x : Value::Int(x.integer());
        return x.is_float() ? Value::Float(-x.number()) : Value::Int(static_cast<int64_t>(0 - static_cast<uint64_t>(x.integer())));
      }
      case Expr::Kind::kBinary: {
        EFT_ASSIGN_OR_RETURN(Value a, Eval(*e.args[0]));
        if (e.name == "and") {
          if (!a.Truthy()) return a;
          return Eval(*e.args[1]);
        }
        if (e.name == "or") {
          if (a.Truthy()) return a;
          return Eval(*e.args[1]);
        }
        EFT_ASSIGN_OR_RETURN(Value b, Eval(*e.args[1]));
        return Arithmetic(e.name, a, b);
      }
      case Expr::Kind::kCompare: {
        EFT_ASSIGN_OR_RETURN(Value left, Eval(*e.args[0]));
        for (size_t i = 0; i < e.ops.size(); ++i) {
          EFT_ASSIGN_OR_RETURN(Value right, Eval(*e.args[i + 1]));
          const std::string& op = e.ops[i];
          bool r;
          if (op == "==") {
            r = Equal(left, right);
          } else if (op == "!=") {
            r = !Equal(left, right);
          } else if (op == "in" || op == "not in") {
            EFT_ASSIGN_OR_RETURN(bool in, Contains(right, left));
            r = (op == "in") == in;
          } else {
            if (left.is_undefined()) return UndefinedError(left);
            if (right.is_undefined()) return UndefinedError(right);
            EFT_ASSIGN_OR_RETURN(int c, Compare(left, right));
            r = op == "<" ? c < 0 : op == "<=" ? c <= 0 : op == ">" ? c > 0 : c >= 0;
          }
          if (!r) return Value::Bool(false);
          left = right;
        }
        return Value::Bool(true);
      }
      case Expr::Kind::kCond: {
        EFT_ASSIGN_OR_RETURN(Value test, Eval(*e.args[0]));
        if (test.Truthy()) return Eval(*e.args[1]);
        if (e.args[2]) return Eval(*e.args[2]);
        return Value::Undefined("the else branch of an inline if");
      }
    }
    return Err("unknown expression");
  }

  std::vector<std::unordered_map<std::string, Value>> frames_;
  Flow flow_ = Flow::kNormal;
  Callbacks callbacks_;
  int64_t steps_ = 0;
  int call_depth_ = 0;
};

Status CheckExpr(const Expr* e) {
  if (!e) return Status::Ok();
  auto where = [&] { return "line " + std::to_string(e->line) + ", column " + std::to_string(e->column) + ": "; };
  if (e->kind == Expr::Kind::kFilter && !IsKnownFilter(e->name))
    return Err(where() + "unsupported filter '" + e->name + "'");
  if (e->kind == Expr::Kind::kTest && !IsKnownTest(e->name)) return Err(where() + "unsupported test '" + e->name + "'");
  for (const auto& a : e->args) EFT_RETURN_IF_ERROR(CheckExpr(a.get()));
  for (const auto& kv : e->kwargs) EFT_RETURN_IF_ERROR(CheckExpr(kv.second.get()));
  return Status::Ok();
}

}  // namespace

Result<std::string> Render(const Body& body, const Dict& variables) { return Interpreter(variables).Run(body); }

Status CheckNames(const Body& body) {
  for (const StmtPtr& s : body) {
    for (const Expr* e : {s->expr.get(), s->filter.get()}) EFT_RETURN_IF_ERROR(CheckExpr(e));
    for (const auto& [cond, b] : s->branches) {
      EFT_RETURN_IF_ERROR(CheckExpr(cond.get()));
      EFT_RETURN_IF_ERROR(CheckNames(b));
    }
    for (const auto& d : s->defaults) EFT_RETURN_IF_ERROR(CheckExpr(d.get()));
    EFT_RETURN_IF_ERROR(CheckNames(s->body));
    EFT_RETURN_IF_ERROR(CheckNames(s->else_body));
  }
  return Status::Ok();
}

}  // namespace eft::trainer::jinja
