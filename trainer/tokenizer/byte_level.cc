#include "trainer/tokenizer/byte_level.h"

#include <array>

#include "common/utf8.h"

namespace eft::trainer::tok {
namespace {

struct Tables {
  std::array<char32_t, 256> to_unicode{};
  std::array<int, 512> to_byte{};  // every alphabet code point is below U+0200
  Tables() {
    to_byte.fill(-1);
    int next = 0;
    for (int b = 0; b < 256; ++b) {
      bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      char32_t cp = printable ? static_cast<char32_t>(b) : static_cast<char32_t>(256 + next++);
      to_unicode[b] = cp;
      to_byte[cp] = b;
    }
  }
};

const Tables& GetTables() {
  static const Tables tables;
  return tables;
}

}  // namespace

char32_t ByteToUnicode(unsigned char byte) { return GetTables().to_unicode[byte]; }

std::optional<std::string> ByteLevelToBytes(std::string_view token) {
  const Tables& t = GetTables();
  std::string out;
  out.reserve(token.size());
  for (size_t i = 0; i < token.size();) {
    size_t len = Utf8SequenceLength(token, i);
    if (len == 0) return std::nullopt;
    char32_t cp = DecodeUtf8(token, i, &len);
    if (cp >= t.to_byte.size() || t.to_byte[cp] < 0) return std::nullopt;
    out.push_back(static_cast<char>(t.to_byte[cp]));
    i += len;
  }
  return out;
}

std::string BytesToByteLevel(std::string_view bytes) {
  std::string out;
  for (unsigned char b : bytes) AppendUtf8(ByteToUnicode(b), &out);
  return out;
}

}  // namespace eft::trainer::tok
