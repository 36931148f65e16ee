// Request targets as the REST API reads them: origin-form "/a/b:verb?k=v&k=w", split into
// percent-decoded path segments and query parameters.
//
// Decoding happens after splitting, so an encoded "%2F" stays inside its segment (a name, never a
// separator) and the router never sees a path the client did not literally send. Dot segments are
// not collapsed: "/v1/nodes/../x" simply matches no route. Everything decoded must be valid UTF-8
// without control characters, because it ends up in JSON error messages and log lines.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/status.h"

namespace eft::http {

struct Target {
  std::vector<std::string> segments;  // decoded, without the leading ""; "/" gives {}
  std::string verb;                   // decoded text after the last ':' of the last segment, if any
  std::vector<std::pair<std::string, std::string>> query;  // decoded, in order, repeats kept
};

// Decodes %XX escapes; in query strings ('plus_is_space') '+' is a space, as HTML forms send it.
// Errors (INVALID_ARGUMENT) for a '%' not followed by two hex digits.
Result<std::string> PercentDecode(std::string_view text, bool plus_is_space);

// True when `text` is well-formed UTF-8 (no overlongs, surrogates or code points past U+10FFFF).
bool IsValidUtf8(std::string_view text);

// Valid UTF-8 and no ASCII control characters: what may appear in an id, name or query value.
bool IsPrintableUtf8(std::string_view text);

// Parses an origin-form request target. INVALID_ARGUMENT names what is wrong ("path: ...").
Result<Target> ParseTarget(std::string_view target);

}  // namespace eft::http
