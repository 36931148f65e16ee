// Integers read from JSON that came from outside (files on shared storage, events, configs), in the
// range of the type they are stored in. nlohmann's get<int64_t>() casts whatever number it holds:
// a float outside the type's range (1e20) is undefined behaviour, an integer outside it wraps
// (4294967296 becomes a crc32c of 0), a fraction is cut off silently. Found by fuzz/ (docs/fuzzing.md).
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <stdexcept>
#include <string>
#include <type_traits>

namespace eft {

// `j` (an nlohmann JSON value) as a T: an integer in T's range, or a float with no fraction (3.0,
// as some writers put integers); nullopt for anything else, with the reason in *why when given.
template <typename T, typename Json>
std::optional<T> TryJsonInt(const Json& j, std::string* why = nullptr) {
  static_assert(std::is_integral_v<T> && !std::is_same_v<T, bool>);
  using Limits = std::numeric_limits<T>;
  auto bad = [&](const std::string& reason) -> std::optional<T> {
    if (why) *why = reason;
    return std::nullopt;
  };
  if (j.is_number_unsigned()) {
    const uint64_t v = j.template get<uint64_t>();
    if (v > static_cast<uint64_t>(Limits::max())) return bad("number " + j.dump() + " is out of range");
    return static_cast<T>(v);
  }
  if (j.is_number_integer()) {
    const int64_t v = j.template get<int64_t>();
    if (v < 0 ? v < static_cast<int64_t>(Limits::min()) : static_cast<uint64_t>(v) > static_cast<uint64_t>(Limits::max()))
      return bad("number " + j.dump() + " is out of range");
    return static_cast<T>(v);
  }
  if (j.is_number_float()) {
    const double d = j.template get<double>();
    const double end = std::ldexp(1.0, Limits::digits);  // 2^63 for int64_t, 2^32 for uint32_t
    if (!(d < end && d >= (Limits::is_signed ? -end : 0.0))) return bad("number " + j.dump() + " is out of range");  // NaN too
    if (d != std::trunc(d)) return bad("number " + j.dump() + " is not a whole number");
    return static_cast<T>(d);
  }
  return bad(std::string("expected a number, got ") + j.type_name());
}

// TryJsonInt, throwing std::out_of_range with the reason where it gives nullopt: for readers whose
// catch (const std::exception&) already turns a malformed file into their own error.
template <typename T, typename Json>
T JsonInt(const Json& j) {
  std::string why;
  if (auto v = TryJsonInt<T>(j, &why)) return *v;
  throw std::out_of_range(why);
}

// obj[key] as a T by JsonInt's rules, or `fallback` where obj has no such key: what nlohmann's
// obj.value(key, fallback) does for numbers, without its cast of any number it finds (found by
// `make sanitize`'s UBSan). Throws as JsonInt for a value that is there but no T.
template <typename T, typename Json>
T JsonIntOr(const Json& obj, const char* key, T fallback) {
  auto it = obj.find(key);
  return it == obj.end() ? fallback : JsonInt<T>(*it);
}

// JsonIntOr without the throw: nullopt for a value that is there but no T.
template <typename T, typename Json>
std::optional<T> TryJsonIntOr(const Json& obj, const char* key, T fallback) {
  auto it = obj.find(key);
  return it == obj.end() ? std::optional<T>(fallback) : TryJsonInt<T>(*it);
}

}  // namespace eft
