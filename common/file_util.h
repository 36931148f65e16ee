// Reading a whole file into memory, and writing one from memory: the one way every eft program and
// test does it.
#pragma once

#include <string>

#include "common/status.h"

namespace eft {

// The bytes of the file at `path`, exactly as stored (binary-safe; an empty file is ""). Reads
// until end of file, so /proc files (which report size 0) work too.
// Errors name the path and the system's reason ("cannot read PATH: No such file or directory"):
// NOT_FOUND when the path does not exist, PERMISSION_DENIED when it may not be opened, and an
// I/O error (INTERNAL) otherwise, e.g. for a directory.
Result<std::string> ReadFileToString(const std::string& path);

// Creates or truncates `path` and writes `bytes` to it (not fsynced). Errors are IoError (INTERNAL) naming
// the path and the system's reason ("cannot write PATH: No space left on device"), which callers
// such as the checkpointer rely on to tell a full disk from other failures.
Status WriteStringToFile(const std::string& path, const std::string& bytes);

}  // namespace eft
