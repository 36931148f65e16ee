// Jinja's filters and tests, and the Python methods templates call on strings, lists and dicts,
// with the behaviour of Jinja 2 under Hugging Face's ImmutableSandboxedEnvironment (tojson as
// transformers defines it; lists and dicts cannot be modified).
#pragma once

#include <functional>
#include <string>

#include "common/status.h"
#include "trainer/chat_template/value.h"

namespace eft::trainer::jinja {

bool IsKnownFilter(const std::string& name);
bool IsKnownTest(const std::string& name);

// Filters that take another filter or test by name (map, select...) call back through these.
struct Callbacks {
  std::function<Result<Value>(const std::string& filter, const Value& input, CallArgs& args)> filter;
  std::function<Result<bool>(const std::string& test, const Value& input, CallArgs& args)> test;
};

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
