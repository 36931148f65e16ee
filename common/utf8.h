// UTF-8 helpers (the tokenizer, chat templates): decoding one code point, encoding, lossy repair of
// invalid sequences (as Rust's String::from_utf8_lossy does, which is what Hugging Face's decode
// produces), and the whitespace test of Rust's char::is_whitespace.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace eft {

// Length of the valid UTF-8 sequence starting at s[i] (1..4), or 0 when it is not valid there.
size_t Utf8SequenceLength(std::string_view s, size_t i);

// The code point at s[i] and its length. s[i] should start a valid sequence; where it does not, the
// result is some code point, but no byte past the end of `s` is read (a sequence cut short by the end
// is U+FFFD, length 1).
char32_t DecodeUtf8(std::string_view s, size_t i, size_t* length);

void AppendUtf8(char32_t cp, std::string* out);

// Every maximal invalid subsequence replaced by U+FFFD (the W3C/Unicode "maximal subpart" rule).
std::string RepairUtf8(std::string_view bytes);

bool IsValidUtf8(std::string_view s);  // Go's utf8.ValidString: no overlong forms, surrogates or code points past U+10FFFF

// Rust's char::is_whitespace: the Unicode White_Space property.
bool IsUnicodeWhitespace(char32_t cp);

}  // namespace eft
