// Jinja's tests (`x is name`, select('name')): one function per test (or per family of aliases),
// and kTests, the table of every test name a template may use (builtins.h).
#include <array>

#include "trainer/chat_template/builtin_table.h"
#include "trainer/chat_template/builtins.h"
#include "trainer/chat_template/python_str.h"

namespace eft::trainer::jinja {
namespace {

Status Err(const std::string& m) { return Status::InvalidArgument(m); }

// The operand of a test that takes one (`x is eq 3`, `x is divisibleby(3)`).
Result<const Value*> Operand(const std::string& n, CallArgs& a) {
  const Value* arg = a.Get(0, "value");
  if (!arg) return Err("test '" + n + "' needs an argument");
  return arg;
}

Result<bool> Defined(const std::string& n, const Value& v, CallArgs& a) { return !v.is_undefined(); }
Result<bool> Undefined(const std::string& n, const Value& v, CallArgs& a) { return v.is_undefined(); }
Result<bool> None(const std::string& n, const Value& v, CallArgs& a) { return v.is_none(); }
Result<bool> String(const std::string& n, const Value& v, CallArgs& a) { return v.is_string(); }
Result<bool> Number(const std::string& n, const Value& v, CallArgs& a) { return v.is_int() || v.is_float(); }
Result<bool> Integer(const std::string& n, const Value& v, CallArgs& a) { return v.is_int(); }
Result<bool> Float(const std::string& n, const Value& v, CallArgs& a) { return v.is_float(); }
Result<bool> Boolean(const std::string& n, const Value& v, CallArgs& a) { return v.is_bool(); }
Result<bool> True(const std::string& n, const Value& v, CallArgs& a) { return v.is_bool() && v.boolean(); }
Result<bool> False(const std::string& n, const Value& v, CallArgs& a) { return v.is_bool() && !v.boolean(); }
Result<bool> Mapping(const std::string& n, const Value& v, CallArgs& a) { return v.is_dict(); }
// iterable and sequence: both mean list, dict or string here.
Result<bool> Iterable(const std::string& n, const Value& v, CallArgs& a) {
  return v.is_list() || v.is_dict() || v.is_string();
}
Result<bool> Callable(const std::string& n, const Value& v, CallArgs& a) { return v.is_function(); }
Result<bool> Lower(const std::string& n, const Value& v, CallArgs& a) {
  return v.is_string() && py::MapCase(v.str(), 0) == v.str();
}
Result<bool> Upper(const std::string& n, const Value& v, CallArgs& a) {
  return v.is_string() && py::MapCase(v.str(), 1) == v.str();
}

Result<bool> OddEven(const std::string& n, const Value& v, CallArgs& a) {
  if (!v.is_int()) return Err("test '" + n + "' needs an integer");
  return (((v.integer() % 2) + 2) % 2 == 1) == (n == "odd");
}

Result<bool> Eq(const std::string& n, const Value& v, CallArgs& a) {
  EFT_ASSIGN_OR_RETURN(const Value* arg, Operand(n, a));
  return Equal(v, *arg);
}

Result<bool> Ne(const std::string& n, const Value& v, CallArgs& a) {
  EFT_ASSIGN_OR_RETURN(const Value* arg, Operand(n, a));
  return !Equal(v, *arg);
}

Result<bool> Sameas(const std::string& n, const Value& v, CallArgs& a) {
  EFT_ASSIGN_OR_RETURN(const Value* arg, Operand(n, a));
  return Equal(v, *arg) && v.type() == arg->type();
}

Result<bool> In(const std::string& n, const Value& v, CallArgs& a) {
  EFT_ASSIGN_OR_RETURN(const Value* arg, Operand(n, a));
  return Contains(*arg, v);
}

Result<bool> Divisibleby(const std::string& n, const Value& v, CallArgs& a) {
  EFT_ASSIGN_OR_RETURN(const Value* arg, Operand(n, a));
  if (!v.is_int() || !arg->is_int() || arg->integer() == 0) return Err("divisibleby needs non-zero integers");
  return v.integer() % arg->integer() == 0;
}

// lt/le/gt/ge and their aliases: Python's ordering, which fails for types it cannot order.
Result<bool> Ordering(const std::string& n, const Value& v, CallArgs& a) {
  EFT_ASSIGN_OR_RETURN(const Value* arg, Operand(n, a));
  EFT_ASSIGN_OR_RETURN(int c, Compare(v, *arg));
  if (n == "lt" || n == "<" || n == "lessthan") return c < 0;
  if (n == "le" || n == "<=") return c <= 0;
  if (n == "gt" || n == ">" || n == "greaterthan") return c > 0;
  return c >= 0;  // ge, >=
}

// Known to Jinja but not implemented: the name compiles, so the error names the test at render.
Result<bool> Unsupported(const std::string& n, const Value& v, CallArgs& a) {
  return Err("test '" + n + "' is not supported");
}

// Sorted by name (checked below, at compile time): FindByName looks names up by binary search.
constexpr std::array kTests = {
    TestEntry{"!=", Ne},
    TestEntry{"<", Ordering},
    TestEntry{"<=", Ordering},
    TestEntry{"==", Eq},
    TestEntry{">", Ordering},
    TestEntry{">=", Ordering},
    TestEntry{"boolean", Boolean},
    TestEntry{"callable", Callable},
    TestEntry{"defined", Defined},
    TestEntry{"divisibleby", Divisibleby},
    TestEntry{"eq", Eq},
    TestEntry{"equalto", Eq},
    TestEntry{"even", OddEven},
    TestEntry{"false", False},
    TestEntry{"filter", Unsupported},
    TestEntry{"float", Float},
    TestEntry{"ge", Ordering},
    TestEntry{"greaterthan", Ordering},
    TestEntry{"gt", Ordering},
    TestEntry{"in", In},
    TestEntry{"integer", Integer},
    TestEntry{"iterable", Iterable},
    TestEntry{"le", Ordering},
    TestEntry{"lessthan", Ordering},
    TestEntry{"lower", Lower},
    TestEntry{"lt", Ordering},
    TestEntry{"mapping", Mapping},
    TestEntry{"ne", Ne},
    TestEntry{"none", None},
    TestEntry{"number", Number},
    TestEntry{"odd", OddEven},
    TestEntry{"sameas", Sameas},
    TestEntry{"sequence", Iterable},
    TestEntry{"string", String},
    TestEntry{"test", Unsupported},
    TestEntry{"true", True},
    TestEntry{"undefined", Undefined},
    TestEntry{"upper", Upper},
};
static_assert(StrictlySortedByName(kTests), "kTests must be sorted by name, each name once");

}  // namespace

std::span<const TestEntry> Tests() { return kTests; }

bool IsKnownTest(const std::string& name) { return FindByName(Tests(), name) != nullptr; }

Result<bool> ApplyTest(const std::string& name, const Value& input, CallArgs& args) {
  const TestEntry* test = FindByName(Tests(), name);
  if (!test) return Err("no test named '" + name + "'");
  return test->apply(name, input, args);
}

}  // namespace eft::trainer::jinja
