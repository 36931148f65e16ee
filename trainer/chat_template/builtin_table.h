// The name -> handler tables of builtins.h: a compile-time check that a table is strictly sorted by
// name (so a misplaced or repeated entry fails the build, not a lookup), and the lookup itself.
#pragma once

#include <algorithm>
#include <span>
#include <string_view>

namespace eft::trainer::jinja {

template <typename Table>
constexpr bool StrictlySortedByName(const Table& table) {
  return std::ranges::adjacent_find(table, [](const auto& a, const auto& b) { return a.name >= b.name; }) ==
         std::ranges::end(table);
}

// The entry named `name`, or nullptr.
template <typename Entry>
const Entry* FindByName(std::span<const Entry> table, std::string_view name) {
  auto it = std::ranges::lower_bound(table, name, {}, &Entry::name);
  return it != table.end() && it->name == name ? &*it : nullptr;
}

}  // namespace eft::trainer::jinja
