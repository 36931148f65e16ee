#include "common/utf8.h"

namespace eft {

size_t Utf8SequenceLength(std::string_view s, size_t i) {
  const auto b = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  const size_t n = s.size();
  unsigned char c = b(i);
  if (c < 0x80) return 1;
  auto cont = [&](size_t k) { return k < n && (b(k) & 0xC0) == 0x80; };
  if (c >= 0xC2 && c <= 0xDF) return cont(i + 1) ? 2 : 0;
  if (c >= 0xE0 && c <= 0xEF) {
    if (i + 1 >= n) return 0;
    unsigned char c1 = b(i + 1);
    if (c == 0xE0 && (c1 < 0xA0 || c1 > 0xBF)) return 0;
    if (c == 0xED && (c1 < 0x80 || c1 > 0x9F)) return 0;  // surrogates
    if ((c1 & 0xC0) != 0x80) return 0;
    return cont(i + 2) ? 3 : 0;
  }
  if (c >= 0xF0 && c <= 0xF4) {
    if (i + 1 >= n) return 0;
    unsigned char c1 = b(i + 1);
    if (c == 0xF0 && (c1 < 0x90 || c1 > 0xBF)) return 0;
    if (c == 0xF4 && (c1 < 0x80 || c1 > 0x8F)) return 0;
    if ((c1 & 0xC0) != 0x80) return 0;
    return cont(i + 2) && cont(i + 3) ? 4 : 0;
  }
  return 0;
}

char32_t DecodeUtf8(std::string_view s, size_t i, size_t* length) {
  const auto b = [&](size_t k) { return static_cast<char32_t>(static_cast<unsigned char>(s[k])); };
  char32_t c = b(i);
  if (c < 0x80) {
    *length = 1;
    return c;
  }
  // A lead byte whose sequence the text cuts short (found by fuzz/tokenizer_json_fuzz.cc: a Strip
  // normalizer over text ending in a lone 0xC3 read past the string). Only the length is checked,
  // so what callers get for a sequence that fits is as before.
  const size_t need = c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
  if (s.size() - i < need) {
    *length = 1;
    return 0xFFFD;
  }
  if (c < 0xE0) {
    *length = 2;
    return ((c & 0x1F) << 6) | (b(i + 1) & 0x3F);
  }
  if (c < 0xF0) {
    *length = 3;
    return ((c & 0x0F) << 12) | ((b(i + 1) & 0x3F) << 6) | (b(i + 2) & 0x3F);
  }
  *length = 4;
  return ((c & 0x07) << 18) | ((b(i + 1) & 0x3F) << 12) | ((b(i + 2) & 0x3F) << 6) | (b(i + 3) & 0x3F);
}

void AppendUtf8(char32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

namespace {

// How many bytes of an invalid sequence at s[i] form one "maximal subpart": the longest prefix
// of a valid sequence (at least one byte).
size_t MaximalSubpart(std::string_view s, size_t i) {
  const auto b = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  unsigned char c = b(i);
  size_t expected = 0;
  unsigned char lo = 0x80, hi = 0xBF;
  if (c >= 0xC2 && c <= 0xDF) {
    expected = 2;
  } else if (c >= 0xE0 && c <= 0xEF) {
    expected = 3;
    if (c == 0xE0) lo = 0xA0;
    if (c == 0xED) hi = 0x9F;
  } else if (c >= 0xF0 && c <= 0xF4) {
    expected = 4;
    if (c == 0xF0) lo = 0x90;
    if (c == 0xF4) hi = 0x8F;
  } else {
    return 1;
  }
  size_t k = 1;
  if (i + 1 < s.size() && b(i + 1) >= lo && b(i + 1) <= hi) {
    k = 2;
    while (k < expected && i + k < s.size() && (b(i + k) & 0xC0) == 0x80) ++k;
  }
  return k;
}

}  // namespace

std::string RepairUtf8(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  size_t i = 0;
  while (i < bytes.size()) {
    size_t len = Utf8SequenceLength(bytes, i);
    if (len > 0) {
      out.append(bytes.substr(i, len));
      i += len;
    } else {
      out.append("\xEF\xBF\xBD");
      i += MaximalSubpart(bytes, i);
    }
  }
  return out;
}

bool IsValidUtf8(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    size_t len = Utf8SequenceLength(s, i);
    if (len == 0) return false;
    i += len;
  }
  return true;
}

bool IsUnicodeWhitespace(char32_t cp) {
  switch (cp) {
    case 0x09: case 0x0A: case 0x0B: case 0x0C: case 0x0D: case 0x20: case 0x85: case 0xA0:
    case 0x1680: case 0x2028: case 0x2029: case 0x202F: case 0x205F: case 0x3000:
      return true;
    default:
      return cp >= 0x2000 && cp <= 0x200A;
  }
}

}  // namespace eft
