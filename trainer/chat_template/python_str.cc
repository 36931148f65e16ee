#include "trainer/chat_template/python_str.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <set>

#include <utf8proc.h>

namespace eft::trainer::jinja::py {

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

size_t CountChars(const std::string& s) {
  size_t n = 0;
  for (size_t i = 0; i < s.size(); ++n) {  // the same steps as Chars, invalid UTF-8 included
    unsigned char c = static_cast<unsigned char>(s[i]);
    i += c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
  }
  return n;
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

namespace {
bool IsCased(char32_t cp) {
  auto c = static_cast<utf8proc_int32_t>(cp);
  return utf8proc_tolower(c) != c || utf8proc_toupper(c) != c || utf8proc_category(c) == UTF8PROC_CATEGORY_LT;
}

}  // namespace

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

std::optional<std::string> ReplaceAll(const std::string& s, const std::string& from, const std::string& to,
                                      int64_t count, size_t max_size) {
  std::string out;
  if (from.empty()) {  // Python inserts `to` between characters
    int64_t n = 0;
    for (const auto& c : Chars(s)) {
      if (count < 0 || n++ < count) out += to;
      out += c;
      if (out.size() > max_size) return std::nullopt;
    }
    if (count < 0 || n < count) out += to;
    if (out.size() > max_size) return std::nullopt;
    return out;
  }
  size_t at = 0;
  int64_t n = 0;
  for (size_t hit; (count < 0 || n < count) && (hit = s.find(from, at)) != std::string::npos; ++n) {
    out.append(s, at, hit - at);
    out += to;
    if (out.size() > max_size) return std::nullopt;
    at = hit + from.size();
  }
  out.append(s, at, std::string::npos);
  if (out.size() > max_size) return std::nullopt;
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
  if (!v->is_float()) return v->integer();
  // Clamped into int64 (a cast from beyond it is undefined: found by fuzz/chat_template_fuzz.cc);
  // as indices and counts, the bounds mean the same as anything past them.
  const double d = v->number();
  if (std::isnan(d)) return fallback;
  if (d >= 9223372036854775808.0) return INT64_MAX;
  if (d < -9223372036854775808.0) return INT64_MIN;
  return static_cast<int64_t>(d);
}

}  // namespace eft::trainer::jinja::py
