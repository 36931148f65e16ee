// GPT-2's byte-level alphabet: every byte is written as one printable code point (the printable
// Latin-1 bytes as themselves, the rest as U+0100 + n in byte order), so a byte-level vocabulary
// stores "Ġthe" for " the". The tokenizer converts the vocabulary back to raw bytes once at load
// time and then works on the text's own bytes, with no per-call mapping.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace eft::trainer::tok {

char32_t ByteToUnicode(unsigned char byte);

// The raw bytes a byte-level token string stands for; nullopt when it contains a code point
// outside the alphabet.
std::optional<std::string> ByteLevelToBytes(std::string_view token);

// The byte-level spelling of raw bytes (for writing tokens back out, e.g. in error messages).
std::string BytesToByteLevel(std::string_view bytes);

}  // namespace eft::trainer::tok
