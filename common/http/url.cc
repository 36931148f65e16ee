#include "common/http/url.h"

namespace eft::http {

namespace {

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// Decodes one piece and checks it is printable UTF-8; `what` names it in errors.
Result<std::string> DecodePart(std::string_view raw, bool plus_is_space, const std::string& what) {
  auto decoded = PercentDecode(raw, plus_is_space);
  if (!decoded.ok()) return Status::InvalidArgument(what + ": " + decoded.status().message());
  if (!IsPrintableUtf8(*decoded)) {
    return Status::InvalidArgument(what + ": must be valid UTF-8 without control characters");
  }
  return decoded;
}

}  // namespace

Result<std::string> PercentDecode(std::string_view text, bool plus_is_space) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    if (c == '%') {
      int hi = i + 1 < text.size() ? HexValue(text[i + 1]) : -1;
      int lo = i + 2 < text.size() ? HexValue(text[i + 2]) : -1;
      if (hi < 0 || lo < 0) {
        return Status::InvalidArgument("bad percent-encoding at byte " + std::to_string(i) +
                                       " ('%' must be followed by two hex digits)");
      }
      out.push_back(static_cast<char>(hi * 16 + lo));
      i += 2;
    } else if (c == '+' && plus_is_space) {
      out.push_back(' ');
    } else {
      out.push_back(c);
    }
  }
  return out;
}

bool IsValidUtf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    auto b = static_cast<unsigned char>(s[i]);
    if (b < 0x80) {
      ++i;
      continue;
    }
    int len;
    uint32_t cp;
    if ((b & 0xE0) == 0xC0) {
      len = 2;
      cp = b & 0x1F;
    } else if ((b & 0xF0) == 0xE0) {
      len = 3;
      cp = b & 0x0F;
    } else if ((b & 0xF8) == 0xF0) {
      len = 4;
      cp = b & 0x07;
    } else {
      return false;  // a continuation byte where a character should start, or 0xF8..0xFF
    }
    if (i + len > s.size()) return false;
    for (int k = 1; k < len; ++k) {
      auto cb = static_cast<unsigned char>(s[i + k]);
      if ((cb & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (cb & 0x3F);
    }
    static constexpr uint32_t kMin[] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < kMin[len]) return false;                   // overlong
    if (cp >= 0xD800 && cp <= 0xDFFF) return false;     // UTF-16 surrogate
    if (cp > 0x10FFFF) return false;
    i += len;
  }
  return true;
}

bool IsPrintableUtf8(std::string_view s) {
  for (char c : s) {
    auto b = static_cast<unsigned char>(c);
    if (b < 0x20 || b == 0x7F) return false;
  }
  return IsValidUtf8(s);
}

Result<Target> ParseTarget(std::string_view target) {
  if (target.empty() || target.front() != '/') {
    return Status::InvalidArgument("request target: must be a path starting with '/'");
  }
  Target out;
  std::string_view path = target;
  std::string_view query;
  if (size_t q = target.find('?'); q != std::string_view::npos) {
    path = target.substr(0, q);
    query = target.substr(q + 1);
  }
  if (size_t h = query.find('#'); h != std::string_view::npos) query = query.substr(0, h);

  std::vector<std::string_view> raw;
  size_t start = 1;  // past the leading '/'
  if (path.size() > 1) {
    while (true) {
      size_t slash = path.find('/', start);
      raw.push_back(path.substr(start, slash == std::string_view::npos ? std::string_view::npos : slash - start));
      if (slash == std::string_view::npos) break;
      start = slash + 1;
    }
  }
  // A custom verb (grpc-gateway's "/v1/jobs/{id}:cancel") is split off the raw last segment, so an
  // encoded ':' (%3A) belongs to the name.
  if (!raw.empty()) {
    std::string_view& last = raw.back();
    if (size_t colon = last.rfind(':'); colon != std::string_view::npos) {
      EFT_ASSIGN_OR_RETURN(out.verb, DecodePart(last.substr(colon + 1), false, "path"));
      last = last.substr(0, colon);
    }
  }
  for (std::string_view seg : raw) {
    EFT_ASSIGN_OR_RETURN(std::string decoded, DecodePart(seg, false, "path"));
    out.segments.push_back(std::move(decoded));
  }

  size_t pos = 0;
  while (pos < query.size()) {
    size_t amp = query.find('&', pos);
    std::string_view item = query.substr(pos, amp == std::string_view::npos ? std::string_view::npos : amp - pos);
    pos = amp == std::string_view::npos ? query.size() : amp + 1;
    if (item.empty()) continue;  // "a=1&&b=2"
    size_t eq = item.find('=');
    std::string_view key = item.substr(0, eq);
    std::string_view value = eq == std::string_view::npos ? std::string_view() : item.substr(eq + 1);
    EFT_ASSIGN_OR_RETURN(std::string k, DecodePart(key, true, "query parameter name"));
    EFT_ASSIGN_OR_RETURN(std::string v, DecodePart(value, true, "query parameter '" + k + "'"));
    out.query.emplace_back(std::move(k), std::move(v));
  }
  return out;
}

}  // namespace eft::http
