// ReadFileOrEmpty: how tests read files, through the one reader (common/file_util.h). Not in
// namespace eft::testing: inside namespace eft that name would hide gtest's ::testing.
#pragma once

#include <string>
#include <utility>

#include "common/file_util.h"

namespace eft::file_testing {

// The file's bytes, or "" when it cannot be read. Tests poll files that may legitimately be
// missing (a log not written yet, /proc/PID/stat of a process that is gone), so absence is a
// value here; a test that needs the file asserts on what it expects to find in it.
inline std::string ReadFileOrEmpty(const std::string& path) {
  Result<std::string> r = ReadFileToString(path);
  return r.ok() ? std::move(r).value() : std::string();
}

}  // namespace eft::file_testing
