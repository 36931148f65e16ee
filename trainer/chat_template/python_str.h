// Python's str behaviour where templates rely on it: strings as sequences of code points,
// str.isspace, strip/split/replace/title/capitalize/upper/lower as Python defines them.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "trainer/chat_template/value.h"

namespace eft::trainer::jinja::py {

std::vector<std::string> Chars(const std::string& s);  // UTF-8 code points
size_t CountChars(const std::string& s);               // len(s), without Chars' copy of each
char32_t CodePoint(const std::string& ch);
std::string Encode(char32_t cp);
bool IsPySpace(char32_t c);  // str.isspace()
// strip/lstrip/rstrip: `chars` null/None = whitespace.
std::string Strip(const std::string& s, const Value* chars, bool left, bool right);
std::string MapCase(const std::string& s, int mode);  // 0 lower, 1 upper
std::string Title(const std::string& s);
std::string Capitalize(const std::string& s);
std::vector<std::string> Split(const std::string& s, const Value* sep, int64_t maxsplit);
// str.replace; nullopt as soon as the result would pass max_size (a long `to` times many hits).
std::optional<std::string> ReplaceAll(const std::string& s, const std::string& from, const std::string& to,
                                      int64_t count, size_t max_size);
std::string HtmlEscape(const std::string& s);  // markupsafe's escape
int64_t IntArg(const Value* v, int64_t fallback);  // an optional integer argument

}  // namespace eft::trainer::jinja::py
