// Reading JSONL safely: one line at a time with a bound on its length, and the checks a line must
// pass before it is parsed (valid UTF-8, bounded nesting). A hostile or broken data file (a 100 MB
// line, binary junk, a value nested a million deep) then costs bounded memory and time and gives a
// "file:line: what is wrong" error, which data.on_bad_line can skip, instead of a crash.
#pragma once

#include <cstddef>
#include <istream>
#include <string>
#include <string_view>

#include "common/status.h"

namespace eft::trainer {

// One example's line: 64 MiB is ~16M tokens of text, far past any max_seq_len.
inline constexpr size_t kMaxJsonlLineBytes = size_t{64} << 20;
// Chat messages with tool schemas nest a few dozen levels at most; copying, printing and
// converting JSON values recurse once per level.
inline constexpr int kMaxJsonlDepth = 128;

// Reads the next line (without its '\n') into *line, keeping at most `max_bytes` of it: a longer
// line is consumed to its end but *too_long is set and *line holds only its start. False at the
// end of the input (or on a read error: check in.bad()).
bool ReadBoundedLine(std::istream& in, std::string* line, bool* too_long, size_t max_bytes = kMaxJsonlLineBytes);

// The message for a line ReadBoundedLine cut: "line is longer than 64 MiB ...".
Status LineTooLong(size_t max_bytes = kMaxJsonlLineBytes);

// Checks, cheaply and without recursion, what the JSON parser and everything after it need:
// valid UTF-8 ("invalid UTF-8 at byte N") and nesting at most kMaxJsonlDepth deep.
Status CheckJsonlLine(std::string_view line);

}  // namespace eft::trainer
