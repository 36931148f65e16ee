// Jinja's filters and tests, and the Python methods templates call on strings, lists and dicts,
// with the behaviour of Jinja 2 under Hugging Face's ImmutableSandboxedEnvironment (tojson as
// transformers defines it; lists and dicts cannot be modified).
#pragma once

#include <functional>
#include <span>
#include <string>
#include <string_view>

#include "common/status.h"
#include "trainer/chat_template/value.h"

namespace eft::trainer::jinja {

// Filters that take another filter or test by name (map, select...) call back through these.
struct Callbacks {
  std::function<Result<Value>(const std::string& filter, const Value& input, CallArgs& args)> filter;
  std::function<Result<bool>(const std::string& test, const Value& input, CallArgs& args)> test;
};

// Each filter and test is one entry of a table sorted by name (builtin_filters.cc, builtin_tests.cc).
// The tables are the only lists of what templates may use: the compile-time name check
// (IsKnown*), the dispatch (Apply*) and the unit tests all read them, so adding a filter or test is
// adding its entry. A handler gets the name the template used, so one handler serves aliases
// (length/count, eq/==) and names itself in its errors.
using FilterFn = Result<Value> (*)(const std::string& name, const Value& input, CallArgs& args,
                                   const Callbacks& callbacks);
using TestFn = Result<bool> (*)(const std::string& name, const Value& input, CallArgs& args);
struct FilterEntry {
  std::string_view name;
  FilterFn apply;
};
struct TestEntry {
  std::string_view name;
  TestFn apply;
};
std::span<const FilterEntry> Filters();
std::span<const TestEntry> Tests();

bool IsKnownFilter(const std::string& name);
bool IsKnownTest(const std::string& name);

// Errors "no filter named 'x'" / "no test named 'x'" for a name not in the table (templates reach
// that through map('x') or select('x'); a literal `| x` is refused when the template compiles).
Result<Value> ApplyFilter(const std::string& name, const Value& input, CallArgs& args, const Callbacks& callbacks);
Result<bool> ApplyTest(const std::string& name, const Value& input, CallArgs& args);

// obj.name: a dict's item (or its method when the name is one), a string's or list's method.
// Undefined (naming what is missing) when there is nothing.
Result<Value> GetAttribute(const Value& obj, const std::string& name);
// obj[key]: items first, then attributes, as Jinja's subscript does.
Result<Value> GetItem(const Value& obj, const Value& key);
Result<Value> Slice(const Value& obj, const Value& start, const Value& stop, const Value& step);

// Python's `in`.
Result<bool> Contains(const Value& container, const Value& item);
// Python's len(); error for types without one.
Result<int64_t> Length(const Value& v);
// The items of an iterable (a dict iterates its keys, a string its characters).
Result<List> Iterate(const Value& v);

}  // namespace eft::trainer::jinja
